"""bench blk --driver virtio_blk: one disk, in one guest, alternately driven by
the in-kernel driver (the guest's /dev/vdX) and by understudy (the same module
file in a driver process behind understudyd's /dev/nbdN). fio runs the same
jobs on the raw device in both worlds, past the page cache (direct I/O,
libaio): 4 KiB random reads and writes at queue depth 16 (IOPS), 128 KiB
sequential reads and writes at depth 4 (MB/s), and 4 KiB random reads at
depth 1 (the median completion latency); then a write of 16 MiB that fio
reads back and checks (crc32c). Medians over --runs, understudy ÷ in-kernel
ratios with each ratio's per-run spread; exit 1 if a check failed.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time

from . import provenance, understudy
from .bench import _fmt, _range, lab_identity, log, medians, run_ratios, spread, table
from .devices import STORAGE, lookup
from .errors import LabError
from .guest import Guest

# name: fio's options for it, and the figure taken from its JSON.
JOBS = {
    "randread_iops": (["--rw=randread", "--bs=4k", "--iodepth=16"], ("read", "iops")),
    "randwrite_iops": (["--rw=randwrite", "--bs=4k", "--iodepth=16"], ("write", "iops")),
    "seqread_mbps": (["--rw=read", "--bs=128k", "--iodepth=4"], ("read", "mbps")),
    "seqwrite_mbps": (["--rw=write", "--bs=128k", "--iodepth=4"], ("write", "mbps")),
    "read_lat_us": (["--rw=randread", "--bs=4k", "--iodepth=1"], ("read", "clat_us_median")),
}
# Higher is better for all but the latency: its ratio above 1 is slower.
KEYS = list(JOBS)
RATIOS = {f"{k.rsplit('_', 1)[0]}_ratio": k for k in KEYS}
VERIFY_MIB = 16


def fio(g: Guest, path: str, options: list[str], seconds: int) -> dict:
    """One fio job on `path`; its JSON's first job."""
    res = g.run(["fio", "--name=bench", f"--filename={path}", "--direct=1", "--ioengine=libaio",
                 "--size=48M", f"--runtime={seconds}", "--time_based", "--output-format=json", *options],
                timeout=seconds * 10 + 120)
    if res.returncode:
        raise LabError(f"fio {' '.join(options)} on {path} failed: {res.err.strip()}")
    return json.loads(res.out[res.out.index("{"):])["jobs"][0]


def figure(job: dict, direction: str, what: str) -> float:
    side = job[direction]
    if what == "iops":
        return round(side["iops"], 1)
    if what == "mbps":
        return round(side["bw"] * 1024 / 1e6, 2)
    return round(side["clat_ns"]["percentile"]["50.000000"] / 1000, 1)


def verified(g: Guest, path: str) -> bool:
    """fio writes VERIFY_MIB with checksums and reads them back: no error, no mismatch."""
    res = g.run(["fio", "--name=verify", f"--filename={path}", "--direct=1", "--ioengine=libaio", "--rw=write",
                 "--bs=64k", f"--size={VERIFY_MIB}M", "--verify=crc32c", "--do_verify=1", "--output-format=json"],
                timeout=600)
    if res.returncode:
        log(f"fio's verify on {path} failed: {res.err.strip()}")
        return False
    job = json.loads(res.out[res.out.index("{"):])["jobs"][0]
    return job["error"] == 0


def measure(g: Guest, path: str, seconds: int) -> tuple[dict, bool]:
    run = {}
    for name, (options, (direction, what)) in JOBS.items():
        run[name] = figure(fio(g, path, options, seconds), direction, what)
    return run, verified(g, path)


def kernel_disk(g: Guest, bdf: str) -> str:
    """The in-kernel driver's disk of the PCI function `bdf`, once it is there."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        names = g.run(f"ls /sys/bus/pci/devices/{bdf}/virtio*/block 2>/dev/null").out.split()
        if names:
            return f"/dev/{names[0]}"
        time.sleep(0.3)
    raise LabError(f"{bdf}: the in-kernel driver made no disk")


def bench_blk(driver: str, runs: int, seconds: int) -> dict:
    dev = lookup(driver)
    if dev.kind != STORAGE:
        raise LabError(f"{driver} is not a disk's driver", hint="--driver takes a lab disk's: virtio_blk")
    bins = understudy.build(release=True)
    kernel_runs, understudy_runs = [], []
    checks = {"kernel": [], "understudy": []}
    log(f"booting a guest with {dev.name} (in-kernel {dev.driver})")
    with Guest(devices=[dev.name]) as g:
        bdf, ko = understudy.hand_over(g, "disk0", dev.driver)
        g.run("modprobe nbd nbds_max=4", check=True)
        daemon = understudy.Daemon(g, bins)
        try:
            for i in range(runs):
                log(f"run {i + 1}/{runs}: in-kernel {dev.driver}")
                understudy.bind_kernel(g, bdf, dev.driver)
                figures, ok = measure(g, kernel_disk(g, bdf), seconds)
                kernel_runs.append(figures)
                checks["kernel"].append(ok)
                log(f"run {i + 1}/{runs}: understudy ({dev.driver} in a driver process)")
                understudy.bind_vfio(g, bdf)
                daemon.run(bdf, [ko], ifname=None)
                path = daemon.wait_state(bdf, "open", timeout=120)["disk"]["path"]
                figures, ok = measure(g, path, seconds)
                understudy_runs.append(figures)
                checks["understudy"].append(ok)
                understudy.understudy_down(g, daemon, bdf)
        finally:
            daemon.stop()
    kernel, under = medians(kernel_runs), medians(understudy_runs)
    return {"driver": dev.driver, "device": dev.name, **lab_identity(), "runs": runs, "seconds": seconds,
            "front_end": "nbd", **{r: round(under[k] / kernel[k], 3) if kernel.get(k) else None for r, k in RATIOS.items()},
            "spread": {r: spread(run_ratios(understudy_runs, kernel_runs, k)) for r, k in RATIOS.items()},
            "kernel": kernel, "understudy": under,
            "verify_ok": {world: all(c) for world, c in checks.items()}, "verify_mib": VERIFY_MIB,
            "per_run": {"kernel": kernel_runs, "understudy": understudy_runs}}


def cmd_blk(args) -> int:
    report = {**bench_blk(args.driver, args.runs, args.seconds), **provenance.record()}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        rows = [{"driver": f"in-kernel {report['driver']}", **report["kernel"]},
                {"driver": "understudy (nbd)", **report["understudy"]}]
        print(table(rows, KEYS))
        print("  ".join(f"{r} {_fmt(report[r])}{_range(report['spread'][r])}" for r in RATIOS))
        print(f"fio's {VERIFY_MIB} MiB write read back and checked: "
              + ", ".join(f"{w} {'yes' if ok else 'NO'}" for w, ok in report["verify_ok"].items()))
        print(f"(medians of {args.runs} alternating runs, {args.seconds} s per job; "
              f"host {provenance.machine()['cpu_model']}; python3 -m lab {shlex.join(sys.argv[1:])})")
    return 0 if all(report["verify_ok"].values()) else 1


def add_parser(bsub) -> None:
    p = bsub.add_parser("blk", help="understudy against the in-kernel driver, same guest and disk",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--driver", default="virtio_blk", help="a lab disk's in-kernel driver (default: virtio_blk)")
    p.add_argument("--runs", type=int, default=3, help="alternating runs of each world (default: 3)")
    p.add_argument("--seconds", type=int, default=5, help="each fio job's duration (default: 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_blk)
