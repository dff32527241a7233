"""The guest's initramfs: busybox, the agent, the 9p modules and init.sh."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from . import config
from .errors import LabError

# Load order measured on these machines (docs/design.md §12): what the 9p host root needs.
NINEP_MODULES = [
    "virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev",
    "virtio_pci", "netfs", "fscache", "9pnet", "9pnet_virtio", "9p", "overlay",
]
BUSYBOX = Path("/bin/busybox")
# The guest side of the lab (docs/lab.md, "Init and agent"): the initramfs's
# init and the agent it execs; lab/agent.py is the host side.
AGENT_DIR = config.LAB_DIR / "guest_agent"
INIT = AGENT_DIR / "init.sh"


def _private_tmp(out: Path) -> Path:
    """A sibling of `out` to build into and rename over it: one per process and
    thread, because parallel workers (swifi campaign --jobs) build the same
    file at the same time on a fresh cache."""
    return out.with_name(f".{out.name}.{os.getpid()}-{threading.get_ident()}.tmp")


def agent_binary() -> Path:
    return config.cache_dir() / "labagent"


def build_agent() -> Path:
    """Compiles the guest agent statically (it runs before any host library is mounted)."""
    src = AGENT_DIR / "agent.c"
    out = agent_binary()
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _private_tmp(out)
    res = subprocess.run(["gcc", "-static", "-O2", "-Wall", "-o", str(tmp), str(src)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise LabError(f"building the guest agent failed:\n{res.stderr}",
                       hint="is gcc with static libc (libc6-dev) installed? run `python3 -m lab setup`")
    tmp.replace(out)
    return out


def _module_paths(kernel: config.KernelConfig) -> list[Path]:
    dep = kernel.modules / "modules.dep"
    by_name = {}
    for line in dep.read_text().splitlines():
        rel = line.split(":", 1)[0]
        by_name[Path(rel).name.removesuffix(".ko").replace("-", "_")] = kernel.modules / rel
    missing = [m for m in NINEP_MODULES if m not in by_name]
    if missing:
        raise LabError(f"guest kernel {kernel.release} lacks modules {missing}")
    return [by_name[m] for m in NINEP_MODULES]


def build(kernel: config.KernelConfig) -> Path:
    """Returns the initramfs for this kernel, rebuilding it only when an input changed."""
    agent = build_agent()
    modules = _module_paths(kernel)
    inputs = [INIT, agent, BUSYBOX, *modules]
    digest = hashlib.sha256()
    for p in inputs:
        digest.update(p.name.encode())
        digest.update(p.read_bytes())
    out = config.cache_dir() / f"initramfs-{kernel.release}-{digest.hexdigest()[:16]}.cpio"
    if out.exists():
        return out
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "bin").mkdir()
        (root / "modules").mkdir()
        shutil.copy2(BUSYBOX, root / "bin" / "busybox")
        shutil.copy2(agent, root / "bin" / "labagent")
        shutil.copy2(INIT, root / "init")
        (root / "init").chmod(0o755)
        for m in modules:
            shutil.copy2(m, root / "modules" / m.name)
        (root / "modules" / "order").write_text(
            "\n".join(m.name.removesuffix(".ko") for m in modules) + "\n")
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        tmp_out = _private_tmp(out)
        with open(tmp_out, "wb") as f:
            subprocess.run(["cpio", "--quiet", "-o", "-H", "newc"], cwd=root, check=True,
                           input="\n".join(files).encode(), stdout=f)
        tmp_out.replace(out)
    for old in out.parent.glob(f"initramfs-{kernel.release}-*.cpio"):
        if old != out:
            old.unlink(missing_ok=True)
    return out
