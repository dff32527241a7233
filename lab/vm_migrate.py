# SPDX-License-Identifier: GPL-2.0
"""`python3 -m lab scenario vm-migrate`: the live-migration paper's main
experiment with understudy in the guest (docs/migration.md, "The VM's live
migration"): a guest whose us0 runs on an e1000 through understudy is
live-migrated to a QEMU that has another NIC model, and a hash-checked TCP
stream to a peer survives.

1. understudy runs from the guest's initramfs (its binaries, their shared
   libraries, the kernel half and the driver modules copied there; `install_kit`):
   QEMU does not migrate a guest that has the 9p host root mounted, and a
   process running from it would keep it mounted.
2. us0 carries a busybox `nc` stream (lab/migration.py's) to a peer on a lab
   bridge; both ends hash it.
3. The source NIC is unplugged (QMP device_del): the kernel asks understudyd
   for the device back, and with no standby the interface parks -- its
   address, routes, sockets and carrier stay, its frames wait.
4. QEMU live-migrates the guest to a twin without that NIC; the new model is
   plugged there and handed to vfio-pci, and `understudy migrate us0 --to`
   gives us0 the new device: the MAC is kept, gratuitous ARP tells the peer.
5. The stream ends; both hashes must match, with no reset.

With `--baseline` (the default) the same run is made with the in-kernel
drivers, the guest swapping the NIC itself (lab/migration.py), in the same
invocation: the comparison the docs quote.
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from . import config, migration, understudy
from .arguments import add_json
from .devices import lookup_nic
from .errors import LabError
from .guest import Guest
from .migration import MEMORY_MIB, GUEST_ADDRESS, GuestStream, await_traffic
from .net import HostBulk
from .netns import PEER_ADDRESS, LabNetwork
from .report import Report, columns, emit, log, verdict_lines

# Where understudy lives in the guest's initramfs.
KIT = "/understudy"
SOCKET = "/run/understudy.sock"

# us0 on the lab network, for busybox: address, wait for the peer.
US0_UP = f"""
ip link set us0 up && ip addr replace {GUEST_ADDRESS} dev us0 || exit 1
i=0; until ping -c 1 -W 1 {PEER_ADDRESS} >/dev/null; do i=$((i+1)); [ $i -gt 60 ] && exit 2; done
exit 0
"""


def shared_libraries(binaries: list[Path]) -> list[str]:
    """What the dynamic loader maps for `binaries` (and the loader itself), as ldd says."""
    libs: set[str] = set()
    for b in binaries:
        out = subprocess.run(["ldd", str(b)], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            words = line.split()
            path = words[2] if "=>" in words and len(words) > 2 else words[0]
            if path.startswith("/"):
                libs.add(path)
    return sorted(libs)


def install_kit(guest: Guest, bins: dict, drivers: list[str]) -> dict:
    """Copies understudy into the guest's initramfs (while the host root is
    still there to copy from): daemon, CLI, driver process with its kernel
    half, the module chains of `drivers`, and every shared library they load,
    at the path the loader looks for it. Returns the kit's paths."""
    abi = config.kernel().abi
    half = understudy.DRIVER.parent / "abi" / abi
    chains = {d: understudy.module_chain(guest, d) for d in drivers}
    kit = {"understudyd": f"{KIT}/understudyd", "understudy": f"{KIT}/understudy", "driver": f"{KIT}/understudy-driver",
           "modules": {d: [f"{KIT}/modules/{Path(m).name}" for m in chain] for d, chain in chains.items()}}
    copies = [(bins["understudyd"], kit["understudyd"]), (bins["understudy"], kit["understudy"]),
              (bins["driver"], kit["driver"]),
              *[(half / f, f"{KIT}/abi/{abi}/{f}") for f in ("understudy-kernel.ko", "Module.symvers")],
              *[(m, f"{KIT}/modules/{Path(m).name}") for chain in chains.values() for m in chain],
              *[(lib, lib) for lib in shared_libraries([bins["understudyd"], bins["understudy"], bins["driver"]])]]
    # Resolved here: the host's symlinks may be absolute, which would point into the initramfs.
    script = " && ".join(f"mkdir -p {Path(dst).parent} && cp /host{Path(src).resolve()} {dst}" for src, dst in copies)
    guest.run(f"{script} && mkdir -p /run", in_initramfs=True, check=True, timeout=120)
    return kit


def vm_migrate(source: str, target: str, memory_mib: int) -> dict:
    """One run: the stream, the unplug (us0 parks), QEMU's migration, the plug
    and `understudy migrate`; what each took and what the peer received."""
    src, dst = lookup_nic(source), lookup_nic(target)
    bins = understudy.build(release=True)
    with LabNetwork() as network, \
            Guest(devices=[src.name], memory_mib=memory_mib, netdev=network) as guest:
        understudy.prepare(guest)
        kit = install_kit(guest, bins, [src.driver, dst.driver])
        guest.detach_host_root()
        bdf = guest.pci_address("nic0")
        understudy.bind_vfio(guest, bdf)
        daemon = understudy.Daemon(guest, kit, None, socket=SOCKET, in_initramfs=True)
        daemon.run(bdf, kit["modules"][src.driver])
        daemon.wait_state(bdf, "registered", timeout=120)
        up = guest.run(["sh", "-c", US0_UP], timeout=90)
        if up.returncode != 0:
            raise LabError(f"us0 did not reach the peer ({up.err.strip()}): {daemon.cli('status').out}\n"
                           + "\n".join(daemon.stop().splitlines()[-40:]))
        mac_before = guest.run("cat /sys/class/net/us0/address", check=True).out.strip()
        peer = HostBulk("tx", 0, network=network)
        stream = GuestStream(guest, peer)
        await_traffic(network)
        log(f"stream flowing through {src.driver} behind understudy; unplugging {src.name}")
        t0 = time.monotonic()
        timeline = {}
        guest.hot_unplug("nic0")
        parked = daemon.wait_state(bdf, "parked", timeout=30)
        timeline["parked_s"] = time.monotonic() - t0
        with guest.incoming_twin() as dest:
            report = guest.migrate_to(dest)
            timeline["migrated_s"] = time.monotonic() - t0
            log(f"migrated in {report['total-time']} ms (QEMU downtime {report['downtime']} ms); plugging {dst.name}")
            new = dest.hot_plug(dst.name, "nic1")
            new_bdf = dest.pci_address(new.id)
            understudy.bind_vfio(dest, new_bdf)
            timeline["plugged_s"] = time.monotonic() - t0
            daemon.g = dest
            res = daemon.cli("migrate", "us0", "--to", new_bdf, "--json",
                             *[a for m in kit["modules"][dst.driver] for a in ("--module", m)], timeout=300)
            answer = json.loads(res.out) if res.out.strip() else {"error": res.err}
            record = answer.get("handover") or {}
            timeline["moved_s"] = time.monotonic() - t0
            at_switchover = network.bridge_rx_bytes()
            after = await_traffic(network) - at_switchover
            mac_after = dest.run("cat /sys/class/net/us0/address", check=True).out.strip()
            status, sent = stream.stop(dest)
            neighbour = network.ip("neigh", "show", GUEST_ADDRESS.split("/")[0]).strip()
            daemon_log = daemon.stop()
        peer_report = peer.result()
    if res.returncode != 0:
        log("the daemon's log, last lines:\n" + "\n".join(daemon_log.splitlines()[-60:]))
    return {"exit": res.returncode, "error": answer.get("error"), "record": record, "parked": parked["state"],
            "timeline": {k: round(v, 3) for k, v in timeline.items()}, "migration": report, "peer": peer_report,
            "sent_sha256": sent, "sender_status": status, "bytes_after_switchover": after,
            "mac_before": mac_before, "mac_after": mac_after, "peer_neighbour": neighbour}


def scenario(source: str, target: str, memory_mib: int, baseline: bool) -> Report:
    run = vm_migrate(source, target, memory_mib)
    peer, record = run["peer"], run["record"]
    hash_ok = peer["sha256"] == run["sent_sha256"] and peer["bytes"] > 0 and run["sender_status"] == 0
    figures = {
        "scenario": "vm-migrate", "from": source, "to": target, "memory_mib": memory_mib,
        "hash_ok": hash_ok, "resets": peer["resets"], "bytes": peer["bytes"],
        "bytes_after_switchover": run["bytes_after_switchover"],
        "downtime_ms": peer["max_stall_ms"], "migration_ms": run["migration"]["total-time"],
        "qemu_downtime_ms": run["migration"]["downtime"], "timeline_s": run["timeline"],
        "outcome": record.get("outcome", run["error"]), "mac_before": run["mac_before"], "mac_after": run["mac_after"],
        "announced": record.get("announced"), "parked_ms": record.get("parked_ms"),
        "phase_ms": {k: record.get(k) for k in ("stop_ms", "start_ms", "replay_ms", "link_ms", "serving_ms")},
        "peer_neighbour": run["peer_neighbour"],
    }
    if baseline:
        log(f"the same migration with the in-kernel drivers (the guest swaps {source} for {target} itself)")
        kernel = migration.run(swap_to=lookup_nic(target).name, source_model=lookup_nic(source).name,
                               memory_mib=memory_mib)
        figures["in_kernel"] = {"intact": kernel.intact, "downtime_ms": kernel.peer["max_stall_ms"],
                                "migration_ms": kernel.migration["total-time"], "timeline_s": kernel.timeline}
    rep = Report(figures)
    rep.check("hash_ok", hash_ok, f"peer {peer['sha256']} after {peer['bytes']} bytes, sent {run['sent_sha256']}")
    rep.check("no_reset", peer["resets"] == 0, f"{peer['resets']} resets")
    rep.check("moved", run["exit"] == 0 and record.get("outcome") == "moved", str(figures["outcome"]))
    rep.check("parked", run["parked"] == "parked", f"us0 was {run['parked']} after the unplug")
    rep.check("mac_unchanged", run["mac_before"] == run["mac_after"], f"{run['mac_before']} -> {run['mac_after']}")
    rep.check("traffic_after", run["bytes_after_switchover"] > 0)
    return rep


def table(rep: Report) -> str:
    f = rep.figures
    rows = [{"run": "understudy", "downtime_ms": f["downtime_ms"], "migration_ms": f["migration_ms"],
             **f["timeline_s"]}]
    if "in_kernel" in f:
        rows.append({"run": "in-kernel swap", "downtime_ms": f["in_kernel"]["downtime_ms"],
                     "migration_ms": f["in_kernel"]["migration_ms"], **f["in_kernel"]["timeline_s"]})
    cols = ["run", "downtime_ms", "migration_ms", "parked_s", "unplugged_s", "migrated_s", "plugged_s", "moved_s",
            "answered_s"]
    lines = columns(rows, cols)
    lines.append(f"{f['from']} -> {f['to']}: {f['outcome']}; stream {f['bytes']} bytes, hash "
                 f"{'ok' if f['hash_ok'] else 'MISMATCH'}, {f['resets']} resets; MAC {f['mac_before']} -> "
                 f"{f['mac_after']}; understudy's phases {f['phase_ms']}, announced {f['announced']}")
    return "\n".join(lines + verdict_lines(rep))


def cmd_vm_migrate(args) -> int:
    return emit(scenario(args.source, args.target, args.memory_mib, args.baseline), args.json, table)


def add_parser(ssub) -> None:
    """`scenario vm-migrate`, beside the others."""
    v = ssub.add_parser("vm-migrate", help="live-migrate the guest to a QEMU with another NIC, understudy in it",
                        description=__doc__, formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
                        epilog="example: python3 -m lab scenario vm-migrate --from e1000 --to rtl8139 --json")
    v.add_argument("--from", dest="source", default="e1000", help="the NIC at the source (default e1000)")
    v.add_argument("--to", dest="target", default="rtl8139", help="the NIC at the destination (default rtl8139)")
    v.add_argument("--memory-mib", type=int, default=MEMORY_MIB, help=f"guest memory (default {MEMORY_MIB})")
    v.add_argument("--no-baseline", dest="baseline", action="store_false",
                   help="skip the in-kernel drivers' run of the same migration")
    add_json(v)
    v.set_defaults(func=cmd_vm_migrate)
