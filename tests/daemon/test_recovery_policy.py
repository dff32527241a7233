"""The recovery agent's policy, with Debian's e1000.ko: a driver killed at every
restart is given up after --max-restarts with us0 down and the reason in
`status --json` (--on-exhausted down), or retried with back-off until it stays
up (--on-exhausted retry); the --recovery-hook script runs after each outcome
with the outcome in its environment.
"""
import time

import pytest

from lab import net, understudy
from lab.guest import Guest

pytestmark = pytest.mark.lab

HOOK = "/tmp/understudy-hook.sh"
HOOK_LOG = "/tmp/understudy-hook.log"
# Kills every driver process as soon as it appears (pgrep's 15-character names).
KILLER = "while :; do pkill -9 -x understudy-driv; sleep 0.01; done"
# Kills every driver process once it is 2 s old, after its probe: a driver
# killed in the middle of e1000's probe can leave QEMU's e1000 so that the next
# probe reads an invalid MAC address (docs/recovery.md), which no restart replaces.
LATE_KILLER = ("while :; do for p in $(pgrep -x understudy-driv); do "
               "[ \"$(ps -o etimes= -p $p)\" -ge 2 ] 2>/dev/null && kill -9 $p; done; sleep 0.1; done")


def hook_outcomes(g: Guest) -> list[dict]:
    text = g.run(f"cat {HOOK_LOG} 2>/dev/null").out
    return [dict(f.split("=", 1) for f in line.split("|") if "=" in f) for line in text.splitlines()]


def wait_hook(g: Guest, outcome: str, timeout: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        seen = hook_outcomes(g)
        if any(h.get("UNDERSTUDY_OUTCOME") == outcome for h in seen):
            return seen
        assert time.monotonic() < deadline, f"no hook run with outcome {outcome}: {seen}"
        time.sleep(0.3)


def install_hook(g: Guest) -> None:
    """A hook that appends its UNDERSTUDY_* environment, one run a line (one write,
    so hooks running at once do not mix their lines), and fails."""
    g.write_file(HOOK, b"#!/bin/sh\nline=$(env | grep ^UNDERSTUDY_ | sort | tr '\\n' '|')\n"
                 b"echo \"$line\" >> " + HOOK_LOG.encode() + b"\nexit 3\n")
    g.run(f"chmod +x {HOOK}", check=True)


def test_a_driver_killed_at_every_restart_is_given_up_and_the_hook_runs(no_leftover_qemu, bins):
    with Guest(devices=["e1000"]) as g:
        install_hook(g)

        # down: two restarts allowed; the first kill is recovered, then every fresh driver is killed.
        d, bdf = understudy.start_understudy(g, "e1000", 2, "--recovery-hook", HOOK)
        understudy.kill_and_recover(g, d, bdf, 1)
        recovered = wait_hook(g, "recovered")[0]
        assert recovered["UNDERSTUDY_DEVICE"] == bdf and recovered["UNDERSTUDY_IFNAME"] == "us0", recovered
        assert "killed by signal 9" in recovered["UNDERSTUDY_CAUSE"], recovered
        assert float(recovered["UNDERSTUDY_RESTART_MS"]) > 0
        killer = g.spawn(KILLER)
        try:
            dead = d.wait_state(bdf, "dead", timeout=120)
        finally:
            killer.kill()
        print("dead", dead["death"])
        assert "not restarted: 2 restart(s) within 86400 s already" in dead["death"], dead
        assert dead["recovery_count"] == 2 and not dead["carrier"] and dead["pid"] is None, dead
        assert not understudy.carrier(g, "us0"), "us0 is left without carrier"
        down = [h for h in wait_hook(g, "down") if h.get("UNDERSTUDY_OUTCOME") == "down"]
        assert len(down) == 1 and "2 restart(s)" in down[0]["UNDERSTUDY_REASON"], down
        time.sleep(3)
        assert d.status()[bdf]["state"] == "dead", "given up means no further attempt"
        assert d.alive()
        log = d.stop()
        assert "recovery hook" in log and "exit status: 3" in log, log[-3000:]


def test_with_on_exhausted_retry_a_driver_killed_at_every_restart_is_retried_until_it_stays_up(
        no_leftover_qemu, bins):
    # One restart allowed, then attempts after 1 s, 2 s, 2 s, ... until one stays up.
    with Guest(devices=["e1000"]) as g:
        install_hook(g)
        d, bdf = understudy.start_understudy(g, "e1000", 1, "--recovery-hook", HOOK,
                                           "--on-exhausted", "retry", "--retry-max-s", "2")
        killer = g.spawn(LATE_KILLER)
        try:
            retrying = d.wait_state(bdf, "dead", timeout=120)
            assert "retrying in" in retrying["death"], retrying
            wait_hook(g, "retrying")
            deadline = time.monotonic() + 60
            while d.status()[bdf]["recovery_count"] < 3:
                assert time.monotonic() < deadline, d.status()[bdf]
                time.sleep(0.5)
        finally:
            killer.kill()
        g.run("sleep 0.5")
        after = d.wait_state(bdf, "open", timeout=120)
        p = net.ping(g, count=50, interval=0.1)
        assert p["received"] > 0, p
        final = d.wait_state(bdf, "open", timeout=30, carrier=True)
        print("retried", final["recovery_count"], final["recoveries"][-1])
        assert final["recoveries"][-1]["outcome"] == "recovered", final
        assert understudy.carrier(g, "us0")
        assert any(h.get("UNDERSTUDY_OUTCOME") == "recovered" for h in hook_outcomes(g))
        assert after["recovery_count"] >= 3
        d.stop()
