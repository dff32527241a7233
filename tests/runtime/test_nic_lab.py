"""Debian's unmodified NIC drivers drive the lab's emulated NICs from a user-space process.

One guest run per driver: tests/runtime/launch.py hands the NIC to
understudy-driver through VFIO; the driver loads the kernel half and the
driver's module chain, probes, opens the interface, waits for carrier and
sends an ARP request for the slirp gateway (10.0.2.2), which must answer;
then the chain is unloaded, which removes the device and releases the
driver's managed resources (runtime/kernel/devres.c). The tests read that
run's event lines.
"""
import hashlib
import subprocess
from pathlib import Path

import pytest

from lab import config
from lab.guest import Guest

from .conftest import DRIVER, KERNEL_HALF, events, launch

pytestmark = pytest.mark.lab

NET = "kernel/drivers/net"
# lab device -> (driver name, module chain under lib/modules/<release>/, PCI id)
DRIVERS = {
    "e1000": ("e1000", [f"{NET}/ethernet/intel/e1000/e1000.ko"], "8086:100e"),
    "e1000e": ("e1000e", [f"{NET}/ethernet/intel/e1000e/e1000e.ko"], "8086:10d3"),
    "pcnet": ("pcnet32", [f"{NET}/mii.ko", f"{NET}/ethernet/amd/pcnet32.ko"], "1022:2000"),
    "rtl8139": ("8139cp", [f"{NET}/mii.ko", f"{NET}/ethernet/realtek/8139cp.ko"], "10ec:8139"),
    "i82559er": ("e100", [f"{NET}/mii.ko", f"{NET}/ethernet/intel/e100.ko"], "8086:1209"),
    "tulip": ("tulip", [f"{NET}/ethernet/dec/tulip/tulip.ko"], "1011:0019"),
}


def packaged_sha256(members: list[str]) -> dict[str, str]:
    """sha256 of files inside the cached linux-image .deb the lab was set up from."""
    k = config.kernel()
    deb = next((config.cache_dir() / "debs").glob(f"{k.package}_*.deb"))
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True,
                         check=True).stdout
    sums = {}
    for m in members:
        data = subprocess.run(["tar", "-xO", f"./lib/modules/{k.release}/{m}"], input=tar,
                              capture_output=True, check=True).stdout
        sums[m] = hashlib.sha256(data).hexdigest()
    return sums


def probe_and_arp_argv(device: str, modules: Path) -> list[str]:
    """understudy-driver for `device`'s module chain: probe, open, carrier, one ARP request, rmmod."""
    argv = [str(DRIVER), "--runtime", str(KERNEL_HALF)]
    for m in DRIVERS[device][1]:
        argv += ["--module", str(modules / m)]
    return argv + ["--open", "--wait-carrier", "15", "--arp", "10.0.2.15,10.0.2.2", "--remove"]


@pytest.fixture(scope="module", params=list(DRIVERS))
def run(request, lab_ready, runtime_built, debian_modules):
    device = request.param
    name, chain, pci_id = DRIVERS[device]
    argv = probe_and_arp_argv(device, debian_modules)
    with Guest(devices=[device]) as g:
        res = launch(g, "nic0", argv)
    return {"res": res, "device": device, "driver": name, "chain": chain, "pci_id": pci_id,
            "modules": debian_modules}


def test_the_modules_are_debians_unmodified_files(run):
    sums = packaged_sha256(run["chain"])
    for m in run["chain"]:
        assert hashlib.sha256((run["modules"] / m).read_bytes()).hexdigest() == sums[m], m


def test_probe_registers_eth0_with_the_device_mac(run):
    out = run["res"].out
    assert events(out, "INIT")[-1] == {"module": run["driver"], "result": "0"}, out
    assert events(out, "PROBE") == [{"driver": run["driver"], "device": run["pci_id"],
                                     "result": "0"}]
    [reg] = events(out, "REGISTERED")
    assert reg["name"] == "eth0"
    assert reg["driver"] == run["driver"]
    assert reg["mac"] == reg["perm"] == "52:54:00:12:34:56"
    assert reg["mtu"] == "1500"


def test_open_brings_the_link_up(run):
    out = run["res"].out
    assert events(out, "OPEN") == [{"result": "0"}], out
    assert events(out, "CARRIER_WAIT") == [{"up": "1"}]
    if run["driver"] == "e1000":
        # Carrier off from probe; e1000's watchdog work item turns it on
        # (and its close, in remove, turns it off again).
        assert [e["on"] for e in events(out, "CARRIER")] == ["0", "1", "0"]
        assert "NIC Link is Up" in run["res"].err
    if run["driver"] == "e1000e":
        # MSI-X through VFIO (runtime/kernel/msi.c): e1000e asks for its three
        # vectors (receive, transmit, other) of the five QEMU's 82574L has,
        # gets them, and falls back to neither MSI nor INTx.
        assert events(out, "IRQ_VECTORS") == [{"source": "msix", "vectors": "3", "granted": "5",
                                                "first_irq": "32"}], out
        assert "Falling back" not in run["res"].err, run["res"].err
        assert "NIC Link is Up" in run["res"].err


def test_arp_request_to_the_gateway_is_answered(run):
    out = run["res"].out
    assert events(out, "TX")[0]["result"] == "0", out   # NETDEV_TX_OK
    [reply] = events(out, "ARP_REPLY")
    assert reply["ip"] == "10.0.2.2"
    assert reply["mac"] == "52:55:0a:00:02:02"   # slirp's gateway
    before, end, _ = events(out, "STATS")
    assert int(end["irqs"]) > int(before["irqs"])
    assert int(end["rx_frames"]) > int(before["rx_frames"])
    # The sent skb was freed on TX completion (IRQ -> NAPI poll), the received
    # one after delivery, and the RX ring was refilled: no skb leaked (the
    # launcher gives the count 5 s to settle). e1000e frees a sent skb only
    # at its TX vector's next interrupt, which QEMU's 82574 raises for a
    # later frame: each request sent may still be held here, as in the
    # kernel (the remove test sees every skb freed).
    in_flight = len(events(out, "TX")) if run["driver"] == "e1000e" else 0
    assert 0 <= int(end["skbs_live"]) - int(before["skbs_live"]) <= in_flight, (before, end)
    if run["driver"] == "e1000e":
        # Each MSI-X vector had its own line: the reply came in on the receive
        # vector, the link change on "other" (the netdev's name), and the
        # handlers counted are the ones freed at close (IRQ_FREED).
        handled = {e["name"]: int(e["handled"]) for e in events(out, "IRQ_FREED")}
        assert set(handled) == {"eth0-rx-0", "eth0-tx-0", "eth0"}, out
        assert handled["eth0-rx-0"] > 0 and handled["eth0"] > 0, handled


# How many managed resources (devm_*, dmam_*, pcim_*) each driver's probe
# leaves for the driver core to release after its remove; the others free
# everything in remove themselves.
MANAGED = {"tulip": 5}   # enabling, the net_device, the BAR mapping, the rings, the SROM media table


def test_remove_unregisters_eth0_and_releases_the_managed_resources(run):
    """rmmod, last module first: the PCI driver's exit unregisters it, its
    remove unregisters eth0 (closing it: the RX ring's skbs are freed), and
    then whatever it left managed is released (UNBOUND)."""
    out = run["res"].out
    assert [e["module"] for e in events(out, "EXIT")] == [Path(m).stem for m in reversed(run["chain"])], out
    assert all(e["result"] == "0" for e in events(out, "EXIT"))
    assert events(out, "UNREGISTERED") == [{"name": "eth0"}]
    assert events(out, "UNBOUND") == [{"driver": run["driver"], "device": run["pci_id"],
                                       "released": str(MANAGED.get(run["device"], 0))}]
    removed = events(out, "STATS")[-1]
    assert removed["when"] == "removed" and removed["skbs_live"] == "0", removed
    assert events(out, "DONE") == [{"status": "0"}]
    assert run["res"].returncode == 0

