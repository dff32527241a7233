"""gdb sees the modules in a driver process: their functions in backtraces and breakpoints.

The DDE paper's point: a driver in a process is debugged with ordinary tools.
The driver registers every loaded module through gdb's JIT interface
(runtime/driver/debugger.c); docs/debugging.md shows how to use it.
"""
import subprocess

import pytest

from lab import understudy
from lab.guest import Guest

from .conftest import BUILD, DRIVER, KERNEL_HALF


def gdb(*commands: str, args: list[str]) -> str:
    argv = ["gdb", "-batch", "-nx", "-ex", "set breakpoint pending on"]
    for c in commands:
        argv += ["-ex", c]
    res = subprocess.run(argv + ["--args", *args], capture_output=True, text=True, timeout=120)
    return res.stdout + res.stderr


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


@pytest.mark.lab
def test_gdb_attaches_to_a_running_driver_process(lab_ready, runtime_built):
    bins = understudy.build()
    with Guest(devices=["e1000"]) as g:
        understudy.prepare(g)
        bdf = g.pci_address("nic0")
        understudy.bind_vfio(g, bdf)
        # An attached gdb stops the process: no heartbeat verdict while we look.
        daemon = understudy.Daemon(g, bins, None, "--ping-timeout-ms", "3600000")
        daemon.run(bdf, understudy.module_chain(g, "e1000"))
        # The driver the daemon runs: a fork of the post-probe template, which
        # inherited the modules' registration with gdb's JIT interface.
        registered = daemon.wait_state(bdf, "registered")
        pid = registered["pid"]
        assert pid in understudy.driver_pids(g, bins["driver"]), registered
        res = g.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "info symbol e1000_probe",
                     "-ex", "info address e1000_xmit_frame"], timeout=120)
        assert daemon.status()[bdf]["state"] == "registered", "the driver survived the attach"
        daemon.stop()
    assert "e1000_probe in section .text of <in-memory@" in res.out, res.out + res.err
    assert 'Symbol "e1000_xmit_frame" is at 0x' in res.out
