"""`python3 -m lab bench baseline`: the in-kernel yardstick, as JSON other tools read."""
import json
import subprocess
import sys

import pytest

from lab import config
from lab.bench import DEFAULT_POLL_US, queue_packets, run_ratios, spread
from lab.bench_plot import series, write_plot

pytestmark = pytest.mark.lab
REQUIRED = ["tx_mbps", "rx_mbps", "rtt_ms_median", "rtt_ms_p99", "reload_downtime_ms"]


def bench(*args):
    return subprocess.run([sys.executable, "-m", "lab", "bench", "baseline", *args],
                          cwd=config.REPO_DIR, capture_output=True, text=True, timeout=600)


def test_baseline_json_has_the_figures_other_tools_read(lab_ready, no_leftover_qemu):
    res = bench("--driver", "e1000", "--runs", "2", "--seconds", "2", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    for key in REQUIRED:
        assert isinstance(report[key], (int, float)), key
    assert report["runs"] == len(report["per_run"]) == 2
    assert report["tx_mbps"] > 10 and report["rx_mbps"] > 10
    assert 0 < report["rtt_ms_median"] <= report["rtt_ms_p99"]
    assert report["ping_loss_pct"] == 0
    # A reload re-runs the probe and waits for link: the sum of its parts.
    assert report["reload_downtime_ms"] > report["reload_probe_ms"] > 0
    assert "bench baseline --driver e1000" in report["command"]
    assert "[bench]" in res.stderr, "progress goes to stderr"


def test_a_driver_the_lab_cannot_run_is_refused_with_the_reason(lab_ready):
    res = bench("--driver", "8139too", "--json")
    assert res.returncode == 3
    assert "8139cp" in res.stderr and res.stdout == ""


@pytest.mark.parametrize("driver, cpu", [("e1000", None), ("pcnet32", 0)])
def test_net_compares_understudy_with_the_in_kernel_driver_in_one_run(lab_ready, no_leftover_qemu, tmp_path,
                                                                      driver, cpu):
    """`bench net`, on its default network (a bridged TAP): both worlds measured in
    the same guest, and the ratios are understudy's medians over the kernel's.
    pcnet32 keeps no statistics (`ethtool -S` fails): its runs carry no per-queue
    counters; it runs with the driver process on another vCPU than the default."""
    plot = tmp_path / "net.png"
    res = subprocess.run([sys.executable, "-m", "lab", "bench", "net", "--driver", driver,
                          "--runs", "1", "--seconds", "2", "--json", "--plot", str(plot),
                          *(["--driver-cpu", str(cpu)] if cpu is not None else [])],
                         cwd=config.REPO_DIR, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["network"] == "tap" and report["driver"] == driver
    # What it ran on: the CPU TCG emulates, and the vCPU understudy's driver process had.
    assert report["guest_cpu"] == config.guest_defaults().cpu_model
    assert report["driver_cpu"] == (config.guest_defaults().cpus - 1 if cpu is None else cpu)
    if driver == "pcnet32":
        assert [r["queue_packets"] for w in ("kernel", "understudy") for r in report["per_run"][w]] == [{}, {}]
    assert len(report["per_run"]["kernel"]) == len(report["per_run"]["understudy"]) == 1
    # understudy's driver polled (the default window); its pings were also measured without.
    assert report["poll_us"] == DEFAULT_POLL_US
    for world in ("kernel", "understudy"):
        assert 0 < report[world]["ping_cpu_utilisation"] <= 1, world
    assert 0 < report["understudy"]["ping_cpu_utilisation_sleeping"] <= 1
    for ratio, figure, kernel_figure in [
            ("tx_ratio", "tx_mbps", "tx_mbps"), ("rx_ratio", "rx_mbps", "rx_mbps"),
            ("rtt_ratio", "rtt_ms_median", "rtt_ms_median"),
            ("rtt_ratio_sleeping", "rtt_ms_median_sleeping", "rtt_ms_median"),
            ("tcp_rtt_ratio", "tx_rtt_ms_mean", "tx_rtt_ms_mean"),
            ("cpu_per_byte_ratio", "cpu_ns_per_byte", "cpu_ns_per_byte")]:
        kernel, under = report["kernel"][kernel_figure], report["understudy"][figure]
        assert kernel > 0 and under > 0, (figure, kernel, under)
        assert report[ratio] == pytest.approx(under / kernel, rel=0.01), ratio
        # one run: its spread is that run's ratio three times
        s = report["spread"][ratio]
        assert s["min"] == s["median"] == s["max"] == pytest.approx(under / kernel, rel=0.01), (ratio, s)
    assert report["machine"]["cpu_model"]      # the host, beside the guest's emulated CPU
    assert report["ping_loss_pct"] == 0
    assert report["hash_ok"] == {"kernel": True, "understudy": True}
    # On the bridge the far end is the host's TCP, whose window is not slirp's 64 KiB.
    assert report["kernel"]["tx_peer_window_kib_max"] > 64
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_spread_pairs_the_runs_and_skips_what_one_side_lacks():
    kernel = [{"tx_mbps": 100}, {"tx_mbps": 200}, {"tx_mbps": 0}, {"tx_mbps": 100}]
    under = [{"tx_mbps": 50}, {"tx_mbps": 180}, {"tx_mbps": 90}, {"tx_mbps": None}]
    assert run_ratios(under, kernel, "tx_mbps") == [0.5, 0.9]
    assert run_ratios([{"a": 3}, {"a": 4}], [{"b": 2}, {"a": 1}], "a", "b") == [1.5]
    assert spread([0.5, 0.9, 0.7]) == {"min": 0.5, "median": 0.7, "max": 0.9}
    assert spread([]) is None


def run(mbps: float) -> dict:
    return {"tx_mbps": mbps, "rx_mbps": mbps / 2, "cpu_utilisation": 0.5}


def test_queue_packets_are_the_per_queue_packet_counters_only():
    stats = {"tx_queue_0_packets": 5, "tx_queue_1_packets": 7, "rx_queue_10_packets": 1,
             "tx_queue_0_bytes": 900, "rx_packets": 13, "tx_queue_0_kicks": 2}
    assert queue_packets(stats) == {"tx_queue_0_packets": 5, "tx_queue_1_packets": 7, "rx_queue_10_packets": 1}


def test_a_no_iommu_report_is_drawn_as_two_pairs_each_beside_its_own_guests_kernel(tmp_path):
    report = {"driver": "e1000", "runs": 2, "seconds": 5, "machine": {"cpu_model": "test"},
              "per_run": {"kernel": [run(900), run(1100)], "understudy": [run(600), run(800)]},
              "vfio": {"per_run": {"kernel": [run(500), run(700)], "understudy": [run(450), run(650)]}}}
    cases = series(report)
    assert list(cases) == ["in-kernel, guest without IOMMU", "understudy over UIO",
                           "in-kernel, guest with IOMMU", "understudy over VFIO"]
    assert [r["tx_mbps"] for r in cases["understudy over VFIO"]] == [450, 650]
    del report["vfio"]
    assert list(series(report)) == ["in-kernel", "understudy"]
    path = tmp_path / "fig.png"
    write_plot([report], path)
    assert path.read_bytes()[:4] == b"\x89PNG"
