# SPDX-License-Identifier: GPL-2.0
"""What every result file records of where it came from: the command that
printed it, the commit it ran at, and the machine (docs/results/README.md)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys

from . import config


def commit() -> str:
    """HEAD, with "-dirty" if the work tree has changes a result could depend on
    (anything but docs/, where results are written while others are measured)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(config.REPO_DIR), *args],
                              capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "HEAD") or "unknown (not a git checkout)"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs") else "")


def machine() -> dict:
    """The host's cores, CPU model and memory, and the CPU TCG emulates for the guest."""
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    memory_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {"cores": os.cpu_count(), "cpu_model": model, "memory_gib": memory_gib,
            "guest_cpu_model": config.guest_defaults().cpu_model}


def record() -> dict:
    """`command`, `commit` and `machine`, for a result's JSON."""
    return {"command": "python3 -m lab " + shlex.join(sys.argv[1:]), "commit": commit(), "machine": machine()}
