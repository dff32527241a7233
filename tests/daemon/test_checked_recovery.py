"""A checked device through understudyd (docs/checking.md, "Failing closed",
"A verdict, then a recovery"): a fatal verdict stops a driver before its
device write and the shadow restarts a clean one; a checker that dies or
hangs ends its driver, and the restart brings a fresh checker. A transfer
through us0 meanwhile stays exact. (The rewritten drivers and the gate
without the daemon are tests/runtime/test_check.py.)"""
import re

import pytest

from lab import traffic, understudy
from lab.guest import Guest
from tests import contract
from tests.conftest import REPO


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
# us_trace_header: `head` and `approved`). A checker closes its fd of
# the region once it is mapped, so the region is opened through map_files.
STOP_AND_READ_COUNTERS = """
import os, signal, struct, sys, time
pid, HEAD, APPROVED = map(int, sys.argv[1:4])
[mapping] = [line.split()[0] for line in open(f"/proc/{pid}/maps") if "memfd:understudy-trace" in line]
region = os.open(f"/proc/{pid}/map_files/{mapping}", os.O_RDONLY)
os.kill(pid, signal.SIGSTOP)
while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
    time.sleep(0.001)
header = os.pread(region, 4096, 0)
print(struct.unpack_from("<Q", header, HEAD)[0], struct.unpack_from("<Q", header, APPROVED)[0])
"""

TRACE_COUNTERS = [str(contract.value("trace.h", f"offsetof(struct us_trace_header, {c})")) for c in ("head", "approved")]


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
                stopped = g.run(["python3", "-c", STOP_AND_READ_COUNTERS, str(int(checker_pid)), *TRACE_COUNTERS],
                                check=True)
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
