"""Debian's virtio_net from user space: virtio_pci, virtio, virtio_ring,
failover, net_failover and virtio_net loaded as one driver process find each
other through the runtime's driver model (runtime/kernel/bus.c) as in the
kernel: virtio_pci's PCI probe registers a virtio device on the virtio bus,
and virtio_net's virtio driver binds to it.

The lab's virtio-net-pci has iommu_platform=on, so its DMA goes through the
emulated IOMMU; one without it is refused (runtime/kernel/virtio.c), since
its DMA would bypass the IOMMU. Behind understudyd (traffic, a recovery,
two queue pairs): tests/daemon/test_virtio_net.py.
"""
import pytest

from lab.guest import Guest

from .conftest import events, stand_alone

pytestmark = pytest.mark.lab

DEVICE = "virtio-net"


def test_virtio_net_binds_through_the_virtio_bus_and_answers_arp(no_leftover_qemu, runtime_built):
    with Guest(devices=[DEVICE]) as g:
        res = stand_alone(g, "nic0", "virtio_net", "--open", "--wait-carrier", "15",
                          "--arp", "10.0.2.15,10.0.2.2", "--remove")
    out = res.out
    assert res.returncode == 0, out + res.err
    # The PCI driver binds the function; its probe adds virtio0 to the virtio
    # bus, where virtio_net (loaded after it) finds it when it registers.
    assert events(out, "PROBE") == [
        {"driver": "virtio-pci", "device": "1af4:1041", "result": "0"},
        {"driver": "virtio_net", "device": "virtio0", "bus": "virtio", "result": "0"}], out
    [reg] = events(out, "REGISTERED")
    assert reg["driver"] == "virtio_net" and reg["mac"] == "52:54:00:12:34:56", reg
    # MSI-X through VFIO: configuration changes, receive and transmit, one vector each.
    assert events(out, "IRQ_VECTORS") == [{"source": "msix", "vectors": "3", "granted": "4",
                                            "first_irq": "32"}], out
    assert events(out, "OPEN") == [{"result": "0"}] and events(out, "CARRIER_WAIT") == [{"up": "1"}], out
    [reply] = events(out, "ARP_REPLY")
    assert reply["ip"] == "10.0.2.2", out
    # rmmod order: virtio_net's exit unbinds it from virtio0, virtio_pci's
    # removes virtio0 and unbinds the function; no skb is left behind.
    unbound = [(e["driver"], e["device"]) for e in events(out, "UNBOUND")]
    assert unbound == [("virtio_net", "virtio0"), ("virtio-pci", "1af4:1041")], out
    assert events(out, "STATS")[-1]["skbs_live"] == "0", out
    assert "WARN" not in out and "has no release()" not in res.err, res.err


def test_a_virtio_device_without_access_platform_is_refused(no_leftover_qemu, runtime_built):
    with Guest(devices=[DEVICE], nic_props="iommu_platform=off") as g:
        res = stand_alone(g, "nic0", "virtio_net")
    # virtio's core refuses the features (virtio_features_ok), so virtio_net never registers.
    assert "did not negotiate VIRTIO_F_ACCESS_PLATFORM" in res.err, res.err
    assert "device must provide VIRTIO_F_ACCESS_PLATFORM" in res.err, res.err
    assert {"driver": "virtio_net", "device": "virtio0", "bus": "virtio",
            "result": "-19"} in events(res.out, "PROBE"), res.out
    assert not events(res.out, "REGISTERED"), res.out


def test_a_device_granting_fewer_vectors_than_asked_gets_the_drivers_fallback(no_leftover_qemu, runtime_built):
    """QEMU's `vectors=2`: an MSI-X table of two. virtio_pci asks for one vector
    per queue and one for configuration changes (three), is refused (-ENOSPC,
    runtime/kernel/msi.c, before anything is enabled), and falls back as in
    the kernel to one for configuration and one its queues share."""
    with Guest(devices=[DEVICE], nic_props="vectors=2") as g:
        res = stand_alone(g, "nic0", "virtio_net", "--open", "--wait-carrier", "15",
                          "--arp", "10.0.2.15,10.0.2.2", "--remove")
    assert res.returncode == 0, res.out + res.err
    assert events(res.out, "IRQ_VECTORS") == [{"source": "msix", "vectors": "2", "granted": "2",
                                                "first_irq": "32"}], res.out
    [reply] = events(res.out, "ARP_REPLY")
    assert reply["ip"] == "10.0.2.2", res.out
    assert events(res.out, "STATS")[-1]["skbs_live"] == "0", res.out
