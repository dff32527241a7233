"""Fixtures for the module loader tests: the built runtime and the pinned ABI's modules."""
import functools
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime"
BUILD = RUNTIME / "build"
KO_LOAD = BUILD / "ko-load"

# A hung or crashed loader must fail the test, never stall it.
TIMEOUT_S = 60


@dataclass(frozen=True)
class Abi:
    release: str
    modules: Path
    headers: Path

    @property
    def symvers(self) -> Path:
        return self.headers / "Module.symvers"

    @property
    def vermagic(self) -> str:
        # What every module of Debian's amd64 flavour carries in .modinfo
        # (include/linux/vermagic.h with SMP, PREEMPT_BUILD, MODULE_UNLOAD,
        # MODVERSIONS), trailing space included.
        return f"{self.release} SMP preempt mod_unload modversions "

    def module(self, relative: str) -> Path:
        return self.modules / "kernel" / relative

    @functools.cache
    def percpu_names(self) -> list[str]:
        """Per-cpu variables the kernel headers declare (DECLARE_PER_CPU*)."""
        common = Path(str(self.headers).replace("-amd64", "-common"))
        names = set()
        macro = re.compile(r"^[ \t]*#[ \t]*define(?:.*\\\n)*.*$", re.MULTILINE)
        declaration = re.compile(r"DECLARE_PER_CPU\w*\(\s*[^;]*?,\s*(\w+)\s*\)")
        for top in (common / "include", common / "arch" / "x86" / "include"):
            for header in top.rglob("*.h"):
                text = macro.sub("", header.read_text(errors="replace"))
                names.update(declaration.findall(text))
        return sorted(names)


@pytest.fixture(scope="session")
def abi() -> Abi:
    out = subprocess.run(
        [sys.executable, "-c",
         "from lab import config; k = config.kernel(); "
         "print(k.release); print(k.modules); print(k.headers)"],
        cwd=REPO, capture_output=True, text=True, check=True).stdout.split("\n")
    found = Abi(release=out[0], modules=Path(out[1]), headers=Path(out[2]))
    if not found.modules.is_dir():
        pytest.skip(f"no extracted modules at {found.modules}: run `python3 -m lab setup`")
    if not found.symvers.is_file():
        pytest.skip(f"no {found.symvers}: run `python3 -m lab setup` (installs the headers)")
    return found


@pytest.fixture(scope="session")
def built():
    """Builds runtime/ once per session; a build failure fails every test."""
    res = subprocess.run(["make", "-C", str(RUNTIME), "-s"], capture_output=True, text=True)
    assert res.returncode == 0, f"make -C runtime failed:\n{res.stdout}{res.stderr}"
    return BUILD


def run_ko_load(*args, timeout=TIMEOUT_S) -> subprocess.CompletedProcess:
    """Runs ko-load; fails the test if it died of a signal or hung."""
    # errors="replace": a corrupt module's names need not be UTF-8.
    res = subprocess.run([str(KO_LOAD), *map(str, args)], capture_output=True,
                         text=True, errors="replace", timeout=timeout)
    assert res.returncode >= 0, \
        f"ko-load was killed by signal {-res.returncode}:\n{res.stderr[-2000:]}"
    return res


def run_ko_load_json(*args, timeout=TIMEOUT_S):
    res = run_ko_load("--json", *args, timeout=timeout)
    return res, json.loads(res.stdout)
