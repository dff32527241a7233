"""The runtime's kernel half, tested from a Kbuild module in a driver process (no device, no VM).

understudy-selftest.ko (tests/runtime/selftest) runs its tests from
init_module and reports each as a SELFTEST event; see its comments for what
each one checks.
"""
import re
import subprocess

import pytest

from .. import contract
from .conftest import BUILD, DRIVER, KERNEL_HALF, events

SELFTESTS = ["percpu", "timers", "wakeups", "workqueues", "napi", "skb", "receive", "vmalloc", "checksum", "strings",
             "gso", "printk", "warn", "devres", "time", "platform"]


@pytest.fixture(scope="module")
def selftest_run(runtime_built):
    return subprocess.run([str(DRIVER), "--runtime", str(KERNEL_HALF),
                           "--module", str(BUILD / "understudy-selftest.ko")],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", SELFTESTS)
def test_selftest(selftest_run, name):
    results = {e["name"]: e for e in events(selftest_run.stdout, "SELFTEST")}
    assert name in results, selftest_run.stdout + selftest_run.stderr
    assert results[name]["result"] == "ok", results[name]


def test_every_selftest_ran_and_init_succeeded(selftest_run):
    assert sorted(e["name"] for e in events(selftest_run.stdout, "SELFTEST")) == sorted(SELFTESTS)
    assert events(selftest_run.stdout, "INIT") == [{"module": "understudy_selftest", "result": "0"}]
    assert selftest_run.returncode == 0


def test_warn_once_is_reported_once_and_execution_continues(selftest_run):
    [warn] = events(selftest_run.stdout, "WARN")
    assert warn["file"].endswith("selftest.c") and int(warn["line"]) > 0
    assert warn["at"].startswith("understudy_selftest+")


@pytest.mark.parametrize("crash, reason", [
    (1, r"BUG at .*selftest\.c:\d+"),
    (2, r"spinlock \S+ taken twice \(deadlock\)"),
    (3, r"sleeps in atomic context \(preempt count 0x1\)"),
    (4, r"page fault at address 0x[0-9a-f]+000, rip understudy_selftest\+"),
])
def test_a_broken_module_ends_the_process_with_the_reason(runtime_built, crash, reason):
    """BUG() (ud2 via SIGILL), a self-deadlock, sleeping under a spinlock and
    running off the end of a vmalloc area (its guard page) are fatal, as in the
    kernel; module parameters are set like insmod's arguments."""
    res = subprocess.run([str(DRIVER), "--runtime", str(KERNEL_HALF),
                          "--module", str(BUILD / "understudy-selftest.ko"),
                          "--param", f"understudy_selftest.crash={crash}"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == contract.define("protocol.h", "US_EXIT_PANIC"), res.stdout + res.stderr
    [panic] = [line for line in res.stdout.splitlines() if line.startswith("PANIC ")]
    assert re.search(reason, panic), panic
    assert "INIT" not in res.stdout


def test_an_unknown_parameter_is_refused(runtime_built):
    res = subprocess.run([str(DRIVER), "--runtime", str(KERNEL_HALF),
                          "--module", str(BUILD / "understudy-selftest.ko"),
                          "--param", "understudy_selftest.no_such=1"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert events(res.stdout, "PARAM_FAILED") == [{"setting": "understudy_selftest.no_such=1",
                                                   "result": "-2"}]


def test_missing_imports_fail_the_load_with_the_complete_list(runtime_built, debian_modules):
    """igb needs much the runtime does not have yet: every missing symbol is named."""
    res = subprocess.run([str(DRIVER), "--runtime", str(KERNEL_HALF), "--module",
                          str(debian_modules / "kernel/drivers/net/ethernet/intel/igb/igb.ko")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    [failed] = events(res.stdout, "LOAD_FAILED")
    assert failed["result"] == "-8"   # -ENOEXEC
    assert re.search(r"^  tried 6\.1\.0-\d+-amd64: .*igb\.ko: \d+ unresolved imports", res.stderr, re.M)
    missing = re.findall(r"^  missing: (\S+) \(", res.stderr, re.M)
    assert len(missing) == int(failed["problems"]) - 1 > 1   # and the summary line
    assert "dca_remove_requester" in missing
    assert "INIT" not in res.stdout   # nothing ran


@pytest.mark.parametrize("module, banner", [
    # e1000e needs time, PCIe capability, runtime PM, MSI and MSI-X, and PTP (none) too.
    ("e1000/e1000", "Intel(R) PRO/1000 Network Driver"),
    ("e1000e/e1000e", "Intel(R) PRO/1000 Network Driver"),
])
def test_intel_gigabit_imports_all_resolve_with_matching_crcs(runtime_built, debian_modules, module, banner):
    """Debian's module loads against the kernel half (CRCs checked against
    Module.symvers) and its init registers the PCI driver; with no device, no probe."""
    res = subprocess.run([str(DRIVER), "--runtime", str(KERNEL_HALF), "--module",
                          str(debian_modules / f"kernel/drivers/net/ethernet/intel/{module}.ko")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert events(res.stdout, "INIT") == [{"module": module.split("/")[-1], "result": "0"}]
    assert events(res.stdout, "PROBE") == []
    assert banner in res.stderr
