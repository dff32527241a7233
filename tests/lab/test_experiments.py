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
    # in-kernel; through understudy the driver process's NAPI polls (at irq
    # exit on the thread serving the interrupt -- for e1000's INTx line the
    # TX thread, not an IRQ thread -- re-polls on its softirq thread) and no
    # in-kernel softirq work to speak of.
    assert kernel["guest_threads"]["ksoftirqd"] > 0.5, kernel
    assert not any(t.startswith("driver:irq/") for t in under["guest_threads"]), under
    napi = sum(v for t, v in under["guest_threads"].items()
               if t.startswith(("driver:understudy-tx", "driver:ksoftirqd")))
    assert napi > 0.5, under
    assert under["guest_threads"].get("ksoftirqd", 0) < 0.5, under
    # No frame passes the daemon or crosses into another address space: the
    # daemon's thread makes no system call per frame (a megabyte is ~700
    # frames; what it makes are its timers' -- heartbeat, multicast poll --
    # a few a second, so per megabyte they depend on the rate), and the
    # driver's TX thread reads every frame the stack sends (the guest's
    # ACKs) from the TAP.
    calls = under["guest_syscalls_per_mb"]
    assert sum(v for t, v in calls.items() if t.startswith("dev-")) < 5, calls
    assert calls.get("driver:understudy-tx", 0) > 0.5, calls
    assert under["guest_mm_switches_per_mb"] < 2, under
    assert "[rx_profile] round 1/1: understudy" in res.stderr, "progress goes to stderr"
    assert report["commit"] and report["machine"]["cpu_model"], "a result says where it came from"


def test_rx_profile_refuses_a_variant_without_a_build(lab_ready):
    res = experiment("rx_profile", "--variant", "nothing=", timeout=60)
    assert res.returncode == 2
    assert "expected NAME=[UNDERSTUDYD][:DRIVER]" in res.stderr


# The way back, the same whether the TX thread sleeps or polls.
REPLY_HOPS = ["reply's interrupt -> driver writes the reply", "driver writes the reply -> reply on us0",
              "reply on us0 -> ping runs"]


def test_ping_trace_splits_each_ping_into_the_hops_of_the_driver_process(lab_ready, no_leftover_qemu):
    res = experiment("ping_trace", "--pings", "10", "--interval", "0.1", "--show", "1", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)     # the timeline shown goes to stderr
    assert "--- ping 1:" in res.stderr
    # The daemon is on no ping's path: TAP -> TX thread -> device -> the TX
    # thread again (it serves e1000's line) -> TAP -> ping.
    assert list(report["hop_ms_median"]) == [
        "request on us0 -> driver tx thread runs", "driver tx thread runs -> reply's interrupt", *REPLY_HOPS]
    assert report["pings"] >= 8, report
    assert 0 < report["total_ms_median"] < 50, report
    # Every interrupt runs VFIO's handler in the guest kernel, and the TX
    # thread unmasks the line with an ioctl.
    assert report["vfio_handler_ms_median"] > 0 and report["driver_ioctl_ms_median"] > 0, report
    assert report["commit"] and report["machine"]["cpu_model"], "a result says where it came from"


def test_ping_trace_splits_the_pings_of_a_polling_tx_thread_at_its_read_of_the_request(lab_ready,
                                                                                        no_leftover_qemu):
    res = experiment("ping_trace", "--pings", "20", "--interval", "0.05", "--poll-us", "30000",
                     "--show", "0", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    # Polling, the TX thread never sleeps between pings: no wake-up ends the
    # first hop, the read that returns the request does. Of the pings after
    # the first (which finds the thread asleep) most are split.
    assert list(report["hop_ms_median"]) == [
        "request on us0 -> driver tx thread reads it", "driver tx thread reads it -> reply's interrupt",
        *REPLY_HOPS]
    assert report["pings"] >= 15, report
    assert 0 < report["total_ms_median"] < 50, report
    assert report["silent_ms_median"] is None, "a polling thread's untraced calls are not silence"
