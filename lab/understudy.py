"""understudy in a lab guest, driven from the host: the pieces tests and benchmarks share.

The host builds understudyd, the CLI and the driver process; the guest runs them
unchanged (the host root is its read-only root).  A device moves between its
in-kernel driver and vfio-pci with bind_vfio / bind_kernel, so one guest can
compare the two on the same NIC.
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from . import config
from .errors import LabError
from .guest import Guest

HOST_DIR = config.REPO_DIR / "host"
TARGET = HOST_DIR / "target" / "debug"
RELEASE_TARGET = HOST_DIR / "target" / "release"
RUNTIME_DIR = config.REPO_DIR / "runtime"
DRIVER = RUNTIME_DIR / "build" / "understudy-driver"
SOCKET = "/run/understudy-lab.sock"


def build(release: bool = False) -> dict[str, Path]:
    """Builds the daemon, its CLI and the driver process; returns their paths.

    Tests use the debug build (overflow checks and debug assertions on);
    measurements use `release`, what `make build` installs: the debug
    daemon spends about 2.5 times the CPU per frame
    (docs/notes/bench-net-history.md, "What changed, and why")."""
    subprocess.run(["cargo", "build", "--locked", "--quiet", "--manifest-path",
                    str(HOST_DIR / "Cargo.toml"), *(["--release"] if release else [])], check=True)
    res = subprocess.run(["make", "-s", "-C", str(RUNTIME_DIR)], capture_output=True, text=True)
    if res.returncode:
        raise LabError(f"make -C runtime failed:\n{res.stdout}\n{res.stderr}")
    target = RELEASE_TARGET if release else TARGET
    return {"understudyd": target / "understudyd", "understudy": target / "understudy",
            "driver": DRIVER}


def prepare(g: Guest) -> None:
    """The modules understudyd needs in the guest: VFIO and TAP."""
    g.run("modprobe vfio-pci && modprobe tun", check=True)


def module_path(g: Guest, name: str) -> str:
    """The guest's own (Debian's) file of a module, as modprobe would load it."""
    return g.run(f"readlink -f $(modinfo -n {name})", check=True).out.strip()


def module_chain(g: Guest, name: str) -> list[str]:
    """A module's file and its dependencies' (modinfo depends), dependencies first."""
    chain: list[str] = []
    for dep in filter(None, g.run(["modinfo", "-F", "depends", name], check=True).out.strip().split(",")):
        chain += [m for m in module_chain(g, dep) if m not in chain]
    return chain + [module_path(g, name)]


def bound_driver(g: Guest, bdf: str) -> str | None:
    res = g.run(f"readlink /sys/bus/pci/devices/{bdf}/driver")
    return res.out.strip().rsplit("/", 1)[-1] if res.returncode == 0 else None


def _rebind(g: Guest, bdf: str, override: str) -> None:
    dev = f"/sys/bus/pci/devices/{bdf}"
    script = f"echo '{override}' > {dev}/driver_override"
    if bound_driver(g, bdf):
        script += f" && echo {bdf} > {dev}/driver/unbind"
    g.run(script + f" && echo {bdf} > /sys/bus/pci/drivers_probe", check=True)


def bind_vfio(g: Guest, bdf: str) -> None:
    """Hands the device to vfio-pci (from whatever driver has it)."""
    _rebind(g, bdf, "vfio-pci")
    if bound_driver(g, bdf) != "vfio-pci":
        raise LabError(f"{bdf} did not bind to vfio-pci")


def hand_over(g: Guest, dev_id: str, driver: str) -> tuple[str, str]:
    """A lab device handed to vfio-pci for understudyd (the guest's VFIO and TAP
    modules loaded): its PCI address, and the file of Debian's module for it."""
    bdf = g.pci_address(dev_id)
    prepare(g)
    ko = module_path(g, driver)
    bind_vfio(g, bdf)
    return bdf, ko


def bind_kernel(g: Guest, bdf: str, driver: str) -> None:
    """Gives the device back to its in-kernel driver (clearing the vfio-pci override)."""
    g.run(["modprobe", driver], check=True)
    _rebind(g, bdf, "")
    if bound_driver(g, bdf) != driver:
        raise LabError(f"{bdf} did not bind to {driver}")


def bus_master_on(g: Guest, bdf: str) -> bool:
    config_space = g.read_file(f"/sys/bus/pci/devices/{bdf}/config")
    return bool(int.from_bytes(config_space[4:6], "little") & 0x4)


def interface_exists(g: Guest, name: str) -> bool:
    return g.run(f"test -e /sys/class/net/{name}").returncode == 0


def carrier(g: Guest, ifname: str) -> bool:
    return g.run(f"cat /sys/class/net/{ifname}/carrier").out.strip() == "1"


class Daemon:
    """understudyd running in the guest, with `driver` as its driver-process executable."""

    def __init__(self, g: Guest, bins: dict, driver: Path | str | None = None, *options: str,
                 env: dict[str, str] | None = None, socket: str = SOCKET):
        self.g, self.bins, self.socket = g, bins, socket
        driver = driver or bins["driver"]
        self.proc = g.spawn([str(bins["understudyd"]), "--socket", socket, "--driver", str(driver),
                             *options], env={"RUST_LOG": "info", **(env or {})})
        deadline = time.monotonic() + 30
        while self.cli("status").returncode == 3:
            if self.proc.poll() is not None:
                raise LabError(f"understudyd exited: {self.proc.wait(1).err}")
            if time.monotonic() > deadline:
                raise LabError("understudyd did not start listening")
            time.sleep(0.2)

    def cli(self, *args: str, timeout: float = 60):
        return self.g.run([str(self.bins["understudy"]), "--socket", self.socket, *args],
                          timeout=timeout)

    def run(self, bdf: str, modules: list[str], ifname: str = "us0", cpu: int | None = None) -> None:
        """`understudy run`: the daemon takes the device and starts its driver (on `cpu`, if given)."""
        argv = ["run", "--device", bdf, "--ifname", ifname, *(["--cpu", str(cpu)] if cpu is not None else [])]
        for m in modules:
            argv += ["--module", m]
        res = self.cli(*argv)
        if res.returncode:
            raise LabError(f"understudy run {bdf} failed: {res.err.strip()}")

    def status(self) -> dict:
        res = self.cli("status", "--json")
        if res.returncode:
            raise LabError(f"understudy status failed: {res.err.strip()}")
        return {d["device"]: d for d in json.loads(res.out)["devices"]}

    def wait_state(self, bdf: str, state: str, timeout: float = 60, **fields) -> dict:
        """Waits until the device's status has `state` (and the given field values)."""
        deadline = time.monotonic() + timeout
        while True:
            d = self.status().get(bdf, {})
            if d.get("state") == state and all(d.get(k) == v for k, v in fields.items()):
                return d
            if time.monotonic() > deadline:
                raise LabError(f"{bdf} never reached {state} {fields or ''}: {d}")
            time.sleep(0.3)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> str:
        """SIGTERM: the daemon stops every driver and removes the interfaces; returns its
        output: the drivers' event lines (PANIC ...), which it forwards to stdout, then its log."""
        self.proc.kill(15)
        res = self.proc.wait(30)
        return res.out + res.err


def driver_pids(g: Guest, executable: Path | str) -> list[int]:
    return [int(p) for p in g.run(["pgrep", "-x", Path(executable).name[:15]]).out.split()]
