"""lab check: a driver under the checker against the same driver unchecked (docs/checking.md).

One guest, one NIC, understudyd; alternating runs of the driver unchecked and
under the checker with --gate (`understudy run --check MODE`), each run a
hash-checked TCP transfer out of the guest and one into it. Prints the
medians, checked ÷ unchecked throughput ratios, the checker's event count
and rate, and what it found (`understudy check report`). With --checkers only
those checkers run (the checker's UNDERSTUDY_CHECKERS, set in the daemon's
environment): what each one costs on its own. --fatal replaces the kinds that
stop the driver (UNDERSTUDY_CHECKER_FATAL), e.g. to measure e100, whose own
device-owned writes are fatal by default, in permissive mode.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time

from . import net, provenance, understudy
from .bench import driver_cpu, lab_identity, run_ratios, table
from .devices import lookup_nic
from .errors import LabError
from .guest import Guest
from .netns import LabNetwork

GATES = ["triage", "permissive", "stringent"]
CHECKERS = ["memory", "race", "dma"]
DRIVERS = ["e1000", "pcnet32", "8139cp", "e100", "tulip"]
KEYS = ["tx_mbps", "rx_mbps", "tx_hash_ok", "rx_hash_ok", "resets"]


def log(msg: str) -> None:
    print(f"[check] {msg}", file=sys.stderr, flush=True)


def transfers(guest: Guest, nbytes: int, network: LabNetwork) -> dict:
    """One hash-checked transfer each way through us0."""
    tx = net.bulk(guest, "tx", nbytes, network=network).summary()
    rx = net.bulk(guest, "rx", nbytes, network=network).summary()
    return {"tx_mbps": tx["mbps"], "rx_mbps": rx["mbps"], "tx_hash_ok": tx["hash_ok"],
            "rx_hash_ok": rx["hash_ok"], "resets": tx["resets"] + rx["resets"],
            "errors": tx["errors"] + rx["errors"]}


def median_of(runs: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 3)


def check(driver: str, gate: str, runs: int, megabytes: int, checkers: list[str],
          fatal: str | None = None) -> dict:
    dev = lookup_nic(driver)
    bins = understudy.build(release=True)
    nbytes = megabytes << 20
    plain, checked, reports = [], [], []
    log(f"booting a guest with {dev.name}; {runs} runs of {megabytes} MiB each way, "
        f"unchecked and checked ({gate}; checkers: {','.join(checkers)})")
    with understudy.nic_lab(dev.name) as lab:
        guest, network, bdf, modules = lab.guest, lab.network, lab.bdf, lab.modules
        daemon = understudy.Daemon(guest, bins, None, "--checker", str(bins["checker"]),
                                   env={"UNDERSTUDY_CHECKERS": ",".join(checkers),
                                        **({"UNDERSTUDY_CHECKER_FATAL": fatal} if fatal else {})})
        try:
            for i in range(runs):
                for mode in (None, gate):
                    log(f"run {i + 1}/{runs}: {dev.driver} {'under the checker, ' + mode if mode else 'unchecked'}")
                    understudy.understudy_up(guest, daemon, bdf, modules, network, driver_cpu(guest),
                                             check=mode)
                    before, t0 = check_report(daemon) if mode else None, time.monotonic()
                    run = transfers(guest, nbytes, network)
                    if mode:
                        after = check_report(daemon)
                        run["events"] = after["status"]["events"] - before["status"]["events"]
                        run["events_per_s"] = round(run["events"] / (time.monotonic() - t0))
                        reports.append(after)
                    (checked if mode else plain).append(run)
                    understudy.understudy_down(guest, daemon, bdf)
        finally:
            daemon.stop()
    return {**summarise(dev, gate, runs, megabytes, plain, checked, reports), "checkers": checkers,
            "fatal": fatal}


def check_report(daemon: understudy.Daemon) -> dict:
    """`understudy check report us0 --json`: the device's findings, verdicts and event counts."""
    status, report = daemon.cli_json("check", "report", "us0")
    if status not in (0, 1):
        raise LabError(f"understudy check report us0 failed (exit {status})")
    return report


def summarise(dev, gate, runs, megabytes, plain, checked, reports) -> dict:
    last = reports[-1]
    ratios = {f"{d}_ratio": round(median_of(checked, f"{d}_mbps") / median_of(plain, f"{d}_mbps"), 3)
              for d in ("tx", "rx")}
    events = [r["events"] for r in checked]
    rates = [r["events_per_s"] for r in checked]
    return {"driver": dev.driver, "device": dev.name, **lab_identity(), "gate": gate,
            "runs": runs, "megabytes": megabytes, **ratios,
            "tx_ratio_spread": spread(checked, plain, "tx_mbps"),
            "rx_ratio_spread": spread(checked, plain, "rx_mbps"),
            # events the checker checked during one run's transfers, and their rate
            "events": int(statistics.median(events)), "events_per_s": round(statistics.median(rates)),
            "hash_ok": all(r["tx_hash_ok"] and r["rx_hash_ok"] for r in plain + checked),
            "resets": sum(r["resets"] for r in plain + checked),
            "verdicts": last.get("verdicts", []), "findings": last.get("findings", []),
            # where the last checked run's events came from (the checker's profile)
            "profile": (last.get("incarnations") or [{}])[-1].get("profile"),
            "unchecked": {k: median_of(plain, k) for k in ("tx_mbps", "rx_mbps")},
            "checked": {k: median_of(checked, k) for k in ("tx_mbps", "rx_mbps")},
            "per_run": {"unchecked": plain, "checked": checked}}


def spread(checked: list[dict], plain: list[dict], key: str) -> list[float]:
    """min and max of the per-run ratios (run i checked ÷ run i unchecked)."""
    ratios = run_ratios(checked, plain, key)
    return [round(min(ratios), 3), round(max(ratios), 3)] if ratios else []


def cmd_check(args) -> int:
    report = check(args.driver, args.gate, args.runs, args.megabytes, args.checkers, args.fatal)
    command = "python3 -m lab " + shlex.join(sys.argv[1:])
    if args.json:
        print(json.dumps({**report, **provenance.record()}, indent=2))
    else:
        rows = [{"driver": "unchecked", **report["unchecked"]},
                {"driver": f"checked ({report['gate']}; {','.join(report['checkers'])})", **report["checked"]}]
        print(table(rows, ["tx_mbps", "rx_mbps"]))
        print(f"tx_ratio {report['tx_ratio']} {report['tx_ratio_spread']}  "
              f"rx_ratio {report['rx_ratio']} {report['rx_ratio_spread']}  "
              f"events {report['events']}  events/s {report['events_per_s']}")
        profile = report["profile"] or {}
        for f in profile.get("functions", [])[:6]:
            print(f"  events from {f['module']}:{f['function']}: {f['share']:.0%}")
        for f in report["findings"]:
            site = f.get("site", {})
            print(f"  {f.get('checker')} {f.get('kind')} at {site.get('module')} "
                  f"{site.get('function')}+{site.get('offset')} x{f.get('count')}")
        print(f"(medians of {args.runs} alternating runs; hash ok: {report['hash_ok']}, "
              f"resets: {report['resets']}; {command})")
    return 0 if report["hash_ok"] and not report["resets"] else 1


def checker_list(text: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in CHECKERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of {', '.join(CHECKERS)}")
    return names


def add_parser(sub) -> None:
    c = sub.add_parser("check", help="a driver under the checker against it unchecked (docs/checking.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--driver", default="e1000", help=f"a lab NIC's driver: {', '.join(DRIVERS)}")
    c.add_argument("--gate", choices=GATES, default="permissive",
                   help="the gate's mode for the checked runs (default: permissive)")
    c.add_argument("--checkers", type=checker_list, default=CHECKERS,
                   help="which checkers run, comma-separated (default: memory,race,dma)")
    c.add_argument("--fatal", metavar="KIND,...",
                   help="the finding kinds that stop the driver, replacing the checker's defaults; "
                        "'none' for none (e100's own device-owned writes would stop it otherwise)")
    c.add_argument("--runs", type=int, default=3)
    c.add_argument("--megabytes", type=int, default=64, help="size of each transfer")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=cmd_check)
