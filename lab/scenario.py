# SPDX-License-Identifier: GPL-2.0
"""Crash scenarios for understudy's shadow driver (docs/design.md §8), driven from the host.

crash-loop  a hash-checked TCP transfer through us0 while the driver process is
            SIGKILLed (or hung) again and again at random (seeded) moments; every
            recovery is checked and timed, by the daemon and by the receiving application.
leak-check  many kill/recover cycles; the daemon's memory, fds, threads and the
            shared pool's free buffers must end where they were after a warm-up.
(update-loop, live updates during one transfer, is lab/update_loop.py.)

They are built from lab/understudy.py (running, killing and recovering the
driver) and lab/traffic.py (the transfer and the probe through us0, and their
gaps), and report through lab/report.py.
"""
from __future__ import annotations

import argparse
import json
import random
import time

from . import net, understudy
from .arguments import add_driver, add_json, add_nic_props, parse_size, positive
from .devices import lookup_nic
from .errors import LabError
from .guest import Guest
from .pcap import frames_from
from .report import Report, columns, emit, log, median, verdict_lines
from .swifi.campaign import ArmedInjection, host_module
from .swifi.faults import generator_for
from .traffic import (GAP_LOG_MS, PROBE_INTERVAL_S, PingProbe, Us0Transfer, gaps_between, gaps_per_kill,
                      wait_received)

# The pcap has every frame, so the wire's gaps need no logging threshold: a
# restart whose outage on the wire is shorter than GAP_LOG_MS (pcnet32's
# template restarts come close) is still measured, not lost as "no gap".
WIRE_GAP_MS = 1
# After a recovery, at least this much passes through the fresh driver before
# the next kill, so every outage has a "last packet before".
MIN_BYTES_BETWEEN_KILLS = 1 << 20


# -- crash-loop ----------------------------------------------------------------

def fire_hang(hang: ArmedInjection) -> tuple[float, float | None]:
    """Writes the armed `jmp .` and watches the process end; returns the
    guest's wall clock at the write and the milliseconds until the daemon
    had ended the hung process."""
    res = hang.fire(understudy.RECOVERY_TIMEOUT_S + 60)
    if res.returncode:
        raise LabError(f"injecting a hang into driver process {hang.pid} failed: {res.err.strip()[-800:]}")
    out = json.loads(res.out.strip().splitlines()[-1])
    return out["written_at"], out["exit_after_ms"]


def crash_loop(driver: str, kills: int, nbytes: int, seed: int, nic_props: str = "",
               fault: str = "kill", daemon_options: tuple[str, ...] = (), iommu: bool = True) -> Report:
    """`fault` "kill": SIGKILL; "hang": a `jmp .` in a hot-path function
    (lab/swifi's hang fault, seed + i for the i-th), found by the heartbeat.
    Without `iommu`, in a guest without one, through uio_pci_generic."""
    dev = lookup_nic(driver)
    rng = random.Random(seed)
    # Kill points spread over the stream (the daemon's counter includes headers,
    # so every point is passed before the payload ends).
    points = sorted(int(rng.uniform(0.03, 0.9) * nbytes) for _ in range(kills))
    hangs = []
    if fault == "hang":
        generator = generator_for(host_module(dev.driver))
        hangs = [generator.generate("hang", seed + i) for i in range(kills)]
    what = "SIGKILLs" if fault == "kill" else "hangs"
    log(f"booting a guest with {dev.name}; {dev.driver} behind understudyd; {kills} {what} "
        f"during {nbytes >> 20} MiB (seed {seed})")
    records: list[dict] = []
    with Guest(devices=[dev.name], pcap=True, nic_props=nic_props, iommu=iommu) as guest:
        daemon, bdf = understudy.start_understudy(guest, dev.name, kills + 10, *daemon_options)
        for i, hang in enumerate(hangs):
            guest.write_file(f"/tmp/hang-{i}.json", json.dumps(hang.to_json()).encode())
        first = daemon.status()[bdf]
        host_kill_times: list[float] = []
        base, drops = first["counters"]["rx_bytes"], understudy.carrier_drops(guest)
        kill_times: list[float] = []
        failure: str | None = None
        with PingProbe(guest) as probe, \
                Us0Transfer(guest, nbytes, timeout=180, gap_log_ms=GAP_LOG_MS) as transfer:
            passed = 0
            for i, point in enumerate(points):
                target = base + max(point, passed + MIN_BYTES_BETWEEN_KILLS)
                injected: dict = {}
                if hangs:
                    # Armed first, so that the hang lands at the byte position.
                    hang = ArmedInjection(guest, daemon.status()[bdf]["pid"], f"/tmp/hang-{i}.json",
                                          f"/tmp/hang-{i}.go", watch_exit_s=understudy.RECOVERY_TIMEOUT_S)
                    try:
                        st = wait_received(daemon, bdf, target, transfer, timeout=180)
                        host_kill_times.append(time.time())
                        at, detect_ms = fire_hang(hang)
                    except LabError as e:
                        # Most likely the daemon restarted the driver meanwhile: say why.
                        now = daemon.status()[bdf]
                        last = (now["recoveries"] or [{}])[-1]
                        raise LabError(f"{e} (the daemon's driver is now process {now['pid']}; "
                                       f"its last recovery: {last.get('cause', 'none')})") from None
                    finally:
                        hang.kill()
                    kill_times.append(at)
                    injected = {"hang": hangs[i].description, "detect_ms": detect_ms}
                else:
                    st = wait_received(daemon, bdf, target, transfer, timeout=180)
                    host_kill_times.append(time.time())
                    kill_times.append(understudy.kill_driver(guest, st["pid"]))
                passed = st["counters"]["rx_bytes"] - base
                try:
                    after = understudy.wait_recovery(daemon, bdf, first["recovery_count"] + i + 1)
                except LabError as e:
                    # A missing recovery is the scenario's verdict (exit 1), not a lab problem.
                    failure = str(e)
                    log(f"{fault} {i + 1}/{kills}: {failure}")
                    break
                r = after["recoveries"][-1]
                records.append({"kill": i + 1, "at_bytes": passed, "pid": st["pid"], **injected, **r})
                detected = f"detected and ended in {injected['detect_ms']} ms, " if hangs else ""
                log(f"{fault} {i + 1}/{kills} at {passed >> 20} MiB: {detected}{r['outcome']}, downtime "
                    f"{r['downtime_ms']} ms (stop {r['stop_ms']}, {r['start']} {r['start_ms']}, "
                    f"replay {r['replay_ms']}, link {r['link_ms']}, first frame {r['first_packet_ms']} ms)")
                if r["outcome"] != "recovered":
                    failure = f"kill {i + 1}: {r['outcome']}"
                    break
                passed = after["counters"]["rx_bytes"] - base
            if failure is None:
                log("waiting for the transfer to end")
                result: net.BulkResult | None = transfer.result(600)
            else:
                result = None     # abandoned: nothing will carry it any more
            replies = probe.reply_times()
        final = daemon.status()[bdf]
        alive = daemon.alive()
        gone = guest.run("test -e /sys/class/net/us0").returncode != 0
        dropped = None if gone else understudy.carrier_drops(guest) - drops
        daemon_log = daemon.stop()
        if failure or gone:
            log("the daemon's log, last lines:\n" + "\n".join(daemon_log.splitlines()[-80:]))
        sent = frames_from(guest.pcap_path("nic0").read_bytes(), guest.find("nic0").mac)
    gaps = gaps_per_kill(result.guest.get("gaps", []) if result else [], kill_times)
    wire = gaps_per_kill(gaps_between(sent, WIRE_GAP_MS), host_kill_times)
    probed = gaps_per_kill(gaps_between(replies, GAP_LOG_MS), kill_times)
    for rec, gap, wire_gap, probe_gap in zip(records, gaps, wire, probed):
        rec["app_gap_ms"] = gap
        rec["wire_gap_ms"] = wire_gap
        rec["probe_gap_ms"] = probe_gap
    summary = result.summary() if result else {
        "direction": "rx", "bytes": 0, "hash_ok": False, "resets": 0, "errors": [failure]}
    downtimes = [r["downtime_ms"] for r in records if r.get("downtime_ms") is not None]
    app = [g for g in gaps if g is not None]
    wired = [g for g in wire if g is not None]
    pinged = [g for g in probed if g is not None]
    recoveries = final["recovery_count"] - first["recovery_count"]
    detects = [r["detect_ms"] for r in records if r.get("detect_ms") is not None]
    rep = Report({
        "scenario": "crash-loop", "driver": dev.driver, "device": dev.name, "nic_props": nic_props,
        "dma": "iommu (vfio-pci)" if iommu else "unconfined (uio_pci_generic)",
        "fault": fault, "daemon_options": list(daemon_options), "seed": seed,
        "kills": kills, "bytes": nbytes, "bytes_received": summary["bytes"],
        "hash_ok": summary["hash_ok"], "resets": summary["resets"], "transfer": summary,
        "recoveries": recoveries,
        "recovered": sum(r["outcome"] == "recovered" for r in records),
        "downtime_ms_median": median(downtimes), "downtime_ms_max": max(downtimes, default=None),
        "app_gap_ms_median": median(app), "app_gap_ms_max": max(app, default=None),
        "wire_gap_ms_median": median(wired), "wire_gap_ms_max": max(wired, default=None),
        "probe_gap_ms_median": median(pinged), "probe_gap_ms_max": max(pinged, default=None),
        "phase_ms_median": {k: median([r[k] for r in records if r.get(k) is not None])
                            for k in ("stop_ms", "start_ms", "replay_ms", "link_ms", "first_packet_ms")},
        "carrier_drops": dropped, "daemon_alive": alive, "per_recovery": records,
    })
    if hangs:
        rep.figures.update(detect_ms_median=median(detects), detect_ms_max=max(detects, default=None))
        rep.check("every_hang_detected", len(detects) == kills and all(
            r["cause"].startswith("hung:") for r in records),
            f"{len(detects)} of {kills} hung processes ended; causes {[r['cause'] for r in records]}")
    rep.check("hash_ok", summary["hash_ok"] and summary["bytes"] == nbytes,
              f"{summary['bytes']} of {nbytes} bytes, hash_ok {summary['hash_ok']}, "
              f"errors {summary['errors']}")
    rep.check("no_reset", summary["resets"] == 0, f"{summary['resets']} resets")
    # More recoveries than kills would be false verdicts of the heartbeat.
    rep.check("every_kill_recovered", recoveries == kills and rep.figures["recovered"] == kills,
              f"{recoveries} recoveries, {rep.figures['recovered']} recovered, {kills} kills"
              + (f"; {failure}" if failure else ""))
    rep.check("carrier_kept", dropped == 0,
              "us0 is gone" if dropped is None else f"us0 lost its carrier {dropped} times")
    rep.check("daemon_alive", alive)
    return rep


# -- leak-check ----------------------------------------------------------------

# Samples of the daemon's fd count, 100 ms apart, of which the check takes the
# fewest: a leaked fd is in every sample, while one the daemon holds for a
# moment (the CLI's connection it has yet to close, the multicast list it
# reads five times a second) is not.
FD_SAMPLES = 5


def daemon_resources(guest: Guest, daemon: understudy.Daemon, bdf: str) -> dict:
    """The daemon's memory, fds and threads (from /proc) and the pool's free buffers."""
    pid = guest.run("pgrep -o -x understudyd", check=True).out.strip()
    fields = dict(line.split(":", 1) for line in
                  guest.read_file(f"/proc/{pid}/status").decode().splitlines() if ":" in line)
    counts = guest.run(f"for i in $(seq {FD_SAMPLES}); do ls /proc/{pid}/fd | wc -l; sleep 0.1; done",
                       check=True).out.split()
    fds = min(int(n) for n in counts)
    st = daemon.status()[bdf]
    def kib(field: str) -> int:
        return int(fields[field].split()[0])
    # What a leak grows is private memory (RssAnon, VmData); VmRSS also
    # counts the shared memory's pages (the rings) and the binary's as the
    # daemon first touches them, which is no leak.
    return {"rss_anon_kib": kib("RssAnon"), "vm_data_kib": kib("VmData"), "vm_rss_kib": kib("VmRSS"),
            "rss_shmem_kib": kib("RssShmem"), "rss_file_kib": kib("RssFile"),
            "threads": int(fields["Threads"]), "fds": fds,
            "pool_free": st["pool_free"], "pool_buffers": st["pool_buffers"]}


def leak_check(driver: str, cycles: int, warmup: int, rss_slack_kib: int, nic_props: str = "") -> Report:
    dev = lookup_nic(driver)
    if not 0 <= warmup < cycles:
        raise LabError(f"--warmup {warmup} must be below --cycles {cycles}")
    log(f"booting a guest with {dev.name}; {dev.driver} behind understudyd; {cycles} kill/recover "
        f"cycles, the first {warmup} as warm-up")
    with Guest(devices=[dev.name], nic_props=nic_props) as guest:
        daemon, bdf = understudy.start_understudy(guest, dev.name, cycles + 10)
        start = daemon.status()[bdf]["recovery_count"]
        before = daemon_resources(guest, daemon, bdf) if warmup == 0 else None
        downtimes: list[float] = []
        t0 = time.monotonic()
        for i in range(cycles):
            r = understudy.kill_and_recover(guest, daemon, bdf, start + i + 1)
            if r["downtime_ms"] is not None:
                downtimes.append(r["downtime_ms"])
            if i + 1 == warmup:
                before = daemon_resources(guest, daemon, bdf)
                log(f"after {warmup} warm-up cycles: {before}")
            if (i + 1) % 10 == 0 or i + 1 == cycles:
                per = (time.monotonic() - t0) / (i + 1)
                log(f"cycle {i + 1}/{cycles} ({per:.1f} s each, about "
                    f"{per * (cycles - i - 1) / 60:.0f} min left)")
            if (i + 1) % 100 == 0 and i + 1 < cycles:
                log(f"after {i + 1} cycles: {daemon_resources(guest, daemon, bdf)}")
        after = daemon_resources(guest, daemon, bdf)
        log(f"after {cycles} cycles: {after}")
        ping = net.ping(guest, count=20, interval=0.05)
        final = daemon.status()[bdf]
        alive = daemon.alive()
        daemon.stop()
    assert before is not None
    growth = {k: after[k] - before[k] for k in after}
    measured = cycles - warmup
    rep = Report({
        "scenario": "leak-check", "driver": dev.driver, "device": dev.name, "nic_props": nic_props,
        "cycles": cycles,
        "warmup": warmup, "before": before, "after": after, "growth": growth,
        "rss_anon_kib_per_cycle": round(growth["rss_anon_kib"] / measured, 3) if measured else None,
        "recoveries": final["recovery_count"] - start,
        "downtime_ms_median": median(downtimes), "downtime_ms_max": max(downtimes, default=None),
        "seconds": round(time.monotonic() - t0, 1), "ping_after": ping,
        "rss_slack_kib": rss_slack_kib,
    })
    rep.check("fds", growth["fds"] == 0, f"{before['fds']} → {after['fds']}")
    rep.check("threads", growth["threads"] == 0, f"{before['threads']} → {after['threads']}")
    rep.check("pool_free", growth["pool_free"] == 0, f"{before['pool_free']} → {after['pool_free']}")
    rep.check("rss_anon", growth["rss_anon_kib"] <= rss_slack_kib,
              f"{before['rss_anon_kib']} → {after['rss_anon_kib']} KiB")
    rep.check("vm_data", growth["vm_data_kib"] <= rss_slack_kib,
              f"{before['vm_data_kib']} → {after['vm_data_kib']} KiB")
    rep.check("every_cycle_recovered", rep.figures["recoveries"] == cycles)
    rep.check("ping_after", ping["loss_pct"] == 0, f"{ping['received']}/{ping['sent']} answered")
    rep.check("daemon_alive", alive)
    return rep


# -- the command -----------------------------------------------------------------

def _table(rep: Report) -> str:
    f = rep.figures
    lines: list[str] = []
    if f["scenario"] == "crash-loop":
        cols = ["kill", "at_bytes", *(["detect_ms"] if f["fault"] == "hang" else []),
                "outcome", "stop_ms", "start_ms", "replay_ms", "link_ms",
                "first_packet_ms", "downtime_ms", "wire_gap_ms", "probe_gap_ms", "app_gap_ms",
                "tx_resubmitted"]
        lines += columns(f["per_recovery"], cols)
        if f["fault"] == "hang":
            lines.append(f"hangs detected and ended: median {f['detect_ms_median']} ms, max "
                         f"{f['detect_ms_max']} ms after the write")
        lines.append(f"{f['driver']}: {f['recoveries']} recoveries of {f['kills']} {f['fault']}s; transfer "
                     f"{f['bytes_received']} of {f['bytes']} bytes, hash "
                     f"{'ok' if f['hash_ok'] else 'MISMATCH'}, {f['resets']} resets; us0 lost "
                     f"carrier {f['carrier_drops']} times")
        lines.append(f"downtime (daemon, last frame → first frame): median {f['downtime_ms_median']} ms, "
                     f"max {f['downtime_ms_max']} ms; on the wire (frames the NIC sent): median "
                     f"{f['wire_gap_ms_median']} ms, max {f['wire_gap_ms_max']} ms; ping every "
                     f"{PROBE_INTERVAL_S * 1000:g} ms, replies: median {f['probe_gap_ms_median']} ms, max "
                     f"{f['probe_gap_ms_max']} ms; the receiving TCP application: median "
                     f"{f['app_gap_ms_median']} ms, max {f['app_gap_ms_max']} ms")
    else:
        keys = ["rss_anon_kib", "vm_data_kib", "vm_rss_kib", "rss_shmem_kib", "rss_file_kib", "fds", "threads",
                "pool_free"]
        lines.append(f"{'':12}{'before':>10}{'after':>10}{'growth':>10}")
        lines += [f"{k:12}{f['before'][k]:>10}{f['after'][k]:>10}{f['growth'][k]:>10}" for k in keys]
        lines.append(f"{f['driver']}: {f['recoveries']} of {f['cycles']} cycles recovered "
                     f"({f['warmup']} warm-up) in {f['seconds']} s; downtime median "
                     f"{f['downtime_ms_median']} ms; ping after: {f['ping_after']['received']}/"
                     f"{f['ping_after']['sent']}")
    return "\n".join(lines + verdict_lines(rep))


def cmd_scenario(args) -> int:
    if args.scenario == "crash-loop":
        heartbeat = [opt for name, value in (("--ping-interval-ms", args.ping_interval_ms),
                                             ("--ping-timeout-ms", args.ping_timeout_ms))
                     if value is not None for opt in (name, str(value))]
        rep = crash_loop(args.driver, args.kills, args.bytes, args.seed, args.nic_props, args.fault,
                         tuple(heartbeat), iommu=not args.no_iommu)
    else:
        rep = leak_check(args.driver, args.cycles, args.warmup if args.warmup is not None
                         else max(1, args.cycles // 10), args.rss_slack_kib, args.nic_props)
    return emit(rep, args.json, _table)


def add_parser(sub):
    s = sub.add_parser("scenario", help="crash scenarios for the shadow driver (exit 1 if a check fails)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ssub = s.add_subparsers(dest="scenario", required=True)
    c = ssub.add_parser("crash-loop", help="SIGKILL (or hang) the driver N times during one hash-checked transfer",
                        description="Boots a lab guest, runs DRIVER's Debian module behind understudyd "
                        "(restarts on), starts a host → guest TCP transfer with an end-to-end SHA-256 "
                        "through us0, and SIGKILLs the driver process (or, with --fault hang, makes it "
                        "spin) --kills times at random byte positions (--seed), each after the previous recovery and after at least "
                        "1 MiB through the fresh driver. Reports hash, resets, recoveries, the "
                        "daemon's phase timings and downtime per recovery, and around each kill the "
                        "longest gap in the frames the NIC sent (QEMU's capture), in the replies "
                        "to a 10 ms ping from the guest, and in the TCP receiver's reads. Exit 0 if every check passed, 1 if one "
                        "failed, 3 lab problem, 4 guest failure. Progress on stderr.",
                        epilog="example: python3 -m lab scenario crash-loop --driver e1000 --kills 20 --json")
    add_driver(c)
    c.add_argument("--kills", type=positive, default=20, help="faults given the driver process: SIGKILLs or hangs (default 20)")
    c.add_argument("--bytes", type=parse_size, default=500 << 20,
                   help="size of the transfer: 500M, 60M, 2G or plain bytes (default 500M)")
    c.add_argument("--seed", type=int, default=1, help="seed of the kill positions (default 1)")
    add_nic_props(c)
    c.add_argument("--fault", choices=["kill", "hang"], default="kill",
                   help="kill: SIGKILL the driver process (default); hang: write `jmp .` into its "
                   "transmit, interrupt or poll function (lab/swifi's hang fault) and let the "
                   "daemon's heartbeat find it (detect_ms: from the write to the process's end)")
    c.add_argument("--ping-interval-ms", type=positive, metavar="MS",
                   help="understudyd --ping-interval-ms (default: the daemon's)")
    c.add_argument("--ping-timeout-ms", type=positive, metavar="MS",
                   help="understudyd --ping-timeout-ms (default: the daemon's)")
    c.add_argument("--no-iommu", action="store_true",
                   help="a guest without an IOMMU: understudy runs the NIC through uio_pci_generic, "
                   "its DMA unconfined (docs/design.md §4)")
    add_json(c)
    c.set_defaults(func=cmd_scenario)
    k = ssub.add_parser("leak-check", help="N kill/recover cycles; no growth of the daemon's resources",
                        description="Boots a lab guest, runs DRIVER behind understudyd and SIGKILLs "
                        "the driver process --cycles times, each time pinging through us0 until the "
                        "fresh driver answers. Compares the daemon's VmRSS, VmData, open fds and "
                        "threads (/proc) and the shared pool's free buffers (`understudy status "
                        "--json`) after the warm-up cycles and after the last one, then pings "
                        "through us0. Exit 0 if nothing grew (memory within --rss-slack-kib), 1 "
                        "if something did.",
                        epilog="example: python3 -m lab scenario leak-check --driver e1000 --cycles 1000 --json")
    add_driver(k)
    k.add_argument("--cycles", type=positive, default=1000, help="kill/recover cycles (default 1000)")
    k.add_argument("--warmup", type=int, help="cycles before the first measurement (default cycles/10)")
    k.add_argument("--rss-slack-kib", type=int, default=256,
                   help="growth of the daemon's private memory (RssAnon, VmData) tolerated "
                        "(allocator noise), KiB (default 256)")
    add_nic_props(k)
    add_json(k)
    k.set_defaults(func=cmd_scenario)
    return ssub
