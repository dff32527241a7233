"""Every catalogue device appears in the guest, in its own IOMMU group, with its in-kernel driver."""
import pytest

from lab.devices import CATALOGUE
from lab.guest import Guest

pytestmark = pytest.mark.lab

# sym53c8xx under QEMU's emulated IOMMU floods DMAR read faults and never
# finishes probing (QEMU's lsi53c895a model; see docs/lab.md): it is checked
# with the IOMMU off.
NEEDS_IOMMU_OFF = {"lsi53c895a"}


def check_devices(g: Guest) -> dict[str, str]:
    """Asserts ID and driver binding of each device; returns their IOMMU groups."""
    groups = {}
    for pd in g.placed:
        sysfs = f"/sys/bus/pci/devices/{g.pci_address(pd.id)}"
        vendor, device = g.run(f"cat {sysfs}/vendor {sysfs}/device", check=True).out.split()
        assert f"{vendor[2:]}:{device[2:]}" == pd.device.vendor_device, pd.device.name
        groups[pd.device.name] = g.run(f"basename $(readlink {sysfs}/iommu_group) 2>/dev/null"
                                       ).out.strip()
        g.run(["modprobe", pd.device.driver], check=True, timeout=60)
        # virtio devices: the PCI function is virtio-pci's; the class driver binds the child.
        bound = g.run(f"d={sysfs}; [ -d $d/virtio* ] && d=$(echo $d/virtio*); "
                      "basename $(readlink $d/driver)").out.strip()
        assert bound.replace("-", "_") == pd.device.driver, (pd.device.name, bound)
    return groups


def test_catalogue_devices_are_present_driven_and_isolated(lab_ready, no_leftover_qemu):
    names = [n for n in CATALOGUE if n not in NEEDS_IOMMU_OFF]
    with Guest(devices=names, memory_mib=1536) as g:
        groups = check_devices(g)
    assert all(groups.values()), f"a device has no IOMMU group: {groups}"
    assert len(set(groups.values())) == len(names), f"devices share IOMMU groups: {groups}"


def test_lsi53c895a_is_driven_by_sym53c8xx_without_the_iommu(lab_ready, no_leftover_qemu):
    with Guest(devices=sorted(NEEDS_IOMMU_OFF), extra_append="intel_iommu=off") as g:
        check_devices(g)


def test_several_queues_are_refused_where_the_nic_or_its_network_has_one(lab_ready):
    from lab.errors import LabError
    from lab.netns import LabNetwork

    with pytest.raises(LabError, match="several queues"):
        Guest(devices=["virtio-net"], nic_queues=2)  # slirp has one queue
    with pytest.raises(LabError, match="several queues"):
        Guest(devices=["e1000"], netdev=LabNetwork(), nic_queues=2)  # a network never created
