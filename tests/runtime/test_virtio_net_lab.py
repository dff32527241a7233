"""Debian's virtio_net from user space: virtio_pci, virtio, virtio_ring,
failover, net_failover and virtio_net loaded as one driver process find each
other through the runtime's driver model (runtime/kernel/bus.c) as in the
kernel: virtio_pci's PCI probe registers a virtio device on the virtio bus,
and virtio_net's virtio driver binds to it.

The lab's virtio-net-pci has iommu_platform=on, so its DMA goes through the
emulated IOMMU; one without it is refused (runtime/kernel/virtio.c), since
its DMA would bypass the IOMMU.
"""
import re

import pytest

from lab import net, understudy
from lab.guest import Guest

from . import nic_settings
from .conftest import DRIVER, KERNEL_HALF, REPO, events
from .test_nic_lab import LAUNCH

pytestmark = pytest.mark.lab

DEVICE = "virtio-net"


@pytest.fixture(scope="module")
def bins(lab_ready, runtime_built):
    return understudy.build()


def stand_alone(g: Guest, *options: str):
    """understudy-driver on nic0 with virtio_net's chain: probe, open, carrier, one ARP request, rmmod."""
    argv = [str(DRIVER), "--runtime", str(KERNEL_HALF),
            *understudy.module_args(understudy.module_chain(g, "virtio_net")), *options]
    res = g.run(["python3", str(LAUNCH), g.pci_address("nic0"), *argv], cwd=str(REPO), timeout=180)
    print(res.out)
    print(res.err)
    return res


def test_virtio_net_binds_through_the_virtio_bus_and_answers_arp(no_leftover_qemu, runtime_built):
    with Guest(devices=[DEVICE]) as g:
        res = stand_alone(g, "--open", "--wait-carrier", "15", "--arp", "10.0.2.15,10.0.2.2", "--remove")
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
        res = stand_alone(g)
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
        res = stand_alone(g, "--open", "--wait-carrier", "15", "--arp", "10.0.2.15,10.0.2.2", "--remove")
    assert res.returncode == 0, res.out + res.err
    assert events(res.out, "IRQ_VECTORS") == [{"source": "msix", "vectors": "2", "granted": "2",
                                                "first_irq": "32"}], res.out
    [reply] = events(res.out, "ARP_REPLY")
    assert reply["ip"] == "10.0.2.2", res.out
    assert events(res.out, "STATS")[-1]["skbs_live"] == "0", res.out


def test_guest_traffic_and_recovery_through_us0(no_leftover_qemu, bins):
    with Guest(devices=[DEVICE]) as g:
        bdf, _ = understudy.hand_over(g, "nic0", "virtio_net")
        d = understudy.Daemon(g, bins, None, "--max-restarts", "3", "--restart-window-s", "300")
        # virtio_net alone: the daemon adds its dependencies (modules.dep) and,
        # before them, the chain of virtio_pci, which claims the PCI function.
        d.run(bdf, [understudy.module_path(g, "virtio_net")])
        d.wait_state(bdf, "registered", timeout=120)
        names = [m["path"].rsplit("/", 1)[-1] for m in d.status()[bdf]["modules"]]
        assert names == ["virtio_ring.ko", "virtio.ko", "virtio_pci_modern_dev.ko", "virtio_pci_legacy_dev.ko",
                         "virtio_pci.ko", "failover.ko", "net_failover.ko", "virtio_net.ko"], names
        nic_settings.apply(g)
        g.run("ip link set us0 up", check=True)
        opened = d.wait_state(bdf, "open", timeout=30, carrier=True, mtu=nic_settings.MTU)
        net.bring_up_iface(g, "us0")
        # What virtio_net told the device through its control queue.
        assert nic_settings.virtio_net_filters(g, "nic0") == nic_settings.wanted()
        assert net.ping(g, count=50, interval=0.02)["loss_pct"] == 0
        for direction in ("tx", "rx"):
            s = net.bulk(g, direction, 2 << 20, timeout=300).summary()
            assert s["hash_ok"] and not s["errors"], (direction, s)
        # virtio_net's per-queue counters (named with ethtool_sprintf), and its
        # link settings (a virtual device's: whatever the device reports).
        stats = d.cli("ethtool", "--driver-info", "--link", "--stats", bdf)
        assert stats.returncode == 0 and "virtio_net" in stats.out, stats.out + stats.err
        received = re.search(r"^\s*rx_queue_0_packets: (\d+)$", stats.out, re.M)
        assert received and int(received.group(1)) > 50, stats.out
        drops = understudy.carrier_drops(g)

        r = understudy.kill_and_recover(g, d, bdf, 1)
        assert "killed by signal 9" in r["cause"], r
        after = d.wait_state(bdf, "open", timeout=30, carrier=True)
        assert after["pid"] not in (None, opened["pid"]) and after["mtu"] == nic_settings.MTU, after
        assert net.ping(g, count=20, interval=0.02)["loss_pct"] == 0
        assert understudy.carrier_drops(g) == drops, "us0 kept its carrier through the restart"
        s = net.bulk(g, "tx", 2 << 20, timeout=300).summary()
        assert s["hash_ok"] and not s["errors"], s
        # The reset between the drivers put back the device's own filters:
        # these the successor set from what the daemon replayed.
        assert nic_settings.virtio_net_filters(g, "nic0") == nic_settings.wanted()
        status = d.status()[bdf]
        log = d.stop()
    print("\n".join(nic_settings.given_to_successors(log)))
    assert status["driver_name"] == "virtio_net" and status["mac"] == nic_settings.MAC, status


def queue_counts(d: understudy.Daemon, bdf: str) -> dict[str, int]:
    """virtio_net's per-queue packet counters, as `understudy ethtool --stats` shows them."""
    status, report = d.cli_json("ethtool", "--stats", bdf)
    assert status == 0, report
    return {s["name"]: s["value"] for s in report["ethtool"]["stats"] if re.fullmatch(r"(tx|rx)_queue_\d+_packets", s["name"])}


def test_two_queue_pairs_carry_parallel_flows_and_a_successor_gets_them_too(no_leftover_qemu, bins):
    """`understudy run --queues 2`: the TAP gets two queues for the driver and
    virtio_net is asked for two queue pairs (it picks one at probe: the
    runtime has one CPU). Sixteen parallel connections each way then use
    both queues each way (the TAP steers each flow by a hash of its
    addresses and ports: all sixteen on one queue has a chance of 2^-15), as
    per-queue counters show, and a restarted driver is asked again."""
    with understudy.nic_lab(DEVICE, queues=2) as lab:
        g, bdf = lab.guest, lab.bdf
        d = understudy.Daemon(g, bins, None, "--max-restarts", "3", "--restart-window-s", "300")
        understudy.understudy_up(g, d, bdf, lab.modules, lab.network)
        assert g.run("ls /sys/class/net/us0/queues | grep -c tx-", check=True).out.strip() == "3", \
            "the daemon's queue and two for the driver"
        status = d.status()[bdf]
        # Every lab guest reserves hugepages for the arena (lab/guest.py).
        assert status["queues"] == 2 and status["arena_in_hugepages"], status
        for incarnation in ("first", "successor"):
            for reverse in (False, True):
                assert net.iperf3(g, reverse, seconds=3, network=lab.network, parallel=16) > 0
            counts = queue_counts(d, bdf)
            assert len(counts) == 4, counts
            assert all(n > 200 for n in counts.values()), (incarnation, counts)
            for way in ("tx", "rx"):
                s = net.bulk(g, way, 2 << 20, network=lab.network).summary()
                assert s["hash_ok"] and not s["errors"], (incarnation, way, s)
            if incarnation == "first":
                understudy.kill_and_recover(g, d, bdf, 1, lab.network)
                d.wait_state(bdf, "open", timeout=30, carrier=True)
        log = d.stop()
    assert log.count("the driver took SET_CHANNELS combined 2") == 2, "asked of the first and of its successor"
