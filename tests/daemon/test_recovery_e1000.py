"""Shadow-driver recovery with Debian's e1000.ko: the driver process is SIGKILLed
during a hash-checked TCP transfer and understudyd restarts it and replays its
settings (MTU 1400, a MAC address, promiscuous mode, a multicast address) while
us0 keeps its carrier; the transfer completes intact, without a reset, and the
NIC's own registers (read by QEMU) hold the address, the promiscuous bits and
the multicast hash again.

Both ways of restarting are exercised: a fork of the post-probe template that
resumes the device (the default), and -- once the template is gone -- a new
process that loads and probes the driver again.
"""
import time

import pytest

from lab import net, traffic, understudy
from lab.guest import SLIRP_GATEWAY, Guest

from . import nic_settings

pytestmark = pytest.mark.lab

BULK_BYTES = 40 * 1000 * 1000


@pytest.mark.parametrize("start", ["template", "probe"])
def test_a_killed_e1000_driver_is_restarted_with_its_settings_and_the_transfer_survives(no_leftover_qemu, bins, start):
    with Guest(devices=["e1000"]) as g:
        bdf, ko = understudy.hand_over(g, "nic0", "e1000")
        d = understudy.Daemon(g, bins, None, "--max-restarts", "3", "--restart-window-s", "300")
        d.run(bdf, [ko])
        d.wait_state(bdf, "registered", timeout=120)
        nic_settings.apply(g)
        g.run(f"ip link set us0 up && "
              f"ip addr add {net.GUEST_ADDRESS} dev us0 && ip route replace default via {SLIRP_GATEWAY} dev us0",
              check=True)
        opened = d.wait_state(bdf, "open", timeout=30, carrier=True, mtu=nic_settings.MTU)
        template = opened["template_pid"]
        assert nic_settings.intel_filters(g, bdf) == nic_settings.wanted()
        assert template and template != opened["pid"], opened
        if start == "probe":
            # Without its template the daemon falls back to a cold restart.
            g.run(["kill", "-9", str(template)], check=True)
            d.wait_state(bdf, "open", timeout=30, template_pid=None)

        try:
            crash = traffic.crash_mid_transfer(g, d, bdf, BULK_BYTES, kill_after=5_000_000)
        except BaseException:
            print(d.stop()[-6000:])
            raise
        print("recovery", crash.status["state"], crash.status["recoveries"], crash.status["death"])
        summary = crash.transfer.summary()
        print("bulk", summary)
        assert crash.killed_pid == opened["pid"]
        assert summary["hash_ok"] and summary["bytes"] == BULK_BYTES, summary
        assert summary["resets"] == 0, summary
        assert crash.carrier_drops == 0, "us0 kept its carrier through the restart"

        after = d.wait_state(bdf, "open", timeout=30, carrier=True)
        print("recoveries", after["recoveries"])
        assert after["recovery_count"] == 1, after
        r = after["recoveries"][0]
        assert "killed by signal 9" in r["cause"] and r["outcome"] == "recovered" and r["start"] == start, r
        assert all(r[k] is not None for k in ("start_ms", "replay_ms", "first_packet_ms", "downtime_ms")), r
        assert after["pid"] not in (None, opened["pid"]) and after["mtu"] == nic_settings.MTU, after
        # Stopped and reset; the arena stays mapped for the fresh driver (dropped only when given up).
        assert after["device_stop"]["bus_master_off"] and after["device_stop"]["reset"] == "done", after
        assert not after["device_stop"]["iommu_unmapped"], after
        assert understudy.bus_master_on(g, bdf), "the fresh driver enabled bus mastering again"
        assert after["template_pid"] == (template if start == "template" else None), after
        assert "PROMISC" in g.run("ip link show us0", check=True).out
        # The device was reset between the two drivers: what it filters on now,
        # the fresh driver wrote from the replayed log.
        assert nic_settings.intel_filters(g, bdf) == nic_settings.wanted()
        assert d.alive()
        log = d.stop()
        # The fresh driver was given (and accepted: a refusal ends the restart) what the dead one had.
        print("\n".join(nic_settings.given_to_successors(log)))
        assert "recovered from" in log
        # A fresh e1000 resets its PHY (QEMU emulates 500 ms of autonegotiation):
        # its frames waited for its link instead of being given to a driver
        # without carrier, which drops them.
        assert r["link_ms"] is not None and r["link_ms"] > 0, r
        assert "its frames wait for its link" in log and "the successor's carrier is on" in log, log[-3000:]
        assert r["serving_ms"] >= r["stop_ms"] + r["start_ms"] + r["replay_ms"] + r["link_ms"] - 0.5, r
        # Nothing passes before the fresh driver is open; a frame it receives
        # while its link is not reported yet is its first (docs/recovery.md).
        assert r["first_packet_ms"] >= r["stop_ms"] + r["start_ms"] + r["replay_ms"] - 0.5, r


def test_a_restart_nothing_passes_through_is_over_when_the_fresh_driver_serves(no_leftover_qemu, bins):
    # us0 stays down: no frame can pass. The restart still ends (and another can be
    # asked for); its first frame is timed when traffic comes. Once us0 is up the
    # fresh driver's carrier shows, though the TAP had held the dead one's (off).
    with Guest(devices=["e1000"]) as g:
        bdf, ko = understudy.hand_over(g, "nic0", "e1000")
        d = understudy.Daemon(g, bins, None, "--max-restarts", "3", "--restart-window-s", "300")
        d.run(bdf, [ko])
        d.wait_state(bdf, "registered", timeout=120)
        for kills in (1, 2):
            pid = d.status()[bdf]["pid"]
            if kills == 1:
                g.run(["kill", "-9", str(pid)], check=True)
            else:
                res = d.cli("recover", bdf)
                assert res.returncode == 0, res.err
            st = d.wait_state(bdf, "registered", timeout=60, recovery_count=kills)
            deadline = time.monotonic() + 30
            while (r := d.status()[bdf]["recoveries"][-1])["outcome"] == "under way":
                assert time.monotonic() < deadline, r
                time.sleep(0.3)
            assert r["outcome"] == "recovered" and r["first_packet_ms"] is None and r["downtime_ms"] is None, r
            assert st["pid"] != pid
        assert [r["first_packet_ms"] for r in d.status()[bdf]["recoveries"]] == [None, None]

        net.bring_up_iface(g, "us0")
        assert net.ping(g, count=5, interval=0.1)["loss_pct"] == 0
        first, second = d.status()[bdf]["recoveries"]
        assert first["first_packet_ms"] is None, first
        # Timed from the death; no downtime, as no frame ever passed through the dead drivers.
        assert second["first_packet_ms"] > second["stop_ms"] and second["downtime_ms"] is None, second
        log = d.stop()
        assert "the first frame through the successor" in log, log[-3000:]
