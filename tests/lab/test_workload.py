"""lab.workload on the host's loopback (no guest): the hash check and the reports are real."""
import json
import subprocess
import sys
import threading

from lab import config
from lab.net import HostBulk
from lab.workload import CHUNK, bulk_connect, percentile


def test_bulk_transfer_hashes_match_both_ways():
    for direction in ("tx", "rx"):
        host = HostBulk(direction, 3 << 20)
        wire_send = direction == "tx"
        client = bulk_connect("127.0.0.1", host.port, wire_send, 3 << 20, timeout=30)
        server = host.result(30)
        assert client["sha256"] == server["sha256"]
        assert client["bytes"] == server["bytes"] == 3 << 20
        assert client["resets"] == server["resets"] == 0


def test_a_paced_sender_keeps_to_its_rate():
    # Each chunk waits for its turn: the last starts (2 MiB - CHUNK) * 8 / 40 Mbit/s
    # after the first, however fast loopback is.
    host = HostBulk("rx", 2 << 20, rate_mbps=40)
    client = bulk_connect("127.0.0.1", host.port, False, 2 << 20, timeout=30)
    server = host.result(30)
    assert client["sha256"] == server["sha256"] and client["bytes"] == 2 << 20
    assert server["seconds"] >= ((2 << 20) - CHUNK) * 8 / 40e6, server


def test_a_reset_connection_is_reported_as_a_reset():
    # The server aborts after the first bytes with SO_LINGER 0: the peer sees a RST.
    import socket
    import struct
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def abort():
        conn, _ = srv.accept()
        conn.recv(1000)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    t = threading.Thread(target=abort)
    t.start()
    report = bulk_connect("127.0.0.1", port, True, 64 << 20, timeout=30)
    t.join()
    srv.close()
    assert report["resets"] == 1 or "Broken pipe" in (report["error"] or "")
    assert report["bytes"] < 64 << 20


def test_cli_prints_one_json_report():
    res = subprocess.run([sys.executable, "-m", "lab.workload", "ping", "127.0.0.1",
                          "--count", "5", "--interval", "0.01"], cwd=config.REPO_DIR,
                         capture_output=True, text=True, timeout=60)
    report = json.loads(res.stdout)
    assert report["sent"] == 5 and report["received"] == 5 and report["loss_pct"] == 0
    assert 0 < report["rtt_ms_median"] <= report["rtt_ms_p99"]


def test_percentile_picks_the_tail():
    values = list(range(1, 101))
    assert percentile(values, 50) in (50, 51)
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100


def test_gaps_longer_than_the_threshold_are_kept_with_their_start():
    import time
    from lab.workload import Progress
    p = Progress(gap_log_s=0.05)
    p.add(b"x")
    before = time.time()
    time.sleep(0.12)
    p.add(b"y")
    p.add(b"z")
    report = p.report(0, None)
    assert len(report["gaps"]) == 1, report["gaps"]
    gap = report["gaps"][0]
    assert gap["ms"] >= 120
    assert abs(gap["start"] - before) < 0.1
    assert "gaps" not in Progress().report(0, None)
