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

    @property
    def net_drivers(self) -> Path:
        """The NIC modules and what they depend on (mii.ko): all an update ABI caches."""
        return self.modules / "kernel" / "drivers" / "net"


@dataclass(frozen=True)
class GuestDefaults:
    cpu_model: str  # QEMU -cpu under TCG (KVM always uses "host")
    memory_mib: int
    cpus: int
    boot_timeout_s: float
    boot_attempts: int


def _load() -> dict:
    with open(LAB_DIR / "lab.toml", "rb") as f:
        return tomllib.load(f)


def kernel() -> KernelConfig:
    k = _load()["kernel"]
    abi = os.environ.get("UNDERSTUDY_ABI", k["abi"])
    return KernelConfig(abi=abi, flavour=k["flavour"])


def update_kernels() -> list[KernelConfig]:
    """The live-update ABIs with headers ([live_update] abis), the pinned one included."""
    k = _load()
    abis = dict.fromkeys([kernel().abi, *k["live_update"]["abis"]])
    return [KernelConfig(abi=a, flavour=k["kernel"]["flavour"]) for a in abis]


def modules_only_kernels() -> list[KernelConfig]:
    """The live-update ABIs Debian ships no headers for ([live_update] modules_only)."""
    k = _load()
    return [KernelConfig(abi=a, flavour=k["kernel"]["flavour"])
            for a in k["live_update"]["modules_only"]]


def cached_module(abi: str, name: str) -> Path:
    """The cached Debian module `name` (e.g. "e1000") of ABI `abi` (e.g. "6.1.0-50")."""
    from .errors import LabError
    kernels = {k.abi: k for k in [*update_kernels(), *modules_only_kernels()]}
    if abi not in kernels:
        raise LabError(f"ABI {abi} is not one the lab caches ({', '.join(kernels)})",
                       hint="add it to [live_update] in lab/lab.toml and run `python3 -m lab setup`")
    k = kernels[abi]
    if not k.net_drivers.is_dir():
        raise LabError(f"the modules of {k.release} are not cached in {k.net_drivers}",
                       hint="run `python3 -m lab setup`")
    found = sorted(k.net_drivers.rglob(f"{name}.ko"))
    if len(found) != 1:
        raise LabError(f"{len(found)} modules named {name}.ko in {k.net_drivers}",
                       hint="name a NIC driver module, e.g. e1000, pcnet32, 8139cp, 8139too, e100")
    return found[0]


@dataclass(frozen=True)
class FixtureModule:
    """A driver module built from Debian's source of the pinned ABI with one
    patch of lab/fixtures/ (`python3 -m lab setup`, lab/install.py)."""
    name: str  # e.g. "e1000-nocsum": the patch is lab/fixtures/<name>.patch
    subdir: str  # the driver's directory in the kernel tree
    module: str  # the module Kbuild builds there, and its name
    config: str  # the Kconfig symbol that builds it

    @property
    def patch(self) -> Path:
        return LAB_DIR / "fixtures" / f"{self.name}.patch"

    @property
    def root(self) -> Path:
        """The extracted source, the record of what it was built from, the module."""
        return cache_dir() / "fixtures" / self.name

    @property
    def ko(self) -> Path:
        return self.root / f"{self.name}.ko"


FIXTURE_MODULES = {
    # e1000 without checksum offload: an update the compatibility check refuses.
    "e1000-nocsum": FixtureModule("e1000-nocsum", "drivers/net/ethernet/intel/e1000", "e1000", "CONFIG_E1000"),
}


def fixture_module(name: str) -> Path:
    """The built fixture module `name` (FIXTURE_MODULES), under the cache the guest reads over 9p."""
    from .errors import LabError
    if name not in FIXTURE_MODULES:
        raise LabError(f"no fixture module {name} (there are {', '.join(FIXTURE_MODULES)})")
    ko = FIXTURE_MODULES[name].ko
    if not ko.exists():
        raise LabError(f"the fixture module {ko} is not built", hint="run `python3 -m lab setup`")
    return ko


def guest_defaults() -> GuestDefaults:
    g = _load()["guest"]
    return GuestDefaults(g["cpu_model"], g["memory_mib"], g["cpus"], float(g["boot_timeout_s"]),
                         int(g["boot_attempts"]))
