"""Host side of the guest agent's serial protocol (lab/guest_agent/agent.c has the spec)."""
from __future__ import annotations

import itertools
import queue
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable

from .errors import LabError

HEADER = struct.Struct("<HBBII")
MAGIC = 0x5553
EXEC, KILL, READ, WRITE, PING, POWEROFF = 1, 2, 3, 4, 5, 6
READY, OUT, ERR, EXIT, FILE, FAIL, PONG = 16, 17, 18, 19, 20, 21, 22
EXEC_IN_INITRAMFS = 1

OutputSink = Callable[[str, bytes], None]   # (stream "out"|"err", chunk)


class AgentGone(LabError):
    """The connection to the guest agent closed: the guest died or was stopped."""


@dataclass
class CommandResult:
    argv: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")

    def check(self) -> "CommandResult":
        if self.returncode != 0:
            raise LabError(f"guest command {self.argv} exited {self.returncode}:\n"
                           f"{self.out[-2000:]}{self.err[-2000:]}")
        return self


class GuestProcess:
    """A command running in the guest; output accumulates until wait()."""

    def __init__(self, agent: "AgentClient", ident: int, argv: list[str], sink: OutputSink | None):
        self._agent, self.id, self.argv, self._sink = agent, ident, argv, sink
        self._out, self._err = bytearray(), bytearray()
        self._done = threading.Event()
        self.returncode: int | None = None
        self.failure: str | None = None

    def _feed(self, kind: int, payload: bytes) -> None:
        if kind in (OUT, ERR):
            (self._out if kind == OUT else self._err).extend(payload)
            if self._sink:
                self._sink("out" if kind == OUT else "err", payload)
        elif kind == EXIT:
            self.returncode = struct.unpack("<i", payload)[0]
            self._done.set()
        elif kind == FAIL:
            self.failure = payload.decode(errors="replace")
            self._done.set()

    def _abort(self, why: str) -> None:
        if not self._done.is_set():
            self.failure = why
            self._done.set()

    def kill(self, signal: int = 9) -> None:
        self._agent._send(KILL, self.id, struct.pack("<i", signal))

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> CommandResult:
        if not self._done.wait(timeout):
            raise TimeoutError(f"guest command {self.argv} still running after {timeout} s")
        if self.failure is not None:
            raise AgentGone(f"guest command {self.argv} failed: {self.failure}")
        return CommandResult(self.argv, self.returncode, bytes(self._out), bytes(self._err))


class AgentClient:
    """Talks to labagent over QEMU's serial-port socket; one reader thread demultiplexes."""

    def __init__(self, sock_path: str):
        self._path = sock_path
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, GuestProcess | queue.Queue] = {}
        self._ready = threading.Event()
        self._closed = False
        self._successor: socket.socket | None = None   # see follow()
        self._followed = threading.Event()

    @staticmethod
    def _open(path: str, deadline: float) -> socket.socket:
        while True:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(path)
                return s
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def connect(self, deadline: float) -> None:
        s = self._open(self._path, deadline)
        self._sock = s
        self._closed = False
        self._ready.clear()
        threading.Thread(target=self._reader, args=(s,), daemon=True, name="lab-agent").start()

    def follow(self, sock_path: str, deadline: float) -> None:
        """Connects ahead to the serial socket of the QEMU the guest is migrating into.

        The agent and its commands run on through a live migration; only the
        socket that reaches them changes.  The connection is made before the
        switch-over because QEMU drops serial output while no client is
        connected.  It is read once the current connection has closed (when the
        source QEMU exits), by the same reader thread with the same buffer: a
        frame the guest was writing at the switch-over arrives in two parts, one
        through each QEMU, and output keeps its order.  Until then commands
        still go to the source.  await_follow() waits for the change.
        """
        self._successor = self._open(sock_path, deadline)
        self._path = sock_path
        self._followed.clear()

    def await_follow(self, deadline: float) -> None:
        if not self._followed.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError("the old connection to the guest agent did not close")

    def abandon_follow(self) -> None:
        """The migration did not happen: forget the destination's socket."""
        with self._lock:
            s, self._successor = self._successor, None
        if s is not None:
            s.close()

    def wait_ready(self, deadline: float, alive: Callable[[], bool]) -> None:
        """Waits for the agent's READY, which it repeats until the host first speaks."""
        while not self._ready.wait(0.1):
            if not alive():
                raise AgentGone("guest stopped before its agent started")
            if time.monotonic() > deadline:
                raise TimeoutError("guest agent did not start")

    def ping(self, timeout: float = 30) -> None:
        """Round trip to a running agent, e.g. after reconnecting to a migrated guest."""
        self._ready.clear()
        self._send(PING, 0, b"")
        if not self._ready.wait(timeout):
            raise TimeoutError("the guest agent did not answer a ping")

    def _reader(self, s: socket.socket) -> None:
        buf = bytearray()
        while True:
            self._read_frames(s, buf)
            with self._lock:
                if s is not self._sock:
                    return   # close() on purpose: nobody is waiting for anything
                s = self._sock = self._successor
                self._successor = None
            if s is None:
                self._fail_all("the guest agent's connection closed")
                return
            self._followed.set()

    def _read_frames(self, s: socket.socket, buf: bytearray) -> None:
        """Dispatches the frames arriving on s until it closes; a partial one stays in buf."""
        try:
            while chunk := s.recv(1 << 16):
                buf.extend(chunk)
                while len(buf) >= HEADER.size:
                    magic, kind, _flags, ident, length = HEADER.unpack_from(buf)
                    if magic != MAGIC:
                        del buf[0]   # boot noise before the agent: resynchronise
                        continue
                    if len(buf) < HEADER.size + length:
                        break
                    payload = bytes(buf[HEADER.size:HEADER.size + length])
                    del buf[:HEADER.size + length]
                    self._dispatch(kind, ident, payload)
        except OSError:
            pass

    def _dispatch(self, kind: int, ident: int, payload: bytes) -> None:
        if kind in (READY, PONG):
            self._ready.set()
            return
        with self._lock:
            target = self._waiting.get(ident)
            if kind in (EXIT, FAIL, FILE):
                self._waiting.pop(ident, None)
        if isinstance(target, GuestProcess):
            target._feed(kind, payload)
        elif target is not None:
            target.put((kind, payload))

    def _fail_all(self, why: str) -> None:
        self._closed = True
        with self._lock:
            pending, self._waiting = self._waiting, {}
        for target in pending.values():
            if isinstance(target, GuestProcess):
                target._abort(why)
            else:
                target.put((FAIL, why.encode()))

    def _send(self, kind: int, ident: int, payload: bytes, flags: int = 0) -> None:
        if self._sock is None or self._closed:
            raise AgentGone("no connection to the guest agent")
        frame = HEADER.pack(MAGIC, kind, flags, ident, len(payload)) + payload
        with self._lock:
            self._sock.sendall(frame)

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str,
              sink: OutputSink | None = None, in_initramfs: bool = False) -> GuestProcess:
        strings = [*argv, *(f"{k}={v}" for k, v in env.items()), cwd]
        payload = struct.pack("<II", len(argv), len(env)) + b"".join(
            s.encode() + b"\0" for s in strings)
        ident = next(self._ids)
        proc = GuestProcess(self, ident, argv, sink)
        with self._lock:
            self._waiting[ident] = proc
        self._send(EXEC, ident, payload, EXEC_IN_INITRAMFS if in_initramfs else 0)
        return proc

    def _request(self, kind: int, payload: bytes, timeout: float) -> tuple[int, bytes]:
        ident = next(self._ids)
        q: queue.Queue = queue.Queue()
        with self._lock:
            self._waiting[ident] = q
        self._send(kind, ident, payload)
        try:
            return q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("the guest agent did not answer") from None

    def read_file(self, path: str, timeout: float = 60) -> bytes:
        kind, payload = self._request(READ, path.encode(), timeout)
        if kind != FILE:
            raise FileNotFoundError(payload.decode(errors="replace"))
        return payload

    def write_file(self, path: str, data: bytes, timeout: float = 60) -> None:
        kind, payload = self._request(WRITE, path.encode() + b"\0" + data, timeout)
        if kind != EXIT:
            raise OSError(payload.decode(errors="replace"))

    def poweroff(self) -> None:
        try:
            self._send(POWEROFF, 0, b"")
        except (AgentGone, OSError):
            pass

    def close(self) -> None:
        self.abandon_follow()
        s, self._sock = self._sock, None
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
