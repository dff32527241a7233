"""Sending through understudy, session by session.

e1000e's sending through understudy is fast in some `understudy run` sessions
and crawls with thousands of retransmissions in others (docs/performance.md
§9). This runs several sessions on one device and one daemon, each after the
in-kernel driver as in `bench net` (or not, with --no-kernel), and for each
measures one guest -> host transfer with the counters that tell where frames
go missing:

    python3 -m lab.experiments.session_loss --driver e1000e [--sessions 4] [--base-pages] [--json]

Per session: Mbit/s and retransmissions (iperf3), the host TCP's
out-of-order segments (holes: `TcpExtTCPOFOQueue` in the lab's network
namespace), the frames us0 sent and dropped against the frames the driver
completed (`understudy ethtool --stats`), the driver process's own counts
(`understudy status`), and how the arena lies in guest-physical memory:
its pages and the places where the next page is not the physically next
one (`arena_breaks`, from the daemon's /proc/PID/pagemap). --no-kernel
leaves the in-kernel driver out; --base-pages takes the guest's hugepages
away first, so the arena is in base pages (docs/design.md §4, "The
arena's pages").
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys

from .. import net, provenance, understudy
from ..errors import LabError

TRANSFER_S = 3


def host_counter(network, name: str) -> int:
    """A counter of the host's stack in the lab's namespace (nstat's absolute value)."""
    res = subprocess.run(["ip", "netns", "exec", network.name, "nstat", "-az", "--json", name],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout)["kernel"].get(name, 0)


def frame_counts(guest, daemon) -> dict:
    """us0's sent and dropped frames, and what the driver says it completed."""
    us0 = json.loads(guest.run("ip -s -j link show us0", check=True).out)[0]["stats64"]["tx"]
    stats = {}
    for line in daemon.cli("ethtool", "us0", "--stats").out.splitlines():
        key, _, value = line.strip().partition(":")
        if value.strip().isdigit():
            stats[key] = int(value)
    return {"us0_sent": us0["packets"], "us0_dropped": us0["dropped"],
            "driver_tx_packets": stats.get("tx_packets"),
            "process": daemon.status_of("us0")["counters"]}


# Reads the daemon's page map of its arena mapping: its pages, how many are
# present, and the breaks in their physical contiguity between present pages.
ARENA_LAYOUT = r'''
import json, struct, subprocess
pid = subprocess.run(["pgrep", "-x", "understudyd"], capture_output=True, text=True).stdout.split()[0]
start, end = next(tuple(int(a, 16) for a in line.split()[0].split("-"))
                  for line in open(f"/proc/{pid}/maps") if "understudy-arena" in line)
pages = (end - start) // 4096
with open(f"/proc/{pid}/pagemap", "rb") as f:
    f.seek(start // 4096 * 8)
    entries = struct.unpack(f"{pages}Q", f.read(pages * 8))
pfns = [e & ((1 << 55) - 1) if e >> 63 else None for e in entries]
present = [p for p in pfns if p is not None]
breaks = sum(1 for a, b in zip(pfns, pfns[1:]) if a is not None and b is not None and b != a + 1)
print(json.dumps({"arena_pages": pages, "arena_present": len(present), "arena_breaks": breaks}))
'''


def arena_layout(guest) -> dict:
    """The arena's pages in the daemon, and the breaks in their physical contiguity."""
    return json.loads(guest.run(["python3", "-c", ARENA_LAYOUT], check=True).out)


def delta(after: dict, before: dict) -> dict:
    return {k: (delta(v, before[k]) if isinstance(v, dict) else
                v - before[k] if isinstance(v, int) and isinstance(before.get(k), int) else v)
            for k, v in after.items()}


def session_loss(driver: str, sessions: int, with_kernel: bool, base_pages: bool) -> list[dict]:
    bins = understudy.build(release=True)
    results = []
    with understudy.nic_lab(driver) as lab:
        g = lab.guest
        if base_pages:
            g.run("echo 0 > /proc/sys/vm/nr_hugepages", check=True)
        daemon = understudy.Daemon(g, bins)
        try:
            for i in range(sessions):
                if with_kernel:
                    understudy.bind_kernel(g, lab.bdf, driver)
                    net.bring_up(g, "nic0", network=lab.network)
                    net.iperf3_run(g, reverse=False, seconds=2, network=lab.network)
                understudy.understudy_up(g, daemon, lab.bdf, lab.modules, lab.network, g.cpus - 1)
                holes0, frames0 = host_counter(lab.network, "TcpExtTCPOFOQueue"), frame_counts(g, daemon)
                sent = net.iperf3_run(g, reverse=False, seconds=TRANSFER_S, network=lab.network)
                result = {"session": i + 1, "mbps": round(sent["mbps"]), "retransmits": sent["retransmits"],
                          "host_out_of_order": host_counter(lab.network, "TcpExtTCPOFOQueue") - holes0,
                          **delta(frame_counts(g, daemon), frames0), **arena_layout(g)}
                print(f"[session_loss] {json.dumps(result)}", file=sys.stderr, flush=True)
                results.append(result)
                understudy.understudy_down(g, daemon, lab.bdf)
        finally:
            daemon.stop()
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--driver", default="e1000e", help="a lab NIC's in-kernel driver (default: e1000e)")
    p.add_argument("--sessions", type=int, default=4, help="understudy sessions (default: 4)")
    p.add_argument("--no-kernel", action="store_true", help="no in-kernel driver before each session")
    p.add_argument("--base-pages", action="store_true",
                   help="take the guest's hugepages away first: the arena in base pages")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    try:
        results = session_loss(args.driver, args.sessions, not args.no_kernel, args.base_pages)
    except LabError as e:
        print(f"session_loss: {e}", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps({"driver": args.driver, "base_pages": args.base_pages, "sessions": results,
                          **provenance.record(),
                          "command": "python3 -m lab.experiments.session_loss " + shlex.join(sys.argv[1:])}, indent=1))
    else:
        for r in results:
            print(f"session {r['session']}: {r['mbps']} Mbit/s, {r['retransmits']} retransmitted, "
                  f"{r['host_out_of_order']} holes at the host; us0 sent {r['us0_sent']} "
                  f"(dropped {r['us0_dropped']}), the driver completed {r['driver_tx_packets']}; "
                  f"arena {r['arena_present']}/{r['arena_pages']} pages present, {r['arena_breaks']} breaks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
