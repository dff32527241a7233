# SPDX-License-Identifier: GPL-2.0
"""What the update and migrate scenarios share (lab/update_loop.py,
lab/migrate_loop.py): one paced, hash-checked transfer through us0, a
handover at a time, each after MIN_BYTES_BETWEEN passed through the serving
driver, and the outage each one caused as the daemon, a ping probe and the
receiving application saw it.
"""
from __future__ import annotations

import time

from . import understudy
from .report import Report, median
from .traffic import GAP_LOG_MS, Us0Transfer, gaps_between, gaps_per_kill, wait_received

# Between two handovers at least this much passes through the serving driver.
MIN_BYTES_BETWEEN = 1 << 20


def guest_time(guest) -> float:
    """The guest's wall clock, which the probe's and the application's gaps are stamped with."""
    return float(guest.run(["bash", "-c", "echo $EPOCHREALTIME"], check=True).out)


def hand_over(daemon: understudy.Daemon, transfer: Us0Transfer, base: int, passed: int, records_key: str,
              *argv: str) -> tuple[int, dict, dict, dict]:
    """Once MIN_BYTES_BETWEEN more have passed us0, runs `understudy ARGV --json`;
    returns its exit status, its record (with the first frame through the new
    driver, which is timed when it passes: waited for), and us0's status before and after."""
    before = wait_received(daemon, "us0", base + passed + MIN_BYTES_BETWEEN, transfer, timeout=120)
    code, answer = daemon.cli_json(*argv)
    record = answer.get("handover") or {"outcome": answer.get("error", "no record")}
    # Only a handover that went through has a first frame to wait for; a
    # refusal may leave no record, and the status's last would be an older one.
    deadline = time.monotonic() + 30
    while (after := daemon.status_of("us0"))[records_key] and after[records_key][-1].get("first_packet_ms") is None \
            and code == 0 and time.monotonic() < deadline and transfer.running():
        time.sleep(0.1)
    if after[records_key] and code in (0, 4):   # done or rolled back: the command's record is the last
        record = {**record, **{k: after[records_key][-1][k] for k in ("first_packet_ms", "downtime_ms")}}
    return code, record, before, after


def outages(records: list[dict], result, replies: list[float], times: list[float]) -> dict:
    """Each record gets the probe's and the application's longest gap after
    its handover; returns the medians and maxima, with the daemon's downtime's."""
    gaps = gaps_per_kill(result.guest.get("gaps", []) if result else [], times)
    probed = gaps_per_kill(gaps_between(replies, GAP_LOG_MS), times)
    for rec, gap, probe_gap in zip(records, gaps, probed):
        rec["app_gap_ms"], rec["probe_gap_ms"] = gap, probe_gap
    figures = {}
    for name, values in (("downtime_ms", [r.get("downtime_ms") for r in records]), ("probe_gap_ms", probed),
                         ("app_gap_ms", gaps)):
        present = [v for v in values if v is not None]
        figures[f"{name}_median"], figures[f"{name}_max"] = median(present), max(present, default=None)
    return figures


def transfer_summary(result, failure: str | None) -> dict:
    """The transfer's summary, or, if a handover failed before it ended, an empty one saying why."""
    return result.summary() if result else {"bytes": 0, "hash_ok": False, "resets": 0, "errors": [failure]}


def check_common(rep: Report, summary: dict, nbytes: int, final: dict, dropped: int, alive: bool) -> None:
    """The checks every handover loop makes: the transfer exact, no reset,
    no death, us0's carrier kept, the daemon alive."""
    rep.check("hash_ok", summary["hash_ok"] and summary["bytes"] == nbytes,
              f"{summary['bytes']} of {nbytes} bytes, hash_ok {summary['hash_ok']}, errors {summary['errors']}")
    rep.check("no_reset", summary["resets"] == 0, f"{summary['resets']} resets")
    rep.check("no_recovery", final["recovery_count"] == 0, f"{final['recovery_count']} restarts after deaths")
    rep.check("carrier_kept", dropped == 0, f"us0 lost its carrier {dropped} times")
    rep.check("daemon_alive", alive)
