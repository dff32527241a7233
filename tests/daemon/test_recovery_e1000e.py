"""Shadow-driver recovery with Debian's e1000e.ko on MSI-X: the driver process
is SIGKILLed while us0 carries pings, understudyd stops the device -- MSI-X
torn down with the rest of its interrupts -- and a fresh driver process probes
it, enables its vectors again, is given us0's settings (MTU, address, a
multicast group: the device's registers hold them again) and serves us0,
which kept its carrier.

e1000e enables its vectors at probe, so its first driver makes no post-probe
template (runtime/kernel/template.c, docs/design.md §13): the restart loads and
probes the driver again.
"""
import pytest

from lab import net, understudy
from lab.guest import Guest

from . import nic_settings

pytestmark = pytest.mark.lab


def test_a_killed_e1000e_driver_on_msix_is_restarted_and_its_vectors_with_it(no_leftover_qemu, bins):
    with Guest(devices=["e1000e"]) as g:
        bdf, ko = understudy.hand_over(g, "nic0", "e1000e")
        d = understudy.Daemon(g, bins, None, "--max-restarts", "3", "--restart-window-s", "300")
        d.run(bdf, [ko])
        d.wait_state(bdf, "registered", timeout=120)
        nic_settings.apply(g, promisc=False)
        # Its carrier first: e1000e on MSI-X finds its link from its watchdog,
        # 2-3 s after it opens (in-kernel too), and a ping sent before gives up.
        g.run("ip link set us0 up", check=True)
        opened = d.wait_state(bdf, "open", timeout=30, carrier=True)
        net.bring_up_iface(g, "us0")
        assert opened["template_pid"] is None, opened
        assert nic_settings.intel_filters(g, bdf) == nic_settings.wanted(promisc=False)
        assert net.ping(g, count=20, interval=0.02)["loss_pct"] == 0
        drops = understudy.carrier_drops(g)

        r = understudy.kill_and_recover(g, d, bdf, 1)
        assert "killed by signal 9" in r["cause"] and r["start"] == "probe", r
        after = d.wait_state(bdf, "open", timeout=30, carrier=True)
        assert after["pid"] not in (None, opened["pid"]) and after["mtu"] == nic_settings.MTU, after
        stop = after["device_stop"]
        # INTx, MSI and MSI-X all off (the two not in use count as off), then the reset.
        assert stop["bus_master_off"] and stop["irqs_disabled"] and stop["reset"] == "done", stop
        assert net.ping(g, count=20, interval=0.02)["loss_pct"] == 0
        assert understudy.carrier_drops(g) == drops, "us0 kept its carrier through the restart"
        # The device was reset between the two drivers: the fresh one wrote these.
        assert nic_settings.intel_filters(g, bdf) == nic_settings.wanted(promisc=False)
        log = d.stop()
    print("\n".join(nic_settings.given_to_successors(log, promisc=False)))
    # Both drivers ran on their three MSI-X vectors; neither fell back.
    vectors = [line for line in log.splitlines() if line.startswith("IRQ_VECTORS")]
    assert vectors == ["IRQ_VECTORS source=msix vectors=3 granted=5 first_irq=32"] * 2, log[-3000:]
    assert "Falling back" not in log, log[-3000:]
