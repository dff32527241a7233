"""Drivers run rewritten under the checker (docs/checking.md): the rewritten
code behaves as the original, the checker sees it, and the gate holds device
writes as its mode says.

Without a device, the runtime's self-test module runs its tests rewritten, in
each gate mode. In the lab, each NIC's Debian driver probes, opens and answers
ARP rewritten, with tests/runtime/launch.py doing what understudyd does for a
checked driver (trace region, understudy-checker, --trace-fd/--gate). e100
is the gate's real test: it writes into a receive descriptor it has mapped
for the device (e100_rx_alloc_skb links the previous RFD, then syncs it for
the device), which the DMA checker calls a device-owned write, fatal by
default -- so stringent mode stops it before its next device write. A checked
device through understudyd (a verdict's recovery, a checker that dies or
hangs) is tests/daemon/test_checked_recovery.py."""
import json
import os
import signal
import subprocess

import pytest

from lab import understudy
from tests import contract
from lab.guest import Guest

from .conftest import BUILD, DRIVER, KERNEL_HALF, events, launch
from .launch import TRACE_REGION_SIZE
from .test_nic_lab import probe_and_arp_argv

GATES = ["triage", "permissive", "stringent"]


@pytest.fixture(scope="module")
def checker(runtime_built):
    return understudy.build(release=True)["checker"]


def checker_lines(stdout: str) -> tuple[list[dict], dict]:
    """The checker's findings and its summary, from its JSON lines."""
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    findings = [line["finding"] for line in lines if "finding" in line]
    [summary] = [line["summary"] for line in lines if "summary" in line]
    return findings, summary


def run_module_checked(checker, module: str, gate: str, *params: str) -> tuple[subprocess.CompletedProcess, str]:
    """A test module (no device) in a driver process under the checker; its run and the checker's output."""
    trace_fd = os.memfd_create("understudy-trace")
    os.ftruncate(trace_fd, TRACE_REGION_SIZE)
    chk = subprocess.Popen([str(checker), "--trace-fd", str(trace_fd)], pass_fds=(trace_fd,),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        res = subprocess.run([str(DRIVER), "--runtime", str(KERNEL_HALF), "--module", str(BUILD / module),
                              *[a for p in params for a in ("--param", p)],
                              "--trace-fd", str(trace_fd), "--gate", gate],
                             pass_fds=(trace_fd,), capture_output=True, text=True, timeout=120)
    finally:
        os.close(trace_fd)
        chk.send_signal(signal.SIGTERM)
        out, _ = chk.communicate(timeout=30)
    return res, out


@pytest.mark.parametrize("gate", GATES)
def test_the_selftests_pass_rewritten_and_the_checker_sees_them(checker, gate):
    res, out = run_module_checked(checker, "understudy-selftest.ko", gate)
    assert res.returncode == 0, res.stdout + res.stderr
    results = events(res.stdout, "SELFTEST")
    assert len(results) >= 13 and all(r["result"] == "ok" for r in results), res.stdout
    findings, summary = checker_lines(out)
    assert summary["events"] > 10_000 and summary["verdict_at"] is None
    # The self-tests share flags with their timers, works and NAPI polls and
    # wait for them with the runtime's own wake-ups, which lockset cannot see:
    # those are the only findings (docs/checking.md, "What the checkers report").
    assert {f["kind"] for f in findings} <= {"data-race"}, findings
    assert not any(f["fatal"] for f in findings)


# understudy-faulty.ko's bugs (tests/runtime/faulty/faulty.c): fault -> what must be found, where.
FAULTS = {
    1: ("memory", "use-after-free", "use_after_free"),
    2: ("memory", "out-of-bounds-write", "out_of_bounds"),
    3: ("memory", "double-free", None),     # a site without probes of its own: named by address
    4: ("memory", "uninitialised-read", "uninitialised_read"),
    5: ("dma", "device-owned-write", "write_device_owned"),
    6: ("dma", "unmap-never-mapped", "unmap_never_mapped"),
    7: ("dma", "repeated-unmap", "repeated_unmap"),
    8: ("race", "data-race", "missing_lock"),
    9: ("memory", "uninitialised-read", "uninitialised_stack_read"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_bug_of_the_corpus_is_found_by_its_checker_at_its_function(checker, fault):
    res, out = run_module_checked(checker, "understudy-faulty.ko", "triage",
                                  f"understudy_faulty.fault={fault}")
    assert res.returncode == 0 and events(res.stdout, "FAULTY") == [{"fault": str(fault), "done": "1"}], \
        res.stdout + res.stderr
    findings, _ = checker_lines(out)
    name, kind, function = FAULTS[fault]
    assert [(f["checker"], f["kind"]) for f in findings] == [(name, kind)], findings
    if function:
        assert findings[0]["site"]["function"] == function, findings
        assert findings[0]["site"]["module"] == "understudy-faulty"     # named after its file


def test_the_same_work_done_right_draws_no_finding(checker):
    res, out = run_module_checked(checker, "understudy-faulty.ko", "stringent", "understudy_faulty.fault=0")
    assert res.returncode == 0, res.stdout + res.stderr
    findings, summary = checker_lines(out)
    assert findings == [] and summary["events"] > 0


def run_nic_checked(device: str, gate: str, modules) -> tuple[subprocess.CompletedProcess, list, dict]:
    argv = probe_and_arp_argv(device, modules)
    with Guest(devices=[device]) as g:
        res = launch(g, "nic0", argv, options=("--check", gate), timeout=300)
    findings, summary = checker_lines(res.out)
    return res, findings, summary


@pytest.mark.lab
@pytest.mark.parametrize("device", ["e1000", "pcnet", "rtl8139"])
def test_a_nic_driver_runs_rewritten_with_each_device_write_approved(checker, lab_ready,
                                                                     debian_modules, device):
    res, findings, summary = run_nic_checked(device, "stringent", debian_modules)
    assert res.returncode == 0, res.out + res.err
    assert events(res.out, "ARP_WAIT") == [{"answered": "1"}], res.out
    assert summary["verdict_at"] is None and not any(f["fatal"] for f in findings), findings
    assert summary["events"] > 1000


@pytest.mark.lab
def test_stringent_stops_e100_before_the_device_write_after_its_dma_violation(
        checker, lab_ready, debian_modules):
    res, findings, summary = run_nic_checked("i82559er", "stringent", debian_modules)
    # Stopped by the checker's verdict.
    assert res.returncode == contract.define("protocol.h", "US_EXIT_VERDICT"), res.out + res.err
    [stop] = [line for line in res.out.splitlines() if line.startswith("CHECK-STOP ")]
    assert f"at event {summary['verdict_at'] - 1}:" in stop
    violation = [f for f in findings if f["kind"] == "device-owned-write"]
    assert violation and violation[0]["fatal"]
    assert violation[0]["site"]["function"].startswith("e100_rx_alloc")
    assert violation[0]["other"]["mapping"]["direction"] in ("bidirectional", 0)
    assert not events(res.out, "ARP_WAIT")          # it never got as far


@pytest.mark.lab
def test_triage_lets_e100_run_and_reports_the_same_violation(checker, lab_ready, debian_modules):
    res, findings, summary = run_nic_checked("i82559er", "triage", debian_modules)
    assert res.returncode == 0, res.out + res.err
    assert events(res.out, "ARP_WAIT") == [{"answered": "1"}]
    assert any(f["kind"] == "device-owned-write" and f["site"]["function"].startswith("e100_rx_alloc")
               for f in findings), findings


@pytest.mark.lab
def test_tulip_rewrites_its_mapped_setup_frame_and_leaks_nothing_managed(checker, lab_ready, debian_modules):
    """tulip_up maps the setup frame for the device and queues it; the open's
    set_rx_mode then rebuilds it in place before the transmit completion has
    unmapped it: a device-owned write, fatal, so stringent stops tulip as it
    stops e100 and triage lets it run. Its rings are dmam_ memory, released
    after remove and before the leak check (STOP), through the DMA path: no
    leak and no unknown free."""
    res, findings, summary = run_nic_checked("tulip", "triage", debian_modules)
    assert res.returncode == 0, res.out + res.err
    assert events(res.out, "ARP_WAIT") == [{"answered": "1"}]
    assert events(res.out, "UNBOUND") == [{"driver": "tulip", "device": "1011:0019", "released": "5"}]
    violation = [f for f in findings if f["kind"] == "device-owned-write"]
    assert violation and all(f["site"]["function"] == "set_rx_mode" for f in violation), findings
    assert violation[0]["other"]["mapping"]["site"]["function"] == "tulip_up"
    assert not {f["kind"] for f in findings} & {"mapping-leak", "coherent-leak", "invalid-coherent-free"}, findings
