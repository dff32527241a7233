"""Runs inside a lab guest: opens a device through VFIO the way the driver process will.

Usage: python3 vfio_open.py 0000:01:00.0
Prints JSON: the IOMMU group, whether it is viable, the device fd's region count.
"""
import ctypes
import json
import os
import sys

VFIO_TYPE = ord(";")
VFIO_BASE = 100


def io(nr: int) -> int:
    return (VFIO_TYPE << 8) | (VFIO_BASE + nr)


VFIO_GET_API_VERSION, VFIO_CHECK_EXTENSION, VFIO_SET_IOMMU = io(0), io(1), io(2)
VFIO_GROUP_GET_STATUS, VFIO_GROUP_SET_CONTAINER = io(3), io(4)
VFIO_GROUP_GET_DEVICE_FD, VFIO_DEVICE_GET_INFO = io(6), io(7)
VFIO_TYPE1v2_IOMMU = 3
VFIO_GROUP_FLAGS_VIABLE = 1


libc = ctypes.CDLL(None, use_errno=True)


def ioctl(fd: int, request: int, arg=0) -> int:
    """ioctl(2) returning its result (VFIO returns fds and flags that way)."""
    ret = libc.ioctl(fd, ctypes.c_ulong(request), arg)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"ioctl {request:#x}: {os.strerror(err)}")
    return ret


class Status(ctypes.Structure):
    _fields_ = [("argsz", ctypes.c_uint32), ("flags", ctypes.c_uint32)]


class DeviceInfo(ctypes.Structure):
    _fields_ = [("argsz", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("num_regions", ctypes.c_uint32), ("num_irqs", ctypes.c_uint32)]


def main(bdf: str) -> dict:
    group = os.path.basename(os.readlink(f"/sys/bus/pci/devices/{bdf}/iommu_group"))
    container = os.open("/dev/vfio/vfio", os.O_RDWR)
    api = ioctl(container, VFIO_GET_API_VERSION)
    type1v2 = ioctl(container, VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU)
    group_fd = os.open(f"/dev/vfio/{group}", os.O_RDWR)
    status = Status(ctypes.sizeof(Status), 0)
    ioctl(group_fd, VFIO_GROUP_GET_STATUS, ctypes.byref(status))
    ioctl(group_fd, VFIO_GROUP_SET_CONTAINER, ctypes.byref(ctypes.c_int(container)))
    ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU)
    device_fd = ioctl(group_fd, VFIO_GROUP_GET_DEVICE_FD, ctypes.c_char_p(bdf.encode()))
    info = DeviceInfo(ctypes.sizeof(DeviceInfo), 0, 0, 0)
    ioctl(device_fd, VFIO_DEVICE_GET_INFO, ctypes.byref(info))
    return {"group": int(group), "api_version": api, "type1v2": bool(type1v2),
            "viable": bool(status.flags & VFIO_GROUP_FLAGS_VIABLE),
            "device_fd": device_fd, "regions": info.num_regions, "irqs": info.num_irqs}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
