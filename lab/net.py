"""Networking in a lab guest, driven from the host: drivers, addresses and traffic.

The guest's peer is the host's loopback, reached through slirp at 10.0.2.2.  Host
servers bind ephemeral ports on 127.0.0.1, so parallel labs never collide.
"""
from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from . import config
from .devices import NIC
from .errors import LabError
from .guest import SLIRP_GATEWAY, SLIRP_GUEST_IP, Guest
from .netns import PEER_ADDRESS, LabNetwork, guest_address

GUEST_ADDRESS = f"{SLIRP_GUEST_IP}/24"


def peer_address(network: LabNetwork | None) -> str:
    """Where the guest reaches the host's end of its traffic: slirp's gateway (the
    host's loopback), or the bridge of a LabNetwork (lab/netns.py)."""
    return PEER_ADDRESS if network else SLIRP_GATEWAY
WORKLOAD = [sys.executable, "-m", "lab.workload"]


def guest_workload(guest: Guest, args: list[str], timeout: float = 600,
                   under: list[str] = (), **kw) -> dict:
    """Runs lab.workload inside the guest (under the command `under`, e.g. perf
    record, if given) and returns its JSON report."""
    res = guest.run([*under, "python3", "-m", "lab.workload", *args], timeout=timeout,
                    cwd=str(config.REPO_DIR), **kw)
    try:
        return json.loads(res.out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise LabError(f"guest workload {args} printed no report (exit {res.returncode}):\n"
                       f"{res.out[-1000:]}{res.err[-2000:]}") from None


def load_kernel_drivers(guest: Guest) -> None:
    """modprobe the in-kernel driver of every device (the lab has no udev to do it)."""
    for pd in guest.placed:
        guest.run(["modprobe", pd.device.driver], check=True)
    nics = [pd for pd in guest.placed if pd.device.kind == NIC]
    if nics:
        bring_up(guest, nics[0].id)


def iface_of(guest: Guest, dev_id: str, timeout: float = 20) -> str:
    """The interface name the guest's driver gave a NIC."""
    pci = guest.pci_address(dev_id)
    deadline = time.monotonic() + timeout
    while True:
        # A virtio NIC's interface hangs off the virtio device on its PCI function.
        res = guest.run(f"ls -d /sys/bus/pci/devices/{pci}/net/* /sys/bus/pci/devices/{pci}/virtio*/net/* 2>/dev/null")
        if res.out.split():
            return res.out.split()[0].rsplit("/", 1)[-1]
        if time.monotonic() > deadline:
            raise LabError(f"no network interface appeared for {dev_id} ({pci})")
        time.sleep(0.2)


def bring_up(guest: Guest, dev_id: str, timeout: float = 30,
             network: LabNetwork | None = None) -> str:
    """Addresses a NIC on the slirp network (or `network`) and waits for carrier and a
    first ping reply."""
    return bring_up_iface(guest, iface_of(guest, dev_id), timeout, what=dev_id, network=network)


def bring_up_iface(guest: Guest, iface: str, timeout: float = 30, what: str = "",
                   network: LabNetwork | None = None) -> str:
    """bring_up for an interface by name (a NIC's, or understudy's TAP)."""
    peer = peer_address(network)
    address = guest_address(1) if network else GUEST_ADDRESS
    # On a LabNetwork the peer is on the guest's own subnet: no route to add.
    route = "" if network else f"ip route replace default via {SLIRP_GATEWAY} dev {iface} && "
    # Carrier first: a ping sent before it is an ARP request lost, and ping
    # gives up on the "unreachable" that follows (e1000e's link comes up
    # seconds after it is opened). Then pings until one is answered.
    script = (f"ip link set {iface} up && ip addr replace {address} dev {iface} && {route}"
              f"end=$(( $(date +%s) + {int(timeout)} )); "
              f"until [ \"$(cat /sys/class/net/{iface}/carrier 2>/dev/null)\" = 1 ]; do "
              f"[ $(date +%s) -ge $end ] && {{ echo 'no carrier in {int(timeout)} s' >&2; exit 1; }}; sleep 0.1; done; "
              f"until ping -n -c 1 -W 1 {peer} >/dev/null 2>&1; do "
              f"[ $(date +%s) -ge $end ] && {{ echo 'no answer from {peer} in {int(timeout)} s' >&2; exit 1; }}; "
              f"sleep 0.2; done")
    res = guest.run(script, timeout=timeout + 10)
    if res.returncode != 0:
        raise LabError(f"{iface} ({what or iface}) did not come up: {res.err.strip()}")
    return iface


def ping(guest: Guest, count: int = 100, interval: float = 0.02,
         network: LabNetwork | None = None) -> dict:
    return guest_workload(guest, ["ping", peer_address(network), "--count", str(count),
                                  "--interval", str(interval)])


@dataclass
class BulkResult:
    direction: str           # "tx" (guest sends) or "rx" (guest receives)
    host: dict
    guest: dict

    @property
    def hash_ok(self) -> bool:
        return (self.host["sha256"] == self.guest["sha256"]
                and self.host["bytes"] == self.guest["bytes"] > 0)

    @property
    def sender(self) -> dict:
        return self.guest if self.direction == "tx" else self.host

    def summary(self) -> dict:
        recv = self.host if self.direction == "tx" else self.guest
        return {"direction": self.direction, "bytes": recv["bytes"], "hash_ok": self.hash_ok,
                "mbps": recv["mbps"], "stalls": max(self.host["stalls"], self.guest["stalls"]),
                "max_stall_ms": max(self.host["max_stall_ms"], self.guest["max_stall_ms"]),
                "resets": self.host["resets"] + self.guest["resets"],
                "errors": [e for e in (self.host["error"], self.guest["error"]) if e]}


class HostBulk:
    """The host half of a bulk transfer, serving on an ephemeral loopback port, or on
    the peer address of a LabNetwork (lab/netns.py) from inside its namespace."""

    def __init__(self, direction: str, nbytes: int, timeout: float = 120,
                 network: LabNetwork | None = None, rate_mbps: float | None = None):
        self.direction = direction
        wire = "from-client" if direction == "tx" else "to-client"
        self.wire = wire
        self.host = PEER_ADDRESS if network else SLIRP_GATEWAY
        argv = [*WORKLOAD, "bulk", "serve", "--direction", wire, "--bytes", str(nbytes),
                "--bind", PEER_ADDRESS if network else "127.0.0.1",
                "--timeout", str(timeout), *(["--rate-mbps", str(rate_mbps)] if rate_mbps else [])]
        start = network.spawn if network else subprocess.Popen
        self.proc = start(argv, cwd=config.REPO_DIR, stdout=subprocess.PIPE, text=True)
        first = self.proc.stdout.readline()
        try:
            self.port = json.loads(first)["listening"]
        except (json.JSONDecodeError, KeyError):
            self.proc.kill()
            raise LabError(f"the host side of the bulk transfer did not start: {first!r}") from None

    def guest_args(self, nbytes: int) -> list[str]:
        return ["bulk", "connect", "--host", self.host, "--port", str(self.port),
                "--direction", self.wire, "--bytes", str(nbytes)]

    def result(self, timeout: float = 600) -> dict:
        out, _ = self.proc.communicate(timeout=timeout)
        return json.loads(out.strip().splitlines()[-1])


def bulk(guest: Guest, direction: str, nbytes: int, timeout: float = 600,
         network: LabNetwork | None = None, under: list[str] = ()) -> BulkResult:
    """A hash-checked TCP transfer between guest and host (through slirp, or with the
    host's end on `network`'s bridge); direction "tx" or "rx"; the guest's end
    under the command `under`, if given."""
    host = HostBulk(direction, nbytes, network=network)
    try:
        g = guest_workload(guest, host.guest_args(nbytes), timeout=timeout, under=under)
        return BulkResult(direction, host.result(timeout), g)
    finally:
        if host.proc.poll() is None:
            host.proc.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iperf3(guest: Guest, reverse: bool, seconds: int = 5, network: LabNetwork | None = None,
           timeout: float | None = None, parallel: int = 1) -> float:
    """iperf3 through the NIC: Mbit/s received (guest→host, or host→guest with reverse)."""
    return iperf3_run(guest, reverse, seconds, network, timeout, parallel)["mbps"]


def iperf3_run(guest: Guest, reverse: bool, seconds: int = 5,
               network: LabNetwork | None = None, timeout: float | None = None, parallel: int = 1) -> dict:
    """iperf3 through the NIC against a host server on the host's loopback (through
    slirp) or on `network`'s bridge, with `parallel` TCP connections: Mbit/s
    received and, guest→host, the sending TCP's figures (sender_figures). A run
    still going after `timeout` seconds (default: a minute more than asked for)
    raises TimeoutError."""
    port = free_port()
    peer = peer_address(network)
    argv = ["iperf3", "-s", "-1", "--forceflush", "-p", str(port), "-B", peer if network else "127.0.0.1"]
    start = network.spawn if network else subprocess.Popen
    server = start(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        # "Server listening on PORT" says it does (--forceflush: a pipe is not a terminal).
        while "listening" not in (line := server.stdout.readline()):
            if not line:
                raise LabError(f"the host's iperf3 server did not start ({shlex.join(argv)})")
        res = guest.run(["iperf3", "-c", peer, "-p", str(port), "-t", str(seconds),
                         "-J", *(["-R"] if reverse else []), *(["-P", str(parallel)] if parallel > 1 else [])],
                        timeout=timeout or seconds + 60)
        data = json.loads(res.out)
        if "error" in data:
            raise LabError(f"iperf3 failed: {data['error']}")
        # Host→guest the sender is the host's TCP (or slirp's), which iperf3 cannot see into.
        return {"mbps": data["end"]["sum_received"]["bits_per_second"] / 1e6,
                **({} if reverse else sender_figures(data))}
    finally:
        server.kill()
        server.wait()


def sender_figures(iperf_json: dict) -> dict:
    """The sending TCP's view of a run (Linux tcp_info, as iperf3 -J reports
    it): smoothed RTT, its largest congestion window and the largest window
    the receiver offered, retransmits. Throughput is at most window ÷ RTT:
    these say which of the two holds it back."""
    s = iperf_json["end"]["streams"][0]["sender"]
    kib = lambda v: round(v / 1024, 1) if v is not None else None  # noqa: E731
    return {"rtt_ms_mean": s["mean_rtt"] / 1000 if s.get("mean_rtt") is not None else None,
            "cwnd_kib_max": kib(s.get("max_snd_cwnd")),
            "peer_window_kib_max": kib(s.get("max_snd_wnd")),
            "retransmits": s.get("retransmits")}


USER_HZ = 100


def busy_ticks(proc_stat: str) -> int:
    """CPU time spent not idle, all CPUs, in USER_HZ ticks, from a /proc/stat text."""
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, proc_stat.split(None, 9)[1:9])
    return user + nice + system + irq + softirq + steal


def cpu_busy_seconds(guest: Guest) -> float:
    """Guest CPU time spent not idle, all CPUs, from /proc/stat."""
    return busy_ticks(guest.read_file("/proc/stat").decode()) / USER_HZ


def tcp_counter(proc_net_snmp: str, name: str) -> int:
    """One of the TCP MIB's counters (OutSegs, RetransSegs...) from a /proc/net/snmp text."""
    names, values = (line.split()[1:] for line in proc_net_snmp.splitlines() if line.startswith("Tcp:"))
    return int(dict(zip(names, values))[name])
