"""Inside the lab guest, an e1000 can be handed to vfio-pci and opened as the driver process will."""
import json
from pathlib import Path

import pytest

from lab.guest import Guest

pytestmark = pytest.mark.lab
VFIO_OPEN = Path(__file__).with_name("vfio_open.py")


def test_e1000_binds_to_vfio_pci_and_its_group_opens(lab_ready, no_leftover_qemu):
    with Guest(devices=["e1000"]) as g:
        bdf = g.pci_address("nic0")
        g.run("modprobe vfio-pci", check=True)
        g.run(f"echo vfio-pci > /sys/bus/pci/devices/{bdf}/driver_override && "
              f"echo {bdf} > /sys/bus/pci/drivers_probe", check=True)
        driver = g.run(f"basename $(readlink /sys/bus/pci/devices/{bdf}/driver)").out.strip()
        assert driver == "vfio-pci"
        res = g.run(["python3", str(VFIO_OPEN), bdf], check=True)
        info = json.loads(res.out)
    assert info["viable"], info
    assert info["type1v2"], "the emulated Intel IOMMU must offer VFIO type1v2"
    assert info["device_fd"] >= 0
    assert info["regions"] >= 7, "a PCI device exposes BARs, ROM and config regions"
    assert info["irqs"] >= 1
