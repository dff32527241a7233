"""bench rt: real-time latency beside a NIC's driver, in-kernel and through understudy.

One guest, one NIC on the bridged TAP (as `bench net`). For each world -- the
in-kernel driver, then understudy (its driver process on the last vCPU, as
`bench net` runs it) -- Debian's cyclictest runs a SCHED_FIFO thread on every
vCPU, waking every --interval-us, once with the NIC idle and once under a TCP
transfer from the host into the guest through it. Each case gives the wake-up
latency's min, mean, 99th percentile and max over every thread's samples, and its
histogram (--plot draws them). With --runs N the cases alternate N times and
their histograms add up.

What it shows under the lab's TCG: where the driver's work runs. In-kernel, the
NIC's interrupt and its NAPI poll run in hard- and soft-interrupt context, which
no real-time thread preempts; through understudy they are threads of an ordinary
process, which a SCHED_FIFO thread does. What it cannot show: a real machine's
latencies. A TCG vCPU is a host thread that the host schedules as it likes and
that runs translated code; its timer fires late by the host's whims, so the
absolute figures, and the tails most, are the emulator's (docs/performance.md,
"Real-time latency").
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import threading
from pathlib import Path

from . import net, provenance, understudy
from .bench import _fmt, driver_cpu, lab_identity, log
from .devices import lookup_nic
from .errors import LabError
from .guest import Guest
from .netns import LabNetwork

CASES = ("kernel_idle", "kernel_load", "understudy_idle", "understudy_load")
# Histogram buckets of 1 us up to this; a sample beyond counts as an overflow
# (cyclictest keeps its max exactly).
HISTOGRAM_US = 100_000
PRIORITY = 95
RESULT = "/tmp/lab-cyclictest.json"


def cyclictest(guest: Guest, seconds: int, interval_us: int) -> dict:
    """One cyclictest run, a thread per vCPU: cyclictest's --json report."""
    argv = ["cyclictest", "--mlockall", "--smp", "--priority", str(PRIORITY), "--interval", str(interval_us),
            "--duration", f"{seconds}s", "--histogram", str(HISTOGRAM_US), "--quiet", f"--json={RESULT}"]
    res = guest.run(argv, timeout=seconds + 60)
    if res.returncode:
        raise LabError(f"cyclictest failed (exit {res.returncode}): {res.err.strip()[-500:]}",
                       hint="is Debian's rt-tests installed? `python3 -m lab setup` installs it")
    return json.loads(guest.read_file(RESULT))


def add_run(case: dict | None, report: dict) -> dict:
    """`case` (the runs so far) with a cyclictest report's threads added."""
    case = case or {"histogram": {}, "samples": 0, "overflows": 0, "min_us": None, "max_us": 0, "sum_us": 0.0}
    for thread in report["thread"].values():
        counted = 0
        for us, n in thread["histogram"].items():
            case["histogram"][int(us)] = case["histogram"].get(int(us), 0) + n
            counted += n
        case["samples"] += thread["cycles"]
        case["overflows"] += max(0, thread["cycles"] - counted)
        case["min_us"] = thread["min"] if case["min_us"] is None else min(case["min_us"], thread["min"])
        case["max_us"] = max(case["max_us"], thread["max"])
        case["sum_us"] += thread["avg"] * thread["cycles"]
    return case


def figures(case: dict) -> dict:
    """min, mean, 99th percentile and max of a case's samples; the p99 is None when
    it lies among the overflows (beyond the histogram)."""
    rank, seen, p99 = 0.99 * case["samples"], 0, None
    for us in sorted(case["histogram"]):
        seen += case["histogram"][us]
        if seen >= rank:
            p99 = us
            break
    return {"min_us": case["min_us"], "avg_us": round(case["sum_us"] / case["samples"], 1) if case["samples"] else None,
            "p99_us": p99, "max_us": case["max_us"], "samples": case["samples"], "overflows": case["overflows"],
            "histogram": {str(us): n for us, n in sorted(case["histogram"].items())}}


def measure(guest: Guest, network: LabNetwork, seconds: int, interval_us: int, loaded: bool) -> tuple[dict, float | None]:
    """cyclictest alone, or while the host sends to the guest through the NIC: its
    report and the transfer's Mbit/s."""
    if not loaded:
        return cyclictest(guest, seconds, interval_us), None
    transfer: dict = {}

    def receive() -> None:
        try:
            transfer["mbps"] = net.iperf3(guest, reverse=True, seconds=seconds + 4, network=network)
        except Exception as e:  # reported below, in the caller's thread
            transfer["error"] = e

    thread = threading.Thread(target=receive)
    thread.start()
    try:
        report = cyclictest(guest, seconds, interval_us)
    finally:
        thread.join()
    if "error" in transfer:
        raise LabError(f"the load's transfer failed: {transfer['error']}")
    return report, transfer["mbps"]


def bench_rt(driver: str, runs: int, seconds: int, interval_us: int) -> dict:
    dev = lookup_nic(driver)
    bins = understudy.build(release=True)
    cases: dict[str, dict | None] = dict.fromkeys(CASES)
    load_mbps: dict[str, list[float]] = {c: [] for c in CASES if c.endswith("_load")}
    log(f"booting a guest with {dev.name}")
    with understudy.nic_lab(dev.name) as lab:
        guest, network, bdf, modules = lab.guest, lab.network, lab.bdf, lab.modules
        daemon = understudy.Daemon(guest, bins)
        try:
            for i in range(runs):
                for world in ("kernel", "understudy"):
                    if world == "kernel":
                        understudy.bind_kernel(guest, bdf, dev.driver)
                        net.bring_up(guest, "nic0", network=network)
                    else:
                        understudy.understudy_up(guest, daemon, bdf, modules, network, driver_cpu(guest))
                    for load in ("idle", "load"):
                        name = f"{world}_{load}"
                        log(f"run {i + 1}/{runs}: {name} (cyclictest {seconds} s)")
                        report, mbps = measure(guest, network, seconds, interval_us, load == "load")
                        cases[name] = add_run(cases[name], report)
                        if mbps is not None:
                            load_mbps[name].append(round(mbps, 1))
                    if world == "understudy":
                        understudy.understudy_down(guest, daemon, bdf)
        finally:
            daemon.stop()
    return {"driver": dev.driver, "device": dev.name, **lab_identity(), "runs": runs, "seconds": seconds,
            "interval_us": interval_us, "priority": PRIORITY, "driver_cpu": driver_cpu(guest),
            "load": "iperf3 host -> guest through the NIC, Mbit/s per run", "load_mbps": load_mbps,
            **{name: figures(case) for name, case in cases.items()}}


def write_plot(report: dict, path: Path) -> None:
    """The four cases' latency distributions, as the share of wake-ups later than
    each latency (log scales: the tails are what real-time cares about)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    styles = {"kernel_idle": ("#2166ac", ":"), "kernel_load": ("#2166ac", "-"),
              "understudy_idle": ("#b2182b", ":"), "understudy_load": ("#b2182b", "-")}
    for name in CASES:
        case = report[name]
        later, xs, ys = case["samples"], [], []
        for us, n in ((int(us), n) for us, n in case["histogram"].items()):
            later -= n
            xs.append(us)
            ys.append(later / case["samples"])
        colour, line = styles[name]
        ax.step(xs, ys, where="post", color=colour, linestyle=line,
                label=f"{name.replace('_', ', ')}: p99 {_fmt(case['p99_us'])} us, max {case['max_us']} us")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("wake-up latency (us)")
    ax.set_ylabel("share of wake-ups later")
    ax.legend(fontsize=8)
    ax.set_title(f"cyclictest beside {report['driver']}, {report['runs']} x {report['seconds']} s per case "
                 f"(QEMU TCG guest; load: {report['load'].split(',')[0]})", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


KEYS = ["min_us", "avg_us", "p99_us", "max_us", "samples", "overflows"]


def cmd_rt(args) -> int:
    report = {**bench_rt(args.driver, args.runs, args.seconds, args.interval_us), **provenance.record()}
    if args.plot:
        write_plot(report, Path(args.plot))
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    width = max(map(len, CASES))
    print(f"{'case':<{width}}  " + "  ".join(f"{k:>9}" for k in KEYS) + "  load Mbit/s")
    for name in CASES:
        row = "  ".join(f"{_fmt(report[name][k]):>9}" for k in KEYS)
        print(f"{name:<{width}}  {row}  {', '.join(map(str, report['load_mbps'].get(name, []))) or '-'}")
    print(f"({args.runs} x {args.seconds} s per case, a SCHED_FIFO {PRIORITY} thread per vCPU every "
          f"{args.interval_us} us; host {report['machine']['cpu_model']}; python3 -m lab "
          f"{shlex.join(sys.argv[1:])})")
    return 0


def add_parser(bsub) -> None:
    p = bsub.add_parser("rt", help="real-time latency (cyclictest) beside the driver, in-kernel and understudy",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--driver", default="e1000", help="a lab NIC's in-kernel driver (default: e1000)")
    p.add_argument("--runs", type=int, default=1, help="times each case runs, alternating (default: 1)")
    p.add_argument("--seconds", type=int, default=20, help="cyclictest's duration per case (default: 20)")
    p.add_argument("--interval-us", type=int, default=1000, help="cyclictest's wake-up period (default: 1000)")
    p.add_argument("--plot", metavar="FILE", help="draw the four histograms into this PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_rt)
