"""Debian's unmodified e1000.ko drives the lab's emulated 82540EM from a user-space process.

One guest run: tests/runtime/launch.py hands the e1000 to understudy-driver
through VFIO; the driver loads the kernel half and e1000.ko, probes, opens the
interface, waits for carrier and sends an ARP request for the slirp gateway.
The tests below read that run's event lines.
"""
import hashlib
import subprocess
from pathlib import Path

import pytest

from lab import config
from lab.guest import Guest

from .conftest import DRIVER, KERNEL_HALF, REPO, events

pytestmark = pytest.mark.lab

E1000 = "kernel/drivers/net/ethernet/intel/e1000/e1000.ko"
LAUNCH = Path(__file__).with_name("launch.py")


def packaged_sha256(member: str) -> str:
    """sha256 of a file inside the cached linux-image .deb the lab was set up from."""
    k = config.kernel()
    deb = next((config.cache_dir() / "debs").glob(f"{k.package}_*.deb"))
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True,
                         check=True).stdout
    data = subprocess.run(["tar", "-xO", f"./lib/modules/{k.release}/{member}"], input=tar,
                          capture_output=True, check=True).stdout
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def run(lab_ready, runtime_built, debian_modules):
    module = debian_modules / E1000
    with Guest(devices=["e1000"]) as g:
        bdf = g.pci_address("nic0")
        res = g.run(["python3", str(LAUNCH), bdf, str(DRIVER), "--runtime", str(KERNEL_HALF),
                     "--module", str(module), "--open", "--wait-carrier", "15",
                     "--arp", "10.0.2.15,10.0.2.2"], cwd=str(REPO), timeout=180)
    print(res.out)
    print(res.err)
    return {"res": res, "module": module}


def test_the_module_is_debians_unmodified_file(run):
    assert hashlib.sha256(run["module"].read_bytes()).hexdigest() == packaged_sha256(E1000)


def test_probe_registers_eth0_with_the_device_mac(run):
    out = run["res"].out
    assert events(out, "INIT") == [{"module": "e1000", "result": "0"}], out
    assert events(out, "PROBE") == [{"driver": "e1000", "device": "8086:100e", "result": "0"}]
    [reg] = events(out, "REGISTERED")
    assert reg["name"] == "eth0"
    assert reg["driver"] == "e1000"
    assert reg["mac"] == reg["perm"] == "52:54:00:12:34:56"
    assert reg["mtu"] == "1500"


def test_open_brings_the_link_up_from_the_watchdog(run):
    out = run["res"].out
    assert events(out, "OPEN") == [{"result": "0"}], out
    carrier = [e["on"] for e in events(out, "CARRIER")]
    assert carrier[-1] == "1", carrier   # e1000's watchdog: netif_carrier_on
    assert "NIC Link is Up" in run["res"].err


def test_arp_request_to_the_gateway_is_answered(run):
    out = run["res"].out
    assert events(out, "TX")[0]["result"] == "0", out   # NETDEV_TX_OK
    [reply] = events(out, "ARP_REPLY")
    assert reply["ip"] == "10.0.2.2"
    assert reply["mac"] == "52:55:0a:00:02:02"   # slirp's gateway
    assert events(out, "DONE") == [{"status": "0"}]
    assert run["res"].returncode == 0
