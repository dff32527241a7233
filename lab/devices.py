"""The lab's catalogue of emulated PCI devices: the papers' own hardware."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import LabError

NIC, STORAGE, SOUND = "nic", "storage", "sound"


@dataclass(frozen=True)
class Device:
    name: str            # what users type: --devices e1000,pcnet
    qemu_model: str      # QEMU's -device name
    kind: str
    driver: str          # the in-kernel Linux driver (module name)
    vendor_device: str   # PCI ID as the guest sees it
    paper: str           # who evaluated it
    props: str = ""      # QEMU -device properties the lab always gives it
    # The PCI driver that puts the device on the driver's own bus, when the
    # driver is not a PCI driver itself (virtio_pci for virtio_net).
    transport: str = ""

CATALOGUE = {d.name: d for d in [
    Device("e1000", "e1000", NIC, "e1000", "8086:100e", "Nooks, Live Update, Live Migration, Guardrail"),
    Device("e1000e", "e1000e", NIC, "e1000e", "8086:10d3", "Live Migration (other Intel NIC)"),
    Device("pcnet", "pcnet", NIC, "pcnet32", "1022:2000", "Nooks (pcnet32)"),
    # QEMU's rtl8139 is revision 0x20, an 8139C+, which 8139too refuses ("use
    # 8139cp") and QEMU has no property to change: 8139cp is its driver here.
    Device("rtl8139", "rtl8139", NIC, "8139cp", "10ec:8139", "DDE, Live Migration"),
    Device("i82559er", "i82559er", NIC, "e100", "8086:1209", "Nooks, Live Update (e100)"),
    Device("tulip", "tulip", NIC, "tulip", "1011:0019", "Live Update"),
    Device("ne2k_pci", "ne2k_pci", NIC, "ne2k_pci", "10ec:8029", "DDE"),
    # iommu_platform=on: its DMA goes through the emulated IOMMU, as a device
    # driven through VFIO must (runtime/kernel/virtio.c refuses it otherwise).
    # The guest offloads are off: received frames then come whole and
    # checksummed, which is all the driver process's receive path carries
    # to the TAP today (no partial checksums, no GSO metadata).
    Device("virtio-net", "virtio-net-pci", NIC, "virtio_net", "1af4:1041", "baseline",
           "iommu_platform=on,guest_csum=off,guest_tso4=off,guest_tso6=off,guest_ecn=off,guest_ufo=off",
           "virtio_pci"),
    Device("ES1370", "ES1370", SOUND, "snd_ens1370", "1274:5000", "Nooks, Live Update (sound)"),
    Device("lsi53c895a", "lsi53c895a", STORAGE, "sym53c8xx", "1000:0012", "Guardrail (sym53c8xx)"),
    Device("nvme", "nvme", STORAGE, "nvme", "1b36:0010", "storage"),
    # iommu_platform=on as for virtio-net: a driver process's device must DMA through the IOMMU.
    Device("virtio-blk", "virtio-blk-pci", STORAGE, "virtio_blk", "1af4:1042", "storage",
           "iommu_platform=on", "virtio_pci"),
]}

# The in-kernel driver a user means by each name (bench --driver e1000|pcnet32|...).
BY_DRIVER = {d.driver: d for d in CATALOGUE.values()}


# Drivers users may ask for that no lab device can run, and why.
UNDRIVABLE = {
    "8139too": "QEMU's rtl8139 is an 8139C+ (PCI revision 0x20), which 8139too refuses "
               "and leaves to 8139cp; use --driver 8139cp",
}


def lookup(name: str) -> Device:
    dev = CATALOGUE.get(name) or BY_DRIVER.get(name.replace("-", "_"))
    if dev is None and name in UNDRIVABLE:
        raise LabError(f"no lab device for {name}: {UNDRIVABLE[name]}")
    if dev is None:
        known = ", ".join(CATALOGUE)
        raise LabError(f"unknown device {name!r}; the lab knows: {known}")
    return dev


def lookup_nic(name: str) -> Device:
    """lookup, for commands that need a network device (--driver)."""
    dev = lookup(name)
    if dev.kind != NIC:
        raise LabError(f"{name} is not a network driver",
                       hint="--driver takes a lab NIC: e1000, pcnet32, rtl8139 (8139cp), ...")
    return dev
