"""The runtime's block layer without a device (no VM): understudy-ramblk.ko
(tests/runtime/ramblk), a blk-mq driver over RAM whose requests complete
from a work item as a device's would, driven by the stand-alone --blk-*
actions, which take the host ring's path into the kernel half
(us_blk_submit).

Its disk's sector s holds (s * 512 + i) * 7 mod 251 until written; a read
touching sector 2000 is never completed by the "device", so its timeout
handler runs.
"""
import struct
import subprocess
import zlib

from .conftest import BUILD, DRIVER, events

RAMBLK = BUILD / "understudy-ramblk.ko"
SECTORS = 2048
INITIAL = bytes((i * 7) % 251 for i in range(SECTORS * 512))


def pattern(seed: int, count: int) -> bytes:
    words = count * 128
    return struct.pack(f"<{words}I", *(((seed * 2654435761) + k) & 0xffffffff for k in range(words)))


def crc(data: bytes) -> str:
    return f"{zlib.crc32(data):08x}"


def ramblk(*actions: str) -> subprocess.CompletedProcess:
    res = subprocess.run([str(DRIVER), "--module", str(RAMBLK), *actions, "--remove"],
                         capture_output=True, text=True, timeout=60)
    print(res.stdout, res.stderr)
    return res


def test_the_disk_is_reported_with_the_serial_its_own_request_read(runtime_built):
    res = ramblk("--blk-read", "0,8")
    [disk] = events(res.stdout, "DISK")
    # The serial is the attribute's show(), which issues a driver request (blk_execute_rq).
    assert disk["serial"] == "ramblk-0001" and disk["wwid"] == "-", disk
    assert disk["capacity"] == str(SECTORS) and disk["name"] == "ramblk0", disk
    assert disk["driver"] == "understudy_ramblk", disk
    assert disk["queues"] == "2" and disk["depth"] == "8", disk
    assert disk["max_sectors"] == "64" and disk["max_discard"] == "64", disk
    # A volatile cache with FUA, not read-only, rotational (ramblk sets no NONROT).
    assert int(disk["features"], 16) == 0x1 | 0x2 | 0x8, disk
    # init_request ran for every request of both hardware queues' pools.
    assert "ramblk: 16 requests initialised" in res.stderr, res.stderr
    assert res.returncode == 0, res.stdout + res.stderr


def test_reads_and_writes_go_through_the_scatterlist_and_back(runtime_built):
    res = ramblk("--blk-read", "0,64", "--blk-write", "100,24,7", "--blk-read", "96,32",
                 "--blk-read", "0,2000", "--blk-flush")
    assert res.returncode == 0, res.stdout + res.stderr
    reads = events(res.stdout, "BLK_READ")
    assert reads[0]["crc32"] == crc(INITIAL[:64 * 512]) and reads[0]["status"] == "0", reads
    assert events(res.stdout, "BLK_WRITE")[0]["status"] == "0", res.stdout
    # The write is where it was written, its neighbours untouched.
    expect = INITIAL[96 * 512:100 * 512] + pattern(7, 24) + INITIAL[124 * 512:128 * 512]
    assert reads[1]["crc32"] == crc(expect), reads
    # 2000 sectors in 32 requests of at most 64 with 8 tags per queue: the
    # submitter waits for tags as completions free them.
    disk = INITIAL[:100 * 512] + pattern(7, 24) + INITIAL[124 * 512:2000 * 512]
    assert reads[2] == {"sector": "0", "count": "2000", "requests": "32",
                        "crc32": crc(disk), "status": "0"}, reads
    assert events(res.stdout, "BLK_FLUSH") == [{"status": "0"}], res.stdout


def test_a_lost_request_times_out_through_the_drivers_handler(runtime_built):
    res = ramblk("--blk-read", "1992,16", "--blk-read", "0,8")
    reads = events(res.stdout, "BLK_READ")
    # BLK_STS_TIMEOUT from ramblk's timeout handler is -ETIMEDOUT to the host,
    # and the queue goes on working.
    assert reads[0]["status"] == "-110", reads
    assert "ramblk: request" in res.stderr and "timed out (1 so far)" in res.stderr, res.stderr
    assert reads[1]["status"] == "0" and reads[1]["crc32"] == crc(INITIAL[:8 * 512]), reads
    assert res.returncode == 1, res.stdout


def test_requests_the_disk_cannot_take_are_refused_before_the_driver(runtime_built):
    res = ramblk("--blk-read", f"{SECTORS - 4},8", "--blk-read", f"{SECTORS - 8},8")
    reads = events(res.stdout, "BLK_READ")
    assert reads[0]["status"] == "-5", reads       # past the end: bio_check_eod's -EIO
    assert reads[1]["status"] == "0", reads        # the last sectors themselves are fine
    assert reads[1]["crc32"] == crc(INITIAL[(SECTORS - 8) * 512:]), reads


def test_removal_frees_the_disk_queue_tag_set_and_major(runtime_built):
    res = ramblk("--blk-read", "0,8")
    stats = {s["when"]: s for s in events(res.stdout, "STATS")}
    # A tag set, a queue and a major while loaded; nothing after rmmod.
    assert stats["end"]["blk_live"] == "3" and stats["removed"]["blk_live"] == "0", stats
    assert events(res.stdout, "EXIT") == [{"module": "understudy_ramblk", "result": "0"}], res.stdout


def test_c_unit_test_of_the_block_rings(runtime_built):
    """runtime/ddekit/block.c against a host and a kernel half the C test plays
    (tests/runtime/test-blk-rings.c): completions echo their requests out of
    order, slots are reused, the waiting host is signalled, bad entries end
    the driver."""
    res = subprocess.run([str(runtime_built / "test-blk-rings")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and "FAIL" not in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("ok ") == 10, res.stdout


def chain(modules, name: str) -> list[str]:
    """A module's chain from Debian's modules.dep, dependencies first."""
    deps = {}
    for line in (modules / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path.rsplit("/", 1)[-1].removesuffix(".ko")] = (path, rest.split())
    path, needs = deps[name]
    return [str(modules / p) for p in reversed(needs)] + [str(modules / path)]


def test_virtio_blks_imports_all_resolve(runtime_built, debian_modules):
    """Every import of Debian's virtio_blk chain is the runtime's (no VM: no probe)."""
    argv = [str(DRIVER), "--runtime", str(BUILD / "understudy-kernel.ko")]
    for m in chain(debian_modules, "virtio_blk"):
        argv += ["--module", m]
    res = subprocess.run(argv + ["--remove"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "LOAD_FAILED" not in res.stdout, res.stdout + res.stderr
    assert {"module": "virtio_blk", "result": "0"} in events(res.stdout, "INIT"), res.stdout


def test_nvmes_crc_chain_loads_on_its_fallback_and_unloads(runtime_built, debian_modules):
    """t10-pi and its CRC modules, nvme-core's dependencies: no crypto algorithm
    is registered in a driver process, so crc-t10dif and crc64-rocksoft keep
    their table-driven fallback (runtime/kernel/crypto.c); their exits free
    the transform they never got."""
    argv = [str(DRIVER), "--runtime", str(BUILD / "understudy-kernel.ko")]
    for m in chain(debian_modules, "t10-pi"):
        argv += ["--module", m]
    res = subprocess.run(argv + ["--remove"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [e["module"] for e in events(res.stdout, "INIT")] == [
        "crct10dif_common", "crc64", "crc_t10dif", "crc64_rocksoft", "t10_pi"], res.stdout
    assert all(e["result"] == "0" for e in events(res.stdout, "EXIT")), res.stdout
