"""Shared fixtures: the lab must be set up (`python3 -m lab setup`, run by `make test`),
and the driver process's runtime built, for the runtime's tests and the daemon's alike."""
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from lab import config

REPO = Path(__file__).resolve().parents[1]
RUNTIME = REPO / "runtime"
BUILD = RUNTIME / "build"

# Guests keep their run directory under TMPDIR: a directory of this test session
# tells its QEMU processes apart from any other lab running on the machine.
SESSION_TMP = tempfile.mkdtemp(prefix="understudy-tests-")
os.environ["TMPDIR"] = SESSION_TMP
tempfile.tempdir = SESSION_TMP


@pytest.fixture(scope="session")
def lab_ready():
    k = config.kernel()
    if not k.vmlinuz.exists():
        pytest.fail(f"the lab is not set up ({k.vmlinuz} missing): run `python3 -m lab setup`")
    return k


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


def qemu_processes() -> set[int]:
    """PIDs of this session's lab QEMU processes (their command lines name its rundirs)."""
    res = subprocess.run(["pgrep", "-f", f"qemu-system-x86_64.*{SESSION_TMP}/understudy-lab-"],
                         capture_output=True, text=True)
    return {int(p) for p in res.stdout.split()}


@pytest.fixture
def no_leftover_qemu():
    """Fails the test if it leaves a lab QEMU process behind."""
    before = qemu_processes()
    yield
    leftover = qemu_processes() - before
    assert not leftover, f"QEMU processes outlived the test: {leftover}"
