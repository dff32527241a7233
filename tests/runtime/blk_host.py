"""Test stand-in for understudyd's block half: drives a block driver process
through the protocol (docs/protocol.md, "Block devices"), inside a lab guest.

Does what launch.py does (VFIO, the arena in the IOMMU) but as the daemon
would for a block device: the pool is mapped read-only for the device (a
read's data must come through the driver's own memory), the rings memfd
holds the two block rings, and the driver gets --control-fd and the ring
eventfds. Then HELLO (US_CLASS_BLOCK), PROBE, and requests on blk_submit,
whose completions it takes from blk_done as the ring rules say, checking
that each echoes its request.

Usage: python3 blk_host.py BDF DRIVER [--runtime KO] --module KO... -- ACTION...
  ACTION: read:SECTOR,COUNT | write:SECTOR,COUNT,SEED | flush
Prints HOST_DISK, HOST_REPLY, HOST_DONE lines (key=value), then HOST_EXIT.
"""
import ctypes
import mmap
import os
import select
import socket
import struct
import subprocess
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import launch  # noqa: E402

VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE = 1, 2

# docs/protocol.md and include/understudy/protocol.h (test_virtio_blk_lab checks these sizes).
VERSION, CLASS_BLOCK = 6, 2
MSG_HELLO, MSG_PROBE, MSG_REPLY, MSG_DISK = 1, 2, 64, 70
MAX_MODULES, PATH_MAX, PCI_ADDR_MAX = 8, 256, 16
HEADER = struct.Struct("<HHI")
HELLO = struct.Struct("<IIIIQQQQII")
REPLY = struct.Struct("<iI")
DISK = struct.Struct("<QIIIIIIHH32s32s64s192s")
ENTRY = struct.Struct("<QQIIHHhH")
RING_HEAD, RING_TAIL, RING_WAITING, RING_ENTRIES = 0, 64, 128, 192
OPS = {"read": 0, "write": 1, "flush": 2}

ARENA_IOVA, ARENA_SIZE = 0x10000000, 64 << 20
RING_SIZE, BUFFER_SIZE, POOL_BUFFERS = 64, 4096, 1024
POOL_SIZE = BUFFER_SIZE * POOL_BUFFERS


def ring_stride(ring_size: int) -> int:
    return (RING_ENTRIES + ring_size * ENTRY.size + 4095) & ~4095


def pattern(seed: int, count: int) -> bytes:
    """runtime/driver/blk_actions.c's write pattern."""
    words = count * 128
    return struct.pack(f"<{words}I", *(((seed * 2654435761) + k) & 0xffffffff for k in range(words)))


def out(kind: str, **fields) -> None:
    print(kind, *(f"{k}={v}" for k, v in fields.items()), flush=True)


class Ring:
    def __init__(self, mem: mmap.mmap, base: int):
        self.mem, self.base = mem, base

    def u32(self, off: int) -> int:
        return struct.unpack_from("<I", self.mem, self.base + off)[0]

    def set_u32(self, off: int, v: int) -> None:
        struct.pack_into("<I", self.mem, self.base + off, v & 0xffffffff)

    def entry(self, counter: int) -> int:
        return self.base + RING_ENTRIES + (counter % RING_SIZE) * ENTRY.size


class Host:
    def __init__(self, sock: socket.socket):
        self.sock, self.seq = sock, 0

    def send(self, type_: int, body: bytes) -> int:
        self.seq += 1
        self.sock.send(HEADER.pack(type_, 0, self.seq) + body)
        return self.seq

    def reply(self, seq: int, timeout: float) -> int:
        """Waits for seq's REPLY, reporting any DISK on the way; its status."""
        self.sock.settimeout(timeout)
        while True:
            msg = self.sock.recv(4096)
            if not msg:
                raise SystemExit("the driver closed its control socket")
            type_, _, mseq = HEADER.unpack_from(msg)
            body = msg[HEADER.size:]
            if type_ == MSG_DISK:
                d = DISK.unpack(body)
                names = [s.split(b"\0")[0].decode() or "-" for s in d[9:]]
                out("HOST_DISK", capacity=d[0], lbs=d[1], pbs=d[2], max_sectors=d[3], features=hex(d[6]),
                    queues=d[7], depth=d[8], driver=names[0], name=names[1], serial=names[2],
                    wwid=names[3], size=len(body))
            elif type_ == MSG_REPLY and mseq == seq:
                status, _ = REPLY.unpack_from(body)
                return status


def run_requests(actions: list[str], pool: memoryview, submit: Ring, done: Ring, kick: int, notify: int):
    requests = []
    for tag, action in enumerate(actions):
        kind, _, args = action.partition(":")
        nums = [int(x) for x in args.split(",")] if args else []
        sector, count = (nums + [0, 0])[:2]
        buf = (tag * 64) % (POOL_BUFFERS - 64)
        length = count * 512
        if kind == "write":
            pool[buf * BUFFER_SIZE:buf * BUFFER_SIZE + length] = pattern(nums[2], count)
        elif kind == "read":
            pool[buf * BUFFER_SIZE:buf * BUFFER_SIZE + length] = b"\xa5" * length
        requests.append((tag, sector, length, buf if length else 0, OPS[kind], 0, 0, 0))
    for e in requests:                       # all lent at once, then one kick
        head = submit.u32(RING_HEAD)
        ENTRY.pack_into(submit.mem, submit.entry(head), *e)
        submit.set_u32(RING_HEAD, head + 1)
    if submit.u32(RING_WAITING):
        submit.set_u32(RING_WAITING, 0)
        os.eventfd_write(kick, 1)
    pending = {e[0]: e for e in requests}
    while pending:
        tail = done.u32(RING_TAIL)
        if done.u32(RING_HEAD) == tail:
            done.set_u32(RING_WAITING, 1)
            if done.u32(RING_HEAD) == tail:
                if not select.select([notify], [], [], 60)[0]:
                    raise SystemExit(f"no completion of {sorted(pending)} within 60 s")
                os.eventfd_read(notify)
            continue
        d = ENTRY.unpack_from(done.mem, done.entry(tail))
        done.set_u32(RING_TAIL, tail + 1)
        tag, status = d[0], d[6]
        want = pending.pop(tag)
        echo = d[:6] == want[:6] and d[7] == want[7]
        data = bytes(pool[want[3] * BUFFER_SIZE:want[3] * BUFFER_SIZE + want[2]])
        out("HOST_DONE", tag=tag, op=want[4], sector=want[1], len=want[2], status=status,
            echo=int(echo), crc32=f"{zlib.crc32(data):08x}")


def main(bdf: str, driver_argv: list[str], actions: list[str]) -> int:
    launch.bind_vfio(bdf)
    group = os.path.basename(os.readlink(f"/sys/bus/pci/devices/{bdf}/iommu_group"))
    container = os.open("/dev/vfio/vfio", os.O_RDWR)
    group_fd = os.open(f"/dev/vfio/{group}", os.O_RDWR)
    launch.ioctl(group_fd, launch.VFIO_GROUP_SET_CONTAINER, ctypes.byref(ctypes.c_int(container)))
    launch.ioctl(container, launch.VFIO_SET_IOMMU, launch.VFIO_TYPE1v2_IOMMU)
    device_fd = launch.ioctl(group_fd, launch.VFIO_GROUP_GET_DEVICE_FD, ctypes.c_char_p(bdf.encode()))

    arena_fd = os.memfd_create("understudy-arena")
    os.ftruncate(arena_fd, ARENA_SIZE)
    arena = mmap.mmap(arena_fd, ARENA_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    vaddr = ctypes.addressof(ctypes.c_char.from_buffer(arena))
    # The pool is the device's to read only; the rest of the arena is the runtime's.
    for flags, off, size in ((VFIO_DMA_MAP_FLAG_READ, 0, POOL_SIZE),
                             (VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE, POOL_SIZE,
                              ARENA_SIZE - POOL_SIZE)):
        dma = launch.DmaMap(ctypes.sizeof(launch.DmaMap), flags, vaddr + off, ARENA_IOVA + off, size)
        launch.ioctl(container, launch.VFIO_IOMMU_MAP_DMA, ctypes.byref(dma))

    rings_size = 2 * ring_stride(RING_SIZE)
    rings_fd = os.memfd_create("understudy-rings")
    os.ftruncate(rings_fd, rings_size)
    rings = mmap.mmap(rings_fd, rings_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    kick, notify = os.eventfd(0), os.eventfd(0)
    host_sock, driver_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    fds = (device_fd, arena_fd, rings_fd, kick, notify, driver_sock.fileno())
    argv = driver_argv + ["--control-fd", str(driver_sock.fileno()), "--device-fd", str(device_fd),
                          "--arena-fd", str(arena_fd), "--rings-fd", str(rings_fd),
                          "--kick-fd", str(kick), "--notify-fd", str(notify)]
    modules = [argv[i + 1] for i, a in enumerate(argv) if a == "--module"]
    argv = [a for i, a in enumerate(argv) if a != "--module" and (i == 0 or argv[i - 1] != "--module")]
    driver = subprocess.Popen(argv, pass_fds=fds)
    driver_sock.close()
    host = Host(host_sock)
    status = host.reply(host.send(MSG_HELLO, HELLO.pack(
        VERSION, RING_SIZE, POOL_BUFFERS, BUFFER_SIZE, ARENA_SIZE, ARENA_IOVA, POOL_SIZE, rings_size,
        CLASS_BLOCK, 0)), 30)
    out("HOST_REPLY", request="HELLO", status=status)
    paths = b"".join(m.encode().ljust(PATH_MAX, b"\0") for m in modules).ljust(MAX_MODULES * PATH_MAX, b"\0")
    probe = bdf.encode().ljust(PCI_ADDR_MAX, b"\0") + struct.pack("<I", len(modules)) + paths
    status = host.reply(host.send(MSG_PROBE, probe), 240)
    out("HOST_REPLY", request="PROBE", status=status)
    if status == 0:
        run_requests(actions, memoryview(arena)[:POOL_SIZE], Ring(rings, 0), Ring(rings, ring_stride(RING_SIZE)),
                     kick, notify)
    host_sock.close()                        # the driver exits: HOST_CLOSED
    code = driver.wait(timeout=60)
    out("HOST_EXIT", status=code)
    return 0 if status == 0 and code == 0 else 1


if __name__ == "__main__":
    args = sys.argv[1:]
    split = args.index("--")
    sys.exit(main(args[0], args[1:split], args[split + 1:]))
