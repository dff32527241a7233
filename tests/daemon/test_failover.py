"""Failover: with a standby declared (`understudy run --standby`), a device
the kernel takes back -- QMP device_del, the guest's hot-unplug -- or a
driver past its restart limit moves us0 to the standby by itself during a
hash-checked TCP transfer on the lab bridge: the same interface and MAC, the
transfer exact; a removed device is released to the kernel, a device whose
driver kept dying becomes the standby. Without a standby the interface parks
until it is given a device; that path is the VM migration's
(test_vm_migrate.py).
"""
import pytest

from lab import net, traffic, understudy
from lab.guest import Guest
from lab.netns import LabNetwork

pytestmark = pytest.mark.lab

BULK_BYTES = 40 * 1000 * 1000
# Paced, so that the unplug and the failover are over mid-transfer: 40 MB at 20 Mbit/s take 16 s.
RATE_MBPS = 20


def us0(d: understudy.Daemon) -> dict:
    """us0's status, whichever device serves it."""
    return next(s for s in d.status().values() if s["ifname"] == "us0")


def with_standby(g: Guest, bins: dict, network: LabNetwork, *options: str) -> tuple[understudy.Daemon, str, str]:
    """understudyd running us0 on the e1000 (nic0) with the RTL8139 (nic1) its standby."""
    understudy.prepare(g)
    e1000, rtl = g.pci_address("nic0"), g.pci_address("nic1")
    for bdf in (e1000, rtl):
        understudy.bind_vfio(g, bdf)
    cp = understudy.module_chain(g, "8139cp")[-1]
    d = understudy.Daemon(g, bins, None, *options)
    res = d.cli("run", "--device", e1000, "--ifname", "us0", "--module", understudy.module_path(g, "e1000"),
                "--standby", f"{rtl}={cp}", timeout=200)
    assert res.returncode == 0, res.err
    st = d.wait_state(e1000, "registered", timeout=120)
    assert [s["device"] for s in st["standby"]] == [rtl], st["standby"]
    assert [m["path"].rsplit("/", 1)[-1] for m in st["standby"][0]["modules"]] == ["mii.ko", "8139cp.ko"], \
        "the standby's dependencies come from modules.dep"
    net.bring_up_iface(g, "us0", network=network)
    return d, e1000, rtl


def during_transfer(g: Guest, d: understudy.Daemon, network: LabNetwork, act) -> dict:
    """Runs `act()` once 2 MB of a paced transfer have passed us0; the transfer's summary."""
    before = us0(d)["counters"]["rx_bytes"]
    with traffic.Us0Transfer(g, BULK_BYTES, timeout=180, network=network, rate_mbps=RATE_MBPS) as transfer:
        traffic.wait_received(d, "us0", before + 2_000_000, transfer)
        act()
        assert transfer.running(), "the failover was over before the transfer: pace it slower"
        return transfer.result(300).summary()


def failed_over(d: understudy.Daemon, summary: dict, to: str) -> dict:
    """Checks that us0 serves on `to`'s 8139cp after a failover, the transfer
    exact; returns the failover's record."""
    after = us0(d)
    print("failover", after["migrations"], "bulk", summary)
    assert summary["hash_ok"] and summary["bytes"] == BULK_BYTES and summary["resets"] == 0, summary
    assert (after["device"], after["driver_name"], after["state"]) == (to, "8139cp", "open"), after
    record = after["migrations"][-1]
    assert (record["reason"], record["outcome"]) == ("failover", "moved"), record
    return record


def test_a_hot_unplugged_device_fails_over_to_the_standby_under_traffic(no_leftover_qemu, bins):
    with LabNetwork() as network, Guest(devices=["e1000", "rtl8139"], netdev=network) as g:
        d, e1000, rtl = with_standby(g, bins, network)
        try:
            mac = g.run("cat /sys/class/net/us0/address", check=True).out.strip()
            summary = during_transfer(g, d, network, lambda: g.hot_unplug("nic0", timeout=60))
            record = failed_over(d, summary, rtl)
            assert (record["from_device"], record["to_device"]) == (e1000, rtl), record
            assert "being removed" in record["cause"] and record["announced"] > 0, record
            assert record["first_packet_ms"] is not None, record
            assert g.run("cat /sys/class/net/us0/address", check=True).out.strip() == mac, "us0 kept its MAC"
            assert us0(d)["standby"] == [], "the removed device is nobody's standby"
            assert g.run(f"test -e /sys/bus/pci/devices/{e1000}").returncode != 0, "the kernel has the device back"
        finally:
            d.stop()


def test_a_driver_past_its_restart_limit_fails_over_to_the_standby_under_traffic(no_leftover_qemu, bins):
    with LabNetwork() as network, Guest(devices=["e1000", "rtl8139"], netdev=network) as g:
        d, e1000, rtl = with_standby(g, bins, network, "--max-restarts", "0")
        try:
            pid = us0(d)["pid"]
            summary = during_transfer(g, d, network, lambda: understudy.kill_driver(g, pid))
            record = failed_over(d, summary, rtl)
            after = us0(d)
            assert "killed by signal 9" in record["cause"] and "restarts are off" in record["cause"], record
            assert after["recovery_count"] == 0, "no restart was allowed: it failed over instead"
            assert [s["device"] for s in after["standby"]] == [e1000], "the device left is the standby now"
        finally:
            d.stop()
