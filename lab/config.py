"""Where the lab keeps things, and the pinned kernel it boots."""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

LAB_DIR = Path(__file__).resolve().parent
REPO_DIR = LAB_DIR.parent


def cache_dir() -> Path:
    """Downloads and build products live here, never in the repository."""
    base = os.environ.get("UNDERSTUDY_CACHE") or Path.home() / ".cache" / "understudy"
    return Path(base)


@dataclass(frozen=True)
class KernelConfig:
    abi: str
    flavour: str

    @property
    def release(self) -> str:
        """`uname -r` of the guest, e.g. 6.1.0-55-amd64."""
        return f"{self.abi}-{self.flavour}"

    @property
    def package(self) -> str:
        return f"linux-image-{self.release}"

    @property
    def headers_package(self) -> str:
        return f"linux-headers-{self.release}"

    @property
    def headers(self) -> Path:
        """Kbuild tree for out-of-tree modules built against this exact ABI."""
        return Path("/usr/src") / self.headers_package

    @property
    def root(self) -> Path:
        """The extracted package: boot/vmlinuz-*, lib/modules/<release>/."""
        return cache_dir() / "kernel" / self.release

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.release}"

    @property
    def modules(self) -> Path:
        return self.root / "lib" / "modules" / self.release


@dataclass(frozen=True)
class GuestDefaults:
    cpu_model: str  # QEMU -cpu under TCG (KVM always uses "host")
    memory_mib: int
    cpus: int
    boot_timeout_s: float


def _load() -> dict:
    with open(LAB_DIR / "lab.toml", "rb") as f:
        return tomllib.load(f)


def kernel() -> KernelConfig:
    k = _load()["kernel"]
    abi = os.environ.get("UNDERSTUDY_ABI", k["abi"])
    return KernelConfig(abi=abi, flavour=k["flavour"])


def guest_defaults() -> GuestDefaults:
    g = _load()["guest"]
    return GuestDefaults(g["cpu_model"], g["memory_mib"], g["cpus"], float(g["boot_timeout_s"]))
