"""Shared fixtures: the lab must be set up (`python3 -m lab setup`, run by `make test`)."""
import subprocess

import pytest

from lab import config


@pytest.fixture(scope="session")
def lab_ready():
    k = config.kernel()
    if not k.vmlinuz.exists():
        pytest.fail(f"the lab is not set up ({k.vmlinuz} missing): run `python3 -m lab setup`")
    return k


def qemu_processes() -> set[int]:
    """PIDs of lab QEMU processes (their command lines name an understudy-lab rundir)."""
    res = subprocess.run(["pgrep", "-f", "qemu-system-x86_64.*understudy-lab-"],
                         capture_output=True, text=True)
    return {int(p) for p in res.stdout.split()}


@pytest.fixture
def no_leftover_qemu():
    """Fails the test if it leaves a lab QEMU process behind."""
    before = qemu_processes()
    yield
    leftover = qemu_processes() - before
    assert not leftover, f"QEMU processes outlived the test: {leftover}"
