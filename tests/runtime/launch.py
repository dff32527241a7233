"""Test stand-in for understudyd's fd set-up: starts understudy-driver on a VFIO device.

Runs as root inside a lab guest. It does what the host daemon will do before a
driver process starts (docs/protocol.md): binds the PCI function to vfio-pci,
opens the VFIO container, group and device, creates the DMA arena (a memfd),
maps it into the IOMMU at the protocol's IOVA, and starts the driver with the
device and arena fds. It keeps the container and group (the driver never gets
them) and stays alive until the driver exits, whose status it returns.

Usage: python3 launch.py BDF DRIVER_ARGS...
  e.g. launch.py 0000:01:00.0 runtime/build/understudy-driver --runtime ... --module e1000.ko
"""
import ctypes
import mmap
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lab"))
from vfio_open import Status, VFIO_GROUP_FLAGS_VIABLE, ioctl, io  # noqa: E402

VFIO_GET_API_VERSION, VFIO_SET_IOMMU = io(0), io(2)
VFIO_GROUP_GET_STATUS, VFIO_GROUP_SET_CONTAINER, VFIO_GROUP_GET_DEVICE_FD = io(3), io(4), io(6)
VFIO_IOMMU_MAP_DMA = io(13)
VFIO_TYPE1v2_IOMMU = 3
VFIO_DMA_MAP_FLAG_READ_WRITE = 1 | 2

ARENA_IOVA = 0x10000000
ARENA_SIZE = 64 << 20
POOL_SIZE = 8 << 20


class DmaMap(ctypes.Structure):
    _fields_ = [("argsz", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("vaddr", ctypes.c_uint64), ("iova", ctypes.c_uint64), ("size", ctypes.c_uint64)]


def bind_vfio(bdf: str) -> None:
    dev = Path(f"/sys/bus/pci/devices/{bdf}")
    driver = dev / "driver"
    if driver.exists() and driver.resolve().name == "vfio-pci":
        return
    subprocess.run(["modprobe", "vfio-pci"], check=True)
    if driver.exists():
        (driver / "unbind").write_text(bdf)
    (dev / "driver_override").write_text("vfio-pci")
    Path("/sys/bus/pci/drivers_probe").write_text(bdf)


def main(bdf: str, driver_argv: list[str]) -> int:
    bind_vfio(bdf)
    group = os.path.basename(os.readlink(f"/sys/bus/pci/devices/{bdf}/iommu_group"))
    container = os.open("/dev/vfio/vfio", os.O_RDWR)
    group_fd = os.open(f"/dev/vfio/{group}", os.O_RDWR)
    status = Status(ctypes.sizeof(Status), 0)
    ioctl(group_fd, VFIO_GROUP_GET_STATUS, ctypes.byref(status))
    if not status.flags & VFIO_GROUP_FLAGS_VIABLE:
        raise SystemExit(f"IOMMU group {group} is not viable")
    ioctl(group_fd, VFIO_GROUP_SET_CONTAINER, ctypes.byref(ctypes.c_int(container)))
    ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU)
    device_fd = ioctl(group_fd, VFIO_GROUP_GET_DEVICE_FD, ctypes.c_char_p(bdf.encode()))

    arena_fd = os.memfd_create("understudy-arena")
    os.ftruncate(arena_fd, ARENA_SIZE)
    arena = mmap.mmap(arena_fd, ARENA_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    vaddr = ctypes.addressof(ctypes.c_char.from_buffer(arena))
    dma = DmaMap(ctypes.sizeof(DmaMap), VFIO_DMA_MAP_FLAG_READ_WRITE, vaddr, ARENA_IOVA, ARENA_SIZE)
    ioctl(container, VFIO_IOMMU_MAP_DMA, ctypes.byref(dma))

    argv = driver_argv + ["--device-fd", str(device_fd), "--pci-address", bdf,
                          "--arena-fd", str(arena_fd), "--arena-iova", hex(ARENA_IOVA),
                          "--arena-size", str(ARENA_SIZE), "--pool-size", str(POOL_SIZE)]
    return subprocess.run(argv, pass_fds=(device_fd, arena_fd)).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
