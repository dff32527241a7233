"""python3 -m lab — the understudy lab: QEMU guests with Debian's kernel and the papers' devices.

Exit codes: boot returns the guest command's own exit code; 0 success otherwise;
1 a scenario or benchmark failed one of its checks (hash mismatch, reset, missing recovery, growth); 2 usage errors; 3 a lab problem the message explains (missing setup, unknown
device); 4 the guest panicked, hung or died.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from . import config
from .devices import CATALOGUE
from .errors import LabError

EXIT_LAB_ERROR, EXIT_GUEST_FAILED = 3, 4
KVM_BOOT_TIMEOUT_S = 30
# The demo's crash transfer (step 3) is paced to last about this long.
CRASH_TRANSFER_S = 4


def _sigterm_as_exit(*_):
    raise SystemExit(128 + signal.SIGTERM)


def cmd_setup(args) -> int:
    from . import install
    if args.list_abis:
        print("\n".join(install.available_abis()))
        return 0
    install.setup()
    return 0


def cmd_modules(args) -> int:
    for name in args.names:
        print(config.cached_module(args.abi, name))
    return 0


def cmd_boot(args) -> int:
    from .guest import Guest, GuestFailed

    def stream(kind: str, chunk: bytes) -> None:
        out = sys.stdout if kind == "out" else sys.stderr
        out.buffer.write(chunk)
        out.flush()

    devices = [d for d in args.devices.split(",") if d] if args.devices else []
    guest = Guest(devices=devices, memory_mib=args.mem, cpus=args.cpus, kvm=args.kvm)
    try:
        guest.start(timeout=KVM_BOOT_TIMEOUT_S if args.kvm else None)
    except GuestFailed as e:
        if not args.kvm:
            raise
        # Nested KVM hangs on some machines (docs/design.md §10): fall back rather than fail.
        print(f"lab: the KVM guest did not boot ({str(e).splitlines()[0]}); "
              "falling back to TCG", file=sys.stderr)
        guest = Guest(devices=devices, memory_mib=args.mem, cpus=args.cpus).start()
    try:
        if not args.no_drivers:
            from .net import load_kernel_drivers
            load_kernel_drivers(guest)
        cmd = args.cmd or ["true"]
        return guest.run(cmd, timeout=args.timeout, cwd=os.getcwd(), sink=stream).returncode
    finally:
        guest.stop()


def cmd_demo(args) -> int:
    """The main job on the built-in lab: the same e1000 binary first in the
    kernel, then in a user-space process behind understudyd, passing real
    traffic to the host over the lab's bridge; then the driver process is
    killed in the middle of a TCP transfer, understudyd restarts it and replays
    its settings, and the transfer finishes intact."""
    from . import bench, net, traffic, understudy
    from .guest import Guest
    from .netns import PEER_ADDRESS, LabNetwork

    def say(msg: str) -> None:
        print(f"[demo] {msg}", flush=True)

    def traffic_both_ways(iface: str) -> dict:
        p = net.ping(guest, count=50, interval=0.02, network=network)
        say(f"  ping {PEER_ADDRESS} (the host, on the lab bridge) over {iface}: "
            f"{p['received']}/{p['sent']} answered, RTT median {p['rtt_ms_median']:.2f} ms")
        for direction, what in (("tx", "guest → host"), ("rx", "host → guest")):
            s = net.bulk(guest, direction, args.megabytes << 20, network=network).summary()
            verdict = "hash matches" if s["hash_ok"] else "HASH MISMATCH"
            say(f"  TCP {args.megabytes} MB {what}: {s['mbps']:.0f} Mbit/s, {verdict}, "
                f"{s['resets']} resets")
        return bench.measure_traffic(guest, seconds=3, network=network)

    say("building understudyd and the driver process")
    # The release build, as `bench net` measures it: the closing table compares
    # the two worlds (docs/notes/bench-net-history.md, "What changed, and why").
    bins = understudy.build(release=True)
    say(f"booting a lab guest: Debian {config.kernel().release}, q35 + emulated Intel IOMMU, e1000 "
        f"on a bridge in a network namespace of the host (lab/netns.py)")
    # Not slirp: its TCP's fixed 64 KiB window caps throughput at that window
    # ÷ the round trip, so it would turn understudy's longer round trip into
    # lower throughput (lab/bench.py, NETWORKS); on the bridge the far end is
    # the host's own TCP, as for `python3 -m lab bench net`.
    with LabNetwork() as network, Guest(devices=["e1000"], netdev=network) as guest:
        bdf = guest.pci_address("nic0")
        understudy.bind_kernel(guest, bdf, "e1000")
        net.bring_up(guest, "nic0", network=network)
        say(f"1. in-kernel e1000 at {bdf}, interface {net.iface_of(guest, 'nic0')}:")
        in_kernel = traffic_both_ways("eth0")

        say("2. the same e1000.ko in a user-space driver process, behind understudyd:")
        understudy.prepare(guest)
        daemon = understudy.Daemon(guest, bins, None, "--max-restarts", "3",
                                   "--restart-window-s", "300")
        understudy.understudy_up(guest, daemon, bdf, understudy.module_chain(guest, "e1000"),
                                 network, bench.driver_cpu(guest))
        status = daemon.status()[bdf]
        say(f"  us0 has the driver's MAC {status['mac']}, module sha256 "
            f"{status['modules'][0]['sha256'][:16]}…, driver process pid {status['pid']}")
        in_process = traffic_both_ways("us0")

        nbytes = args.megabytes << 20
        # Paced: unpaced, a small transfer can be over before the kill lands, and
        # then no frame follows the restart to time its downtime by.
        rate_mbps = round(nbytes * 8 / 1e6 / CRASH_TRANSFER_S, 1)
        say(f"3. the driver process is killed (SIGKILL) in the middle of a TCP transfer "
            f"(sent at {rate_mbps} Mbit/s, to last {CRASH_TRANSFER_S} s):")
        crash = traffic.crash_mid_transfer(guest, daemon, bdf, nbytes, kill_after=nbytes // 4,
                                           rate_mbps=rate_mbps, network=network)
        r = crash.recovery
        transfer = crash.transfer.summary()
        say(f"  daemon alive: {daemon.alive()}; cause: {r['cause']}; outcome: {r['outcome']}")
        how = "forked from the post-probe template" if r["start"] == "template" else "loaded and probed"
        say(f"  restart: device stopped {r['stop_ms']:.0f} ms, new driver {how} "
            f"{r['start_ms'] or 0:.0f} ms, settings replayed {r['replay_ms'] or 0:.0f} ms"
            + (f", its link up after {r['link_ms']:.0f} ms more" if r.get("link_ms") else "")
            + f"; downtime {r['downtime_ms'] or 0:.0f} ms; {r['tx_resubmitted']} frames resubmitted")
        verdict = "hash matches" if transfer["hash_ok"] else "HASH MISMATCH"
        say(f"  the transfer: {transfer['bytes'] >> 20} MB, {verdict}, {transfer['resets']} resets, "
            f"us0 lost carrier {crash.carrier_drops} times")
        daemon.stop()
    say("the same e1000.ko, both ways, on the lab bridge (one run each; "
        "`python3 -m lab bench net` for medians):")
    print(bench.table([{"driver": "in-kernel", **in_kernel}, {"driver": "understudy", **in_process}],
                      bench.NET_KEYS))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m lab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("setup", help="install QEMU, busybox, iperf3, the pinned Debian kernel and the live-update ABIs",
                       description="Installs what the lab needs (apt packages, Python packages, "
                       f"Debian's {config.kernel().package}) into {config.cache_dir()}; "
                       "safe to run again.")
    s.add_argument("--list-abis", action="store_true",
                   help="list the Debian 6.1 kernel ABIs the archive serves and exit")
    s.set_defaults(func=cmd_setup)

    m = sub.add_parser("modules", help="print the paths of a cached ABI's NIC modules",
                       description="Prints the path of each named Debian module of ABI --abi "
                       "that `setup` cached (lab/lab.toml: [kernel] and [live_update]).",
                       epilog="example: python3 -m lab modules --abi 6.1.0-50 e1000 e100")
    m.add_argument("--abi", default=config.kernel().abi, help="e.g. 6.1.0-50 (default: the pinned ABI)")
    m.add_argument("names", nargs="+", help="module names without .ko, e.g. e1000 8139cp mii")
    m.set_defaults(func=cmd_modules)

    b = sub.add_parser("boot", help="boot a guest, run a command in it, return its exit code",
                       description="Boots a q35 guest (TCG) with an emulated Intel IOMMU and the "
                       "given devices, runs CMD as root inside the host's root filesystem "
                       "(read-only, with writable /tmp) in the current directory, streams its "
                       "output and exits with its exit code. Devices: " + ", ".join(CATALOGUE),
                       epilog="example: python3 -m lab boot --devices e1000 -- ping -c 3 10.0.2.2")
    b.add_argument("--devices", default="e1000",
                   help="comma-separated catalogue names (default: e1000; '' for none)")
    b.add_argument("--mem", type=int, help="guest memory in MiB (lab/lab.toml)")
    b.add_argument("--cpus", type=int, help="guest CPUs (lab/lab.toml)")
    b.add_argument("--kvm", action="store_true",
                   help=f"use KVM instead of TCG; falls back to TCG if the guest has not "
                   f"booted within {KVM_BOOT_TIMEOUT_S} s (nested KVM hangs here)")
    b.add_argument("--no-drivers", action="store_true",
                   help="do not load the in-kernel drivers for the devices (leave them unbound)")
    b.add_argument("--timeout", type=float, default=3600, help="limit for CMD in seconds")
    b.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...] (default: true)")
    b.set_defaults(func=cmd_boot)

    d = sub.add_parser("demo", help="boot the lab and show the main job (used by `make demo`)",
                       description=cmd_demo.__doc__)
    d.add_argument("--megabytes", type=int, default=100, help="size of each bulk transfer")
    d.set_defaults(func=cmd_demo)

    from .bench import add_parser as add_bench
    from .bench_plot import add_parser as add_bench_plot
    from .bench_rt import add_parser as add_bench_rt
    from .bench_blk import add_parser as add_bench_blk
    bench = add_bench(sub)
    add_bench_rt(bench)
    add_bench_blk(bench)
    add_bench_plot(bench)
    from .check import add_parser as add_check
    add_check(sub)
    from .coverage import add_parser as add_coverage
    add_coverage(sub)
    from .swifi.cli import add_parser as add_swifi
    add_swifi(sub)
    from .scenario import add_parser as add_scenario
    from .update_loop import add_parser as add_update_loop
    from .vm_migrate import add_parser as add_vm_migrate
    from .migrate_loop import add_parser as add_migrate
    scenarios = add_scenario(sub)
    add_update_loop(scenarios)
    add_migrate(scenarios)
    add_vm_migrate(scenarios)
    return p


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _sigterm_as_exit)
    args = build_parser().parse_args(argv)
    if getattr(args, "cmd", None) and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    from .guest import GuestFailed
    try:
        return args.func(args)
    except GuestFailed as e:
        print(f"lab: guest failed: {e}", file=sys.stderr)
        return EXIT_GUEST_FAILED
    except LabError as e:
        print(f"lab: {e}", file=sys.stderr)
        return EXIT_LAB_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
