"""lab/experiments: the measurements behind docs/ figures run and report what they say they do."""
import json
import subprocess
import sys

import pytest

from lab import config

pytestmark = pytest.mark.lab


def experiment(name, *args, timeout=900):
    return subprocess.run([sys.executable, "-m", f"lab.experiments.{name}", *args],
                          cwd=config.REPO_DIR, capture_output=True, text=True, timeout=timeout)


def test_rx_profile_splits_a_transfer_by_thread_in_both_worlds(lab_ready, no_leftover_qemu):
    res = experiment("rx_profile", "--driver", "e1000", "--rounds", "1", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    kernel, under = report["modes"]["kernel"], report["modes"]["understudy"]
    for mode in (kernel, under):
        assert mode["mbps"] > 10, mode
        assert 0 < mode["host_busy_cores"] <= 2.5 and mode["guest_ms_per_mb"] > 0, mode
        assert mode["retrans"] >= 0 and mode["guest_tcp_segs_out_per_mb"] > 0, mode
    # The receive path's threads, by the part they play: the kernel's softirq
    # in-kernel; the daemon's device thread and the driver process's NAPI
    # polls (on its IRQ thread at irq exit, re-polls on its softirq thread)
    # through understudy, and no in-kernel softirq work to speak of.
    assert kernel["guest_threads"]["ksoftirqd"] > 0.5, kernel
    assert any(t.startswith("dev-") for t in under["guest_threads"]), under
    napi = under["guest_threads"].get("driver:irq", 0) + under["guest_threads"].get("driver:ksoftirqd/0", 0)
    assert napi > 0.5, under
    assert under["guest_threads"].get("ksoftirqd", 0) < 0.5, under
    # The driver process and the daemon are address spaces of their own; the
    # kernel's driver and its softirq run in whichever is current.
    assert under["guest_mm_switches_per_mb"] > 5 * kernel["guest_mm_switches_per_mb"] + 1, report
    # Every received frame reaches the TAP through one of the daemon's writes.
    daemon_calls = sum(v for t, v in under["guest_syscalls_per_mb"].items() if t.startswith("dev-"))
    assert daemon_calls > 0.5, under["guest_syscalls_per_mb"]
    assert "[rx_profile] round 1/1: understudy" in res.stderr, "progress goes to stderr"
    assert report["commit"] and report["machine"]["cpu_model"], "a result says where it came from"


def test_rx_profile_refuses_a_variant_without_a_build(lab_ready):
    res = experiment("rx_profile", "--variant", "nothing=", timeout=60)
    assert res.returncode == 2
    assert "expected NAME=[UNDERSTUDYD][:DRIVER]" in res.stderr
