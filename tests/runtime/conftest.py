"""Fixtures for the driver-process runtime: the built runtime and the pinned ABI's modules."""
import subprocess
from pathlib import Path

import pytest

from lab import config

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime"
BUILD = RUNTIME / "build"
DRIVER = BUILD / "understudy-driver"
KERNEL_HALF = BUILD / "understudy-kernel.ko"


@pytest.fixture(scope="session")
def runtime_built() -> Path:
    """Builds the runtime (libloader, understudy-driver, the Kbuild kernel half)."""
    res = subprocess.run(["make", "-s", "-C", str(RUNTIME)], capture_output=True, text=True)
    if res.returncode:
        pytest.fail(f"make -C runtime failed:\n{res.stdout}\n{res.stderr}")
    return BUILD


@pytest.fixture(scope="session")
def debian_modules() -> Path:
    """The unpacked linux-image package's module tree (set up by `python3 -m lab setup`)."""
    modules = config.kernel().modules
    if not (modules / "modules.dep").exists():
        pytest.fail(f"{modules} is missing: run `python3 -m lab setup`")
    return modules


def events(stdout: str, kind: str) -> list[dict[str, str]]:
    """The driver's event lines of one kind ("REGISTERED name=eth0 ...") as dicts."""
    found = []
    for line in stdout.splitlines():
        words = line.split()
        if words and words[0] == kind:
            found.append(dict(w.split("=", 1) for w in words[1:] if "=" in w))
    return found
