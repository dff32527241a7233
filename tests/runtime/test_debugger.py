"""gdb sees the modules in a driver process: their functions in backtraces and breakpoints.

The DDE paper's point: a driver in a process is debugged with ordinary tools.
The driver registers every loaded module through gdb's JIT interface, and
writes perf's /tmp/perf-PID.map when asked (runtime/driver/debugger.c);
docs/debugging.md shows how to use them.
"""
import os
import re
import subprocess
from pathlib import Path

import pytest

from lab import understudy
from lab.guest import Guest

from .conftest import BUILD, DRIVER, KERNEL_HALF


def gdb(*commands: str, args: list[str], env: dict[str, str] | None = None) -> str:
    argv = ["gdb", "-batch", "-nx", "-ex", "set breakpoint pending on"]
    for c in commands:
        argv += ["-ex", c]
    res = subprocess.run(argv + ["--args", *args], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **(env or {})})
    return res.stdout + res.stderr


def perf_map_entries(text: str) -> list[tuple[int, int, str]]:
    """A perf map's functions: "START SIZE name" lines, hex."""
    entries = []
    for line in text.splitlines():
        start, size, name = line.split(" ", 2)
        entries.append((int(start, 16), int(size, 16), name))
    return entries


def perf_map_address(text: str, function: str) -> int | None:
    """Where a perf map puts a function."""
    return next((start for start, _, name in perf_map_entries(text) if name == function), None)


def gdb_address(out: str, function: str) -> int:
    return int(re.search(rf'Symbol "{function}" is at (0x[0-9a-f]+)', out).group(1), 16)


def test_a_crash_in_a_module_is_shown_in_its_own_functions(runtime_built):
    out = gdb("run", "bt", args=[str(DRIVER), "--runtime", str(KERNEL_HALF),
                                  "--module", str(BUILD / "understudy-selftest.ko"),
                                  "--param", "understudy_selftest.crash=1"])
    assert "SIGILL" in out, out
    assert "#0  do_crash ()" in out and "selftest_init ()" in out, out


def test_a_breakpoint_in_debians_e1000_is_hit(runtime_built, debian_modules):
    e1000 = debian_modules / "kernel/drivers/net/ethernet/intel/e1000/e1000.ko"
    out = gdb("break e1000_init_module", "run", "info symbol $pc",
              args=[str(DRIVER), "--runtime", str(KERNEL_HALF), "--module", str(e1000)])
    assert "Breakpoint 1, " in out, out
    assert "in section .init.text of <in-memory@" in out, out


def test_perf_map_puts_debians_e1000_where_gdb_does_when_asked(runtime_built, debian_modules):
    e1000 = debian_modules / "kernel/drivers/net/ethernet/intel/e1000/e1000.ko"
    argv = [str(DRIVER), "--runtime", str(KERNEL_HALF), "--module", str(e1000)]
    out = gdb("break e1000_init_module", "run", "info inferiors", "info address e1000_xmit_frame",
              args=argv, env={"UNDERSTUDY_PERF_MAP": "1"})
    pid = re.search(r"process (\d+)", out).group(1)
    perf_map = Path(f"/tmp/perf-{pid}.map")
    try:
        text = perf_map.read_text()
    finally:
        perf_map.unlink(missing_ok=True)
    assert perf_map_address(text, "e1000_xmit_frame") == gdb_address(out, "e1000_xmit_frame"), out
    # The runtime's kernel half is a module too.
    assert perf_map_address(text, "napi_gro_receive") is not None

    unasked = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert unasked.wait(timeout=60) == 0
    assert not Path(f"/tmp/perf-{unasked.pid}.map").exists()


@pytest.mark.lab
def test_gdb_attaches_to_a_running_driver_process(lab_ready, runtime_built):
    bins = understudy.build()
    with Guest(devices=["e1000"]) as g:
        understudy.prepare(g)
        bdf = g.pci_address("nic0")
        understudy.bind_vfio(g, bdf)
        # An attached gdb stops the process: no heartbeat verdict while we look.
        daemon = understudy.Daemon(g, bins, None, "--ping-timeout-ms", "3600000",
                                   env={"UNDERSTUDY_PERF_MAP": "1"})
        daemon.run(bdf, understudy.module_chain(g, "e1000"))
        # The driver the daemon runs: a fork of the post-probe template, which
        # inherited the modules' registration with gdb's JIT interface.
        registered = daemon.wait_state(bdf, "registered")
        pid = registered["pid"]
        assert pid in understudy.driver_pids(g, bins["driver"]), registered
        res = g.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "info symbol e1000_probe",
                     "-ex", "info address e1000_xmit_frame"], timeout=120)
        assert daemon.status()[bdf]["state"] == "registered", "the driver survived the attach"
        # perf's map, too, is the template's, under the fork's pid.
        perf_map = g.read_file(f"/tmp/perf-{pid}.map").decode()
        daemon.stop()
    assert "e1000_probe in section .text of <in-memory@" in res.out, res.out + res.err
    assert perf_map_address(perf_map, "e1000_xmit_frame") == gdb_address(res.out, "e1000_xmit_frame")
