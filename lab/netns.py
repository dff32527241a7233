"""A private Ethernet segment for lab guests whose connections must outlive a QEMU process.

slirp cannot carry a connection across a live migration: its TCP connections are
host sockets owned by the source QEMU process.  A LabNetwork is instead a real
L2 segment that the host owns and both QEMU processes plug into:

    network namespace (made by this run, deleted on exit)
      br0  10.203.0.1/24  <- the guest's peer (e.g. `lab.workload bulk serve`) runs here
       |-- tap0  <- fd held by the source QEMU
       `-- tap1  <- fd held by the destination QEMU

Test traffic never leaves the namespace.  QEMU itself runs in the root namespace
and gets each TAP as an already open file descriptor (`-netdev tap,fd=N`, or
`getfd` + `netdev_add` for hot-plug): a TAP is created in the namespace of the
thread that opens /dev/net/tun, so the lab opens it from a short-lived thread
that has entered the namespace.  The TAPs are not persistent, so each vanishes
from the bridge when the QEMU holding it exits or deletes the netdev.

After a switch-over the destination QEMU announces the guest's MAC (RARP), so
the bridge moves the MAC to the destination's port at once.
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import secrets
import struct
import subprocess
import threading

from .errors import LabError

SUBNET_PREFIX = 24
PEER_ADDRESS = "10.203.0.1"   # the bridge's own address: where the peer listens
BRIDGE = "br0"
# Fixed, locally administered: a bridge without an assigned address takes the
# lowest of its ports' addresses, so the peer's MAC would change under the
# guest when the source QEMU's TAP leaves the bridge.
BRIDGE_MAC = "02:00:0a:cb:00:01"

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI, IFF_MULTI_QUEUE = 0x0002, 0x1000, 0x0100
IFNAMSIZ = 16


def guest_address(index: int) -> str:
    """The index-th guest address on the segment (1 -> 10.203.0.2/24)."""
    return f"10.203.0.{index + 1}/{SUBNET_PREFIX}"


def namespace_exists(name: str) -> bool:
    res = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return any(line.split()[0] == name for line in res.stdout.splitlines() if line)


def _in_namespace(netns_path: str, fn):
    """Runs fn() in a thread that has entered the network namespace; returns its result.

    setns(CLONE_NEWNET) switches only the calling thread, and the thread ends
    right after, so no other thread of this process ever changes namespace.
    """
    outcome: dict = {}

    def body() -> None:
        try:
            with open(netns_path, "rb") as ns:
                if ctypes.CDLL(None, use_errno=True).setns(ns.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns({netns_path})")
            outcome["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = e

    t = threading.Thread(target=body, name="lab-netns")
    t.start()
    t.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _open_tap(queues: int = 1) -> tuple[list[int], str]:
    """Creates a TAP (the kernel names it tapN) with `queues` queues
    (IFF_MULTI_QUEUE when more than one) and returns their fds and its name."""
    flags = IFF_TAP | IFF_NO_PI | (IFF_MULTI_QUEUE if queues > 1 else 0)
    fds: list[int] = []
    name = b""
    try:
        for _ in range(queues):
            fds.append(os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC))
            ifr = fcntl.ioctl(fds[-1], TUNSETIFF, struct.pack("16sH22x", name, flags))
            name = ifr[:IFNAMSIZ].rstrip(b"\0")
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return fds, name.decode()


class LabNetwork:
    """A namespace with a bridge; hands out TAP fds on it.  Use as a context manager."""

    def __init__(self) -> None:
        self.name = f"understudy-{os.getpid()}-{secrets.token_hex(3)}"
        self._peers: list[subprocess.Popen] = []
        self._created = False

    def __enter__(self) -> "LabNetwork":
        self.create()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def ip(self, *args: str) -> str:
        """`ip -n <this namespace> ARGS`; returns stdout, raises with stderr on failure."""
        res = subprocess.run(["ip", "-n", self.name, *args], capture_output=True, text=True)
        if res.returncode != 0:
            raise LabError(f"ip -n {self.name} {' '.join(args)}: {res.stderr.strip()}")
        return res.stdout

    def create(self) -> None:
        res = subprocess.run(["ip", "netns", "add", self.name], capture_output=True, text=True)
        if res.returncode != 0:
            raise LabError(f"cannot create network namespace {self.name}: {res.stderr.strip()}",
                           hint="the lab's migration tests need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)")
        self._created = True
        try:
            self.ip("link", "set", "lo", "up")
            self.ip("link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge")
            self.ip("addr", "add", f"{PEER_ADDRESS}/{SUBNET_PREFIX}", "dev", BRIDGE)
            self.ip("link", "set", BRIDGE, "up")
        except BaseException:
            self.close()
            raise

    def open_tap(self, queues: int = 1) -> list[int]:
        """A new TAP on the bridge, as an fd per queue for QEMU; the TAP lives as long as they do."""
        fds, name = _in_namespace(f"/run/netns/{self.name}", lambda: _open_tap(queues))
        try:
            self.ip("link", "set", name, "master", BRIDGE, "up")
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def spawn(self, argv: list[str], **popen_kw) -> subprocess.Popen:
        """Starts a host process inside the namespace (a peer); close() kills it."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.name, *argv], **popen_kw)
        self._peers.append(proc)
        return proc

    def bridge_rx_bytes(self) -> int:
        """Bytes the bridge has passed up to the namespace's own stack, i.e. to the peers."""
        info = json.loads(self.ip("-j", "-s", "link", "show", "dev", BRIDGE))
        return info[0]["stats64"]["rx"]["bytes"]

    def close(self) -> None:
        """Kills the peers and deletes the namespace (with the bridge and any TAP left)."""
        for proc in self._peers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self._peers.clear()
        if self._created:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
            self._created = False
