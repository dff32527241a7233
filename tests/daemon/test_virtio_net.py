"""Debian's virtio_net behind understudyd: us0 carries the guest's traffic
through virtio_pci's and virtio_net's chain (the daemon adds the
dependencies), a killed driver's successor is given us0's settings, which
the device's control-queue filters show; with two queue pairs both carry
flows, for the first driver and its successor. (virtio_net on the virtio
bus without the daemon is tests/runtime/test_virtio_net_lab.py.)
"""
import re

import pytest

from lab import net, understudy
from lab.guest import Guest

from . import nic_settings

pytestmark = pytest.mark.lab

DEVICE = "virtio-net"


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
