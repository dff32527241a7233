"""A lab guest: Debian's 6.1 kernel under QEMU with an emulated Intel IOMMU.

The guest sees the host's root read-only over 9p (so host-built binaries run
unchanged), the repository at the same path, and the devices it was given,
each behind its own PCIe root port so it can be hot-unplugged and has its own
IOMMU group.  Commands run through the agent (lab/agent.py); QEMU is driven
through QMP (the qemu.qmp package).
"""
from __future__ import annotations

import ctypes
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from . import config, initramfs
from .agent import AgentClient, AgentGone, CommandResult, GuestProcess, OutputSink
from .devices import NIC, SOUND, STORAGE, Device, lookup
from .errors import LabError

SPARE_ROOT_PORTS = 2          # empty hot-plug slots besides one per device
DISK_MIB = 64
PCAP_SNAPLEN = 96             # bytes kept of each frame with Guest(pcap=True)
# 2 MiB hugepages every guest reserves at boot: a 64 MiB arena's 32, and room
# to spare. understudyd puts an arena in them (docs/design.md §4, "The
# arena's pages"); without an IOMMU it must.
ARENA_HUGEPAGES = 40
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Inside the guest the slirp network is 10.0.2.0/24 and its gateway, 10.0.2.2,
# is the host's 127.0.0.1: a server the host runs on loopback is reachable there.
SLIRP_GUEST_IP = "10.0.2.15"
SLIRP_GATEWAY = "10.0.2.2"
# QEMU 7.2 caps a migration at 128 MiB/s; a unix socket on this host carries
# 150-230 MB/s, and the sooner the copy ends, the less the running guest dirties
# again.  300 ms is QEMU's default downtime limit, set explicitly because it
# bounds the switch-over the migration tests measure (20-60 ms in practice).
MIGRATION_PARAMETERS = {"max-bandwidth": 8 << 30, "downtime-limit": 300}


class GuestFailed(LabError):
    """The guest panicked, hung or stopped; the message carries its console tail."""


class BootHung(Exception):
    """One boot ran out of time (Guest.start may try again); the message is the report."""


class TapSource(Protocol):
    """Where a guest's NICs get their TAPs when not on slirp (lab.netns.LabNetwork)."""

    def open_tap(self, queues: int = 1) -> list[int]:
        """An open TAP's file descriptors, one per queue, already attached to its network."""


def _die_with_parent() -> None:
    """QEMU gets SIGKILL if the Python process that started it dies, however it dies."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _guest_path() -> str:
    """The guest's PATH: this interpreter's own directory first, then the usual ones."""
    return f"{Path(sys.executable).resolve().parent}:{GUEST_PATH}"


@dataclass
class PlacedDevice:
    device: Device
    id: str               # QEMU id, e.g. "nic0"
    port: str             # the root port it sits on
    mac: str | None = None


@dataclass
class Guest:
    devices: list[str] = field(default_factory=lambda: ["e1000"])
    memory_mib: int | None = None
    cpus: int | None = None
    kvm: bool = False
    netdev: str | TapSource = "user"  # "user" (slirp) or a TapSource (lab/netns.py)
    incoming: bool = False            # start paused, waiting for a live migration
    extra_append: str = ""
    share_dir: Path | None = None     # host directory mounted read-write at /run/lab
    console: OutputSink | None = None  # called with the guest's console output, if set
    pcap: bool = False                # record each NIC's frames' headers (pcap_path)
    # With pcap, which frames: "all", both ways, or "rx", only those the NIC
    # sent (QEMU's filter queues are named from the backend's side: its "rx"
    # is what it receives from the NIC). Two NICs on one bridge hear each
    # other's broadcasts, and a stopped NIC gets those queued for it when it
    # starts: "rx" tells what each one put on the wire.
    pcap_queue: str = "all"
    nic_props: str = ""               # more QEMU -device properties for each NIC ("autonegotiation=off")
    # Storage devices' backing files by device id ("disk0"): raw images a
    # test fills before boot and reads after the guest stopped. A storage
    # device without one gets an empty DISK_MIB image in the run directory.
    disk_images: dict[str, Path] = field(default_factory=dict)
    disk_props: str = ""              # more QEMU -device properties for each storage device
    # Queue pairs of each virtio-net NIC (mq=on, a vector per queue and two
    # more), each a queue of its multi-queue TAP: needs a TapSource netdev.
    nic_queues: int = 1
    # False: a machine without an IOMMU (no intel-iommu device, no IOMMU
    # groups, so VFIO refuses), where `understudy run --no-iommu` needs the
    # ARENA_HUGEPAGES every guest reserves (docs/design.md §4).
    iommu: bool = True

    def __post_init__(self) -> None:
        nics = [dev for dev in map(lookup, self.devices) if dev.kind == NIC]
        if self.nic_queues > 1 and (self.netdev == "user" or any(d.qemu_model != "virtio-net-pci" for d in nics)):
            raise LabError(f"nic_queues={self.nic_queues}: several queues are a virtio-net NIC's on a TAP "
                           "(slirp has one queue, the other NIC models one queue pair)")
        d = config.guest_defaults()
        self.memory_mib = self.memory_mib or d.memory_mib
        self.cpus = self.cpus or d.cpus
        self.kernel = config.kernel()
        self.rundir = Path(tempfile.mkdtemp(prefix="understudy-lab-"))
        self.placed: list[PlacedDevice] = []
        for i, name in enumerate(self.devices):
            dev = lookup(name)
            mac = f"52:54:00:12:34:{0x56 + i:02x}" if dev.kind == NIC else None
            prefix = {NIC: "nic", STORAGE: "disk", SOUND: "snd"}[dev.kind]
            self.placed.append(PlacedDevice(dev, f"{prefix}{i}", f"rp{i}", mac))
        # The root ports keep their order (hence PCI addresses) and chassis numbers
        # for the guest's whole life: a migration destination must declare the
        # very same ones, whatever was unplugged or plugged since (incoming_twin).
        self.ports = [f"rp{i}" for i in range(len(self.placed) + SPARE_ROOT_PORTS)]
        self.host_root_attached = True   # see detach_host_root()
        self._tap_fds: dict[str, list[int]] = {}  # NIC id -> its TAP's fds, from start() until QEMU has them
        self.qemu: subprocess.Popen | None = None
        self.qmp = None   # qemu.qmp's QEMUMonitorProtocol once started
        self.agent = AgentClient(str(self.rundir / "agent.sock"))
        self._console_log = self.rundir / "console.log"

    @property
    def free_ports(self) -> list[str]:
        used = {pd.port for pd in self.placed}
        return [port for port in self.ports if port not in used]

    # -- QEMU command line ---------------------------------------------------

    def _netdev_args(self, pd: PlacedDevice) -> list[str]:
        if self.netdev == "user":
            return ["-netdev", f"user,id=net-{pd.id}"]
        fds = self._tap_fds[pd.id]
        if len(fds) == 1:
            return ["-netdev", f"tap,id=net-{pd.id},fd={fds[0]}"]
        return ["-netdev", f"tap,id=net-{pd.id},fds={':'.join(map(str, fds))}"]

    def pcap_path(self, dev_id: str) -> Path:
        """With `pcap`, the NIC's frames as its backend saw them, both ways (or
        those it sent, pcap_queue): the wire side of the NIC, timestamped by
        QEMU (host wall clock)."""
        return self.rundir / f"{dev_id}.pcap"

    def device_args(self, pd: PlacedDevice) -> list[str]:
        """-device (and backend) arguments for one catalogue device on its root port."""
        dev, bus = pd.device, pd.port
        if dev.kind == NIC:
            # Headers are enough to time frames; whole frames would cost disk and CPU.
            dump = ["-object", f"filter-dump,id=dump-{pd.id},netdev=net-{pd.id},maxlen={PCAP_SNAPLEN},"
                    f"file={self.pcap_path(pd.id)},queue={self.pcap_queue}"] if self.pcap else []
            queues = f"mq=on,vectors={2 * self.nic_queues + 2}" if self.nic_queues > 1 else ""
            return [*self._netdev_args(pd), *dump, "-device",
                    f"{dev.qemu_model},id={pd.id},netdev=net-{pd.id},mac={pd.mac},bus={bus}"
                    + "".join(f",{p}" for p in (dev.props, queues, self.nic_props) if p)]
        if dev.kind == SOUND:
            return ["-audiodev", f"none,id=audio-{pd.id}",
                    "-device", f"{dev.qemu_model},id={pd.id},audiodev=audio-{pd.id},bus={bus}"]
        image = self.disk_image(pd.id)
        if pd.id not in self.disk_images:
            with open(image, "wb") as f:
                f.truncate(DISK_MIB << 20)
        # QEMU's default cache (writeback): a completed write is in the file as the
        # host reads it (its page cache), and the device has a volatile cache to flush.
        drive = ["-drive", f"if=none,id=drv-{pd.id},file={image},format=raw"]
        if dev.qemu_model == "lsi53c895a":
            return [*drive, "-device", f"lsi53c895a,id={pd.id},bus={bus}",
                    "-device", f"scsi-hd,drive=drv-{pd.id},bus={pd.id}.0"]
        serial = f",serial={self.disk_serial(pd.id)}" if dev.qemu_model in ("nvme", "virtio-blk-pci") else ""
        return [*drive, "-device", f"{dev.qemu_model},id={pd.id},drive=drv-{pd.id},bus={bus}{serial}"
                + "".join(f",{p}" for p in (dev.props, self.disk_props) if p)]

    def disk_image(self, dev_id: str) -> Path:
        """A storage device's backing file (disk_images, or the run directory's)."""
        return Path(self.disk_images.get(dev_id, self.rundir / f"{dev_id}.img"))

    @staticmethod
    def disk_serial(dev_id: str) -> str:
        """The serial QEMU gives a storage device ("labdisk0")."""
        return f"lab{dev_id}"

    def qemu_argv(self) -> list[str]:
        k = self.kernel
        dma = [*(["intel_iommu=on"] if self.iommu else []), f"hugepages={ARENA_HUGEPAGES}"]
        append = " ".join([
            "console=ttyS0", "panic=-1", *dma, "loglevel=4",
            "tsc=reliable", "no_timer_check",
            f"LAB_KREL={k.release}", f"LAB_KMODULES={k.modules}",
            f"LAB_SHARE={1 if self.share_dir else ''}", self.extra_append,
        ]).strip()
        accel = "kvm" if self.kvm else "tcg,thread=multi"
        argv = [
            "qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none",
            "-machine", "q35", "-accel", accel, "-cpu", "host" if self.kvm else config.guest_defaults().cpu_model,
            "-m", str(self.memory_mib), "-smp", str(self.cpus), "-no-reboot",
            *(["-device", "intel-iommu"] if self.iommu else []),
            "-kernel", str(k.vmlinuz), "-initrd", str(initramfs.build(k)), "-append", append,
            "-chardev", f"file,id=console,path={self._console_log}", "-serial", "chardev:console",
            "-chardev", f"socket,id=agent,path={self.rundir / 'agent.sock'},server=on,wait=off",
            "-serial", "chardev:agent",
            "-qmp", f"unix:{self.rundir / 'qmp.sock'},server=on,wait=off",
            "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
        ]
        if self.share_dir:
            argv += ["-fsdev", f"local,id=labshare,path={self.share_dir},security_model=none,multidevs=remap",
                     "-device", "virtio-9p-pci,fsdev=labshare,mount_tag=labshare"]
        for i, port in enumerate(self.ports):
            argv += ["-device", f"pcie-root-port,id={port},chassis={i + 1},slot={i + 1}"]
        for pd in self.placed:
            argv += self.device_args(pd)
        if self.incoming:
            argv += ["-incoming", f"unix:{self.rundir / 'migrate.sock'}"]
        return argv

    # -- life cycle ----------------------------------------------------------

    def start(self, timeout: float | None = None, attempts: int | None = None) -> "Guest":
        """Boots the guest and waits for its agent (or, with incoming=True, for QMP only).

        A boot that hangs (a normal one takes seconds; TCG has been seen, once
        in some hundred boots, to leave one hanging with nothing on the
        console) is reported with where the vCPUs were, killed, and tried
        again, up to `attempts` boots (the lab's default: lab.toml).  Any other
        failure (QEMU exits, the kernel panics) is not retried."""
        d = config.guest_defaults()
        timeout = timeout or d.boot_timeout_s
        attempts = attempts or d.boot_attempts
        if shutil.which("qemu-system-x86_64") is None:
            raise LabError("qemu-system-x86_64 is not installed", hint="run `python3 -m lab setup`")
        if self.kvm and not os.access("/dev/kvm", os.W_OK):
            raise LabError("--kvm asked for but /dev/kvm is not usable")
        for attempt in range(1, attempts + 1):
            try:
                self._boot(timeout)
                return self
            except BootHung as hung:
                if attempt == attempts:
                    self.stop()
                    raise GuestFailed(str(hung)) from None
                print(f"lab: boot {attempt} of {attempts} hung; booting again. {hung}", file=sys.stderr)
                self._halt()
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _boot(self, timeout: float) -> None:
        if self.netdev != "user":
            self._tap_fds = {pd.id: self.netdev.open_tap(self.nic_queues)
                             for pd in self.placed if pd.device.kind == NIC}
        try:
            argv = self.qemu_argv()
            (self.rundir / "qemu.argv").write_text(shlex.join(argv) + "\n")
            self._qemu_stderr = open(self.rundir / "qemu.stderr", "wb")
            self.qemu = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._qemu_stderr,
                                         stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                                         pass_fds=[fd for fds in self._tap_fds.values() for fd in fds])
        finally:
            # QEMU has its own copies: a TAP must vanish when the QEMU using it exits.
            for fds in self._tap_fds.values():
                for fd in fds:
                    os.close(fd)
            self._tap_fds = {}
        deadline = time.monotonic() + timeout
        self._connect_qmp(deadline)
        if not self.incoming:
            self._connect_agent(deadline, timeout)

    def _connect_qmp(self, deadline: float) -> None:
        # Imported here, not at the top: `python3 -m lab setup` must run on a
        # machine where setup has not yet installed qemu.qmp.
        from qemu.qmp import ConnectError
        from qemu.qmp.legacy import QEMUMonitorProtocol

        sock = str(self.rundir / "qmp.sock")
        while True:
            self._check_alive("while starting")
            if not os.path.exists(sock):
                time.sleep(0.02)
                continue
            try:
                qmp = QEMUMonitorProtocol(sock)
                qmp.connect()
                self.qmp = qmp
                return
            except (ConnectError, OSError):
                if time.monotonic() > deadline:
                    raise GuestFailed(self._report("QEMU did not open its QMP socket")) from None
                time.sleep(0.05)

    def _connect_agent(self, deadline: float, timeout: float) -> None:
        try:
            self.agent.connect(deadline)
            self.agent.wait_ready(deadline, self.alive)
        except TimeoutError:
            raise BootHung(self._report(
                f"the guest did not finish booting within the timeout ({timeout:.0f} s); "
                f"its vCPUs were at {self._vcpu_places()}: killed")) from None
        except AgentGone:
            raise GuestFailed(self._report("the guest stopped during boot")) from None

    def _vcpu_places(self) -> str:
        """Each vCPU's instruction pointer, from QEMU's monitor: where a hung
        guest was (look the addresses up in the guest kernel's System.map)."""
        try:
            regs = self.qmp.cmd("human-monitor-command", **{"command-line": "info registers -a"})
        except Exception as err:  # noqa: BLE001 - evidence for a report, never the failure itself
            return f"(unknown: the monitor said {err})"
        return ", ".join(re.findall(r"RIP=([0-9a-f]+)", regs)) or "(unknown)"

    def alive(self) -> bool:
        return self.qemu is not None and self.qemu.poll() is None

    def _check_alive(self, when: str) -> None:
        if not self.alive():
            raise GuestFailed(self._report(f"QEMU exited {when}"))

    def console_text(self) -> str:
        try:
            return self._console_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _report(self, what: str, lines: int = 25) -> str:
        """A failure message with the evidence: QEMU's stderr and the console's tail."""
        tail = "\n".join(self.console_text().splitlines()[-lines:])
        qemu_err = ""
        try:
            qemu_err = (self.rundir / "qemu.stderr").read_text(errors="replace").strip()
        except FileNotFoundError:
            pass
        panicked = "Kernel panic" in tail
        msg = what + (" (the guest kernel panicked)" if panicked else "")
        if qemu_err:
            msg += f"\n--- QEMU said:\n{qemu_err[-1500:]}"
        return msg + f"\n--- last {lines} lines of the guest console:\n{tail}"

    def stop(self) -> None:
        """Powers the guest off (or kills it) and removes everything it left on the host."""
        self._halt()
        if os.environ.get("UNDERSTUDY_KEEP_RUNDIR"):
            return
        shutil.rmtree(self.rundir, ignore_errors=True)

    def _halt(self) -> None:
        """Powers QEMU off (or kills it) and lets go of its sockets; the run directory stays."""
        if self.alive():
            self.agent.poweroff()
            try:
                self.qemu.wait(5)
            except subprocess.TimeoutExpired:
                self.qemu.kill()
                self.qemu.wait()
        self.agent.close()
        if self.qmp is not None:
            try:
                self.qmp.close()
            except Exception:  # noqa: BLE001 - the monitor may already be gone
                pass
            self.qmp = None
        if getattr(self, "_qemu_stderr", None):
            self._qemu_stderr.close()
            self._qemu_stderr = None

    def __enter__(self) -> "Guest":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- commands and files ---------------------------------------------------

    def spawn(self, cmd: str | list[str], cwd: str = "/", env: dict[str, str] | None = None,
              sink: OutputSink | None = None, in_initramfs: bool | None = None) -> GuestProcess:
        """Starts a command in the host root, or in the initramfs (busybox) if asked or
        if the host root is detached (detach_host_root)."""
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        full_env = {"PATH": _guest_path(), "HOME": "/root", "TERM": "dumb",
                    "LANG": "C.UTF-8", **(env or {})}
        if in_initramfs is None:
            in_initramfs = not self.host_root_attached
        return self.agent.spawn(argv, full_env, cwd, sink, in_initramfs)

    def run(self, cmd: str | list[str], timeout: float = 300, check: bool = False,
            **kw) -> CommandResult:
        proc = self.spawn(cmd, **kw)
        try:
            res = proc.wait(timeout)
        except TimeoutError:
            proc.kill()
            raise
        except AgentGone:
            if not self.alive():
                raise GuestFailed(self._report(f"the guest died while running {cmd!r}")) from None
            raise
        return res.check() if check else res

    def _agent_path(self, path: str) -> str:
        """The agent runs outside the host root: commands' absolute paths are under /host."""
        return "/host" + path if self.host_root_attached and path.startswith("/") else path

    def read_file(self, path: str) -> bytes:
        """Reads a file as the guest's commands see it (see spawn)."""
        return self.agent.read_file(self._agent_path(path))

    def write_file(self, path: str, data: bytes) -> None:
        """Writes a file in the guest (only its tmpfs parts are writable)."""
        self.agent.write_file(self._agent_path(path), data)

    def detach_host_root(self) -> None:
        """Unmounts the host root (the overlay and its 9p lower layer) from the guest.

        QEMU refuses to live-migrate while a 9p export is mounted in the guest.
        The agent lives in the initramfs, so it carries on; afterwards commands
        run there, with busybox (nc, sha256sum, ip, arping...), and kernel
        modules loaded before stay loaded: modprobe what the guest will need
        (including the driver of a NIC to be plugged after a migration) first.
        """
        mounts = "awk '$2 == \"/host\" || $2 ~ \"^/host/\" { print $2 }' /proc/mounts | sort -r"
        res = self.run(f"for m in $({mounts}); do umount \"$m\" || exit 1; done && umount /lower",
                       in_initramfs=True, timeout=60)
        if res.returncode != 0:
            raise LabError(f"cannot detach the host root: {res.err.strip()}",
                           hint="is a command still running in the host root?")
        self.host_root_attached = False

    # -- devices -------------------------------------------------------------

    def find(self, dev_id: str) -> PlacedDevice:
        for pd in self.placed:
            if pd.id == dev_id:
                return pd
        raise KeyError(f"no device {dev_id!r} in this guest")

    def pci_address(self, dev_id: str) -> str:
        """The guest's PCI address (0000:BB:DD.F) of a device, from QEMU's view of the bus."""
        for bus in self.qmp.cmd("query-pci"):
            found = _find_pci(bus["devices"], dev_id)
            if found:
                return found
        raise KeyError(f"device {dev_id!r} is not on the guest's PCI bus")

    def bar_address(self, bdf: str, bar: int) -> int:
        """Where a device's BAR sits in guest-physical memory (from sysfs)."""
        return int(self.read_file(f"/sys/bus/pci/devices/{bdf}/resource").split()[3 * bar], 16)

    def read_phys_u32(self, address: int) -> int:
        """32 bits of guest-physical memory, read by QEMU's monitor (`xp`): for a
        device register, the device's own state with no driver of the guest
        involved. Only for registers without read side effects (an interrupt
        cause register would be cleared)."""
        reply = self.qmp.cmd("human-monitor-command", **{"command-line": f"xp /1wx {address:#x}"})
        return int(reply.split(":", 1)[1].split()[0], 16)

    def hot_unplug(self, dev_id: str, timeout: float = 30) -> None:
        """Asks the guest to release the device and waits until it has.

        On QEMU 7.2's q35 the root ports' hot-plug is ACPI's (the guest's
        acpiphp), which ejects at once: no 5-second attention-button wait as
        with PCIe native hot-plug (pciehp).
        """
        pd = self.find(dev_id)
        self.qmp.cmd("device_del", id=dev_id)
        deadline = time.monotonic() + timeout
        while any(d["qdev_id"] == dev_id for d in self._qdev_ids()):
            if time.monotonic() > deadline:
                raise LabError(f"guest did not release {dev_id} within {timeout} s")
            time.sleep(0.1)
        if pd.device.kind == NIC:
            self.qmp.cmd("netdev_del", id=f"net-{dev_id}")
        self.placed.remove(pd)

    def hot_plug(self, name: str, dev_id: str, mac: str | None = None) -> PlacedDevice:
        """Plugs a catalogue NIC into a free root port; the guest sees it appear."""
        dev = lookup(name)
        if dev.kind != NIC:
            raise LabError(f"hot-plug is implemented for NICs; {name} is {dev.kind}")
        if not self.free_ports:
            raise LabError("no free root port left for hot-plug")
        pd = PlacedDevice(dev, dev_id, self.free_ports[0],
                          mac or f"52:54:00:12:35:{len(self.placed):02x}")
        if self.netdev == "user":
            self.qmp.cmd("netdev_add", type="user", id=f"net-{dev_id}")
        else:
            # The TAP reaches QEMU over the QMP socket (SCM_RIGHTS), named by getfd.
            [fd] = self.netdev.open_tap()
            try:
                self.qmp.send_fd_scm(fd)
            finally:
                os.close(fd)
            self.qmp.cmd("getfd", fdname=f"net-{dev_id}")
            self.qmp.cmd("netdev_add", type="tap", id=f"net-{dev_id}", fd=f"net-{dev_id}")
        # device_add takes properties as strings, as -device does ("iommu_platform": "on").
        props = dict(p.split("=", 1) for p in dev.props.split(",") if p)
        self.qmp.cmd("device_add", driver=dev.qemu_model, id=dev_id,
                     netdev=f"net-{dev_id}", mac=pd.mac, bus=pd.port, **props)
        self.placed.append(pd)
        return pd

    def _qdev_ids(self) -> list[dict]:
        out = []
        for bus in self.qmp.cmd("query-pci"):
            _walk(bus["devices"], out)
        return out

    # -- live migration --------------------------------------------------------

    def incoming_twin(self) -> "Guest":
        """A destination for migrate_to(): a second QEMU with this guest's hardware as it is now.

        Migration needs the same devices on both sides, so the twin declares the
        same root ports (numbering and order) holding the same devices, ids and
        MACs, including hot-plugged ones.  To land on another NIC model, unplug
        the NIC here before migrating and plug the new model into the twin after.
        """
        twin = Guest(devices=[pd.device.name for pd in self.placed], memory_mib=self.memory_mib,
                     cpus=self.cpus, kvm=self.kvm, netdev=self.netdev, incoming=True,
                     extra_append=self.extra_append, share_dir=self.share_dir,
                     console=self.console, iommu=self.iommu)
        twin.placed = [replace(pd) for pd in self.placed]
        twin.ports = list(self.ports)
        twin.host_root_attached = self.host_root_attached
        return twin

    def migrate_to(self, dest: "Guest", timeout: float = 300) -> dict:
        """Live-migrates this guest into `dest` (an incoming_twin(), started); this QEMU exits.

        Afterwards `dest` is the guest: the agent connection, with the commands
        still running in the guest, moves to it.  Returns QEMU's final
        query-migrate report (total-time and downtime in ms, ram statistics).
        """
        if self.host_root_attached:
            raise LabError("QEMU does not migrate a guest with the 9p host root mounted",
                           hint="call detach_host_root() first")
        deadline = time.monotonic() + timeout
        self.qmp.cmd("migrate-set-parameters", **MIGRATION_PARAMETERS)
        self.agent.follow(str(dest.rundir / "agent.sock"), deadline)
        try:
            self.qmp.cmd("migrate", uri=f"unix:{dest.rundir / 'migrate.sock'}")
            report = self._await_migration(deadline)
            dest._await_resumed(deadline)
        except BaseException:
            self.agent.abandon_follow()
            raise
        # This QEMU now only holds the guest's old TAP and serial socket; its
        # exit closes the socket, which hands the agent connection to dest.
        self.qemu.kill()
        self.qemu.wait()
        self.agent.await_follow(deadline)
        dest.agent, self.agent = self.agent, dest.agent
        self.stop()
        return report

    def _await_migration(self, deadline: float) -> dict:
        while True:
            report = self.qmp.cmd("query-migrate")
            status = report.get("status")
            if status == "completed":
                return report
            if status in ("failed", "cancelled"):
                raise LabError(f"live migration {status}: {report.get('error-desc', report)}")
            if time.monotonic() > deadline:
                self.qmp.cmd("migrate_cancel")
                raise LabError(f"live migration did not complete in time: {report}")
            time.sleep(0.05)

    def _await_resumed(self, deadline: float) -> None:
        """The source calls a migration complete once it has sent everything; the
        destination has taken over only when it has loaded it all and runs."""
        while (status := self.qmp.cmd("query-status")["status"]) != "running":
            self._check_alive("while receiving the migrated guest")
            if status != "inmigrate" or time.monotonic() > deadline:
                raise GuestFailed(self._report(f"the migration destination is {status!r}"))
            time.sleep(0.02)


def _walk(devices: list[dict], out: list[dict]) -> None:
    for d in devices:
        out.append(d)
        bridge = d.get("pci_bridge")
        if bridge:
            _walk(bridge.get("devices", []), out)


def _find_pci(devices: list[dict], dev_id: str) -> str | None:
    found: list[dict] = []
    _walk(devices, found)
    for d in found:
        if d.get("qdev_id") == dev_id:
            return f"0000:{d['bus']:02x}:{d['slot']:02x}.{d['function']}"
    return None
