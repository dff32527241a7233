"""`make demo`'s job (`python3 -m lab demo`) works and shows what the README says it shows."""
import subprocess
import sys

import pytest

from lab import config

pytestmark = pytest.mark.lab


def test_demo_runs_e1000_in_kernel_and_in_a_process_and_survives_a_driver_kill(lab_ready,
                                                                               no_leftover_qemu):
    """The README's main job: the transfer the kill interrupts still ends intact."""
    res = subprocess.run([sys.executable, "-m", "lab", "demo", "--megabytes", "5"],
                         cwd=config.REPO_DIR, capture_output=True, text=True, timeout=900)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    # both ways, in-kernel and understudy, and the transfer across the crash
    assert out.count("hash matches") == 5, out
    assert out.count("50/50 answered") == 2, out
    assert "us0 has the driver's MAC 52:54:00:12:34:56" in out
    assert "daemon alive: True; cause: the driver process" in out and "killed by signal 9" in out
    assert "outcome: recovered" in out
    assert "hash matches, 0 resets, us0 lost carrier 0 times" in out
    assert "in-kernel  understudy" in out, "the closing table compares both sides"
