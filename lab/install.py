"""`python3 -m lab setup`: everything the lab needs, installed idempotently."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import config, initramfs
from .errors import LabError

APT_PACKAGES = [
    "qemu-system-x86", "busybox-static", "cpio", "iperf3", "kmod", "iproute2",
    "iputils-ping", "ethtool", "pciutils", "gcc", "libc6-dev", "make", "gdb",
]
PYTHON_MODULES = {"qemu.qmp": "qemu.qmp", "pytest": "pytest",
                  "pytest_timeout": "pytest-timeout", "matplotlib": "matplotlib",
                  "elftools": "pyelftools", "capstone": "capstone"}


def log(msg: str) -> None:
    print(f"[lab setup] {msg}", file=sys.stderr, flush=True)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


def _apt_missing(packages: list[str]) -> list[str]:
    missing = []
    for p in packages:
        res = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p],
                             capture_output=True, text=True)
        if "install ok installed" not in res.stdout:
            missing.append(p)
    return missing


_apt_updated = False


def _apt_update() -> None:
    global _apt_updated
    if not _apt_updated:
        log("apt-get update")
        _run(["apt-get", "update", "-q"], stdout=subprocess.DEVNULL)
        _apt_updated = True


def ensure_apt() -> None:
    missing = _apt_missing(APT_PACKAGES)
    if not missing:
        return
    if os.geteuid() != 0:
        raise LabError(f"missing Debian packages: {' '.join(missing)}",
                       hint="run `python3 -m lab setup` as root (it uses apt-get)")
    _apt_update()
    log(f"apt-get install {' '.join(missing)}")
    _run(["apt-get", "install", "-y", "-q", *missing], stdout=subprocess.DEVNULL,
         env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def ensure_python() -> None:
    missing = [pkg for mod, pkg in PYTHON_MODULES.items()
               if importlib.util.find_spec(mod.split(".")[0]) is None
               or (mod == "qemu.qmp" and importlib.util.find_spec(mod) is None)]
    if not missing:
        return
    log(f"pip install -r lab/requirements.txt (missing: {', '.join(missing)})")
    _run([sys.executable, "-m", "pip", "install", "-q", "--root-user-action=ignore",
          "-r", str(config.LAB_DIR / "requirements.txt")])


def _apt_field(package: str, field: str) -> str | None:
    res = subprocess.run(["apt-cache", "show", "--no-all-versions", package],
                         capture_output=True, text=True)
    m = re.search(rf"^{field}: (\S+)$", res.stdout, re.M)
    return m.group(1) if m else None


def available_abis(flavour: str = "amd64") -> list[str]:
    res = subprocess.run(["apt-cache", "search", "--names-only",
                          rf"^linux-image-6\.1\.0-[0-9]+-{flavour}$"],
                         capture_output=True, text=True)
    abis = re.findall(rf"linux-image-(6\.1\.0-\d+)-{flavour}", res.stdout)
    return sorted(set(abis), key=lambda a: int(a.rsplit("-", 1)[1]))


def download_package(package: str, dest: Path) -> Path:
    """Fetches one .deb by exact name (never a glob) and checks its sha256."""
    sha = _apt_field(package, "SHA256")
    if sha is None:
        _apt_update()
        sha = _apt_field(package, "SHA256")
    if sha is None:
        raise LabError(f"Debian package {package} is not in the archive",
                       hint="pick an ABI the archive serves (`python3 -m lab setup --list-abis`) "
                            "in lab/lab.toml ([kernel] abi, [live_update])")
    dest.mkdir(parents=True, exist_ok=True)
    for deb in dest.glob(f"{package}_*.deb"):
        if hashlib.sha256(deb.read_bytes()).hexdigest() == sha:
            return deb
    log(f"apt-get download {package}")
    _run(["apt-get", "download", "-q", package], cwd=dest,
         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    debs = sorted(dest.glob(f"{package}_*.deb"), key=lambda p: p.stat().st_mtime)
    if not debs or hashlib.sha256(debs[-1].read_bytes()).hexdigest() != sha:
        raise LabError(f"downloaded {package} does not match the archive's sha256 {sha}")
    return debs[-1]


def ensure_kernel(kernel: config.KernelConfig) -> None:
    if kernel.vmlinuz.exists() and (kernel.modules / "modules.dep").exists():
        return
    deb = download_package(kernel.package, config.cache_dir() / "debs")
    log(f"extracting {deb.name}")
    kernel.root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=kernel.root.parent) as tmp:
        _run(["dpkg-deb", "-x", str(deb), tmp])
        _run(["depmod", "-b", tmp, kernel.release])
        if kernel.root.exists():
            shutil.rmtree(kernel.root)
        os.rename(tmp, kernel.root)
        os.mkdir(tmp)  # TemporaryDirectory wants something to remove


def ensure_net_drivers(kernel: config.KernelConfig) -> None:
    """The NIC modules of a live-update ABI: drivers/net of its linux-image package.

    Only that subtree (77 of the package's 400 MB): live update loads these
    modules, it never boots this kernel. Extracted next to, and in the same
    layout as, the pinned kernel (config.KernelConfig.root), so the guest sees
    them over 9p at the same paths.
    """
    if kernel.net_drivers.is_dir():
        return
    deb = download_package(kernel.package, config.cache_dir() / "debs")
    log(f"extracting drivers/net of {deb.name}")
    kernel.root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=kernel.root.parent) as tmp:
        subtree = f"./lib/modules/{kernel.release}/kernel/drivers/net"
        with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)],
                              stdout=subprocess.PIPE) as package:
            untar = subprocess.run(["tar", "-x", "-C", tmp, subtree], stdin=package.stdout)
            package.stdout.close()
        if package.returncode or untar.returncode:
            raise LabError(f"cannot extract {subtree} from {deb}",
                           hint="delete the .deb and run `python3 -m lab setup` again")
        if kernel.root.exists():
            shutil.rmtree(kernel.root)
        os.rename(tmp, kernel.root)
        os.mkdir(tmp)  # TemporaryDirectory wants something to remove


def ensure_headers(kernels: list[config.KernelConfig]) -> None:
    """Kbuild and the headers of each ABI: a kernel half's struct layouts come from here."""
    missing = [k.headers_package for k in kernels if not (k.headers / "Module.symvers").exists()]
    if not missing:
        return
    _apt_update()
    for package in missing:
        if _apt_field(package, "Version") is None:
            raise LabError(f"Debian package {package} is not in the archive",
                           hint="pick another ABI (`python3 -m lab setup --list-abis`) in "
                                "lab/lab.toml, or list it under [live_update] modules_only")
    log(f"apt-get install {' '.join(missing)}")
    _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
         stdout=subprocess.DEVNULL, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def setup() -> None:
    ensure_apt()
    ensure_python()
    kernel = config.kernel()
    ensure_kernel(kernel)
    updates = config.update_kernels()
    for k in [*updates, *config.modules_only_kernels()]:
        if k != kernel:
            ensure_net_drivers(k)
    ensure_headers(updates)
    initramfs.build(kernel)
    log(f"ready: guest kernel {kernel.release} in {kernel.root}")
