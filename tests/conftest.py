"""Shared fixtures: the lab must be set up (`python3 -m lab setup`, run by `make test`)."""
import os
import subprocess
import tempfile

import pytest

from lab import config

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
