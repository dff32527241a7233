"""Where a transfer through a NIC spends the machine: the in-kernel driver and understudy side by side.

Boots a lab guest with one NIC on the bridged TAP (as `bench net`) and, round
after round, runs the same iperf3 transfer (5 s, host -> guest unless --tx)
through the in-kernel driver and through understudy (its driver process on
the last vCPU, as `bench net` runs it), and through each --variant: another
understudyd and/or driver-process build, for A/B rounds of a change in one
guest:

    python3 -m lab.experiments.rx_profile --driver e1000 --rounds 3
    python3 -m lab.experiments.rx_profile --variant refill8=/tmp/understudyd:/tmp/understudy-driver

Per run it takes, besides Mbit/s, the CPU of every guest thread (which stage
of the path works how hard), of QEMU and of the whole host (the lab
runs under TCG: guest, device model and the peer share the host's cores), the
NIC's interrupts, the segments the guest's TCP sent (its ACKs), the switches
between address spaces (each a flush of TCG's software TLB), each guest
thread's sleeps (voluntary context switches) and read/write system calls,
the peer TCP's retransmissions and the bridge's drops towards the guest. Prints per-mode medians as a
table (or --json), CPU as milliseconds per megabyte moved.
docs/performance.md §7 has what it found; docs/notes/bench-net-history.md
the A/B rounds it ran.
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .. import bench, net, provenance, understudy
from ..devices import lookup
from ..guest import Guest
from ..netns import LabNetwork

SECONDS = 5

# Every guest thread's CPU ticks (utime + stime), voluntary context switches
# (sleeps, each ended by a wake-up) and read/write system calls (its io's syscr +
# syscw: read, readv, recvmsg, write, writev, sendmsg and their kin -- the TAP's
# and the eventfds' traffic, not ioctl, futex or poll), keyed "pid/tid comm"; not
# this script's own (a python3 start under TCG costs about a second).
THREAD_TICKS = """
import glob, json, os
out = {}
for task in glob.glob('/proc/[0-9]*/task/[0-9]*'):
    if task.split('/')[2] == str(os.getpid()):
        continue
    try:
        text = open(task + '/stat').read()
        sleeps = [l for l in open(task + '/status') if l.startswith('voluntary_ctxt_switches')]
        calls = sum(int(l.split()[1]) for l in open(task + '/io') if l.startswith(('syscr', 'syscw')))
    except OSError:
        continue
    comm = text[text.index('(') + 1:text.rindex(')')]
    fields = text[text.rindex(')') + 2:].split()
    pid, tid = task.split('/')[2], task.split('/')[4]
    out[pid + '/' + tid + ' ' + comm] = [int(fields[11]) + int(fields[12]), int(sleeps[0].split()[1]), calls]
print(json.dumps(out))
"""


def process_ticks(pid: int) -> int:
    """A host process's CPU ticks (utime + stime, all its threads)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def peer_counters(network: LabNetwork) -> dict[str, int]:
    """The peer TCP's retransmitted segments and what the bridge's ports dropped."""
    # /proc/net is the reader's network namespace's.
    snmp = subprocess.run(["ip", "netns", "exec", network.name, "cat", "/proc/net/snmp"],
                          capture_output=True, text=True, check=True).stdout
    links = json.loads(network.ip("-j", "-s", "link", "show"))
    return {"retrans": net.tcp_counter(snmp, "RetransSegs"),
            "tap_tx_dropped": sum(link["stats64"]["tx"]["dropped"] for link in links
                                  if link["ifname"] != "lo")}


def nic_interrupts(g: Guest, bdf: str) -> int:
    irq = g.run(f"cat /sys/bus/pci/devices/{bdf}/irq", check=True).out.strip()
    line = g.run(f"grep '^ *{irq}:' /proc/interrupts").out.split()
    return sum(int(f) for f in line[1:1 + g.cpus]) if line else 0


# Every switch between two processes' address spaces writes CR3, and TCG (no
# PCID) then flushes the whole software TLB of that vCPU: the kernel's
# tlb_flush tracepoint with reason 0 ("flush on task switch") counts them.
# A hist trigger keeps the count in the kernel; reading it costs a cat.
TLB_FLUSH_EVENT = "/sys/kernel/tracing/events/tlb/tlb_flush"


def count_mm_switches(g: Guest) -> None:
    g.run("mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; "
          f"echo hist:keys=reason > {TLB_FLUSH_EVENT}/trigger", check=True)


def mm_switches(g: Guest) -> int:
    hist = g.read_file(f"{TLB_FLUSH_EVENT}/hist").decode()
    return sum(int(line.split("hitcount:")[1]) for line in hist.splitlines()
               if line.startswith("{") and line.split("}")[0].split(":")[1].strip() == "0")


def thread_role(name: str, driver_pids: set[str]) -> str:
    """A thread's part in the transfer: its name, the driver process's tagged as such."""
    pid, comm = name.split("/", 1)[0], name.split(" ", 1)[1]
    if pid in driver_pids:
        return f"driver:{comm}"
    if comm.startswith("ksoftirqd") or comm.startswith("kworker"):
        return comm.split("/")[0]
    return comm


def thread_ticks(g: Guest) -> dict[str, list[int]]:
    return json.loads(g.run(["python3", "-c", THREAD_TICKS], check=True).out)


def counters(g: Guest, network: LabNetwork, bdf: str) -> dict[str, int]:
    """The counters measure() takes the difference of, besides the threads'."""
    return {"guest_busy": net.busy_ticks(g.read_file("/proc/stat").decode()),
            "guest_tcp_out": net.tcp_counter(g.read_file("/proc/net/snmp").decode(), "OutSegs"),
            "host_busy": net.busy_ticks(Path("/proc/stat").read_text()),
            "qemu": process_ticks(g.qemu.pid), "irqs": nic_interrupts(g, bdf),
            "mm_switches": mm_switches(g), **peer_counters(network)}


def measure(g: Guest, network: LabNetwork, bdf: str, reverse: bool,
            driver_exe: str | None) -> dict:
    # The thread scan goes outside the counters' window: its python3 costs
    # the guest (and so the host) about a second of CPU under TCG.
    threads0 = thread_ticks(g)
    before = counters(g, network, bdf)
    t0 = time.monotonic()
    mbps = net.iperf3(g, reverse=reverse, seconds=SECONDS, network=network)
    elapsed = time.monotonic() - t0
    after = counters(g, network, bdf)
    threads1 = thread_ticks(g)
    delta = {k: after[k] - before[k] for k in after}
    mbytes = mbps * SECONDS / 8
    per_mb = lambda ticks: round(ticks * 1000 / net.USER_HZ / mbytes, 2)  # noqa: E731 ms per MB
    drivers = set(map(str, understudy.driver_pids(g, driver_exe))) if driver_exe else set()
    guest: dict[str, int] = collections.Counter()
    sleeps: dict[str, int] = collections.Counter()
    syscalls: dict[str, int] = collections.Counter()
    for name, (ticks, slept, calls) in threads1.items():
        ticks0, slept0, calls0 = threads0.get(name, (0, 0, 0))
        role = thread_role(name, drivers)
        guest[role] += ticks - ticks0
        sleeps[role] += slept - slept0
        syscalls[role] += calls - calls0
    # Threads that ended in between (iperf3's) are in the total only.
    guest["(ended)"] = max(0, delta["guest_busy"] - sum(guest.values()))
    return {"mbps": round(mbps, 1),
            "guest_ms_per_mb": per_mb(delta["guest_busy"]),
            "host_busy_cores": round(delta["host_busy"] / net.USER_HZ / elapsed, 2),
            "host_ms_per_mb": per_mb(delta["host_busy"]),
            "qemu_ms_per_mb": per_mb(delta["qemu"]),
            "irqs_per_s": round(delta["irqs"] / elapsed),
            "guest_tcp_segs_out_per_mb": round(delta["guest_tcp_out"] / mbytes, 1),
            "guest_mm_switches_per_mb": round(delta["mm_switches"] / mbytes, 1),
            "retrans": delta["retrans"], "tap_tx_dropped": delta["tap_tx_dropped"],
            "guest_threads": {k: per_mb(v) for k, v in guest.items() if v},
            "guest_sleeps_per_mb": {k: round(v / mbytes, 1) for k, v in sleeps.items() if v},
            "guest_syscalls_per_mb": {k: round(v / mbytes, 1) for k, v in syscalls.items() if v}}


GROUPS = {"guest_threads": "ms/MB", "guest_sleeps_per_mb": "sleeps/MB",
          "guest_syscalls_per_mb": "read/write system calls/MB"}


def summarise(runs: list[dict]) -> dict:
    """Medians of every figure; per-thread figures over the threads with at least 0.5 (ms, sleeps or calls) per MB."""
    out = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]
           if not isinstance(runs[0][k], dict)}
    for group in GROUPS:
        names = {n for r in runs for n in r[group]}
        med = {n: round(statistics.median(r[group].get(n, 0) for r in runs), 3) for n in names}
        out[group] = dict(sorted(((n, v) for n, v in med.items() if v >= 0.5), key=lambda kv: -kv[1]))
    return out


def print_table(report: dict) -> None:
    modes = list(report["modes"])
    flat = [k for k in report["modes"][modes[0]] if not isinstance(report["modes"][modes[0]][k], dict)]
    rows = [(k, [report["modes"][m].get(k) for m in modes]) for k in flat]
    for group, unit in GROUPS.items():
        names = sorted({n for m in modes for n in report["modes"][m][group]},
                       key=lambda n: -max(report["modes"][m][group].get(n, 0) for m in modes))
        rows += [(f"{group.split('_')[0]} {n} {unit}", [report["modes"][m][group].get(n) for m in modes])
                 for n in names]
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  " + "  ".join(f"{m:>12}" for m in modes))
    for name, values in rows:
        print(f"{name:<{width}}  " + "  ".join(f"{bench._fmt(v):>12}" for v in values))
    print(f"(medians of {report['rounds']} rounds of {SECONDS} s, {report['direction']}; "
          f"{report['command']}; at {report['commit'][:12]} on {report['machine']['cpu_model']})")


def parse_variant(text: str) -> tuple[str, str, str | None]:
    """NAME=[UNDERSTUDYD][:DRIVER] -> (name, daemon path or "", driver path or None)."""
    name, _, paths = text.partition("=")
    daemon, _, driver = paths.partition(":")
    if not name or not (daemon or driver):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=[UNDERSTUDYD][:DRIVER]")
    return name, daemon, driver or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m lab.experiments.rx_profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--driver", default="e1000", help="the NIC's driver (default: e1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every mode (default: 3)")
    parser.add_argument("--tx", action="store_true", help="guest -> host instead of host -> guest")
    parser.add_argument("--variant", action="append", type=parse_variant, default=[],
                        metavar="NAME=[UNDERSTUDYD][:DRIVER]",
                        help="also run understudy with these builds (paths as the guest sees them, "
                             "which is the host's root); repeatable")
    parser.add_argument("--no-kernel", action="store_true", help="leave out the in-kernel driver")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    dev = lookup(args.driver)
    bins = understudy.build(release=True)
    modes: dict[str, tuple[dict, str] | None] = {} if args.no_kernel else {"kernel": None}
    modes["understudy"] = (bins, str(bins["driver"]))
    for name, daemon, driver in args.variant:
        modes[name] = ({**bins, "understudyd": Path(daemon or bins["understudyd"])},
                       driver or str(bins["driver"]))
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    with LabNetwork() as network, Guest(devices=[dev.name], netdev=network) as g:
        bdf = g.pci_address("nic0")
        understudy.prepare(g)
        count_mm_switches(g)
        chain = understudy.module_chain(g, dev.driver)
        for r in range(args.rounds):
            for mode, build in modes.items():
                print(f"[rx_profile] round {r + 1}/{args.rounds}: {mode}", file=sys.stderr, flush=True)
                if build is None:
                    understudy.bind_kernel(g, bdf, dev.driver)
                    net.bring_up(g, "nic0", network=network)
                    runs[mode].append(measure(g, network, bdf, not args.tx, None))
                    continue
                daemon = understudy.Daemon(g, build[0], build[1])
                try:
                    understudy.understudy_up(g, daemon, bdf, chain, network, bench.driver_cpu(g))
                    runs[mode].append(measure(g, network, bdf, not args.tx, build[1]))
                    understudy.understudy_down(g, daemon, bdf)
                finally:
                    daemon.stop()
    report = {"driver": dev.driver, "direction": "guest -> host" if args.tx else "host -> guest",
              "rounds": args.rounds, "command": "python3 -m lab.experiments.rx_profile "
              + " ".join(argv if argv is not None else sys.argv[1:]),
              "commit": provenance.commit(), "machine": provenance.machine(),
              "modes": {m: summarise(rs) for m, rs in runs.items()}, "per_run": runs}
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
