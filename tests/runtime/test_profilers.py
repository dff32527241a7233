"""Valgrind's memcheck and perf on a driver process.

A driver is an ordinary process, so the ordinary tools work on it
(docs/debugging.md): understudyd starts it under a wrapper command
(UNDERSTUDY_DRIVER_WRAPPER) such as valgrind, whose tool sits below the
loader's low window (runtime/loader/loader.h), and perf names the modules'
functions from the map the driver writes with UNDERSTUDY_PERF_MAP=1.
Valgrind reports module code at bare addresses; the same map names them.
"""
import os
import re
import subprocess
from pathlib import Path

import pytest

from lab import net, understudy
from lab.guest import Guest

from .conftest import BUILD, DRIVER, KERNEL_HALF
from .test_debugger import perf_map_entries

MEMCHECK_LOG = "/tmp/understudy-memcheck"
PERF_DATA = "/tmp/understudy-perf.data"


@pytest.fixture(scope="module")
def bins(lab_ready, runtime_built):
    return understudy.build()


def function_at(perf_map: str, address: int) -> str | None:
    return next((name for start, size, name in perf_map_entries(perf_map) if start <= address < start + size), None)


def up_on_us0(g: Guest, bins: dict, env: dict[str, str], *options: str) -> tuple[understudy.Daemon, dict]:
    """understudyd (with `env` and `options`) runs Debian's e1000 for nic0 behind
    us0, which carries the slirp network; returns the daemon and the device's status."""
    bdf, ko = understudy.hand_over(g, "nic0", "e1000")
    d = understudy.Daemon(g, bins, None, *options, env=env)
    d.run(bdf, [ko])
    d.wait_state(bdf, "registered", timeout=600)
    g.run("ip link set us0 up", check=True)
    d.wait_state(bdf, "open", timeout=300, carrier=True)
    net.bring_up_iface(g, "us0", timeout=300)
    return d, d.status()[bdf]


def test_memcheck_names_no_module_function_but_the_perf_map_does(runtime_built):
    """The selftest's store past a vmalloc area (crash=4): memcheck reports an
    invalid write in module code it cannot name; the perf map names it."""
    res = subprocess.run(["valgrind", "--tool=memcheck", "--leak-check=no", str(DRIVER),
                          "--runtime", str(KERNEL_HALF), "--module", str(BUILD / "understudy-selftest.ko"),
                          "--param", "understudy_selftest.crash=4"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "UNDERSTUDY_PERF_MAP": "1"})
    pid = re.search(r"==(\d+)== Command", res.stderr).group(1)
    perf_map = Path(f"/tmp/perf-{pid}.map")
    try:
        text = perf_map.read_text()
    finally:
        perf_map.unlink(missing_ok=True)
    write = re.search(r"Invalid write of size 8\n==\d+==    at (0x[0-9A-F]+): \?\?\?\n", res.stderr)
    assert write, res.stderr
    assert function_at(text, int(write.group(1), 16)) == "selftest_init", res.stderr
    assert "ERROR SUMMARY: 1 errors from 1 contexts" in res.stderr, res.stderr
    assert "PANIC page fault" in res.stdout, res.stdout


@pytest.mark.lab
def test_memcheck_runs_the_e1000_driver_process_through_traffic(no_leftover_qemu, bins):
    """Debian's e1000 under memcheck carries a ping and a hash-checked transfer;
    memcheck, ended by SIGTERM, reports no error in the template that loaded and
    probed the module nor in its fork that drove the traffic."""
    wrapper = f"valgrind --tool=memcheck --leak-check=no --vgdb=no --log-file={MEMCHECK_LOG}.%p"
    # Everything is several times slower under memcheck: generous deadlines.
    with Guest(devices=["e1000"]) as g:
        d, status = up_on_us0(g, bins, {"UNDERSTUDY_DRIVER_WRAPPER": wrapper},
                              "--probe-timeout-ms", "600000", "--ping-timeout-ms", "60000",
                              "--request-timeout-ms", "120000", "--tx-timeout-ms", "60000")
        p = net.ping(g, count=20, interval=0.1)
        bulk = net.bulk(g, "tx", 2_000_000, timeout=600)
        print("ping", p, "transfer", bulk.summary())
        pids = {"driver": status["pid"], "template": status["template_pid"]}
        # SIGKILL, the daemon's way to end a driver, would leave no summary.
        g.run(["kill", "-TERM", *map(str, pids.values())], check=True)
        logs = {}
        for role, pid in pids.items():
            g.run(f"for i in $(seq 300); do grep -q 'ERROR SUMMARY' {MEMCHECK_LOG}.{pid} && exit; sleep 1; done",
                  timeout=330)
            logs[role] = g.read_file(f"{MEMCHECK_LOG}.{pid}").decode()
        d.stop()
    for role, log in logs.items():
        print(f"--- {role}\n{log}")
    assert p["loss_pct"] == 0, p
    assert bulk.hash_ok, bulk.summary()
    for role, log in logs.items():
        assert f"Command: {DRIVER} --control-fd" in log, log
        assert "Process terminating with default action of signal 15 (SIGTERM)" in log, log
        assert re.search(r"ERROR SUMMARY: 0 errors from 0 contexts \(suppressed: 0 from 0\)\n$", log), log
    # The template reserved the low window where memcheck's tool is not.
    assert "large range [0x60000000, 0x80000000) (noaccess)" in logs["template"], logs["template"]
    # SIGTERM found the driver in its own control loop, waiting for the daemon.
    assert re.search(r"by 0x[0-9A-F]+: control_loop \(control.c:\d+\)", logs["driver"]), logs["driver"]


@pytest.mark.lab
def test_perf_record_names_e1000s_functions_under_traffic(no_leftover_qemu, bins):
    """perf record on the driver process during a host → guest transfer: perf
    report names every sample in module code, e1000's functions among them."""
    with Guest(devices=["e1000"]) as g:
        d, status = up_on_us0(g, bins, {"UNDERSTUDY_PERF_MAP": "1"})
        pid = status["pid"]
        # The transfer is perf's workload: the recording spans it.
        result = net.bulk(g, "rx", 20_000_000, timeout=300,
                          under=["perf", "record", "-o", PERF_DATA, "-p", str(pid), "--"])
        report = g.run(["perf", "report", "-i", PERF_DATA, "--sort", "dso,sym", "--stdio"], check=True).out
        d.stop()
    print(report)
    assert result.hash_ok, result.summary()
    # "  18.79%  [JIT] tid 151      [.] e1000_xmit_frame"
    in_modules = re.findall(rf"^\s+[\d.]+%\s+\[JIT\] tid {pid}\s+\[\.\] (\S+)$", report, re.M)
    assert any(name.startswith("e1000_") for name in in_modules), report
    assert not [name for name in in_modules if name.startswith("0x")], "module code the map does not cover"
