# SPDX-License-Identifier: GPL-2.0
"""Traffic through understudy's interface us0 while its driver is killed or
replaced, and the gaps that measure each outage: a hash-checked host → guest
transfer and a fast ping probe running in the background, a kill in the middle
of a transfer, and the longest gap around each event.

The demo (`python3 -m lab demo`), the crash scenarios (lab/scenario.py), the
update scenario (lab/update_loop.py) and the recovery and update tests
(tests/daemon/) build on these; starting and killing the driver is
lab/understudy.py.
"""
from __future__ import annotations

import json
import re
import signal
import time
from dataclasses import dataclass

from . import config, net, understudy
from .agent import GuestProcess
from .errors import LabError
from .guest import SLIRP_GATEWAY, Guest
from .netns import LabNetwork

# Gaps in the received stream longer than this are reported by the workload,
# to be lined up with the kills (the application's view of each outage).
GAP_LOG_MS = 20
# The ping probe: one echo request every 10 ms (root may go this fast).
PROBE_INTERVAL_S = 0.01
PING_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from", re.M)


class Us0Transfer:
    """A host → guest hash-checked TCP transfer through understudy's interface
    (the guest's default route, or `network`'s bridge), running in the background."""

    def __init__(self, guest: Guest, nbytes: int, timeout: float = 120,
                 gap_log_ms: float | None = None, network: LabNetwork | None = None,
                 rate_mbps: float | None = None):
        self.guest, self.nbytes = guest, nbytes
        self.host = net.HostBulk("rx", nbytes, timeout=timeout, network=network, rate_mbps=rate_mbps)
        argv = self.host.guest_args(nbytes)
        if gap_log_ms is not None:
            argv += ["--gap-log-ms", str(gap_log_ms)]
        self.proc: GuestProcess = guest.spawn(["python3", "-m", "lab.workload", *argv],
                                              cwd=str(config.REPO_DIR))

    def running(self) -> bool:
        return self.proc.poll() is None

    def result(self, timeout: float = 300) -> net.BulkResult:
        """Waits for both ends; their reports (hash, bytes, resets, the guest's gaps)."""
        res = self.proc.wait(timeout)
        try:
            guest_side = json.loads(res.out.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            raise LabError(f"the guest end of the transfer printed no report (exit "
                           f"{res.returncode}): {res.err[-2000:]}") from None
        return net.BulkResult("rx", self.host.result(timeout), guest_side)

    def close(self) -> None:
        if self.running():
            self.proc.kill()
        if self.host.proc.poll() is None:
            self.host.proc.kill()
        self.host.proc.wait()

    def __enter__(self) -> "Us0Transfer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PingProbe:
    """Echo requests from the guest to slirp's gateway (or `target`) through us0 every
    PROBE_INTERVAL_S, running in the background: a steady stream in both
    directions whose gaps show when the interface carried frames again, free
    of TCP's retransmission timer."""

    def __init__(self, guest: Guest, target: str = SLIRP_GATEWAY):
        self.proc: GuestProcess = guest.spawn(
            ["ping", "-D", "-n", "-i", str(PROBE_INTERVAL_S), "-W", "1", target])

    def reply_times(self) -> list[float]:
        """Stops the probe; the guest's wall-clock times of the replies it received."""
        self.proc.kill(signal.SIGINT)
        res = self.proc.wait(30)
        return [float(t) for t in PING_REPLY.findall(res.out)]

    def __enter__(self) -> "PingProbe":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


def wait_received(daemon: understudy.Daemon, device: str, at_least: int, transfer: Us0Transfer,
                  timeout: float = 60) -> dict:
    """Waits until the daemon has passed `at_least` received bytes (its rx counter)
    while `transfer` still runs; returns the status of `device` (a PCI address, or
    an interface, whichever device serves it)."""
    deadline = time.monotonic() + timeout
    while (st := daemon.status_of(device))["counters"]["rx_bytes"] < at_least:
        if not transfer.running():
            raise LabError(f"the transfer ended before {at_least} bytes had passed us0 "
                           f"({st['counters']['rx_bytes']})")
        if time.monotonic() > deadline:
            raise LabError(f"the transfer through us0 did not reach {at_least} bytes in "
                           f"{timeout:.0f} s: {st['counters']}")
        time.sleep(0.05)
    return st


@dataclass
class Crash:
    """One SIGKILL of the driver in the middle of a transfer, and the daemon's verdict."""
    killed_pid: int
    status: dict                         # the device's status at the verdict
    transfer: net.BulkResult | None      # None when the driver stayed dead
    carrier_drops: int

    @property
    def recovery(self) -> dict:
        return self.status["recoveries"][-1]


def crash_mid_transfer(guest: Guest, daemon: understudy.Daemon, bdf: str, nbytes: int,
                       kill_after: int, restarted: bool = True, timeout: float = 120,
                       rate_mbps: float | None = None, network: LabNetwork | None = None) -> Crash:
    """Starts a hash-checked host → guest transfer of `nbytes` through us0 (from
    `network`'s peer if given, sent at most at `rate_mbps`), SIGKILLs the driver
    once `kill_after` more bytes have passed, and waits for the verdict: the
    recovery (then for the transfer's end) if `restarted`, else the death (the
    transfer is then abandoned). The kill must land while bytes are still to come,
    as the verdict waits for the fresh driver's first frame: a transfer too short
    to outlast the lab's reaction (a status query, then the kill) is refused; make
    it longer or slower."""
    before = daemon.status()[bdf]
    drops = understudy.carrier_drops(guest)
    with Us0Transfer(guest, nbytes, timeout=timeout, rate_mbps=rate_mbps, network=network) as transfer:
        st = wait_received(daemon, bdf, before["counters"]["rx_bytes"] + kill_after, transfer)
        understudy.kill_driver(guest, st["pid"])
        if not transfer.running():
            raise LabError(f"the {nbytes >> 20} MiB transfer was over before the driver was killed",
                           hint="give crash_mid_transfer more bytes or a lower rate_mbps")
        if not restarted:
            dead = daemon.wait_state(bdf, "dead", timeout=30)
            return Crash(st["pid"], dead, None, understudy.carrier_drops(guest) - drops)
        after = understudy.wait_recovery(daemon, bdf, before["recovery_count"] + 1)
        result = transfer.result(timeout * 3)
    return Crash(st["pid"], after, result, understudy.carrier_drops(guest) - drops)


def gaps_per_kill(gaps: list[dict], kill_times: list[float]) -> list[float | None]:
    """For each kill, the longest gap ({"start": s, "ms": ms}) that ended after it
    and before the next kill (the stream had resumed by then: each kill waits for
    bytes through the fresh driver): that outage as the gaps' observer saw it."""
    out: list[float | None] = []
    for i, t in enumerate(kill_times):
        nxt = kill_times[i + 1] if i + 1 < len(kill_times) else float("inf")
        around = [g["ms"] for g in gaps if t < g["start"] + g["ms"] / 1000 <= nxt]
        out.append(max(around) if around else None)
    return out


def gaps_between(times: list[float], over_ms: float) -> list[dict]:
    """The gaps longer than `over_ms` in a list of timestamps, as gaps_per_kill takes them."""
    return [{"start": a, "ms": round((b - a) * 1000, 1)}
            for a, b in zip(times, times[1:]) if (b - a) * 1000 > over_ms]
