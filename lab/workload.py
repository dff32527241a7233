"""Workloads that run on either side of a lab link (host or guest): `python3 -m lab.workload`.

bulk    a TCP bulk transfer with an end-to-end SHA-256, reporting bytes, stalls and resets.
        The server side listens (on the host, 127.0.0.1); the client connects (in the
        guest, to the slirp gateway).  --direction says which way the bytes flow.
ping    ping with loss and RTT percentiles (wraps iputils ping).
reload  rmmod + modprobe + address + link → first answered ping, in milliseconds.

Every subcommand prints one JSON object on stdout.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHUNK = 64 * 1024
STALL_S = 0.2          # no progress for this long counts as a stall


GAPS_KEPT = 10000      # --gap-log-ms keeps at most this many gaps


class Progress:
    """Counts bytes and the gaps between them: a gap over STALL_S is a stall.
    With `gap_log_s`, every gap longer than that is also kept, with the wall
    clock time it began, so a caller can line gaps up with events it caused
    (a driver killed at a known time): the application's own view of an outage."""

    def __init__(self, gap_log_s: float | None = None) -> None:
        self.start = self.last = time.monotonic()
        self.bytes = 0
        self.stalls = 0
        self.max_gap = 0.0
        self.hash = hashlib.sha256()
        self.gap_log_s = gap_log_s
        self.gaps: list[dict] = []

    def add(self, data: bytes) -> None:
        now = time.monotonic()
        gap = now - self.last
        if gap > STALL_S:
            self.stalls += 1
        if self.gap_log_s is not None and gap > self.gap_log_s and len(self.gaps) < GAPS_KEPT:
            self.gaps.append({"start": round(time.time() - gap, 4), "ms": round(gap * 1000, 1)})
        self.max_gap = max(self.max_gap, gap)
        self.last = now
        self.bytes += len(data)
        self.hash.update(data)

    def report(self, resets: int, error: str | None) -> dict:
        secs = max(self.last - self.start, 1e-9)
        out = {"bytes": self.bytes, "sha256": self.hash.hexdigest(), "seconds": round(secs, 3),
               "mbps": round(self.bytes * 8 / secs / 1e6, 1), "stalls": self.stalls,
               "max_stall_ms": round(self.max_gap * 1000, 1), "resets": resets, "error": error}
        if self.gap_log_s is not None:
            out["gaps"] = self.gaps
        return out


def _pump(sock: socket.socket, direction_send: bool, total: int,
          gap_log_s: float | None = None, rate_mbps: float | None = None) -> dict:
    """Sends `total` pseudo-random bytes (at most `rate_mbps` on average, if
    given), or receives until EOF; hashes either way."""
    prog, resets, error = Progress(gap_log_s), 0, None
    block = os.urandom(CHUNK * 16)
    try:
        if direction_send:
            offset, started = 0, time.monotonic()
            while prog.bytes < total:
                if rate_mbps:
                    time.sleep(max(0.0, started + prog.bytes * 8 / (rate_mbps * 1e6) - time.monotonic()))
                n = min(CHUNK, total - prog.bytes)
                data = block[offset:offset + n]
                offset = (offset + 4099) % (len(block) - CHUNK)   # vary the stream
                sock.sendall(data)
                prog.add(data)
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1)   # wait for the peer to close: it has everything
        else:
            while data := sock.recv(1 << 18):
                prog.add(data)
    except ConnectionResetError as e:
        resets, error = 1, f"connection reset: {e}"
    except OSError as e:
        error = f"{type(e).__name__}: {e}"
    return prog.report(resets, error)


def bulk_serve(bind: str, port: int, send: bool, total: int,
               timeout: float, rate_mbps: float | None = None) -> dict:
    with socket.create_server((bind, port)) as srv:
        srv.settimeout(timeout)
        # The first line says where we listen (a caller asking for port 0 needs
        # it before it can start the client); the report follows at the end.
        print(json.dumps({"listening": srv.getsockname()[1]}), flush=True)
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(timeout)
            return _pump(conn, send, total, rate_mbps=rate_mbps)


def bulk_connect(host: str, port: int, send: bool, total: int, timeout: float,
                 gap_log_s: float | None = None) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with sock:
        sock.settimeout(timeout)
        return _pump(sock, send, total, gap_log_s)


PING_RTT = re.compile(r"time=([\d.]+) ms")
PING_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) received")


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def ping(host: str, count: int, interval: float) -> dict:
    out = subprocess.run(["ping", "-n", "-c", str(count), "-i", str(interval), "-W", "1", host],
                         capture_output=True, text=True).stdout
    rtts = [float(x) for x in PING_RTT.findall(out)]
    m = PING_SUMMARY.search(out)
    sent, received = (int(m.group(1)), int(m.group(2))) if m else (count, len(rtts))
    return {"sent": sent, "received": received,
            "loss_pct": round(100 * (sent - received) / sent, 2) if sent else 100.0,
            "rtt_ms_median": statistics.median(rtts) if rtts else None,
            "rtt_ms_p99": percentile(rtts, 99) if rtts else None,
            "rtt_ms_min": min(rtts) if rtts else None,
            "rtt_ms_max": max(rtts) if rtts else None}


def netdev_of(pci: str) -> str | None:
    """The network interface a PCI device's driver registered, if any."""
    path = Path("/sys/bus/pci/devices") / pci / "net"
    names = sorted(p.name for p in path.iterdir()) if path.exists() else []
    return names[0] if names else None


def wait_for(predicate, timeout: float, step: float = 0.005):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            return None
        time.sleep(step)
    return value


def configure(iface: str, address: str, gateway: str | None) -> None:
    """Brings an interface up with an address and (optionally) the default route."""
    subprocess.run(["ip", "link", "set", iface, "up"], check=True)
    subprocess.run(["ip", "addr", "replace", address, "dev", iface], check=True)
    if gateway:
        subprocess.run(["ip", "route", "replace", "default", "via", gateway, "dev", iface],
                       check=True)


def reload(driver: str, pci: str, address: str, gateway: str, timeout: float) -> dict:
    """Today's cost of a driver restart: rmmod+modprobe+address+link → first answered ping."""
    t0 = time.monotonic()
    subprocess.run(["rmmod", driver], check=True)
    t_unloaded = time.monotonic()
    subprocess.run(["modprobe", driver], check=True)
    iface = wait_for(lambda: netdev_of(pci), timeout)
    if iface is None:
        return {"error": f"{driver} did not register a netdev for {pci}"}
    t_probed = time.monotonic()
    configure(iface, address, gateway)
    # -c 1 with -w: stop at the first reply, probing every 10 ms until then.
    res = subprocess.run(["ping", "-n", "-c", "1", "-i", "0.01", "-w", str(int(timeout)),
                          gateway], capture_output=True, text=True)
    t_reply = time.monotonic()
    if res.returncode != 0:
        return {"error": f"no ping reply within {timeout} s after reload"}
    return {"downtime_ms": round((t_reply - t0) * 1000, 1),
            "rmmod_ms": round((t_unloaded - t0) * 1000, 1),
            "probe_ms": round((t_probed - t_unloaded) * 1000, 1),
            "link_ms": round((t_reply - t_probed) * 1000, 1), "iface": iface}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m lab.workload", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bulk", help="TCP bulk transfer with a SHA-256 of the stream")
    b.add_argument("role", choices=["serve", "connect"])
    b.add_argument("--host", default="10.0.2.2")
    b.add_argument("--port", type=int, default=0)
    b.add_argument("--bind", default="127.0.0.1",
                   help="serve: the address to listen on (a lab network's peer address)")
    b.add_argument("--direction", choices=["to-client", "from-client"], required=True,
                   help="which way the bytes flow")
    b.add_argument("--bytes", type=int, default=200 << 20, help="bytes to send (sender only)")
    b.add_argument("--timeout", type=float, default=120, help="I/O inactivity limit (s)")
    b.add_argument("--rate-mbps", type=float,
                   help="serve: send at most this many Mbit/s on average (default: as fast as TCP goes)")
    b.add_argument("--gap-log-ms", type=float,
                   help="connect: report every gap between received or sent chunks longer than "
                   "this (its wall-clock start and length) under \"gaps\"")
    pg = sub.add_parser("ping", help="ping with loss and RTT percentiles")
    pg.add_argument("host")
    pg.add_argument("--count", type=int, default=100)
    pg.add_argument("--interval", type=float, default=0.02)
    r = sub.add_parser("reload", help="measure rmmod+modprobe+link → first answered ping")
    r.add_argument("--driver", required=True)
    r.add_argument("--pci", required=True, help="the device's PCI address")
    r.add_argument("--address", default="10.0.2.15/24")
    r.add_argument("--gateway", default="10.0.2.2")
    r.add_argument("--timeout", type=float, default=30)
    a = p.parse_args(argv)

    if a.cmd == "bulk":
        sends = (a.role == "serve") == (a.direction == "to-client")
        if a.role == "serve":
            out = bulk_serve(a.bind, a.port, sends, a.bytes, a.timeout, a.rate_mbps)
        else:
            gap_log_s = a.gap_log_ms / 1000 if a.gap_log_ms is not None else None
            out = bulk_connect(a.host, a.port, sends, a.bytes, a.timeout, gap_log_s)
        out["role"] = "sender" if sends else "receiver"
    elif a.cmd == "ping":
        out = ping(a.host, a.count, a.interval)
    else:
        out = reload(a.driver, a.pci, a.address, a.gateway, a.timeout)
    json.dump(out, sys.stdout)
    print()
    return 0 if not out.get("error") else 1


if __name__ == "__main__":
    sys.exit(main())
