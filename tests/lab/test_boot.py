"""`python3 -m lab boot`: exit codes, output, timeouts and clean-up."""
import subprocess
import sys
import time

import pytest

from lab import config
from lab.guest import Guest, GuestFailed
from tests.conftest import qemu_processes

pytestmark = pytest.mark.lab


def lab(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "lab", *args], cwd=config.REPO_DIR,
                          capture_output=True, text=True, timeout=timeout)


def test_boot_true_is_quick_and_succeeds(lab_ready, no_leftover_qemu):
    t0 = time.monotonic()
    res = lab("boot", "--devices", "e1000", "--", "true")
    elapsed = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert elapsed < 30, f"boot -- true took {elapsed:.1f} s (the limit is 30 s; docs/lab.md measured 10.9 s)"


def test_guest_exit_code_and_output_come_back_unchanged(lab_ready, no_leftover_qemu):
    res = lab("boot", "--devices", "", "--", "sh", "-c", "echo out-$((6*7)); echo err >&2; exit 42")
    assert res.returncode == 42
    assert "out-42" in res.stdout
    assert "err" in res.stderr and "err" not in res.stdout


def test_command_runs_in_the_callers_directory_with_the_guest_kernel(lab_ready):
    res = lab("boot", "--devices", "", "--", "sh", "-c", "pwd; uname -r")
    assert res.returncode == 0, res.stderr
    cwd, release = res.stdout.split()
    assert cwd == str(config.REPO_DIR)
    assert release == config.kernel().release


def test_the_guest_cpu_is_the_model_lab_toml_names(lab_ready, no_leftover_qemu):
    # lab.toml's cpu_model reaches QEMU, and a feature it takes away ("max,-erms":
    # the kernel then copies with `rep movsq`, not TCG's byte-by-byte `rep movsb`)
    # is gone from the guest's flags; the copy routines' REP_GOOD stays.
    model = config.guest_defaults().cpu_model
    removed = {f[1:] for f in model.split(",")[1:] if f.startswith("-")}
    with Guest(devices=[]) as g:
        argv = (g.rundir / "qemu.argv").read_text().split()
        flags = g.run(["grep", "-m1", "^flags", "/proc/cpuinfo"], check=True).out.split(":", 1)[1].split()
    assert argv[argv.index("-cpu") + 1] == model
    assert "rep_good" in flags
    assert ("erms" in flags) == ("erms" not in removed)
    assert not removed & set(flags), f"the guest still has {removed & set(flags)}"


def test_unknown_device_is_a_clear_error(lab_ready):
    res = lab("boot", "--devices", "e2000", "--", "true")
    assert res.returncode == 3
    assert "unknown device 'e2000'" in res.stderr and "e1000" in res.stderr


def test_a_guest_that_never_finishes_booting_is_killed_at_the_timeout_and_booted_once_more(
        lab_ready, no_leftover_qemu, capsys):
    # A shell as init waits on the console forever: the agent never starts.
    g = Guest(devices=[], extra_append="rdinit=/bin/busybox -- sh")
    t0 = time.monotonic()
    with pytest.raises(GuestFailed, match="did not finish booting") as err:
        g.start(timeout=20, attempts=2)
    assert 40 <= time.monotonic() - t0 < 80, "one boot and one more, each killed at the timeout"
    assert "last 25 lines of the guest console" in str(err.value)
    assert "its vCPUs were at" in str(err.value) and "(unknown" not in str(err.value)
    assert not g.alive()
    assert "boot 1 of 2 hung; booting again" in capsys.readouterr().err


def test_a_guest_kernel_panic_is_reported_with_its_console(lab_ready, no_leftover_qemu):
    g = Guest(devices=[], extra_append="rdinit=/no/such/init")
    with pytest.raises(GuestFailed, match="panicked") as err:
        g.start(timeout=60)
    assert "Kernel panic" in str(err.value)


def test_killing_the_lab_command_kills_its_qemu(lab_ready):
    before = qemu_processes()
    proc = subprocess.Popen([sys.executable, "-m", "lab", "boot", "--devices", "", "--",
                             "sleep", "600"], cwd=config.REPO_DIR,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (qemu_processes() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert qemu_processes() - before, "the lab did not start QEMU"
    proc.kill()          # SIGKILL: no Python clean-up runs, PR_SET_PDEATHSIG must act
    proc.wait()
    deadline = time.monotonic() + 10
    while (qemu_processes() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (qemu_processes() - before), "QEMU outlived the lab command"


def test_kvm_when_asked_falls_back_to_tcg_if_it_cannot_boot(lab_ready, no_leftover_qemu):
    # Nested KVM fails or hangs on these machines; where it works, it simply boots.
    res = lab("boot", "--kvm", "--devices", "", "--", "uname", "-r")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == config.kernel().release
    if "falling back to TCG" not in res.stderr:
        assert "lab: the KVM guest did not boot" not in res.stderr


def test_the_hosts_tmp_is_visible_so_a_clone_there_works(lab_ready, tmp_path):
    marker = tmp_path / "marker"
    marker.write_text("seen from the guest\n")
    res = lab("boot", "--devices", "", "--", "cat", str(marker))
    assert res.returncode == 0, res.stderr
    assert res.stdout == "seen from the guest\n"
