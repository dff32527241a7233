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
default -- so stringent mode stops it before its next device write."""
import json
import os
import re
import signal
import subprocess

import pytest

from lab import traffic, understudy
from lab.guest import Guest

from .conftest import BUILD, DRIVER, KERNEL_HALF, REPO, events
from .launch import TRACE_REGION_SIZE
from .test_nic_lab import LAUNCH, probe_and_arp_argv

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
        res = g.run(["python3", str(LAUNCH), "--check", gate, g.pci_address("nic0"), *argv],
                    cwd=str(REPO), timeout=300)
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
    assert res.returncode == 3, res.out + res.err     # stopped by the checker's verdict
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


@pytest.mark.lab
def test_a_verdict_stops_a_variant_before_its_device_write_and_the_shadow_recovers(lab_ready):
    """Stringent mode, a host → guest transfer through us0: a variant of e1000 that
    writes into a receive buffer the device owns (lab/check_variant.py, made in the
    running process) meets a small frame (a ping's answer takes the copybreak
    path); the checker's verdict stops it before its next device write, the
    daemon restarts a clean e1000 from disk, and the transfer never notices."""
    with Guest(devices=["e1000"]) as g:
        daemon, bdf = understudy.start_understudy(g, "e1000", 3, check="stringent")
        try:
            before = daemon.status()[bdf]
            with traffic.Us0Transfer(g, 48 << 20, timeout=300) as transfer:
                st = traffic.wait_received(daemon, bdf, before["counters"]["rx_bytes"] + (4 << 20), transfer)
                inject = g.run(["python3", "-m", "lab.check_variant", str(st["pid"])], cwd=str(REPO), timeout=60)
                assert inject.returncode == 0, inject.err
                g.run("ping -n -q -c 1 -w 5 10.0.2.2", timeout=30)
                after = understudy.wait_recovery(daemon, bdf, before["recovery_count"] + 1)
                result = transfer.result(600)
            _, report = daemon.cli_json("check", "report", "us0")
        finally:
            daemon.stop()
    recovery = after["recoveries"][-1]
    assert recovery["outcome"] == "recovered", recovery
    assert "verdict" in recovery["cause"], recovery
    assert result.hash_ok and result.summary()["resets"] == 0, result.summary()
    [verdict] = report["verdicts"]
    assert "device-owned-write" in verdict["cause"] and "e1000" in verdict["cause"], verdict
    owned = [f for f in report["findings"] if f["kind"] == "device-owned-write"]
    assert owned and owned[0]["site"]["function"] == "e1000_clean_rx_irq", report["findings"]


@pytest.mark.lab
def test_a_checker_that_dies_ends_its_driver_and_the_shadow_restarts_both(lab_ready):
    """Fail closed: with its checker gone nothing approves the driver's device
    writes, so the daemon ends the driver; the restart brings a fresh checker,
    and a transfer through us0 meanwhile stays exact."""
    with Guest(devices=["e1000"]) as g:
        daemon, bdf = understudy.start_understudy(g, "e1000", 3, check="stringent")
        try:
            before = daemon.status()[bdf]
            checker_pid = before["check"]["checker_pid"]
            with traffic.Us0Transfer(g, 48 << 20, timeout=300) as transfer:
                traffic.wait_received(daemon, bdf, before["counters"]["rx_bytes"] + (4 << 20), transfer)
                g.run(f"kill -9 {int(checker_pid)}", check=True)
                after = understudy.wait_recovery(daemon, bdf, before["recovery_count"] + 1)
                result = transfer.result(600)
        finally:
            daemon.stop()
    recovery = after["recoveries"][-1]
    assert recovery["outcome"] == "recovered" and "checker" in recovery["cause"], recovery
    assert after["check"]["checker_pid"] not in (None, checker_pid)
    assert result.hash_ok and result.summary()["resets"] == 0, result.summary()


# Stops a process and, once it is stopped, prints the head and approved
# counters of the trace region it maps (include/understudy/trace.h, struct
# us_trace_header: head at 128, approved at 192). A checker closes its fd of
# the region once it is mapped, so the region is opened through map_files.
STOP_AND_READ_COUNTERS = """
import os, signal, struct, sys, time
pid = int(sys.argv[1])
[mapping] = [line.split()[0] for line in open(f"/proc/{pid}/maps") if "memfd:understudy-trace" in line]
region = os.open(f"/proc/{pid}/map_files/{mapping}", os.O_RDONLY)
os.kill(pid, signal.SIGSTOP)
while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
    time.sleep(0.001)
header = os.pread(region, 200, 0)
print(struct.unpack_from("<Q", header, 128)[0], struct.unpack_from("<Q", header, 192)[0])
"""


@pytest.mark.lab
def test_a_checker_that_hangs_ends_its_driver_and_the_shadow_restarts_both(lab_ready):
    """Fail closed: a stopped checker approves nothing, so its stringent driver
    waits at its gate with its CPU held and misses its PING; the daemon puts the
    hang down to the checker, ends both, and the restart brings a fresh checker;
    a transfer through us0 meanwhile stays exact."""
    with Guest(devices=["e1000"]) as g:
        daemon, bdf = understudy.start_understudy(g, "e1000", 3, check="stringent")
        try:
            before = daemon.status()[bdf]
            checker_pid, driver_pid = before["check"]["checker_pid"], before["pid"]
            with traffic.Us0Transfer(g, 48 << 20, timeout=300) as transfer:
                traffic.wait_received(daemon, bdf, before["counters"]["rx_bytes"] + (4 << 20), transfer)
                stopped = g.run(["python3", "-c", STOP_AND_READ_COUNTERS, str(int(checker_pid))], check=True)
                after = understudy.wait_recovery(daemon, bdf, before["recovery_count"] + 1)
                old_checker = g.run(f"test -e /proc/{int(checker_pid)}")
                result = transfer.result(600)
        finally:
            log = daemon.stop()
    _, approved_at_stop = map(int, stopped.out.split())
    recovery = after["recoveries"][-1]
    assert recovery["outcome"] == "recovered", recovery
    hung = re.search(rf"^hung: no reply to \S+ within \d+ ms: checker {checker_pid} of driver process {driver_pid} "
                     r"approved nothing for at least [0-9.]+ s while the driver waited on it "
                     r"\(approved (\d+) of (\d+) events\), so no device write passed meanwhile; "
                     r"the driver and its checker are ended", recovery["cause"])
    assert hung, recovery
    [ending] = [line for line in log.splitlines() if f"ending driver process {driver_pid}: " in line]
    assert hung[0] in ending, ending
    # Nothing was approved from the stop to the daemon's look at the hang, and
    # the driver waited on more: in stringent mode no device write after event
    # `approved` reached the device (docs/checking.md, "The gate").
    assert int(hung[1]) == approved_at_stop < int(hung[2]), (stopped.out, recovery["cause"])
    assert "approved nothing" in after["check"]["last_error"], after["check"]
    # Killed and reaped (a zombie would still have its /proc entry), and replaced.
    assert old_checker.returncode == 1
    assert after["check"]["checker_pid"] not in (None, checker_pid)
    assert result.hash_ok and result.summary()["resets"] == 0, result.summary()
