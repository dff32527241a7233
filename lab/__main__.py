"""python3 -m lab — the understudy lab: QEMU guests with Debian's kernel and the papers' devices.

Exit codes: boot returns the guest command's own exit code; 0 success otherwise;
2 usage errors; 3 a lab problem the message explains (missing setup, unknown
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


def _sigterm_as_exit(*_):
    raise SystemExit(128 + signal.SIGTERM)


def cmd_setup(args) -> int:
    from . import install
    if args.list_abis:
        print("\n".join(install.available_abis()))
        return 0
    install.setup()
    return 0


def cmd_boot(args) -> int:
    from .guest import Guest

    def stream(kind: str, chunk: bytes) -> None:
        out = sys.stdout if kind == "out" else sys.stderr
        out.buffer.write(chunk)
        out.flush()

    devices = [d for d in args.devices.split(",") if d] if args.devices else []
    with Guest(devices=devices, memory_mib=args.mem, cpus=args.cpus, kvm=args.kvm) as guest:
        if args.no_drivers is False:
            from .net import load_kernel_drivers
            load_kernel_drivers(guest)
        cmd = args.cmd or ["true"]
        res = guest.run(cmd, timeout=args.timeout, cwd=os.getcwd(), sink=stream)
        return res.returncode


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m lab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("setup", help="install QEMU, busybox, iperf3 and the pinned Debian kernel",
                       description="Installs what the lab needs (apt packages, Python packages, "
                       f"Debian's {config.kernel().package}) into {config.cache_dir()}; "
                       "safe to run again.")
    s.add_argument("--list-abis", action="store_true",
                   help="list the Debian 6.1 kernel ABIs the archive serves and exit")
    s.set_defaults(func=cmd_setup)

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
    b.add_argument("--kvm", action="store_true", help="use KVM instead of TCG (hangs when nested)")
    b.add_argument("--no-drivers", action="store_true",
                   help="do not load the in-kernel drivers for the devices (leave them unbound)")
    b.add_argument("--timeout", type=float, default=3600, help="limit for CMD in seconds")
    b.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...] (default: true)")
    b.set_defaults(func=cmd_boot)

    from .bench import add_parser as add_bench
    add_bench(sub)
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
    except (LabError, KeyError) as e:
        print(f"lab: {e}", file=sys.stderr)
        return EXIT_LAB_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
