"""Debian's virtio_blk from user space: virtio_pci, virtio_ring, virtio and
virtio_blk loaded as one driver process on the lab's virtio-blk-pci
(iommu_platform=on), whose disk is a raw file on the host that the test
fills before the guest boots and reads after it stopped.

The runtime's block layer (runtime/kernel/blk-*.c, genhd.c) gives the
driver its tag set, queue and disk; the stand-alone --blk-* actions go
through the same path as the host's block ring (us_blk_submit). The disk's
serial comes from the driver's own sysfs attribute, whose show() issues a
GET_ID request of the driver's (blk_execute_rq).
"""
import random
import struct
import sys
import zlib
from pathlib import Path

import pytest

from lab.guest import Guest

from .conftest import REPO, driver_argv, events, stand_alone

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import contract  # noqa: E402
from . import blk_host  # noqa: E402

BLK_HOST = Path(__file__).with_name("blk_host.py")

pytestmark = pytest.mark.lab

DEVICE = "virtio-blk"
SECTOR = 512
DISK_SECTORS = 16 << 11          # 16 MiB
WRITE_AT, WRITE_COUNT, SEED = 1000, 24, 7


def pattern(seed: int, count: int) -> bytes:
    """What --blk-write SECTOR,COUNT,SEED writes (runtime/driver/blk_actions.c)."""
    words = count * SECTOR // 4
    return struct.pack(f"<{words}I", *(((seed * 2654435761) + k) & 0xffffffff for k in range(words)))


def crc(data: bytes) -> str:
    return f"{zlib.crc32(data):08x}"


def test_virtio_blk_reads_writes_and_is_removed(tmp_path, no_leftover_qemu, runtime_built):
    image = tmp_path / "disk0.img"
    before = random.Random(20261202).randbytes(DISK_SECTORS * SECTOR)
    image.write_bytes(before)
    last = DISK_SECTORS - 8
    with Guest(devices=[DEVICE], disk_images={"disk0": image}) as g:
        res = stand_alone(g, "disk0", "virtio_blk", "--blk-read", "0,64", "--blk-read", f"{last},8",
                          "--blk-read", "4096,2048",
                          "--blk-read", f"{DISK_SECTORS - 4},8",
                          "--blk-write", f"{WRITE_AT},{WRITE_COUNT},{SEED}",
                          "--blk-read", f"{WRITE_AT},{WRITE_COUNT}",
                          "--blk-flush", "--remove", timeout=300)
    out = res.out
    after = image.read_bytes()

    assert events(out, "PROBE") == [
        {"driver": "virtio-pci", "device": "1af4:1042", "result": "0"},
        {"driver": "virtio_blk", "device": "virtio0", "bus": "virtio", "result": "0"}], out
    # The disk as the host would learn it: the image's size, and the serial
    # QEMU was given, read by the driver's own GET_ID request.
    [disk] = events(out, "DISK")
    assert disk["driver"] == "virtio_blk" and disk["name"] == "vda", disk
    assert int(disk["capacity"]) == DISK_SECTORS, disk
    assert disk["serial"] == Guest.disk_serial("disk0"), disk
    assert disk["lbs"] == "512" and disk["queues"] == "1", disk
    assert int(disk["depth"]) > 0 and int(disk["max_sectors"]) >= 8, disk
    # QEMU's writeback cache is a volatile cache (VIRTIO_BLK_F_FLUSH), without FUA.
    assert int(disk["features"], 16) & 0x3 == 0x1, disk

    reads = events(out, "BLK_READ")
    assert len(reads) == 5, out
    # The first sectors, the last ones, a MiB in several requests in flight at once.
    assert reads[0] == {"sector": "0", "count": "64", "requests": reads[0]["requests"],
                        "crc32": crc(before[:64 * SECTOR]), "status": "0"}, reads[0]
    assert reads[1]["crc32"] == crc(before[last * SECTOR:]) and reads[1]["status"] == "0", reads[1]
    assert reads[2]["crc32"] == crc(before[4096 * SECTOR:6144 * SECTOR]), reads[2]
    assert reads[2]["status"] == "0" and int(reads[2]["requests"]) > 1, reads[2]
    # Past the end of the disk: refused as Linux refuses it (bio_check_eod, -EIO).
    assert reads[3]["status"] == "-5", reads[3]
    [write] = events(out, "BLK_WRITE")
    assert write["status"] == "0", write
    # The write reads back, and lands in the file where it should and nowhere else.
    written = pattern(SEED, WRITE_COUNT)
    assert reads[4]["crc32"] == crc(written) and reads[4]["status"] == "0", reads[4]
    lo, hi = WRITE_AT * SECTOR, (WRITE_AT + WRITE_COUNT) * SECTOR
    assert after[lo:hi] == written
    assert after[:lo] == before[:lo] and after[hi:] == before[hi:]
    assert events(out, "BLK_FLUSH") == [{"status": "0"}], out

    # rmmod order: virtio_blk's remove deletes the disk and frees its tag set,
    # virtio_pci's removes virtio0; no queue, tag set or block major is left.
    unbound = [(e["driver"], e["device"]) for e in events(out, "UNBOUND")]
    assert unbound == [("virtio_blk", "virtio0"), ("virtio-pci", "1af4:1042")], out
    stats = {s["when"]: s for s in events(out, "STATS")}
    assert stats["end"]["blk_live"] != "0" and stats["removed"]["blk_live"] == "0", stats
    # The one refused read is the run's one failure (exit status 1, "an action failed").
    assert events(out, "DONE") == [{"status": "1"}] and res.returncode == 1, out + res.err
    assert "WARN" not in out, out


def test_blk_host_packs_the_protocols_layouts():
    """blk_host.py's hand-packed structs are protocol.h's (no VM)."""
    for fmt, struct_name in ((blk_host.HELLO, "us_hello"), (blk_host.REPLY, "us_reply"),
                             (blk_host.DISK, "us_disk"), (blk_host.ENTRY, "us_blk_entry"),
                             (blk_host.HEADER, "us_msg_header")):
        assert fmt.size == contract.value("protocol.h", f"sizeof(struct {struct_name})"), struct_name
    assert blk_host.ring_stride(64) == contract.value("protocol.h", "us_blk_ring_stride(64)")
    assert blk_host.VERSION == contract.define("protocol.h", "US_PROTOCOL_VERSION")
    assert blk_host.RING_ENTRIES == contract.define("protocol.h", "US_RING_ENTRIES_OFFSET")
    assert blk_host.MSG_DISK == contract.value("protocol.h", "US_MSG_DISK")
    assert blk_host.CLASS_BLOCK == contract.value("protocol.h", "US_CLASS_BLOCK")


def test_virtio_blk_serves_the_hosts_block_rings(tmp_path, no_leftover_qemu, runtime_built):
    """Behind the protocol, as understudyd will drive it: HELLO with the block
    class, PROBE, requests lent on blk_submit all at once, completions on
    blk_done. The pool is read-only to the device, so a read's data reaches
    it only through the driver's copy."""
    image = tmp_path / "disk0.img"
    before = random.Random(7).randbytes(DISK_SECTORS * SECTOR)
    image.write_bytes(before)
    actions = ["read:0,64", "read:8192,512", "write:3000,16,9", "read:12000,8", "flush"]
    with Guest(devices=[DEVICE], disk_images={"disk0": image}) as g:
        res = g.run(["python3", str(BLK_HOST), g.pci_address("disk0"), *driver_argv(g, "virtio_blk"),
                     "--", *actions],
                    cwd=str(REPO), timeout=300)
        print(res.out)
        print(res.err)
    out = res.out
    after = image.read_bytes()
    assert events(out, "HOST_REPLY") == [{"request": "HELLO", "status": "0"},
                                         {"request": "PROBE", "status": "0"}], out + res.err
    [disk] = events(out, "HOST_DISK")
    assert int(disk["capacity"]) == DISK_SECTORS and disk["serial"] == Guest.disk_serial("disk0"), disk
    assert disk["driver"] == "virtio_blk" and disk["name"] == "vda" and disk["queues"] == "1", disk
    assert int(disk["max_sectors"]) >= 512, disk
    done = {int(d["tag"]): d for d in events(out, "HOST_DONE")}
    assert sorted(done) == list(range(len(actions))), out
    assert all(d["echo"] == "1" and d["status"] == "0" for d in done.values()), done
    assert done[0]["crc32"] == crc(before[:64 * SECTOR]), done[0]
    assert done[1]["crc32"] == crc(before[8192 * SECTOR:8704 * SECTOR]), done[1]
    assert done[3]["crc32"] == crc(before[12000 * SECTOR:12008 * SECTOR]), done[3]
    lo, hi = 3000 * SECTOR, 3016 * SECTOR
    assert after[lo:hi] == pattern(9, 16)
    assert after[:lo] == before[:lo] and after[hi:] == before[hi:]
    assert events(out, "HOST_EXIT") == [{"status": "0"}], out + res.err
