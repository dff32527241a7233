# SPDX-License-Identifier: GPL-2.0
"""Fault injection (lab/swifi) in lab guests, with Debian's e1000.ko in both worlds.

understudy: `jmp .` written into the running driver process's hot path
(through /proc/PID/mem at the address its gdb JIT registration names) while a
hash-checked transfer runs through us0; the daemon's heartbeat declares the
driver hung, restarts it from its file, and the transfer completes intact.

in-kernel: a NULL load, or `jmp .`, written into the guest kernel's e1000
(swifi-poke.ko) while the same workload runs: the guest oopses or locks up, and
the campaign's classifier calls it a guest crash or a guest hang.
"""
import json
import time

import pytest

from lab import config, net, understudy
from lab.guest import Guest
from lab.swifi.campaign import KernelWorld, host_module
from lab.swifi.faults import generator_for
from lab.swifi.inject import build_poke

pytestmark = pytest.mark.lab

# Paced to last 20 s, well past the injector's start-up in the guest on a
# loaded machine, however fast the path is (unpaced, 120 MB once ended first).
BULK_BYTES = 120 * 1000 * 1000
BULK_RATE_MBPS = 48
# Tens of milliseconds (docs/design.md §8). A 50 ms deadline drew false
# verdicts after the hang's recovery on a loaded 2-core machine
# (docs/notes/house-history.md); 100 ms still finds the hang within a few
# tenths of a second.
PING_INTERVAL_MS, PING_TIMEOUT_MS = 20, 100


@pytest.fixture(scope="module")
def e1000():
    return generator_for(host_module("e1000"))


def test_a_hang_injected_into_the_understudy_driver_is_detected_and_recovered(no_leftover_qemu, bins, e1000):
    fault = e1000.generate("hang", 0)
    print("fault:", fault.description)
    assert fault.patches[0].new == b"\xeb\xfe"
    with Guest(devices=["e1000"]) as g:
        bdf = g.pci_address("nic0")
        understudy.prepare(g)
        d = understudy.Daemon(g, bins, None, "--max-restarts", "3", "--restart-window-s", "300",
                              "--ping-interval-ms", str(PING_INTERVAL_MS),
                              "--ping-timeout-ms", str(PING_TIMEOUT_MS))
        understudy.understudy_up(g, d, bdf, understudy.module_chain(g, "e1000"))
        opened = d.status()[bdf]
        g.write_file("/tmp/fault.json", json.dumps(fault.to_json()).encode())

        host = net.HostBulk("rx", BULK_BYTES, timeout=120, rate_mbps=BULK_RATE_MBPS)
        transfer = g.spawn(["python3", "-m", "lab.workload", *host.guest_args(BULK_BYTES)],
                           cwd=str(config.REPO_DIR))
        try:
            deadline = time.monotonic() + 60
            while d.status()[bdf]["counters"]["rx_bytes"] < opened["counters"]["rx_bytes"] + 5_000_000:
                assert time.monotonic() < deadline, d.status()[bdf]
                time.sleep(0.2)
            assert transfer.poll() is None, "the transfer ended before the fault was injected"
            res = g.run(["python3", "-m", "lab.swifi", "inject-process", "--pid", str(opened["pid"]),
                         "--fault", "/tmp/fault.json", "--watch-exit", "30"],
                        cwd=str(config.REPO_DIR), timeout=90)
            assert res.returncode == 0, res.err
            injected = json.loads(res.out)
            print("injected:", injected)
            assert transfer.poll() is None, "the transfer ended before the fault was written: nothing was tested"
            guest_side = json.loads(transfer.wait(300).out.strip().splitlines()[-1])
            result = net.BulkResult("rx", host.result(300), guest_side).summary()
        except BaseException:
            print(d.stop()[-6000:])
            raise
        finally:
            transfer.kill()
            host.proc.kill()
            host.proc.wait()
        # From the write of `jmp .` to the daemon ending the hung process (guest CLOCK_MONOTONIC).
        latency = injected["exit_after_ms"]
        print(f"hang detection latency: {latency} ms (PING after {PING_INTERVAL_MS} ms idle, "
              f"deadline {PING_TIMEOUT_MS} ms)")
        assert latency is not None, "the hung driver process was never ended"
        after = d.wait_state(bdf, "open", timeout=60, carrier=True)
        r = after["recoveries"][-1]
        print("recovery:", r)
        assert r["cause"].startswith(f"hung: no reply to PING within {PING_TIMEOUT_MS} ms"), r
        assert r["outcome"] == "recovered" and after["recovery_count"] == 1, after
        assert after["pid"] != opened["pid"]
        # Measured 50-90 ms; seconds would mean the heartbeat no longer sees a spinning driver.
        assert latency < 500, latency
        print("transfer:", result)
        assert result["hash_ok"] and result["bytes"] == BULK_BYTES and result["resets"] == 0, result
        assert d.alive()
        d.stop()


@pytest.mark.parametrize("fault_type, outcome, evidence", [
    ("null", "guest crash", ("NULL pointer dereference", "Oops")),
    ("hang", "guest hang", ("soft lockup", "stall")),
])
def test_a_fault_injected_into_the_in_kernel_driver_takes_the_guest_down(
        no_leftover_qemu, runtime_built, e1000, fault_type, outcome, evidence):
    fault = e1000.generate(fault_type, 0)
    print("fault:", fault.description)
    world = KernelWorld("e1000", build_poke())
    try:
        result = world.trial(fault, 24 << 20)
    finally:
        world.close()
    print(json.dumps({k: v for k, v in result.items() if k != "injection"}, indent=1))
    # The guest may go down before the injecting command returns: an oops in
    # interrupt context panics at once (the agent's connection closes), and a
    # CPU spinning in NAPI poll keeps the injector's `rmmod` from finishing.
    assert "injection" in result or result["injection_error"].startswith(("AgentGone", "TimeoutError")), result
    assert result["outcome"] == outcome, result
    lines = "\n".join(result["guest"]["crash_lines"] + result["guest"]["hang_lines"])
    assert any(e in lines for e in evidence), lines
    if fault_type == "hang":
        # A hung guest's workload never finishes: the trial ends when the
        # console says so, not at the workload's deadline.
        assert "console reported" in result.get("workload_error", ""), result
