# SPDX-License-Identifier: GPL-2.0
"""python3 -m lab swifi (or python3 -m lab.swifi) — software fault injection, as in Nooks §4.1.

  types                     the fault types and what each does
  generate                  the patch for (module, type, seed), without a VM
  campaign                  trials in lab guests: in-kernel driver vs understudy, same faults
  report DIR                a campaign's table, headline and plot
  inject-process            (inside a guest) write a fault into a running driver process

Exit codes: 0 success; 2 usage; 3 a lab problem the message explains.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import LabError
from . import faults

TYPE_HELP = {
    "source": "change the source register of an instruction",
    "destination": "change the destination register of an instruction",
    "pointer": "change the address calculation (displacement or base) of a memory access",
    "interface": "drop the instruction that sets up an argument register before a call",
    "branch": "delete a branch instruction (NOPs in its place)",
    "loop": "invert the condition of a loop's backward branch",
    "text": "flip one bit of an instruction",
    "nop": "elide an instruction (NOPs in its place)",
    "hang": "`jmp .` early in a hot-path function (transmit, interrupt, NAPI poll)",
    "null": "load through a zeroed register early in a hot-path function",
    "alloc": "a data-path allocator's result tested as NULL (allocation failure)",
}


def cmd_types(args) -> int:
    rows = [{"type": t, "kind": "Nooks Table II" if t in faults.NOOKS_TYPES else "run time",
             "does": TYPE_HELP[t]} for t in faults.FAULT_TYPES]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['type']:<12} {r['kind']:<15} {r['does']}")
    return 0


def cmd_generate(args) -> int:
    gen = faults.Generator(faults.Module(args.module))
    fault = gen.generate(args.type, args.seed, args.count)
    if args.json:
        print(json.dumps(fault.to_json(), indent=2))
    else:
        print(f"{fault.module} (sha256 {fault.module_sha256[:16]}…) {fault.type} seed {fault.seed}:")
        for p in fault.patches:
            print(f"  {p.section}+{p.offset:#x} ({p.function}+{p.function_offset:#x}): "
                  f"{p.old.hex()} -> {p.new.hex()}   {p.before}  =>  {p.after}")
    return 0


def cmd_inject_process(args) -> int:
    from .inject import inject_process, wait_exit
    text = sys.stdin.read() if args.fault == "-" else Path(args.fault).read_text()
    fault = faults.Fault.from_json(json.loads(text))
    out = inject_process(args.pid, fault, revert=args.revert, trigger=args.trigger)
    if args.watch_exit:
        gone = wait_exit(args.pid, args.watch_exit)
        out["exited_ns"] = gone
        out["exit_after_ms"] = round((gone - out["written_ns"]) / 1e6, 1) if gone else None
    print(json.dumps(out))
    return 0


def cmd_campaign(args) -> int:
    from .campaign import Settings, run_campaign
    from .report import load, summarize, text_report, write_plot
    types = args.types.split(",") if args.types else list(faults.FAULT_TYPES)
    s = Settings(driver=args.driver, types=types, trials_per_type=args.trials_per_type,
                 faults_per_trial=args.faults_per_trial, jobs=args.jobs, out=Path(args.out),
                 resume=args.resume or bool(args.rerun), megabytes=args.megabytes,
                 rerun=args.rerun.split(",") if args.rerun else [],
                 ping_interval_ms=args.ping_interval_ms, ping_timeout_ms=args.ping_timeout_ms)
    if s.jobs < 1 or s.trials_per_type < 1 or s.faults_per_trial < 1:
        raise LabError("--jobs, --trials-per-type and --faults-per-trial must be at least 1")
    run_campaign(s)
    summary = summarize(load(Path(args.out)))
    write_plot(summary, Path(args.out) / "swifi.png")
    print(text_report(summary))
    return 0


def cmd_report(args) -> int:
    from .report import load, markdown_report, summarize, text_report, write_plot
    summary = summarize(load(Path(args.dir)))
    if args.plot:
        write_plot(summary, Path(args.plot))
    if args.json:
        print(json.dumps(summary, indent=2))
    elif args.markdown:
        print(markdown_report(summary))
    else:
        print(text_report(summary))
    return 0


def add_commands(sub) -> None:
    t = sub.add_parser("types", help="the fault types", description="Lists the fault types.")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_types)

    g = sub.add_parser("generate", help="the patch for (module, type, seed), no VM",
                       description="Reads a .ko, disassembles its functions and prints the "
                       "patch a fault of TYPE with SEED makes: section, offset, old and new "
                       "bytes and their disassembly. Deterministic in (module sha256, type, seed).")
    g.add_argument("--module", required=True, help="path of a .ko file")
    g.add_argument("--type", required=True, choices=faults.FAULT_TYPES)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--count", type=int, default=1, help="patches in the fault (Nooks used 5)")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_generate)

    c = sub.add_parser("campaign", help="run trials: in-kernel driver vs understudy, same faults",
                       description="Each trial (type, seed) injects the same fault into the "
                       "in-kernel driver and into understudy's driver process while a workload "
                       "runs (two hash-checked TCP transfers and pings), and classifies both. "
                       "Progress on stderr; results appended to OUT/trials.jsonl; the report "
                       "at the end (also `swifi report OUT`).")
    c.add_argument("--driver", default="e1000", help="a lab NIC (lab/devices.py)")
    c.add_argument("--trials-per-type", type=int, default=50)
    c.add_argument("--types", help=f"comma list (default: all of {','.join(faults.FAULT_TYPES)})")
    c.add_argument("--faults-per-trial", type=int, default=1,
                   help="patches per trial, all of the trial's type (Nooks injected 5)")
    c.add_argument("--jobs", type=int, default=1,
                   help="trials at once; each job runs two guests (one per world)")
    c.add_argument("--out", default="swifi-results", help="results directory")
    c.add_argument("--resume", action="store_true", help="skip trials already in OUT")
    c.add_argument("--rerun", metavar="TRIALS",
                   help="with --resume implied: run these finished trials again (comma list of "
                        "TYPE-SEED, or \"severe\" for every trial that crashed or hung the guest "
                        "in-kernel, to measure a change to understudy); the report counts the last record")
    c.add_argument("--megabytes", type=int, default=24, help="bytes each transfer moves, MiB")
    c.add_argument("--ping-interval-ms", type=int, default=100,
                   help="understudyd's heartbeat interval for the driver")
    c.add_argument("--ping-timeout-ms", type=int, default=1000,
                   help="understudyd's heartbeat deadline (a hang is detected after it)")
    c.set_defaults(func=cmd_campaign)

    r = sub.add_parser("report", help="a campaign's table, headline and plot",
                       description="Outcome per fault type for both worlds, and the share of "
                       "in-kernel crashes and hangs that understudy survived with the "
                       "application unaffected.")
    r.add_argument("dir", help="a campaign's --out directory")
    r.add_argument("--json", action="store_true")
    r.add_argument("--markdown", action="store_true", help="the tables as Markdown (for docs/)")
    r.add_argument("--plot", help="write a PNG plot here")
    r.set_defaults(func=cmd_report)

    i = sub.add_parser("inject-process", help="(in a guest, root) write a fault into a driver process",
                       description="Finds the module in driver process PID through its gdb JIT "
                       "registration and writes the fault's patches at their load addresses "
                       "through /proc/PID/mem, after checking the old bytes. Prints JSON.")
    i.add_argument("--pid", type=int, required=True)
    i.add_argument("--fault", required=True, help="a fault's JSON file (from generate --json), or -")
    i.add_argument("--revert", action="store_true", help="write the old bytes back")
    i.add_argument("--trigger", metavar="FILE",
                   help="prepare, make a FIFO at FILE, print a ready line, and write the fault "
                   "once a line is written into FILE")
    i.add_argument("--watch-exit", type=float, metavar="SECONDS",
                   help="then wait up to SECONDS for the process to end and report when")
    i.set_defaults(func=cmd_inject_process)


def add_parser(sub) -> None:
    """`python3 -m lab swifi ...`"""
    p = sub.add_parser("swifi", help="software fault injection: campaign, report, generator",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_commands(p.add_subparsers(dest="swifi", required=True))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m lab.swifi", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_commands(p.add_subparsers(dest="swifi", required=True))
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except (LabError, OSError) as e:
        print(f"lab.swifi: {e}", file=sys.stderr)
        return 3
