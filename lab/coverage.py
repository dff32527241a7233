"""lab coverage: which of Debian's ethernet drivers the runtime can load today.

For every module under the pinned ABI's kernel/drivers/net/ethernet, its chain
from Debian's modules.dep (dependencies first) is loaded with the runtime's real
loader as a driver process loads it -- the runtime's kernel half of that ABI
first, every import resolved from the half's exports or an earlier module's,
every CRC checked against the ABI's Module.symvers -- except that an import
nothing provides gets a dummy address instead of failing the load
(runtime/build/ko-load --resolve-all-dummy), so that each module of the chain
says everything it lacks, not only the first module that lacks something. The
kernel half's `ddekit_` imports are the process's libc half, there in a driver
process. A module none of whose chain lacks anything has every import the
runtime provides; whether it then runs
depends on what those functions do for it (MSI-X, several queues, ... in
docs/design.md §13), which only the lab's devices show. Prints the counts by
vendor directory and the imports most often missing: what to add next.
"""
from __future__ import annotations

import argparse
import collections
import json
import shlex
import subprocess
import sys
from pathlib import Path

from . import config, provenance
from .errors import LabError

ETHERNET = "kernel/drivers/net/ethernet/"
RUNTIME = config.REPO_DIR / "runtime"
KO_LOAD = RUNTIME / "build" / "ko-load"
TOP_MISSING = 25


def log(msg: str) -> None:
    print(f"[coverage] {msg}", file=sys.stderr, flush=True)


def chains(modules_dir: Path) -> dict[str, list[Path]]:
    """Each ethernet module's name -> its files, dependencies first, from modules.dep
    (which lists a module's dependencies, transitive ones included, in the reverse
    of the order modprobe loads them)."""
    out = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        target, _, deps = line.partition(":")
        if target.startswith(ETHERNET):
            files = [*reversed(deps.split()), target]
            out[target[len(ETHERNET):].removesuffix(".ko")] = [modules_dir / f for f in files]
    return out


def lacks(half: Path, symvers: Path, files: list[Path]) -> dict[str, list[str]]:
    """Each of `files` (loaded after the half, in order) -> the imports nothing
    provides it. A module that does not load even so (a CRC from another ABI, a
    relocation out of range) is an error."""
    res = subprocess.run([str(KO_LOAD), "--json", "--resolve-all-dummy", "--symvers", str(symvers),
                          str(half), *map(str, files)], capture_output=True, text=True, timeout=120)
    report = json.loads(res.stdout) if res.stdout.strip() else {}
    if res.returncode or not report.get("ok"):
        raise LabError(f"ko-load cannot place {files[-1].name}'s chain (exit {res.returncode}): "
                       f"{(report.get('error') or {}).get('message') or res.stderr.strip()[-500:]}")
    # Weak imports may stay unresolved, in the kernel as here.
    return {m["name"]: sorted(i["name"] for i in m["imports"] if i["dummy"] and not i["weak"])
            for m in report["modules"][1:]}


def coverage(abi: str) -> dict:
    kernel = next((k for k in config.update_kernels() if k.abi == abi), None)
    if kernel is None:
        raise LabError(f"ABI {abi} is not one the lab has headers for",
                       hint="see [live_update] abis in lab/lab.toml")
    half_dir = RUNTIME / "build" / "abi" / abi
    half, symvers = half_dir / "understudy-kernel.ko", half_dir / "Module.symvers"
    if not (kernel.modules / "modules.dep").exists():
        raise LabError(f"{kernel.modules} is missing", hint="run `python3 -m lab setup`")
    log("building the runtime (make -C runtime)")
    subprocess.run(["make", "-s", "-C", str(RUNTIME)], check=True, stdout=subprocess.DEVNULL)
    if not half.exists():
        raise LabError(f"{half} was not built", hint=f"is ABI {abi} among the runtime's halves (runtime/Makefile)?")
    modules = {}
    found = chains(kernel.modules)
    for i, (name, files) in enumerate(sorted(found.items())):
        if i % 50 == 0:
            log(f"{i}/{len(found)} modules")
        lacking = lacks(half, symvers, files)
        missing = sorted({s for symbols in lacking.values() for s in symbols})
        modules[name] = {"loads": not missing, "chain": [f.name for f in files], "missing": missing,
                         "missing_by_module": {m: s for m, s in lacking.items() if s}}
    return summarise(abi, modules)


def summarise(abi: str, modules: dict[str, dict]) -> dict:
    """Counts overall and by vendor directory, and the imports most modules lack."""
    by_vendor: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    needed: collections.Counter = collections.Counter()
    for name, m in modules.items():
        vendor = name.split("/")[0] if "/" in name else "(top level)"
        by_vendor[vendor]["modules"] += 1
        by_vendor[vendor]["load"] += m["loads"]
        needed.update(m["missing"])
    return {"abi": abi, "modules": len(modules), "load": sum(m["loads"] for m in modules.values()),
            "by_vendor": {v: dict(c) for v, c in sorted(by_vendor.items())},
            "most_missing": [{"symbol": s, "modules": n} for s, n in needed.most_common(TOP_MISSING)],
            "per_module": modules}


def markdown(report: dict) -> str:
    lines = [f"Debian's `drivers/net/ethernet` modules of ABI {report['abi']} whose modules.dep chain "
             f"loads with every import provided by the runtime: **{report['load']} of {report['modules']}**.",
             "", "| vendor directory | modules | load | those that load |", "|---|---|---|---|"]
    for vendor, c in report["by_vendor"].items():
        loading = sorted(n.split("/")[-1] for n, m in report["per_module"].items()
                         if m["loads"] and (n.split("/")[0] if "/" in n else "(top level)") == vendor)
        lines.append(f"| {vendor} | {c['modules']} | {c.get('load', 0)} | {', '.join(loading) or '–'} |")
    lines += ["", f"The {len(report['most_missing'])} imports the most modules lack (a module counts once per "
              "import, what its dependencies lack included):", "", "| import | modules lacking it |", "|---|---|"]
    lines += [f"| `{m['symbol']}` | {m['modules']} |" for m in report["most_missing"]]
    lines += ["", f"Generated by `{report['command']}` at {report['commit'][:12]} on "
              f"{report['machine']['cpu_model']}."]
    return "\n".join(lines)


def cmd_coverage(args) -> int:
    report = {**coverage(args.abi or config.kernel().abi), **provenance.record()}
    if args.json:
        print(json.dumps(report, indent=1))
    elif args.markdown:
        print(markdown(report))
    else:
        print(f"{'vendor directory':<22} {'modules':>7} {'load':>5}")
        for vendor, c in report["by_vendor"].items():
            print(f"{vendor:<22} {c['modules']:>7} {c.get('load', 0):>5}")
        print(f"{'all':<22} {report['modules']:>7} {report['load']:>5}")
        print("most often missing: " + ", ".join(f"{m['symbol']} ({m['modules']})" for m in report["most_missing"]))
        print(f"(ABI {report['abi']}; python3 -m lab {shlex.join(sys.argv[1:])})")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("coverage", help="which of Debian's ethernet drivers the runtime can load",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--abi", help=f"a Debian ABI the runtime has a half for (default: the pinned {config.kernel().abi})")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object, every module's result included")
    out.add_argument("--markdown", action="store_true", help="print the tables docs/coverage.md keeps")
    p.set_defaults(func=cmd_coverage)
