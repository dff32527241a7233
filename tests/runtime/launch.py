"""Test stand-in for understudyd's fd set-up: starts understudy-driver on a VFIO device.

Runs as root inside a lab guest. It does what the host daemon will do before a
driver process starts (docs/protocol.md): binds the PCI function to vfio-pci,
opens the VFIO container, group and device, creates the DMA arena (a memfd),
maps it into the IOMMU at the protocol's IOVA, and starts the driver with the
device and arena fds. It keeps the container and group (the driver never gets
them) and stays alive until the driver exits, whose status it returns.

With --check MODE it also does what the daemon does for a checked driver
(docs/checking.md): creates the trace region, starts understudy-checker on
it and hands the driver --trace-fd and --gate MODE. The checker's JSON lines
go to stdout among the driver's event lines; it is ended (and prints its
summary) once the driver has exited.

Usage: python3 launch.py [--check MODE] BDF DRIVER_ARGS...
  e.g. launch.py 0000:01:00.0 runtime/build/understudy-driver --runtime ... --module e1000.ko
"""
import ctypes
import mmap
import os
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lab"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import contract  # noqa: E402
from vfio_open import Status, VFIO_GROUP_FLAGS_VIABLE, ioctl, io  # noqa: E402

VFIO_GET_API_VERSION, VFIO_SET_IOMMU = io(0), io(2)
VFIO_GROUP_GET_STATUS, VFIO_GROUP_SET_CONTAINER, VFIO_GROUP_GET_DEVICE_FD = io(3), io(4), io(6)
VFIO_IOMMU_MAP_DMA = io(13)
VFIO_TYPE1v2_IOMMU = 3
VFIO_DMA_MAP_FLAG_READ_WRITE = 1 | 2

CHECKER = Path(__file__).resolve().parents[2] / "host/target/release/understudy-checker"
TRACE_REGION_SIZE = contract.define("trace.h", "US_TRACE_REGION_SIZE")

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


def run_checked(argv: list[str], pass_fds: tuple, gate: str) -> int:
    """The driver under the checker, as understudyd starts them: region, checker, driver."""
    trace_fd = os.memfd_create("understudy-trace")
    os.ftruncate(trace_fd, TRACE_REGION_SIZE)
    checker = subprocess.Popen([str(CHECKER), "--trace-fd", str(trace_fd)], pass_fds=(trace_fd,))
    status = subprocess.run(argv + ["--trace-fd", str(trace_fd), "--gate", gate],
                            pass_fds=pass_fds + (trace_fd,)).returncode
    checker.send_signal(signal.SIGTERM)     # it prints its summary and exits
    checker.wait(timeout=30)
    return status


def main(bdf: str, driver_argv: list[str], gate: str | None = None) -> int:
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
    if gate:
        return run_checked(argv, (device_fd, arena_fd), gate)
    return subprocess.run(argv, pass_fds=(device_fd, arena_fd)).returncode


if __name__ == "__main__":
    args, gate = sys.argv[1:], None
    if args[:1] == ["--check"]:
        gate, args = args[1], args[2:]
    sys.exit(main(args[0], args[1:], gate))
