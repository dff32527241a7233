"""In-kernel NIC drivers pass real traffic in the lab; NICs can be hot-(un)plugged."""
import pytest

from lab import net
from lab.guest import Guest

pytestmark = pytest.mark.lab


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
        assert net.iperf3(g, reverse=False, seconds=2) > 1


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
