"""`python3 -m lab scenario`: the shadow driver's crash scenarios, run small.

crash-loop: Debian's e1000.ko, pcnet32.ko and 8139cp.ko (QEMU's rtl8139) are
each SIGKILLed three times during a 60 MB hash-checked transfer; every kill
must be recovered without a reset and the JSON must carry the figures
docs/recovery.md reports. leak-check: 30 kill/recover
cycles must leave the daemon's fds, threads, memory and the pool's free
buffers where they were after the warm-up.
"""
import json
import subprocess
import sys

import pytest

from lab import config
from lab.arguments import parse_size
from lab.pcap import announcements_from, frames_from
from lab.traffic import gaps_between, gaps_per_kill


def test_each_kill_gets_the_longest_gap_that_ended_before_the_next_kill():
    kills = [10.0, 20.0]
    gaps = [{"start": 9.9, "ms": 900.0},      # the first kill's outage
            {"start": 12.0, "ms": 50.0},      # noise after it
            {"start": 19.95, "ms": 4000.0},   # the second kill's outage, begun before it
            {"start": 5.0, "ms": 3000.0}]     # before any kill
    assert gaps_per_kill(gaps, kills) == [900.0, 4000.0]
    assert gaps_per_kill([], kills) == [None, None]


def test_frames_a_mac_sent_are_read_from_a_pcap_and_their_gaps_found():
    import struct
    guest, peer = bytes.fromhex("525400123456"), bytes.fromhex("525500000002")

    def record(t: float, src: bytes) -> bytes:
        frame = peer + src + b"\x08\x00" + bytes(40)
        return struct.pack("<IIII", int(t), round(t % 1 * 1e6), len(frame), len(frame)) + frame

    pcap = struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 96, 1)
    pcap += b"".join(record(t, src) for t, src in
                     [(100.0, guest), (100.01, peer), (100.02, guest), (100.9, guest), (101.0, peer)])
    times = frames_from(pcap, "52:54:00:12:34:56")
    assert [round(t, 3) for t in times] == [100.0, 100.02, 100.9]
    assert gaps_between(times, 20) == [{"start": times[1], "ms": 880.0}]
    with pytest.raises(Exception, match="not a pcap"):
        frames_from(b"nonsense" * 10, "52:54:00:12:34:56")


def test_announcements_are_gratuitous_arps_and_unsolicited_advertisements_of_that_mac_only():
    import struct
    us0, peer = bytes.fromhex("525400123456"), bytes.fromhex("525500000002")
    ip, peer_ip = bytes([10, 203, 0, 2]), bytes([10, 203, 0, 1])

    def arp(src: bytes, sender: bytes, target: bytes) -> bytes:
        return b"\xff" * 6 + src + b"\x08\x06" + bytes([0, 1, 8, 0, 6, 4, 0, 1]) + src + sender + bytes(6) + target

    def na(src: bytes, icmp_type: int) -> bytes:
        ipv6 = bytes([0x60, 0, 0, 0, 0, 32, 58, 255]) + bytes(32)
        return b"\x33\x33\0\0\0\x01" + src + b"\x86\xdd" + ipv6 + bytes([icmp_type]) + bytes(31)

    frames = [(1.0, arp(us0, ip, peer_ip)),     # an ordinary request for the peer: not one
              (2.0, arp(us0, ip, ip)),          # gratuitous
              (2.1, na(us0, 136)),              # unsolicited advertisement
              (2.2, na(us0, 135)),              # a solicitation: not one
              (2.3, arp(peer, peer_ip, peer_ip)),  # the peer's own: another MAC
              (2.4, arp(us0, ip, ip)[:30])]     # cut short by the snap length: cannot tell
    pcap = struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 96, 1)
    pcap += b"".join(struct.pack("<IIII", int(t), round(t % 1 * 1e6), len(f), len(f)) + f for t, f in frames)
    assert [round(t, 3) for t in announcements_from(pcap, "52:54:00:12:34:56")] == [2.0, 2.1]


def test_a_moves_wire_gap_spans_both_nics_and_its_announcements_are_the_destinations():
    import struct
    from lab.migrate_loop import wire
    us0 = bytes.fromhex("525400123456")
    ip = bytes([10, 203, 0, 2])

    def capture(frames):
        pcap = struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 96, 1)
        return pcap + b"".join(struct.pack("<IIII", int(t), round(t % 1 * 1e6), len(f), len(f)) + f
                               for t, f in frames)

    data = b"\x52\x55\0\0\0\x02" + us0 + b"\x08\x00" + bytes(40)
    garp = b"\xff" * 6 + us0 + b"\x08\x06" + bytes([0, 1, 8, 0, 6, 4, 0, 1]) + us0 + ip + bytes(6) + ip
    # nic0 serves until 10.0, nic1 from 10.8 (announcing at 10.9), nic0 again from 21.5.
    nic0 = capture([(9.9, data), (10.0, data), (21.5, data), (21.6, garp)])
    nic1 = capture([(10.8, data), (10.9, garp)] + [(11.0 + i / 2, data) for i in range(19)])   # ... 20.0
    records = [{"move": 1, "dest_nic": 1}, {"move": 2, "dest_nic": 0}]
    figures = wire(records, [nic0, nic1], "52:54:00:12:34:56", [9.95, 19.0])
    assert [r["wire_gap_ms"] for r in records] == [800.0, 1500.0]
    assert [(r["announced_on_wire"], r["announced_after_first_frame_ms"]) for r in records] == [(1, 100.0), (1, 100.0)]
    assert (figures["wire_gap_ms_median"], figures["wire_gap_ms_max"]) == (1150.0, 1500.0)


def test_sizes_parse_and_bad_ones_are_usage_errors():
    assert parse_size("60M") == 60 << 20 and parse_size("2G") == 2 << 30
    assert parse_size("1000000") == 1000000
    for bad in ("5X", "-1M", ""):
        res = subprocess.run([sys.executable, "-m", "lab", "scenario", "crash-loop", "--bytes", bad],
                             cwd=config.REPO_DIR, capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and "--bytes" in res.stderr, (bad, res.stderr)
    res = subprocess.run([sys.executable, "-m", "lab", "scenario", "leak-check", "--driver", "nvme"],
                         cwd=config.REPO_DIR, capture_output=True, text=True, timeout=60)
    assert res.returncode == 3 and "not a network driver" in res.stderr, res.stderr


def run_scenario(*args: str, timeout: float) -> tuple[int, dict, str]:
    res = subprocess.run([sys.executable, "-m", "lab", "scenario", *args, "--json"],
                         cwd=config.REPO_DIR, capture_output=True, text=True, timeout=timeout)
    print(res.stderr[-4000:])
    return res.returncode, json.loads(res.stdout), res.stderr


@pytest.mark.lab
@pytest.mark.parametrize("driver, dma", [("e1000", "iommu"), ("pcnet32", "iommu"), ("rtl8139", "iommu"),
                                         ("e1000", "no-iommu")], ids=["e1000", "pcnet32", "rtl8139", "e1000-uio"])
def test_crash_loop_recovers_every_kill_and_the_transfer_is_intact(lab_ready, no_leftover_qemu, driver, dma):
    rc, report, err = run_scenario("crash-loop", "--driver", driver, "--kills", "3", "--bytes", "60M",
                                   "--seed", "7", *(["--no-iommu"] if dma == "no-iommu" else []), timeout=900)
    print(json.dumps({k: v for k, v in report.items() if k != "per_recovery"}, indent=1))
    assert report["dma"] == ("iommu (vfio-pci)" if dma == "iommu" else "unconfined (uio_pci_generic)")
    assert rc == 0 and report["ok"], report["failures"]
    assert report["hash_ok"] and report["bytes_received"] == 60 << 20
    assert report["resets"] == 0 and report["recoveries"] == 3 and report["recovered"] == 3
    assert report["carrier_drops"] == 0
    records = report["per_recovery"]
    assert [r["kill"] for r in records] == [1, 2, 3]
    assert len({r["pid"] for r in records}) == 3, "each kill hit a fresh driver process"
    for r in records:
        assert "killed by signal 9" in r["cause"] and r["outcome"] == "recovered", r
        assert all(r[k] is not None and r[k] > 0 for k in
                   ("stop_ms", "start_ms", "replay_ms", "first_packet_ms", "downtime_ms")), r
        # The application cannot see data again before the daemon's first frame.
        assert r["app_gap_ms"] is not None and r["app_gap_ms"] > 0, r
        assert r["wire_gap_ms"] is not None and r["wire_gap_ms"] > 0, r
        # A 10 ms ping runs throughout: its replies stop at every kill.
        assert r["probe_gap_ms"] is not None and r["probe_gap_ms"] > 0, r
    downtimes = sorted(r["downtime_ms"] for r in records)
    assert report["downtime_ms_median"] == downtimes[1] and report["downtime_ms_max"] == downtimes[2]
    assert report["app_gap_ms_max"] >= report["app_gap_ms_median"] > 0
    assert "[scenario] kill 3/3" in err


@pytest.mark.lab
def test_crash_loop_finds_injected_hangs_in_tens_of_milliseconds(lab_ready, no_leftover_qemu):
    rc, report, err = run_scenario("crash-loop", "--driver", "e1000", "--kills", "2", "--bytes", "100M",
                                   "--fault", "hang", "--ping-interval-ms", "20", "--ping-timeout-ms", "100",
                                   "--nic-props", "autonegotiation=off", timeout=900)
    print(json.dumps({k: v for k, v in report.items() if k != "per_recovery"}, indent=1))
    assert rc == 0 and report["ok"], report["failures"]
    assert report["fault"] == "hang" and report["recoveries"] == 2, "one restart per hang, no false verdict"
    for r in report["per_recovery"]:
        assert r["hang"].startswith("e1000_") and "jmp" in r["hang"], r
        assert r["cause"].startswith("hung: no reply to PING within 100 ms"), r
        # Measured 44-103 ms; seconds would mean the heartbeat missed a spinning driver.
        assert r["detect_ms"] is not None and 0 < r["detect_ms"] < 500, r
        assert r["outcome"] == "recovered", r
        # autonegotiation=off: the fresh e1000 has its link at once.
        assert r["link_ms"] is None or r["link_ms"] < 500, r
    assert report["hash_ok"] and report["resets"] == 0
    assert "detected and ended in" in err


@pytest.mark.lab
def test_leak_check_finds_no_growth_after_30_cycles(lab_ready, no_leftover_qemu):
    rc, report, _ = run_scenario("leak-check", "--driver", "e1000", "--cycles", "30", "--warmup", "5",
                                 timeout=1800)
    print(json.dumps(report, indent=1))
    assert rc == 0 and report["ok"], report["failures"]
    assert report["recoveries"] == 30
    growth = report["growth"]
    assert growth["fds"] == 0 and growth["threads"] == 0 and growth["pool_free"] == 0, growth
    assert growth["rss_anon_kib"] <= report["rss_slack_kib"], growth
    # At rest the driver holds at most the frames whose completions it has not
    # yet been asked for (received frames take no pool buffer): never the pool.
    assert 0 < report["after"]["pool_free"] <= report["after"]["pool_buffers"], report["after"]
    assert report["ping_after"]["loss_pct"] == 0
