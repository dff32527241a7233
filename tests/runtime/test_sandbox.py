"""The driver process's sandbox (docs/design.md §0; runtime/driver/sandbox.c).

A probe enters the sandbox holding a queue of a real TAP, as a driver process
does, and tries what the sandbox must refuse: the TAP's own ioctls on that
queue, which tun answers for any process holding it, root or not; new
sockets, or sending anywhere but on the host's socket; new namespaces;
signalling another user's process; calls outside the list it allows (bpf,
execve, ptrace, io_uring...). Frames still move, threads still start. (That every driver process runs
sandboxed is checked in the lab, tests/daemon/test_understudyd_lab.py, from its /proc
status.)
"""
import os
import subprocess

import pytest

from .conftest import REPO

PROBE = REPO / "tests" / "runtime" / "sandbox" / "probe.c"
SANDBOX = REPO / "runtime" / "driver" / "sandbox.c"
UID = 0x4000_0018   # understudyd's default --driver-uid-base, device 0000:00:03.0

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun"),
                                reason="needs root and /dev/net/tun to create a TAP")


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict:
    binary = tmp_path_factory.mktemp("sandbox") / "probe"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", str(binary), str(PROBE), str(SANDBOX), "-lseccomp"],
                   check=True)
    res = subprocess.run([str(binary), str(UID)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return dict(line.split("=", 1) for line in res.stdout.split())


def test_the_driver_gives_up_root_for_its_own_user(probed):
    assert probed["uid"] == str(UID)
    assert probed["kill_init"] == "EPERM"
    assert probed["open_tun"] == "EACCES"


def test_its_queue_of_the_tap_moves_frames_and_configures_nothing(probed):
    assert probed["tap_write"] == "0"
    for ioctl in ("tunsetcarrier", "tunsetoffload", "tunsetqueue", "tungetiff", "siocsifhwaddr"):
        assert probed[ioctl] == "EPERM", ioctl


def test_no_new_sockets_and_no_address_but_the_hosts(probed):
    assert probed["send_to_host"] == "0"
    for call in ("socket_unix", "socket_netlink", "socket_inet", "sendto_elsewhere"):
        assert probed[call] == "ENOSYS", call


def test_calls_outside_the_allowed_list_fail_as_if_the_kernel_had_none(probed):
    assert probed["thread"] == "0", "what the runtime makes is allowed"
    for call in ("bpf", "execve", "ptrace", "io_uring_setup", "userfaultfd", "perf_event_open", "mount",
                 "clone3", "unshare"):
        assert probed[call] == "ENOSYS", call


def test_no_new_namespaces(probed):
    # A user namespace would give the driver capabilities inside it.
    assert probed["clone_newuser"] == "EPERM"
