"""The TX thread's poll policy (runtime/ddekit/tx_poll.c), on a clock the C test moves:
sparse traffic polls through the window, dense traffic and batches sleep in their
gaps, a short window polls as long as it says. The lab test of `understudy run
--poll-us` (tests/daemon/test_understudyd_e1000.py) checks the same on a real NIC."""
import subprocess


def test_c_unit_test_of_the_poll_policy(runtime_built):
    res = subprocess.run([str(runtime_built / "test-tx-poll")], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and "FAIL" not in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("ok ") >= 8, res.stdout
