"""In-kernel NIC drivers pass real traffic in the lab; NICs can be hot-(un)plugged."""
import json
import subprocess
import time

import pytest

from lab import net
from lab.guest import Guest

@pytest.mark.lab
@pytest.mark.parametrize("device", ["e1000", "pcnet", "rtl8139", "i82559er"])
def test_in_kernel_driver_passes_traffic(lab_ready, no_leftover_qemu, device):
    with Guest(devices=[device]) as g:
        net.load_kernel_drivers(g)
        p = net.ping(g, count=20, interval=0.02)
        assert p["loss_pct"] == 0, p
        for direction in ("tx", "rx"):
            r = net.bulk(g, direction, 8 << 20)
            s = r.summary()
            assert r.hash_ok and s["resets"] == 0 and not s["errors"], s
        sent = net.iperf3_run(g, reverse=False, seconds=2)
        assert sent["mbps"] > 1
        # The guest's TCP sent it: its RTT and windows are there to explain the rate.
        assert sent["rtt_ms_mean"] > 0 and sent["cwnd_kib_max"] > 0, sent


def test_sender_figures_come_from_a_real_iperf3_run():
    port = net.free_port()
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port), "-B", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):   # until the server listens
            result = json.loads(subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "1", "-J"],
                                               capture_output=True, text=True, timeout=30).stdout)
            if "Connection refused" not in result.get("error", ""):
                break
            time.sleep(0.1)
    finally:
        server.kill()
        server.wait()
    assert "error" not in result, result["error"]
    figures = net.sender_figures(result)
    assert figures["rtt_ms_mean"] > 0 and figures["cwnd_kib_max"] > 0, figures
    assert figures["retransmits"] >= 0 and figures["peer_window_kib_max"] > 0, figures


@pytest.mark.lab
def test_nic_hot_unplug_and_plug(lab_ready, no_leftover_qemu):
    with Guest(devices=["e1000"]) as g:
        net.load_kernel_drivers(g)
        bdf = g.pci_address("nic0")
        g.hot_unplug("nic0")
        assert g.run(f"test -e /sys/bus/pci/devices/{bdf}").returncode != 0
        g.hot_plug("rtl8139", "nic1")
        g.run("modprobe 8139cp", check=True)
        new = g.pci_address("nic1")
        ids = g.run(f"cat /sys/bus/pci/devices/{new}/vendor /sys/bus/pci/devices/{new}/device")
        assert ids.out.split() == ["0x10ec", "0x8139"]
        net.bring_up(g, "nic1")
        assert net.ping(g, count=10, interval=0.02)["loss_pct"] == 0
