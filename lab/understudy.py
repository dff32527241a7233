"""understudy in a lab guest, driven from the host: building it, handing it a
device, running its driver behind us0, and killing and recovering that driver.

The host builds understudyd, the CLI and the driver process; the guest runs them
unchanged (the host root is its read-only root).  A device moves between its
in-kernel driver and vfio-pci with bind_vfio / bind_kernel, so one guest can
compare the two on the same NIC.

Traffic through us0 and the gaps a kill or an update leaves in it are
lab/traffic.py; the demo, the benchmarks, the scenarios and the tests build on both.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from . import config, net
from .devices import BY_DRIVER, lookup_nic
from .errors import LabError
from .guest import Guest
from .netns import LabNetwork

HOST_DIR = config.REPO_DIR / "host"
TARGET = HOST_DIR / "target" / "debug"
RELEASE_TARGET = HOST_DIR / "target" / "release"
RUNTIME_DIR = config.REPO_DIR / "runtime"
DRIVER = RUNTIME_DIR / "build" / "understudy-driver"
SOCKET = "/run/understudy-lab.sock"
RECOVERY_TIMEOUT_S = 90


def build(release: bool = False) -> dict[str, Path]:
    """Builds the daemon, its CLI, the checker and the driver process; returns their paths.

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
            "checker": target / "understudy-checker", "driver": DRIVER}


def prepare(g: Guest) -> None:
    """The modules understudyd needs in the guest: VFIO (with an IOMMU) and TAP.
    Without an IOMMU understudyd loads uio_pci_generic itself."""
    g.run("modprobe vfio-pci && modprobe tun" if g.iommu else "modprobe tun", check=True)


@dataclass
class NicLab:
    """A guest with one NIC, ready for understudyd: its PCI address and its driver's module chain."""
    guest: Guest
    network: LabNetwork | None
    bdf: str
    modules: list[str]


@contextlib.contextmanager
def nic_lab(device: str, network: bool = True, iommu: bool = True, queues: int = 1) -> Iterator[NicLab]:
    """A guest with the lab NIC `device` on a LabNetwork (or, without `network`,
    on slirp), VFIO and TAP loaded, as the benchmarks and `lab check` use it;
    without `iommu`, a guest with no IOMMU (Guest.iommu);
    with `queues`, that many queue pairs (a virtio-net NIC, Guest.nic_queues)."""
    with contextlib.ExitStack() as stack:
        lab_network = stack.enter_context(LabNetwork()) if network else None
        guest = stack.enter_context(Guest(devices=[device], netdev=lab_network or "user", iommu=iommu,
                                          nic_queues=queues))
        prepare(guest)
        yield NicLab(guest, lab_network, guest.pci_address("nic0"),
                     module_chain(guest, guest.placed[0].device.driver))


def module_path(g: Guest, name: str) -> str:
    """The guest's own (Debian's) file of a module, as modprobe would load it."""
    return g.run(f"readlink -f $(modinfo -n {name})", check=True).out.strip()


def dependencies_first(name: str, depends: Callable[[str], list[str]], path: Callable[[str], str]) -> list[str]:
    """The files of a module and of all it depends on, dependencies first, as
    `understudy run|update|migrate --module` takes them: `depends` names a
    module's direct dependencies (modinfo's `depends`), `path` its file."""
    chain: list[str] = []
    for dep in depends(name):
        chain += [m for m in dependencies_first(dep, depends, path) if m not in chain]
    return chain + [path(name)]


def module_chain(g: Guest, name: str) -> list[str]:
    """The guest's own (Debian's) files of a module and its dependencies, dependencies first;
    for a driver of a bus of its own (virtio_net), its PCI transport's chain first."""
    def depends(n: str) -> list[str]:
        return list(filter(None, g.run(["modinfo", "-F", "depends", n], check=True).out.strip().split(",")))
    dev = BY_DRIVER.get(name)
    chain = module_chain(g, dev.transport) if dev and dev.transport else []
    return chain + [m for m in dependencies_first(name, depends, lambda n: module_path(g, n)) if m not in chain]


def module_args(modules: list[str]) -> list[str]:
    """`--module M` for each file, in order (dependencies first)."""
    return [a for m in modules for a in ("--module", m)]


def bound_driver(g: Guest, bdf: str) -> str | None:
    res = g.run(f"readlink /sys/bus/pci/devices/{bdf}/driver")
    return res.out.strip().rsplit("/", 1)[-1] if res.returncode == 0 else None


def _rebind(g: Guest, bdf: str, override: str) -> None:
    dev = f"/sys/bus/pci/devices/{bdf}"
    script = f"echo '{override}' > {dev}/driver_override"
    if bound_driver(g, bdf):
        script += f" && echo {bdf} > {dev}/driver/unbind"
    g.run(script + f" && echo {bdf} > /sys/bus/pci/drivers_probe", check=True)


def unbind(g: Guest, bdf: str) -> None:
    """Leaves the device without a driver, for `understudy run --no-iommu`,
    which binds only a device no driver holds."""
    dev = f"/sys/bus/pci/devices/{bdf}"
    g.run(f"echo > {dev}/driver_override" + (f" && echo {bdf} > {dev}/driver/unbind" if bound_driver(g, bdf) else ""),
          check=True)


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
    """Gives the device back to its in-kernel driver (clearing the vfio-pci override);
    a driver of a bus of its own (virtio_net) binds through its PCI transport."""
    dev = BY_DRIVER.get(driver)
    pci_driver = dev.transport if dev and dev.transport else driver
    g.run(["modprobe", "-a", pci_driver, driver], check=True)
    _rebind(g, bdf, "")
    # sysfs spells some drivers' names with '-' where their modules have '_' (virtio-pci).
    if (bound_driver(g, bdf) or "").replace("-", "_") != pci_driver:
        raise LabError(f"{bdf} did not bind to {pci_driver}")


def bus_master_on(g: Guest, bdf: str) -> bool:
    config_space = g.read_file(f"/sys/bus/pci/devices/{bdf}/config")
    return bool(int.from_bytes(config_space[4:6], "little") & 0x4)


def interface_exists(g: Guest, name: str) -> bool:
    return g.run(f"test -e /sys/class/net/{name}").returncode == 0


def carrier(g: Guest, ifname: str) -> bool:
    return g.run(f"cat /sys/class/net/{ifname}/carrier").out.strip() == "1"


class Daemon:
    """understudyd running in the guest, with `driver` as its driver-process executable
    (in the host root, or with `in_initramfs` from a kit in the initramfs: lab/vm_migrate.py)."""

    def __init__(self, g: Guest, bins: dict, driver: Path | str | None = None, *options: str,
                 env: dict[str, str] | None = None, socket: str = SOCKET, in_initramfs: bool | None = None):
        self.g, self.bins, self.socket, self.in_initramfs = g, bins, socket, in_initramfs
        driver = driver or bins["driver"]
        self.proc = g.spawn([str(bins["understudyd"]), "--socket", socket, "--driver", str(driver),
                             *options], env={"RUST_LOG": "info", **(env or {})}, in_initramfs=in_initramfs)
        deadline = time.monotonic() + 30
        while self.cli("status").returncode == 3:
            if self.proc.poll() is not None:
                raise LabError(f"understudyd exited: {self.proc.wait(1).err}")
            if time.monotonic() > deadline:
                raise LabError("understudyd did not start listening")
            time.sleep(0.2)

    def cli(self, *args: str, timeout: float = 60):
        return self.g.run([str(self.bins["understudy"]), "--socket", self.socket, *args],
                          timeout=timeout, in_initramfs=self.in_initramfs)

    def run(self, bdf: str, modules: list[str], ifname: str | None = "us0", cpu: int | None = None,
            check: str | None = None, no_iommu: bool = False, queues: int = 1, poll_us: int | None = None) -> None:
        """`understudy run`: the daemon takes the device and starts its driver (on `cpu`, if
        given, its TX thread polling for up to `poll_us` if given; under the checker with
        gate mode `check`, if given; with `no_iommu` through uio_pci_generic,
        docs/design.md §4; with `queues` queue pairs). A disk has no `ifname`: the kernel names it."""
        res = self.cli("run", "--device", bdf, *(["--ifname", ifname] if ifname else []),
                       *(["--cpu", str(cpu)] if cpu is not None else []),
                       *(["--poll-us", str(poll_us)] if poll_us else []),
                       *(["--check", check] if check else []), *(["--no-iommu"] if no_iommu else []),
                       *(["--queues", str(queues)] if queues > 1 else []), *module_args(modules))
        if res.returncode:
            raise LabError(f"understudy run {bdf} failed: {res.err.strip()}")

    def cli_json(self, *args: str, timeout: float = 300) -> tuple[int, dict]:
        """`understudy ARGS --json`: its exit status and its JSON answer."""
        res = self.cli(*args, "--json", timeout=timeout)
        try:
            return res.returncode, json.loads(res.out)
        except json.JSONDecodeError:
            raise LabError(f"understudy {args[0]} printed no JSON (exit {res.returncode}): {res.err.strip()}") from None

    def status(self) -> dict:
        res = self.cli("status", "--json")
        if res.returncode:
            raise LabError(f"understudy status failed: {res.err.strip()}")
        return {d["device"]: d for d in json.loads(res.out)["devices"]}

    def status_of(self, name: str) -> dict:
        """The status of the interface `name`, or of the device at that PCI address
        (a move changes the device that serves an interface)."""
        for d in self.status().values():
            if name in (d["device"], d["ifname"]):
                return d
        raise LabError(f"understudyd runs no device or interface {name}")

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


def understudy_up(guest: Guest, daemon: Daemon, bdf: str, modules: list[str],
                  network: LabNetwork | None = None, cpu: int | None = None,
                  check: str | None = None, poll_us: int | None = None) -> None:
    """understudy runs the device's driver (on `cpu`, if given, polling for up to
    `poll_us` if given; under the checker with
    gate mode `check`, if given; through uio_pci_generic in a guest without an
    IOMMU; with as many queues as the guest's NIC has) and us0 carries the slirp
    network (or `network`)."""
    if guest.iommu:
        bind_vfio(guest, bdf)
    else:
        unbind(guest, bdf)
    daemon.run(bdf, modules, "us0", cpu, check, no_iommu=not guest.iommu, queues=guest.nic_queues, poll_us=poll_us)
    daemon.wait_state(bdf, "registered", timeout=120)
    guest.run("ip link set us0 up", check=True)
    daemon.wait_state(bdf, "open", timeout=30, carrier=True)
    net.bring_up_iface(guest, "us0", network=network)


def understudy_down(guest: Guest, daemon: Daemon, bdf: str) -> None:
    res = daemon.cli("stop", bdf)
    if res.returncode:
        raise LabError(f"understudy stop {bdf} failed: {res.err.strip()}")


def start_understudy(guest: Guest, driver: str, max_restarts: int,
                     *options: str, check: str | None = None) -> tuple[Daemon, str]:
    """understudyd with restarts on, running `driver` (lab device nic0) behind us0,
    which carries the guest's slirp network (under the checker with gate mode
    `check`, if given: then in the release build, as a debug checker would
    hold a stringent driver to a trickle); returns the daemon and the device."""
    dev = lookup_nic(driver)
    bdf = guest.pci_address("nic0")
    prepare(guest)
    modules = module_chain(guest, dev.driver)
    bins = build(release=check is not None)
    daemon = Daemon(guest, bins, None, "--max-restarts", str(max_restarts),
                    "--restart-window-s", "86400", "--checker", str(bins["checker"]), *options)
    understudy_up(guest, daemon, bdf, modules, check=check)
    return daemon, bdf


def kill_driver(guest: Guest, pid: int) -> float:
    """SIGKILLs the driver process; returns the guest's wall clock just after.

    bash's builtin kill and $EPOCHREALTIME, not `date`: forking a process in a
    busy TCG guest took long enough that a fast restart (pcnet32's 56 ms) had
    ended before the clock was read, and its gaps did not count as after the kill."""
    res = guest.run(["bash", "-c", f"kill -9 {int(pid)} && echo $EPOCHREALTIME"], check=True)
    return float(res.out.strip())


def wait_recovery(daemon: Daemon, bdf: str, count: int,
                  timeout: float = RECOVERY_TIMEOUT_S) -> dict:
    """Waits until the device's `count`-th recovery has an outcome and, if it
    recovered, its first frame through the fresh driver has been timed (traffic
    must be flowing); returns the device's status."""
    deadline = time.monotonic() + timeout
    while True:
        st = daemon.status()[bdf]
        last = st["recoveries"][-1] if st["recovery_count"] >= count and st["recoveries"] else None
        if last and last["outcome"] != "under way" and \
                (last["outcome"] != "recovered" or last["first_packet_ms"] is not None):
            return st
        if st["state"] == "dead":
            raise LabError(f"{bdf}: the driver was not restarted: {st['death']}")
        if time.monotonic() > deadline:
            idle = bool(last) and last["outcome"] == "recovered"
            raise LabError(f"{bdf}: recovery {count} not over within {timeout:.0f} s: "
                           f"state {st['state']}, {st['recoveries'][-1:]}"
                           + ("; the fresh driver serves but no frame has passed through it: "
                              "was anything still being sent?" if idle else ""))
        time.sleep(0.05)


def kill_and_recover(guest: Guest, daemon: Daemon, bdf: str, count: int,
                     network: LabNetwork | None = None) -> dict:
    """One cycle: SIGKILL the driver, ping the peer (slirp's, or `network`'s)
    until the fresh one answers (its first frame is timed), and check the
    daemon's verdict; returns the record."""
    pid = daemon.status()[bdf]["pid"]
    # ping gives up early once the neighbour entry fails (3 s of ARP without an
    # answer, as when the fresh driver's link is slow to come up): ping again.
    res = guest.run(f"kill -9 {int(pid)} && end=$(($(date +%s) + 60)) && "
                    f"while [ $(date +%s) -lt $end ]; do "
                    f"ping -n -q -c 1 -i 0.1 -w 10 {net.peer_address(network)} >/dev/null && exit 0; done; exit 1",
                    timeout=90)
    if res.returncode:
        raise LabError(f"no ping answered through us0 within 60 s of killing driver {pid}: "
                       f"{daemon.status()[bdf]}")
    r = wait_recovery(daemon, bdf, count)["recoveries"][-1]
    if r["outcome"] != "recovered":
        raise LabError(f"{bdf}: recovery {count} failed: {r['outcome']}")
    return r


def carrier_drops(guest: Guest, ifname: str = "us0") -> int:
    return int(guest.run(f"cat /sys/class/net/{ifname}/carrier_down_count", check=True).out)
