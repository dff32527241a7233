"""The work behind a megabyte moved, counted in the guest: what a benchmark's figures
cost in context switches, interrupts, understudy's read/write system calls and
its threads' wake-ups (docs/performance.md, "Work per megabyte").

Counters are read before and after a transfer, and the differences divided by the
megabytes it moved. The system's counters (/proc/stat: context switches,
interrupts) compare the in-kernel driver with understudy; the processes' (their
threads' /proc/PID/task/*/status and /proc/PID/io) say where understudy's share
goes: a voluntary context switch is a thread that blocked and was woken again, a
read/write system call is one of read, readv, recvmsg, write, writev, sendmsg and
their kin (what /proc/PID/io counts as syscr and syscw: the TAP's and the eventfds'
traffic, not ioctl, futex or poll).
"""
from __future__ import annotations

from .guest import Guest

# Prints "system ctxt N", "system intr N", then per process "NAME syscalls N",
# "NAME wakeups N", "NAME preempted N". A process that has gone prints nothing.
_SCRIPT = r"""
awk '$1 == "ctxt" || $1 == "intr" { print "system", $1, $2 }' /proc/stat
for spec in "$@"; do
  name=${spec%%=*}; pid=${spec#*=}
  [ -r /proc/$pid/io ] || continue
  awk -v n="$name" '$1 == "syscr:" || $1 == "syscw:" { s += $2 } END { print n, "syscalls", s }' /proc/$pid/io
  cat /proc/$pid/task/*/status 2>/dev/null | awk -v n="$name" '
    $1 == "voluntary_ctxt_switches:" { v += $2 }
    $1 == "nonvoluntary_ctxt_switches:" { i += $2 }
    END { print n, "wakeups", v; print n, "preempted", i }'
done
"""


def counters(guest: Guest, processes: dict[str, int] | None = None) -> dict[str, dict[str, int]]:
    """{"system": {"ctxt", "intr"}, NAME: {"syscalls", "wakeups", "preempted"}} now,
    for the guest's `processes` (name -> pid)."""
    specs = [f"{name}={pid}" for name, pid in (processes or {}).items()]
    res = guest.run(["sh", "-c", _SCRIPT, "work", *specs], check=True)
    out: dict[str, dict[str, int]] = {}
    for line in res.out.splitlines():
        name, key, value = line.split()
        out.setdefault(name, {})[key] = int(value)
    return out


def per_megabyte(before: dict, after: dict, megabytes: float) -> dict[str, float]:
    """Each counter's growth per megabyte, as "NAME_KEY_per_mb" (system's as "KEY_per_mb"):
    for the processes present at both ends. None of it if nothing moved."""
    if megabytes <= 0:
        return {}
    out = {}
    for name, values in after.items():
        for key, value in values.items():
            if key in before.get(name, {}):
                label = f"{key}_per_mb" if name == "system" else f"{name}_{key}_per_mb"
                out[label] = round((value - before[name][key]) / megabytes, 1)
    return out
