"""Debian's virtio_blk behind understudyd: the lab's virtio-blk disk is the
guest's /dev/nbdN, served by a driver process; reads see what the host put
on the disk, writes reach it, and a driver SIGKILLed while a writer streams
to the disk is restarted with the writer none the wiser -- it finishes
without an error and every byte it wrote is on the image, which the test
reads on the host after the guest stopped. (virtio_blk without the daemon
is tests/runtime/test_virtio_blk_lab.py.)
"""
import hashlib
import random
import time

import pytest

from lab import understudy
from lab.guest import Guest

pytestmark = pytest.mark.lab

MIB = 1 << 20
DISK_BYTES = 16 * MIB
# The writer's stream: 6 MiB from 4 MiB on, in direct 64 KiB writes, each
# acknowledged before the next is sent, then a flush.
WRITE_AT, WRITE_BYTES = 4 * MIB, 6 * MIB


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_disk(g: Guest, path: str, offset: int, length: int) -> str:
    """The sha256 of `length` bytes at `offset` of the disk, read past the page cache."""
    res = g.run(f"dd if={path} bs=64K skip={offset // 65536} count={length // 65536} iflag=direct status=none "
                f"| sha256sum", check=True, timeout=300)
    return res.out.split()[0]


def test_the_disk_is_dev_nbd_and_a_killed_driver_loses_no_acknowledged_write(tmp_path, no_leftover_qemu, bins):
    image = tmp_path / "disk0.img"
    before = random.Random(20261203).randbytes(DISK_BYTES)
    image.write_bytes(before)
    with Guest(devices=["virtio-blk"], disk_images={"disk0": image}) as g:
        bdf, ko = understudy.hand_over(g, "disk0", "virtio_blk")
        g.run("modprobe nbd nbds_max=4", check=True)
        d = understudy.Daemon(g, bins, None, "--max-restarts", "3", "--restart-window-s", "300")
        d.run(bdf, [ko], ifname=None)
        st = d.wait_state(bdf, "open", timeout=120)
        disk = st["disk"]
        assert st["class"] == "block" and disk["driver_name"] == "virtio_blk", st
        assert disk["size_bytes"] == DISK_BYTES and disk["logical_block_size"] == 512, disk
        path = disk["path"]
        assert path.startswith("/dev/nbd") and st["ifname"] == path.removeprefix("/dev/"), st
        assert int(g.run(f"blockdev --getsize64 {path}", check=True).out) == DISK_BYTES

        # What the host put on the disk, through the driver process.
        assert read_disk(g, path, 0, 2 * MIB) == sha256(before[:2 * MIB])
        assert read_disk(g, path, DISK_BYTES - MIB, MIB) == sha256(before[-MIB:])

        # A writer streams to the disk; its driver is killed under it.
        g.run(f"head -c {WRITE_BYTES} /dev/urandom > /tmp/stream", check=True)
        written = g.run("sha256sum /tmp/stream", check=True).out.split()[0]
        # One dd per 64 KiB: the stream lasts seconds in the guest, so the kill falls inside it.
        blocks, first = WRITE_BYTES // 65536, WRITE_AT // 65536
        writer = g.spawn(f"for i in $(seq 0 {blocks - 1}); do dd if=/tmp/stream of={path} bs=64K skip=$i "
                         f"seek=$(({first} + i)) count=1 oflag=direct status=none || exit 1; done; "
                         f"sync {path} && echo WRITTEN")
        deadline = time.monotonic() + 60
        while d.status()[bdf]["disk"]["counts"]["writes"] < 8:
            assert time.monotonic() < deadline, d.status()[bdf]
            time.sleep(0.05)
        killed = d.status()[bdf]["pid"]
        understudy.kill_driver(g, killed)
        done = writer.wait(300)
        assert done.returncode == 0 and "WRITTEN" in done.out, done.out + done.err
        r = understudy.wait_recovery(d, bdf, 1)["recoveries"][-1]
        assert r["outcome"] == "recovered" and "killed by signal 9" in r["cause"], r
        after = d.wait_state(bdf, "open", timeout=30)
        assert after["pid"] not in (None, killed), after
        assert after["disk"]["counts"]["errors"] == 0, after["disk"]
        # Read back through the successor: the stream, and the disk around it as it was.
        assert read_disk(g, path, WRITE_AT, WRITE_BYTES) == written
        assert read_disk(g, path, 0, WRITE_AT) == sha256(before[:WRITE_AT])
        log = d.stop()
    print("\n".join(line for line in log.splitlines() if "handover" in line or "recovered" in line))
    # The image itself, on the host: the stream where it was written, nothing else changed.
    on_disk = image.read_bytes()
    assert sha256(on_disk[WRITE_AT:WRITE_AT + WRITE_BYTES]) == written
    assert on_disk[:WRITE_AT] == before[:WRITE_AT] and on_disk[WRITE_AT + WRITE_BYTES:] == before[WRITE_AT + WRITE_BYTES:]
