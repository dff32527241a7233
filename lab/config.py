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
        """The NIC modules and what they depend on (mii.ko)."""
        return self.modules / "kernel" / "drivers" / "net"

    @property
    def driver_trees(self) -> list[Path]:
        """What an update ABI caches of its package (DRIVER_TREES), with its modules.dep."""
        return [self.modules / "kernel" / t for t in DRIVER_TREES]


# The trees of kernel/ an update ABI caches (lab/install.py, ensure_driver_modules):
# the lab's drivers and every module their modules.dep chains reach, e.g.
# virtio_blk -> virtio, virtio_ring; nvme -> nvme-core, t10-pi (block/),
# crc64-rocksoft, crc-t10dif (lib/), crct10dif_common (crypto/).
DRIVER_TREES = ("drivers/net", "drivers/virtio", "drivers/block", "drivers/nvme/host",
                "block", "lib", "crypto")


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
    found = sorted(m for tree in k.driver_trees if tree.is_dir()
                   for m in tree.rglob(f"{name}.ko"))
    if len(found) != 1:
        raise LabError(f"{len(found)} modules named {name}.ko in {k.modules / 'kernel'}",
                       hint="name a driver module, e.g. e1000, pcnet32, 8139cp, virtio_blk, nvme")
    return found[0]


def cached_chain(abi: str, name: str) -> list[Path]:
    """The cached module `name` of ABI `abi` and every module it needs, dependencies
    first, from that ABI's modules.dep (as modprobe would load them)."""
    from .errors import LabError
    module = cached_module(abi, name)
    k = update_root(module)
    dep = k / "modules.dep"
    if not dep.exists():
        raise LabError(f"no modules.dep in {k}", hint="run `python3 -m lab setup`")
    deps = {}
    for line in dep.read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
    rel = str(module.relative_to(k))
    if rel not in deps:
        raise LabError(f"{rel} is not in {dep}", hint="run `python3 -m lab setup` again")
    # modules.dep lists every dependency, nearest first: load them farthest first.
    return [k / p for p in reversed(deps[rel])] + [module]


def update_root(module: Path) -> Path:
    """lib/modules/<release>/ of a cached module's path."""
    for parent in module.parents:
        if parent.parent.name == "modules" and parent.parent.parent.name == "lib":
            return parent
    raise ValueError(f"{module} is not under lib/modules/<release>/")


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
