# SPDX-License-Identifier: GPL-2.0
"""`python3 -m lab scenario migrate`: us0 moved back and forth between two
devices with different drivers during one hash-checked TCP transfer on the
lab bridge (docs/migration.md).

The guest has both NICs, each on the lab bridge so that the peer reaches
whichever serves, each bound to vfio-pci. understudy runs us0 on the first
with the second declared a standby (so us0 advertises only what both
drivers offer), and `understudy migrate us0 --to` moves it --moves times,
each after 1 MiB through the serving driver. The daemon's record of each
move gives its phases and downtime, a ping probe and the receiving
application the outage as they saw it, and what each NIC sent (QEMU's
captures) the gap in us0's frames on the wire and the gratuitous ARPs
the destination sent.
"""
from __future__ import annotations

import time

from . import net, pcap, understudy
from .arguments import add_json, positive
from .devices import lookup_nic
from .errors import LabError
from .guest import Guest
from .netns import PEER_ADDRESS, LabNetwork
from .handover_loop import check_common, guest_time, hand_over, outages, transfer_summary
from .report import Report, columns, emit, log, median, verdict_lines
from .scenario import WIRE_GAP_MS
from .traffic import GAP_LOG_MS, PROBE_INTERVAL_S, PingProbe, Us0Transfer, gaps_between, gaps_per_kill

# A move: the destination's load and probe on scratch memory, the switch, the
# link (QEMU's e1000 emulates 2 s of autonegotiation) and the 5 s probation.
SECONDS_PER_MOVE = 12
PHASES = ("load_ms", "stop_ms", "start_ms", "replay_ms", "link_ms", "serving_ms", "first_packet_ms")


def features_on(guest: Guest) -> list[str]:
    """What `ethtool -k us0` says is on: what the stack may leave to the interface."""
    out = guest.run("ethtool -k us0", check=True).out
    return [line.split(":")[0].strip() for line in out.splitlines()[1:] if line.split(":")[-1].strip().startswith("on")]


def mac_of_us0(guest: Guest) -> str:
    return guest.run("cat /sys/class/net/us0/address", check=True).out.strip()


def announcements(capture: bytes, mac: str, start: float, end: float) -> dict:
    """What the destination sent between a move's start and the next (host
    clock): how many announcements of `mac`, and how long after its first
    frame the first of them went out. Timed from that frame, not from the
    command: the command's time includes the CLI's own start in the guest,
    a good part of a second on TCG."""
    heard = [t for t in pcap.announcements_from(capture, mac) if start <= t < end]
    sent = [t for t in pcap.frames_from(capture, mac) if start <= t < end]
    return {"announced_on_wire": len(heard),
            "announced_after_first_frame_ms": round((heard[0] - sent[0]) * 1000, 1) if heard else None}


def wire(records: list[dict], captures: list[bytes], mac: str, times: list[float]) -> dict:
    """Each record gets the longest gap in us0's frames on the wire after its
    move -- what either NIC sent, whichever served -- and the destination's
    announcements; returns the gaps' median and maximum."""
    sent = sorted(t for c in captures for t in pcap.frames_from(c, mac))
    gaps = gaps_per_kill(gaps_between(sent, WIRE_GAP_MS), times)
    for rec, gap, start, end in zip(records, gaps, times, times[1:] + [float("inf")]):
        rec["wire_gap_ms"] = gap
        rec.update(announcements(captures[rec["dest_nic"]], mac, start, end))
    present = [g for g in gaps if g is not None]
    after_first = [r["announced_after_first_frame_ms"] for r in records
                   if r.get("announced_after_first_frame_ms") is not None]
    return {"wire_gap_ms_median": median(present), "wire_gap_ms_max": max(present, default=None),
            "announced_after_first_frame_ms_median": median(after_first)}


def migrate_loop(source: str, target: str, moves: int, rate_mbps: float) -> Report:
    a, b = lookup_nic(source), lookup_nic(target)
    nbytes = int(rate_mbps * 1e6 / 8 * (moves + 1) * SECONDS_PER_MOVE)
    log(f"booting a guest with {a.name} and {b.name} on the lab bridge; us0 on {a.driver}, {b.driver} its standby; "
        f"{moves} moves during {nbytes >> 20} MiB at {rate_mbps:g} Mbit/s")
    records: list[dict] = []
    failure: str | None = None
    with LabNetwork() as network, Guest(devices=[a.name, b.name], netdev=network, pcap=True, pcap_queue="rx") as guest:
        understudy.prepare(guest)
        devices = [guest.pci_address("nic0"), guest.pci_address("nic1")]
        chains = [understudy.module_chain(guest, a.driver), understudy.module_chain(guest, b.driver)]
        for bdf in devices:
            understudy.bind_vfio(guest, bdf)
        daemon = understudy.Daemon(guest, understudy.build(), None, "--max-restarts", "3")
        standby = f"{devices[1]}={chains[1][-1]}"
        res = daemon.cli("run", "--device", devices[0], "--ifname", "us0", *understudy.module_args(chains[0]),
                         "--standby", standby, timeout=300)
        if res.returncode:
            raise LabError(f"understudy run failed: {res.err.strip()}")
        daemon.wait_state(devices[0], "registered", timeout=120)
        net.bring_up_iface(guest, "us0", network=network)
        features_before, mac_before = features_on(guest), mac_of_us0(guest)
        base = daemon.status_of("us0")["counters"]["rx_bytes"]
        drops = understudy.carrier_drops(guest)
        # The guest's clock times the probe's and the application's gaps; the
        # host's, the captures' (QEMU stamps them with the host's).
        move_times: list[float] = []
        host_move_times: list[float] = []
        with PingProbe(guest, PEER_ADDRESS) as probe, \
                Us0Transfer(guest, nbytes, timeout=nbytes * 8 / rate_mbps / 1e6 * 3 + 120, gap_log_ms=GAP_LOG_MS,
                            network=network, rate_mbps=rate_mbps) as transfer:
            passed = 0
            for i in range(moves):
                to = (i + 1) % 2
                move_times.append(guest_time(guest))
                host_move_times.append(time.time())
                code, record, st, after = hand_over(daemon, transfer, base, passed, "migrations", "migrate", "us0",
                                                    "--to", devices[to], *understudy.module_args(chains[to]))
                mac = mac_of_us0(guest)
                records.append({"move": i + 1, "to": f"{devices[to]} ({(a, b)[to].driver})", "exit": code,
                                "at_bytes": st["counters"]["rx_bytes"] - base, "mac": mac, "dest_nic": to,
                                "serving": after["device"], "serving_driver": after["driver_name"], **record})
                log(f"move {i + 1}/{moves} to {devices[to]}: {record['outcome']}, downtime {record.get('downtime_ms')} "
                    f"ms (load {record.get('load_ms')}, stop {record.get('stop_ms')}, probe {record.get('start_ms')}, "
                    f"replay {record.get('replay_ms')}, link {record.get('link_ms')})")
                if code != 0 or (after["device"], after["driver_name"]) != (devices[to], (a, b)[to].driver):
                    failure = (f"move {i + 1}: {record['outcome']}; us0 is served by {after['device']} "
                               f"({after['driver_name']})")
                    break
                passed = after["counters"]["rx_bytes"] - base
            result = transfer.result(nbytes * 8 / rate_mbps / 1e6 * 3) if failure is None else None
            replies = probe.reply_times()
        features_after = features_on(guest)
        final = daemon.status_of("us0")
        dropped = understudy.carrier_drops(guest) - drops
        alive = daemon.alive()
        daemon_log = daemon.stop()
        if failure:
            log("the daemon's log, last lines:\n" + "\n".join(daemon_log.splitlines()[-80:]))
        captures = [guest.pcap_path(f"nic{i}").read_bytes() for i in range(2)]
    gaps = {**outages(records, result, replies, move_times), **wire(records, captures, mac_before, host_move_times)}
    summary = transfer_summary(result, failure)
    moved = sum(r["outcome"] == "moved" for r in records)
    rolled_back = sum(str(r["outcome"]).startswith("rolled back") for r in records)
    refused = sum(r["exit"] == 1 for r in records)
    mac_unchanged = all(r["mac"] == mac_before for r in records)
    rep = Report({
        "scenario": "migrate", "from": a.driver, "to": b.driver, "devices": devices,
        "rate_mbps": rate_mbps, "bytes": nbytes, "bytes_received": summary["bytes"],
        "hash_ok": summary["hash_ok"], "resets": summary["resets"], "transfer": summary,
        "moves": moved, "rolled_back": rolled_back, "refused": refused, "recoveries": final["recovery_count"],
        "mac_unchanged": mac_unchanged, "mac": mac_before, **gaps,
        "phase_ms_median": {to: {k: median([r[k] for r in records if r.get(k) is not None and r["to"].endswith(f"({drv})")])
                                 for k in PHASES}
                            for to, drv in (("to_" + b.driver, b.driver), ("to_" + a.driver, a.driver))},
        "features_before": features_before, "features_after": features_after,
        "standby_offloads": final["standby"][0]["offloads"] if final["standby"] else None,
        "carrier_drops": dropped, "daemon_alive": alive, "per_move": records,
    })
    check_common(rep, summary, nbytes, final, dropped, alive)
    rep.check("every_move_moved", moved == moves, f"{moved} of {moves} moved" + (f"; {failure}" if failure else ""))
    rep.check("mac_unchanged", mac_unchanged, f"us0's MAC per move: {[r['mac'] for r in records]}, before {mac_before}")
    unheard = [r["move"] for r in records
               if r["outcome"] == "moved" and not (r.get("announced") and r["announced_on_wire"])]
    rep.check("announced", not unheard,
              f"moves whose announcements the daemon did not count or the destination did not send: {unheard}")
    rep.check("features_kept", features_after == features_before, f"{features_before} -> {features_after}")
    return rep


def table(rep: Report) -> str:
    f = rep.figures
    cols = ["move", "to", "outcome", "load_ms", "stop_ms", "start_ms", "replay_ms", "link_ms", "first_packet_ms",
            "downtime_ms", "wire_gap_ms", "probe_gap_ms", "app_gap_ms", "announced", "announced_on_wire"]
    lines = columns(f["per_move"], cols)
    lines.append(f"{f['from']} <-> {f['to']}: {f['moves']} moved, {f['rolled_back']} rolled back, {f['refused']} "
                 f"refused; transfer {f['bytes_received']} of {f['bytes']} bytes, hash "
                 f"{'ok' if f['hash_ok'] else 'MISMATCH'}, {f['resets']} resets; MAC "
                 f"{'unchanged' if f['mac_unchanged'] else 'CHANGED'} ({f['mac']}); us0 lost carrier "
                 f"{f['carrier_drops']} times")
    lines.append(f"downtime (daemon, last frame -> first frame): median {f['downtime_ms_median']} ms, max "
                 f"{f['downtime_ms_max']} ms; us0's frames on the wire: median {f['wire_gap_ms_median']} ms, max "
                 f"{f['wire_gap_ms_max']} ms; ping every {PROBE_INTERVAL_S * 1000:g} ms, replies: median "
                 f"{f['probe_gap_ms_median']} ms, max {f['probe_gap_ms_max']} ms; the receiving TCP application: "
                 f"median {f['app_gap_ms_median']} ms, max {f['app_gap_ms_max']} ms")
    lines.append(f"announcements (gratuitous ARP, unsolicited NA) sent by the destination: "
                 f"{sum(r.get('announced_on_wire', 0) for r in f['per_move'])} in {len(f['per_move'])} moves, median "
                 f"{f['announced_after_first_frame_ms_median']} ms after its first frame")
    lines.append(f"ethtool -k us0, on: before {', '.join(f['features_before'])}")
    lines.append(f"                    after  {', '.join(f['features_after'])}")
    return "\n".join(lines + verdict_lines(rep))


def cmd_migrate(args) -> int:
    return emit(migrate_loop(args.source, args.target, args.moves, args.rate_mbps), args.json, table)


def add_parser(ssub) -> None:
    """`scenario migrate`, beside the others."""
    m = ssub.add_parser("migrate", help="move us0 between two devices and drivers N times during one transfer",
                        description=__doc__ + "\nExit 0 if every check passed, 1 if one failed, 3 lab problem.",
                        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
                        epilog="example: python3 -m lab scenario migrate --from e1000 --to 8139cp --moves 10 --json")
    m.add_argument("--from", dest="source", default="e1000", help="the NIC us0 starts on (default e1000)")
    m.add_argument("--to", dest="target", default="8139cp",
                   help="the other NIC: 8139cp (rtl8139), pcnet32, e100 (i82559er)... (default 8139cp)")
    m.add_argument("--moves", type=positive, default=10, help="moves to make (default 10)")
    m.add_argument("--rate-mbps", type=float, default=20,
                   help="the transfer's pace, Mbit/s; it is sized to last through every move (default 20)")
    add_json(m)
    m.set_defaults(func=cmd_migrate)
