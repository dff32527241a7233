"""The block front-end's half that talks to the kernel (host/nbd): inside a
lab guest, Debian's own nbd.ko is configured over generic netlink with two
connections, and reads, writes and a flush through /dev/nbdN reach the
export's server end. The export is memory held by the Rust test
(`host/nbd/tests/kernel_client.rs`) standing in for a block driver, which
that crate does not know; the guest runs the binary from the host's tree.
"""
import json
import subprocess

import pytest

from lab import config
from lab.guest import Guest

pytestmark = pytest.mark.lab


def kernel_client_binary() -> str:
    res = subprocess.run(["cargo", "test", "--locked", "--no-run", "--message-format=json", "-p", "understudy-nbd",
                          "--test", "kernel_client", "--manifest-path", str(config.REPO_DIR / "host/Cargo.toml")],
                         capture_output=True, text=True, check=True)
    for line in res.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["target"]["name"] == "kernel_client":
            return msg["executable"]
    raise AssertionError("cargo built no kernel_client test:\n" + res.stderr)


def test_the_kernels_nbd_client_is_served_through_two_connections(lab_ready, no_leftover_qemu):
    binary = kernel_client_binary()
    with Guest() as g:
        g.run("modprobe nbd nbds_max=2", check=True)
        res = g.run([binary, "--ignored", "--exact", "the_kernels_nbd_client_reads_and_writes_through_two_connections",
                     "--test-threads", "1"], timeout=240)
        dmesg = g.run("dmesg | grep -i nbd").out
    assert res.returncode == 0, res.out + res.err + dmesg
    assert "1 passed" in res.out, res.out
