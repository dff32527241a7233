"""Where one ping's time goes through understudy: a timeline from the guest kernel's tracer.

Boots a lab guest with an e1000 on the bridged TAP (the host's stack answers,
as in `bench net`), brings up us0 behind understudyd (the release build,
placed as `bench net` places it), turns on the guest kernel's tracepoints with the
monotonic clock -- scheduler wakeups and switches, interrupt handlers, us0's
transmit and receive, and the system calls of the daemon and the driver
process -- and sends pings spaced apart so that every thread sleeps between
them. For each ping it finds the hops between the echo request leaving the
stack on us0 and ping running with the reply (the TX thread runs, the reply's
interrupt, the driver writes the reply to the TAP, the reply on us0), and
prints their medians:

    python3 -m lab.experiments.ping_trace --pings 30 [--json] [--dump FILE]

--pin, --tx-cpu, --irq-cpu and --ping-cpu move threads and the interrupt, and
--tx-fifo gives the TX thread a real-time priority, for experiments. With
--poll-us the TX thread polls instead of sleeping between pings; its first
hop then ends when it reads the request from the TAP.

The tracer costs a little per event but, unlike strace, does not stop the
threads it watches, so the gaps it shows are the ones a ping waits through.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass

from .. import net, provenance, understudy
from ..bench import driver_cpu
from ..guest import Guest
from ..netns import LabNetwork

TRACING = "/sys/kernel/tracing"
ECHO_REQUEST_FRAME = 98      # 56 bytes of ping data + ICMP 8 + IP 20 + Ethernet 14
ECHO_REPLY_PACKET = 84       # the same, as netif_receive_skb sees it (after the MAC header)
READV = 19
WRITEV = 20
IOCTL = 16
SYSCALLS = {0: "read", 1: "write", 7: "poll", IOCTL: "ioctl", WRITEV: "writev", 202: "futex",
            230: "clock_nanosleep", 35: "nanosleep", 271: "ppoll"}

# One line of the trace: "  comm-pid  [cpu] flags  seconds: event: details"
LINE = re.compile(r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+):\s+"
                  r"(?P<event>\w+):\s+(?P<rest>.*)$")


@dataclass
class Event:
    ts: float          # seconds, CLOCK_MONOTONIC
    cpu: int
    pid: int           # the thread the event happened on (0: idle)
    event: str
    rest: str

    def field(self, name: str) -> str | None:
        m = re.search(rf"\b{name}=(\S+)", self.rest)
        return m.group(1) if m else None


def parse(trace: str) -> list[Event]:
    events = []
    for line in trace.splitlines():
        m = LINE.match(line)
        if m:
            events.append(Event(float(m["ts"]), int(m["cpu"]), int(m["pid"]), m["event"], m["rest"]))
    return events


def threads(guest: Guest, *names: str) -> dict[int, str]:
    """tid -> role for every thread of the named processes ("understudyd:dev-0000:01:00.")."""
    found = {}
    for name in names:
        for pid in guest.run(["pgrep", "-x", name[:15]]).out.split():
            out = guest.run(f"for t in /proc/{pid}/task/*; do echo ${{t##*/}} $(cat $t/comm); done").out
            for line in out.splitlines():
                tid, comm = line.split(" ", 1)
                found[int(tid)] = f"{name}:{comm}"
    return found


def enable_tracing(guest: Guest, tids: list[int], polling: bool = False) -> None:
    """The tracepoints, our threads' system calls among them: all of them, or
    for a polling TX thread, whose empty polls would fill the buffer, only
    those the hops and timings need (writev and ioctl, and a readv that
    read something)."""
    pids = " || ".join(f"common_pid == {t}" for t in tids)
    enter, exit_ = (f"({pids}) && (id == {WRITEV} || id == {IOCTL})",
                    f"({pids}) && (id == {IOCTL} || (id == {READV} && ret > 0))") if polling else (pids, pids)
    script = f"""
        mountpoint -q {TRACING} || mount -t tracefs tracefs {TRACING}
        cd {TRACING} && echo 0 > tracing_on && echo > trace && echo mono > trace_clock
        echo 4096 > buffer_size_kb
        for e in sched/sched_wakeup sched/sched_switch irq/irq_handler_entry irq/irq_handler_exit irq_vectors/local_timer_entry \\
                 irq_vectors/reschedule_entry irq_vectors/call_function_single_entry \\
                 net/net_dev_queue net/netif_receive_skb raw_syscalls/sys_enter raw_syscalls/sys_exit; do
            echo 1 > events/$e/enable
        done
        echo 'name == "us0"' > events/net/net_dev_queue/filter
        echo 'name == "us0"' > events/net/netif_receive_skb/filter
        echo '{enter}' > events/raw_syscalls/sys_enter/filter
        echo '{exit_}' > events/raw_syscalls/sys_exit/filter
        echo 1 > tracing_on
    """
    guest.run(script, check=True)


def stop_tracing(guest: Guest) -> str:
    guest.run(f"echo 0 > {TRACING}/tracing_on", check=True)
    return guest.read_file(f"{TRACING}/trace").decode(errors="replace")


def describe(e: Event, roles: dict[int, str]) -> str:
    who = roles.get(e.pid, f"pid {e.pid}")
    if e.event in ("sys_enter", "sys_exit"):
        nr = int(re.match(r"NR (-?\d+)", e.rest)[1])
        return f"{who}: {e.event[4:]} {SYSCALLS.get(nr, nr)}"
    if e.event == "sched_wakeup":
        tid = int(e.field("pid") or -1)
        return f"{who}: wakes {roles.get(tid, tid)} on cpu {e.field('target_cpu')}"
    if e.event == "sched_switch":
        nxt = int(e.field("next_pid") or -1)
        return f"cpu {e.cpu}: switch to {roles.get(nxt, nxt)}"
    return f"{who}: {e.event} {e.rest}"


def relevant(e: Event, roles: dict[int, str]) -> bool:
    """Events of our threads, wakeups and switches that involve them, interrupts, us0."""
    if e.event in ("net_dev_queue", "netif_receive_skb", "irq_handler_entry", "irq_handler_exit",
                   "local_timer_entry", "reschedule_entry", "call_function_single_entry"):
        return True
    if e.event == "sched_wakeup":
        return int(e.field("pid") or -1) in roles
    if e.event == "sched_switch":
        return int(e.field("next_pid") or -1) in roles
    return e.pid in roles


def pings(events: list[Event]) -> list[tuple[int, int]]:
    """(index of the request on us0, index of its reply) for every complete ping."""
    found, start = [], None
    for i, e in enumerate(events):
        if e.event == "net_dev_queue" and e.field("len") == str(ECHO_REQUEST_FRAME):
            start = i
        elif e.event == "netif_receive_skb" and e.field("len") == str(ECHO_REPLY_PACKET) and start is not None:
            found.append((start, i))
            start = None
    return found


def with_ping(events: list[Event], found: list[tuple[int, int]], roles: dict[int, str]) -> dict[int, str]:
    """`roles` and the thread that sent the echo requests as "ping". Only a
    request says which thread ping is: the driver's threads send on us0 too
    (an ARP reply, sent while the frame that asked for it is written to the
    TAP), and keep their roles."""
    return {**{events[lo].pid: "ping" for lo, _ in found}, **roles}


def first(events: list[Event], lo: int, hi: int, pred) -> int | None:
    return next((i for i in range(lo, hi) if pred(events[i])), None)


def last(events: list[Event], lo: int, hi: int, pred) -> int | None:
    return next((i for i in range(hi - 1, lo - 1, -1) if pred(events[i])), None)


def hops(events: list[Event], lo: int, hi: int, roles: dict[int, str],
         polling: bool = False) -> dict[str, float] | None:
    """Milliseconds of each hop of one ping, or None when a milestone is missing.

    The way out is read forwards from the request, the way back backwards from
    the reply: the send's own completion interrupt comes in between, and the
    reply's hops are the last ones of their kind before it. A sleeping TX
    thread's first hop ends when it runs; a polling one is running already,
    and its first hop ends when its read of the TAP returns the request."""
    def runs(role: str):
        return lambda e: e.event == "sched_switch" and role in roles.get(int(e.field("next_pid") or -1), "")

    def reads_the_tap(e: Event) -> bool:
        m = re.match(r"NR (\d+) = (-?\d+)", e.rest)
        return e.event == "sys_exit" and roles.get(e.pid, "").endswith(":understudy-tx") and \
            m is not None and int(m[1]) == READV and int(m[2]) > 0

    def is_irq(e: Event) -> bool:
        return e.event == "irq_handler_entry" and "vfio" in e.rest

    def writes_to_tap(e: Event) -> bool:
        return e.event == "sys_enter" and "understudy-driver" in roles.get(e.pid, "") and \
            re.match(r"NR (\d+)", e.rest)[1] == str(WRITEV)

    out = [("request on us0", lo)]
    label, pred = ("driver tx thread reads it", reads_the_tap) if polling else \
        ("driver tx thread runs", runs(":understudy-tx"))
    i = first(events, lo + 1, hi, pred)
    if i is None:
        return None
    out.append((label, i))
    # ping runs with the reply when it is switched back in; with no switch
    # before its next request it never left its vCPU (it has the reply at once).
    pid = events[lo].pid
    nxt = first(events, hi + 1, len(events), lambda e: e.event == "net_dev_queue" and e.pid == pid)
    i = first(events, hi + 1, len(events) if nxt is None else nxt,
              lambda e: e.event == "sched_switch" and e.field("next_pid") == str(pid))
    back = [("ping runs", hi if i is None else i), ("reply on us0", hi)]
    # Whichever thread handles the interrupt (an IRQ thread, or the TX
    # thread serving the line) writes the reply to the TAP.
    for label, pred in (("driver writes the reply", writes_to_tap), ("reply's interrupt", is_irq)):
        i = last(events, out[-1][1] + 1, back[-1][1], pred)
        if i is None:
            return None
        back.append((label, i))
    marks = out + back[::-1]
    return {f"{a} -> {b}": (events[j].ts - events[i].ts) * 1000
            for (a, i), (b, j) in zip(marks, marks[1:])}


def durations_ms(events: list[Event], roles: dict[int, str]) -> dict[str, list[float]]:
    """How long each run of the device's VFIO interrupt handler took, and each
    ioctl of the driver process (the INTx unmask, in the steady state)."""
    started, took = {}, {"vfio_handler": [], "driver_ioctl": []}
    for e in events:
        if e.event == "irq_handler_entry" and "vfio" in e.rest:
            started["vfio_handler", e.cpu] = e.ts
        elif e.event == "sys_enter" and e.rest.startswith(f"NR {IOCTL} ") and \
                "understudy-driver" in roles.get(e.pid, ""):
            started["driver_ioctl", e.pid] = e.ts
        else:
            key = ("vfio_handler", e.cpu) if e.event == "irq_handler_exit" else \
                ("driver_ioctl", e.pid) if e.event == "sys_exit" else None
            if key in started:
                took[key[0]].append((e.ts - started.pop(key)) * 1000)
    return took


SILENT_GAP_S = 0.0003


def silent_ms(events: list[Event], lo: int, hi: int) -> float:
    """Milliseconds of one ping in which nothing was traced on either vCPU for
    over SILENT_GAP_S, except the wait for the device (gaps that end in its
    interrupt): time in which the guest did not run at all."""
    return sum((b.ts - a.ts) * 1000 for a, b in zip(events[lo:hi], events[lo + 1:hi + 1])
               if b.ts - a.ts > SILENT_GAP_S and b.event != "irq_handler_entry")


def set_irq_cpu(guest: Guest, bdf: str, cpu: int) -> None:
    for line in guest.run("grep vfio /proc/interrupts", check=True).out.splitlines():
        if bdf in line:
            guest.run(f"echo {1 << cpu:x} > /proc/irq/{line.split(':')[0].strip()}/smp_affinity", check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m lab.experiments.ping_trace", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pings", type=int, default=30, help="pings to trace (default 30)")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between pings (default 0.2)")
    ap.add_argument("--show", type=int, default=3, help="pings whose whole timeline is printed (default 3)")
    ap.add_argument("--pin", type=int, metavar="CPU",
                    help="first pin the daemon's and the driver process's threads to this CPU")
    ap.add_argument("--irq-cpu", type=int, metavar="CPU",
                    help="route the device's interrupts to this CPU (/proc/irq/N/smp_affinity); "
                         "by default the guest kernel chooses")
    ap.add_argument("--tx-cpu", type=int, metavar="CPU",
                    help="then pin the driver's TX thread alone to this CPU (an experiment: on the "
                         "pinging thread's CPU the request needs no cross-CPU wake-up)")
    ap.add_argument("--ping-cpu", type=int, metavar="CPU",
                    help="run ping on this CPU alone (taskset); by default the scheduler places it")
    ap.add_argument("--tx-fifo", action="store_true",
                    help="give the TX thread SCHED_FIFO priority 10: woken on ping's CPU, it "
                         "preempts ping at once instead of waiting for it to sleep")
    ap.add_argument("--poll-us", type=int, metavar="N",
                    help="the driver's TX thread polls for up to N µs after its last work while "
                         "the traffic is sparse (`understudy run --poll-us`); by default it sleeps. "
                         "A polling thread's first hop ends when its read of the TAP returns the "
                         "request (it has no wake-up), and of its system calls only writev, ioctl "
                         "and a read that returned data are traced: no silent time is reported")
    ap.add_argument("--dump", help="write the raw trace to this file")
    ap.add_argument("--json", action="store_true", help="print the hop medians as JSON")
    args = ap.parse_args(argv)
    polling = bool(args.poll_us)

    bins = understudy.build(release=True)
    with LabNetwork() as network, Guest(devices=["e1000"], netdev=network) as g:
        bdf = g.pci_address("nic0")
        understudy.prepare(g)
        peer = net.peer_address(network)
        on_cpu = f"taskset -c {args.ping_cpu} " if args.ping_cpu is not None else ""

        def ping():
            return g.run(f"{on_cpu}ping -n -q -c {args.pings} -i {args.interval} {peer}", check=True)

        # The in-kernel driver's pings first, then understudy's, untraced, to compare with.
        understudy.bind_kernel(g, bdf, "e1000")
        net.bring_up(g, "nic0", network=network)
        kernel = ping()
        daemon = understudy.Daemon(g, bins)
        understudy.understudy_up(g, daemon, bdf, understudy.module_chain(g, "e1000"), network,
                                 driver_cpu(g), poll_us=args.poll_us)
        if args.irq_cpu is not None:
            set_irq_cpu(g, bdf, args.irq_cpu)
        roles = threads(g, "understudyd", "understudy-driver")
        if args.pin is not None:
            for tid in roles:
                g.run(["taskset", "-p", "-c", str(args.pin), str(tid)], check=True)
        for tid in (t for t, role in roles.items() if role.endswith(":understudy-tx")):
            if args.tx_cpu is not None:
                g.run(["taskset", "-p", "-c", str(args.tx_cpu), str(tid)], check=True)
            if args.tx_fifo:
                g.run(["chrt", "-f", "-p", "10", str(tid)], check=True)
        untraced = ping()
        enable_tracing(g, list(roles), polling)
        res = ping()
        raw = stop_tracing(g)
        daemon.stop()
    if args.dump:
        open(args.dump, "w").write(raw)
    events = parse(raw)
    found = pings(events)
    roles = with_ping(events, found, roles)
    per_ping, silent = [], []
    for n, (lo, hi) in enumerate(found):
        h = hops(events, lo, hi, roles, polling)
        if h:
            per_ping.append(h)
        if not polling:   # a polling thread's untraced calls would read as silence
            silent.append(silent_ms(events, lo, hi))
        if n < args.show:   # with --json, stdout is the JSON alone
            out = sys.stderr if args.json else sys.stdout
            print(f"--- ping {n + 1}: {(events[hi].ts - events[lo].ts) * 1000:.3f} ms", file=out)
            for e in events[lo:hi + 1]:
                if relevant(e, roles):
                    print(f"  {(e.ts - events[lo].ts) * 1000:8.3f} ms  [{e.cpu}] {describe(e, roles)}", file=out)
    summary = {"command": "python3 -m lab.experiments.ping_trace "
               + " ".join(argv if argv is not None else sys.argv[1:]),
               "commit": provenance.commit(), "machine": provenance.machine(),
               "pings": len(per_ping), "ping_output": res.out.strip().splitlines()[-1],
               "untraced_ping_output": untraced.out.strip().splitlines()[-1],
               "kernel_ping_output": kernel.out.strip().splitlines()[-1],
               "hop_ms_median": {k: round(statistics.median(p[k] for p in per_ping), 3)
                                 for k in (per_ping[0] if per_ping else {})},
               "total_ms_median": round(statistics.median(sum(p.values()) for p in per_ping), 3)
               if per_ping else None,
               "silent_ms_median": round(statistics.median(silent), 3) if silent else None,
               **{f"{name}_ms_median": round(statistics.median(took), 3) if took else None
                  for name, took in durations_ms(events, roles).items()}}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['pings']} pings traced; ping says: {summary['ping_output']}")
        print(f"untraced: {summary['untraced_ping_output']}; "
              f"through the in-kernel driver: {summary['kernel_ping_output']}")
        for hop, ms in summary["hop_ms_median"].items():
            print(f"  {ms:8.3f} ms  {hop}")
        print(f"  {summary['total_ms_median']} ms in all (median)" + (
              "" if summary["silent_ms_median"] is None else
              f"; of a ping, {summary['silent_ms_median']} ms with nothing traced on either vCPU (median)"))
        print(f"  the VFIO interrupt handler {summary['vfio_handler_ms_median']} ms, the driver's "
              f"ioctl (unmask) {summary['driver_ioctl_ms_median']} ms (medians)")
    if not per_ping:
        print(f"[ping_trace] no hops found in any of the {len(found)} pings traced: the trace "
              "lost events, or the driver's threads were not the ones traced; "
              "--dump FILE writes the raw trace", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
