# SPDX-License-Identifier: GPL-2.0
"""`python3 -m lab scenario update-loop`: live updates back and forth between
Debian's builds of a driver of several ABIs during one hash-checked transfer
(docs/live-update.md).

Each update is `understudy update us0 --module ...` with the next version's
module files from the lab's cache (lab/lab.toml, [live_update]); the daemon's
record of it gives the phases and the downtime, the receiving application's
gaps give the outage as it saw it.
"""
from __future__ import annotations

import subprocess

from . import config, understudy
from .arguments import add_driver, add_json, add_nic_props, positive
from .devices import lookup_nic
from .errors import LabError
from .guest import Guest
from .handover_loop import check_common, guest_time, hand_over, outages, transfer_summary
from .report import Report, columns, emit, log, median, verdict_lines
from .traffic import GAP_LOG_MS, PROBE_INTERVAL_S, PingProbe, Us0Transfer

# An update takes its load, the switch, the link (QEMU's e1000 emulates 2 s of
# autonegotiation after its PHY reset) and the daemon's 5 s probation; the
# transfer is paced to last through all of them.
SECONDS_PER_UPDATE = 12


def module_chain(abi: str, driver: str) -> list[str]:
    """A driver's module and its dependencies, dependencies first, as Debian's
    ABI `abi` built them (the lab's cache, which the guest sees at the same path)."""
    def depends(name: str) -> list[str]:
        path = config.cached_module(abi, name)
        res = subprocess.run(["modinfo", "-F", "depends", str(path)], capture_output=True, text=True)
        if res.returncode:
            raise LabError(f"modinfo {path}: {res.stderr.strip()}")
        return list(filter(None, res.stdout.strip().split(",")))
    return understudy.dependencies_first(driver, depends, lambda name: str(config.cached_module(abi, name)))


def update_loop(driver: str, versions: list[str], updates: int, rate_mbps: float,
                nic_props: str = "") -> Report:
    dev = lookup_nic(driver)
    if len(versions) < 2:
        raise LabError("give at least two versions to update between", hint="--versions 6.1.0-50,6.1.0-53")
    chains = {v: module_chain(v, dev.driver) for v in versions}
    seconds = (updates + 1) * SECONDS_PER_UPDATE
    nbytes = int(rate_mbps * 1e6 / 8 * seconds)
    log(f"booting a guest with {dev.name}; {dev.driver} of {versions[0]} behind understudyd; {updates} updates "
        f"between {', '.join(versions)} during {nbytes >> 20} MiB at {rate_mbps:g} Mbit/s")
    records: list[dict] = []
    failure: str | None = None
    with Guest(devices=[dev.name], nic_props=nic_props) as guest:
        understudy.prepare(guest)
        bdf = guest.pci_address("nic0")
        daemon = understudy.Daemon(guest, understudy.build(), None, "--max-restarts", "3")
        understudy.understudy_up(guest, daemon, bdf, chains[versions[0]])
        first = daemon.status()[bdf]
        base, drops = first["counters"]["rx_bytes"], understudy.carrier_drops(guest)
        update_times: list[float] = []
        # The ping probe sees when us0 carries frames both ways again, free of
        # TCP's retransmission timer, which decides when the transfer resumes.
        with PingProbe(guest) as probe, \
                Us0Transfer(guest, nbytes, timeout=seconds * 3, gap_log_ms=GAP_LOG_MS, rate_mbps=rate_mbps) as transfer:
            passed = 0
            for i in range(updates):
                to = versions[(i + 1) % len(versions)]
                update_times.append(guest_time(guest))
                code, record, st, after = hand_over(daemon, transfer, base, passed, "updates",
                                                    "update", "us0", *understudy.module_args(chains[to]))
                records.append({"update": i + 1, "to": to, "exit": code, "at_bytes": st["counters"]["rx_bytes"] - base,
                                "pid_before": st["pid"], "pid_after": after["pid"], **record})
                log(f"update {i + 1}/{updates} to {to}: {record['outcome']}, downtime {record.get('downtime_ms')} ms "
                    f"(load {record.get('load_ms')}, stop {record.get('stop_ms')}, probe {record.get('start_ms')}, "
                    f"replay {record.get('replay_ms')}, link {record.get('link_ms')})")
                if code != 0:
                    failure = f"update {i + 1}: {record['outcome']}"
                    break
                passed = after["counters"]["rx_bytes"] - base
            if failure is None:
                log("waiting for the transfer to end")
                result = transfer.result(seconds * 3)
            else:
                result = None
            replies = probe.reply_times()
        final = daemon.status()[bdf]
        alive = daemon.alive()
        dropped = understudy.carrier_drops(guest) - drops
        daemon_log = daemon.stop()
        if failure:
            log("the daemon's log, last lines:\n" + "\n".join(daemon_log.splitlines()[-80:]))
    gaps = outages(records, result, replies, update_times)
    summary = transfer_summary(result, failure)
    updated = sum(r["outcome"] == "updated" for r in records)
    rollbacks = sum(str(r["outcome"]).startswith("rolled back") for r in records)
    rep = Report({
        "scenario": "update-loop", "driver": dev.driver, "device": dev.name, "nic_props": nic_props,
        "versions": versions, "rate_mbps": rate_mbps, "bytes": nbytes, "bytes_received": summary["bytes"],
        "hash_ok": summary["hash_ok"], "resets": summary["resets"], "transfer": summary,
        "updates": updated, "rollbacks": rollbacks, "recoveries": final["recovery_count"], **gaps,
        "phase_ms_median": {k: median([r[k] for r in records if r.get(k) is not None])
                            for k in ("load_ms", "stop_ms", "start_ms", "replay_ms", "link_ms", "serving_ms",
                                      "first_packet_ms")},
        "carrier_drops": dropped, "daemon_alive": alive, "per_update": records,
    })
    check_common(rep, summary, nbytes, final, dropped, alive)
    rep.check("every_update_updated", updated == updates and rollbacks == 0,
              f"{updated} of {updates} updated, {rollbacks} rolled back" + (f"; {failure}" if failure else ""))
    return rep


def table(rep: Report) -> str:
    f = rep.figures
    cols = ["update", "to", "outcome", "load_ms", "stop_ms", "start_ms", "replay_ms", "link_ms",
            "first_packet_ms", "downtime_ms", "probe_gap_ms", "app_gap_ms", "tx_resubmitted"]
    lines = columns(f["per_update"], cols)
    lines.append(f"{f['driver']} between {', '.join(f['versions'])}: {f['updates']} updated, {f['rollbacks']} rolled "
                 f"back; transfer {f['bytes_received']} of {f['bytes']} bytes, hash "
                 f"{'ok' if f['hash_ok'] else 'MISMATCH'}, {f['resets']} resets; us0 lost carrier "
                 f"{f['carrier_drops']} times")
    lines.append(f"downtime (daemon, last frame → first frame): median {f['downtime_ms_median']} ms, max "
                 f"{f['downtime_ms_max']} ms; ping every {PROBE_INTERVAL_S * 1000:g} ms, replies: median "
                 f"{f['probe_gap_ms_median']} ms, max {f['probe_gap_ms_max']} ms; the receiving TCP application: "
                 f"median {f['app_gap_ms_median']} ms, max {f['app_gap_ms_max']} ms")
    return "\n".join(lines + verdict_lines(rep))


def cmd_update_loop(args) -> int:
    rep = update_loop(args.driver, args.versions.split(","), args.updates, args.rate_mbps, args.nic_props)
    return emit(rep, args.json, table)


def add_parser(ssub) -> None:
    """`scenario update-loop`, beside the crash scenarios."""
    u = ssub.add_parser("update-loop", help="live-update the driver back and forth N times during one transfer",
                        description="Boots a lab guest, runs DRIVER's module of the first --versions ABI "
                        "(from the lab's cache, lab/lab.toml [live_update]) behind understudyd, starts a "
                        "paced host → guest TCP transfer with an end-to-end SHA-256 through us0, and runs "
                        "`understudy update us0` --updates times, to the next version in turn, each after "
                        "1 MiB through the serving driver. Reports hash, resets, updates, rollbacks, the "
                        "daemon's phases and downtime per update and the receiving application's longest "
                        "gap around each. Exit 0 if every check passed, 1 if one failed, 3 lab problem.",
                        epilog="example: python3 -m lab scenario update-loop --driver e1000 "
                        "--versions 6.1.0-50,6.1.0-53 --updates 20 --json")
    add_driver(u)
    u.add_argument("--versions", required=True, metavar="ABI,ABI[,...]",
                   help="Debian ABIs to update between, the first one runs first, e.g. 6.1.0-50,6.1.0-53")
    u.add_argument("--updates", type=positive, default=20, help="updates to run (default 20)")
    u.add_argument("--rate-mbps", type=float, default=50,
                   help="the transfer's pace, Mbit/s; it is sized to last through every update (default 50)")
    add_nic_props(u)
    add_json(u)
    u.set_defaults(func=cmd_update_loop)

