"""understudyd in a lab guest: taking an e1000 through VFIO, refusing bad input
with nothing left behind, and surviving drivers that misbehave or die.

The driver process here is tests/daemon/hostile_driver.c, a test stand-in that
gets the device "running" and then breaks the protocol or kills itself."""
import time

import pytest

from lab import understudy
from lab.guest import Guest
from lab.understudy import bind_vfio, bus_master_on, interface_exists

pytestmark = pytest.mark.lab
SOCKET = "/run/understudy-test.sock"
REMOTE = "/run/understudy-test-driver"


class Daemon(understudy.Daemon):
    """understudyd running in the guest with the hostile stand-in as its driver."""

    def __init__(self, g: Guest, bins: dict, mode: str, *options: str, remote_dir: str | None = None):
        env = {"UNDERSTUDY_TEST_DRIVER_MODE": mode}
        if remote_dir:
            env["UNDERSTUDY_TEST_DRIVER_DIR"] = remote_dir
        super().__init__(g, bins, bins["hostile_driver"], *options, env=env, socket=SOCKET)


def garbage_taken(g: Guest) -> int | None:
    """How many of the tap-garbage stand-in's frames the TAP took, once it has written them."""
    res = g.run(f"sed -n 's/^GARBAGE_TAKEN //p' {REMOTE}/requests")
    return int(res.out) if res.out.strip() else None


def driver_processes(g: Guest, bins: dict) -> str:
    return g.run(["pgrep", "-x", bins["hostile_driver"].name]).out.strip()


def e1000_module(g: Guest) -> str:
    return understudy.module_path(g, "e1000")


def test_refusals_and_hostile_drivers(lab_ready, no_leftover_qemu, host_binaries):
    bins = host_binaries
    with Guest(devices=["e1000"]) as g:
        bdf = g.pci_address("nic0")
        g.run("modprobe vfio-pci && modprobe tun", check=True)
        ko = e1000_module(g)
        d = Daemon(g, bins, "sigkill-mid-transfer")

        # Bound to no driver, then to the kernel's e1000: refused, nothing created.
        res = d.cli("run", "--device", bdf, "--module", ko)
        assert res.returncode == 1 and f"{bdf} is not bound to vfio-pci" in res.err, res.err
        g.run("modprobe e1000", check=True)
        res = d.cli("run", "--device", bdf, "--module", ko)
        assert res.returncode == 1
        assert f"{bdf} is bound to the kernel driver e1000" in res.err and "vfio-pci" in res.err
        assert not interface_exists(g, "us0") and not driver_processes(g, bins)

        res = d.cli("run", "--device", "0000:0f:1f.0", "--module", ko)
        assert res.returncode == 1 and "no PCI device 0000:0f:1f.0" in res.err
        res = d.cli("run", "--device", bdf, "--module", "/nonexistent.ko")
        assert res.returncode == 1 and "/nonexistent.ko" in res.err

        bind_vfio(g, bdf)
        res = d.cli("run", "--device", bdf, "--module", ko)
        assert res.returncode == 0, res.err
        assert interface_exists(g, "us0")
        registered = d.wait_state(bdf, "registered")
        assert registered["mac"] == "52:54:00:12:34:56" and not registered["carrier"]
        sha256 = g.run(["sha256sum", ko], check=True).out.split()[0]
        assert registered["modules"] == [{"path": ko, "sha256": sha256}]
        assert "52:54:00:12:34:56" in g.run("ip link show us0", check=True).out
        assert bus_master_on(g, bdf), "the stand-in enabled bus mastering, as pci_set_master does"

        # A second run for the same device is refused and leaves the first alone.
        res = d.cli("run", "--device", bdf, "--module", ko, "--ifname", "us9")
        assert res.returncode == 1 and f"{bdf} is already used by this understudyd (us0" in res.err
        assert not interface_exists(g, "us9") and d.status()[bdf]["state"] == "registered"

        # Setting us0 up opens the driver; traffic into us0 (IPv6 starts at
        # once, the ping adds to it) reaches its queue of the TAP; the
        # stand-in reads a frame and dies holding it, by its own hand.
        g.run("ip link set us0 up && ip addr add 192.0.2.1/24 dev us0", check=True)
        g.run("ping -c 1 -W 1 192.0.2.2")
        dead = d.wait_state(bdf, "dead")
        assert "killed by signal 9" in dead["death"] and "ended by the daemon" not in dead["death"], dead
        assert dead["device_stop"]["bus_master_off"] and dead["device_stop"]["iommu_unmapped"]
        assert dead["pid"] is None and not dead["carrier"]
        assert not bus_master_on(g, bdf)
        assert interface_exists(g, "us0"), "the TAP survives its driver"
        assert d.alive()

        res = d.cli("stop", bdf)
        assert res.returncode == 0, res.err
        assert not interface_exists(g, "us0") and d.status() == {}
        log = d.stop()
        assert "were refused" not in log, "an honest record of a held frame is taken back"

        # Records of frames it never read are the driver's word: after its
        # death each is checked and refused, and the daemon serves on.
        d = Daemon(g, bins, "forged-records")
        assert d.cli("run", "--device", bdf, "--module", ko).returncode == 0
        d.wait_state(bdf, "registered")
        g.run("ip link set us0 up", check=True)
        dead = d.wait_state(bdf, "dead")
        assert "killed by signal 9" in dead["death"], dead
        assert interface_exists(g, "us0") and d.alive()
        log = d.stop()
        assert "4 record(s) of frames the driver held were refused" in log, log
        assert "are not in the driver's memory" in log and "length 70000 is not a frame's" in log, log
        assert "queue 8 (at most 8 queues)" in log, log

        # A stuck transmitter: its control loop answers, the frame it read is never finished.
        d = Daemon(g, bins, "tx-hole", "--tx-timeout-ms", "500")
        assert d.cli("run", "--device", bdf, "--module", ko).returncode == 0
        d.wait_state(bdf, "registered")
        g.run("ip link set us0 up && ip addr add 192.0.2.1/24 dev us0", check=True)
        g.run("ping -c 2 -i 0.3 -W 1 192.0.2.2")
        dead = d.wait_state(bdf, "dead")
        assert "completed none within 500 ms" in dead["death"] and "ended by the daemon" in dead["death"], dead
        assert not bus_master_on(g, bdf) and interface_exists(g, "us0") and d.alive()
        d.stop()

        # WARNs now and then are logged and counted; WARNs close together are a failing driver.
        d = Daemon(g, bins, "warn-storm", "--warn-storm", "5", "--warn-window-ms", "1000")
        assert d.cli("run", "--device", bdf, "--module", ko).returncode == 0
        dead = d.wait_state(bdf, "dead", timeout=60)
        assert "failing: 5 WARNs within 1000 ms" in dead["death"] and "ended by the daemon" in dead["death"], dead
        assert dead["warnings"] == 10, "the five scattered WARNs did not end it: the burst did"
        assert not bus_master_on(g, bdf) and interface_exists(g, "us0") and d.alive()
        log = d.stop()
        assert "driver WARN at hostile_driver.c:100: WARN number 0" in log, log

        for mode, cause in [("bad-tx-done", "tx_done ring: buffer 57005 is outside the pool"),
                            ("bad-message", "carrier.on = 7 is out of range"),
                            ("garbage-message", "protocol violation")]:
            d = Daemon(g, bins, mode)
            res = d.cli("run", "--device", bdf, "--module", ko)
            assert res.returncode == 0, res.err
            dead = d.wait_state(bdf, "dead")
            assert cause in dead["death"], dead
            assert "ended by the daemon" in dead["death"]
            assert not bus_master_on(g, bdf) and interface_exists(g, "us0") and d.alive()
            assert not driver_processes(g, bins)
            log = d.stop()
            assert "driver died" in log and "interface us0 removed" in log, log
            assert not interface_exists(g, "us0")

        # Modules the runtime cannot run: LOAD's refusal, every line of it
        # (escaped: the driver's text), is the death reason.
        d = Daemon(g, bins, "refuse-load")
        assert d.cli("run", "--device", bdf, "--module", ko).returncode == 0
        dead = d.wait_state(bdf, "dead")
        assert dead["death"].startswith("the driver refused the modules (Exec format error"), dead
        assert "\n  missing: not_in_runtime (no loaded module exports it" in dead["death"], dead
        assert "also_missing \\u{1b}[2K forged line" in dead["death"] and "\x1b" not in dead["death"], dead
        assert "not restarted: it died before registering" in dead["death"], dead
        assert "\n            missing: not_in_runtime" in d.cli("status").out, "indented under `died:`"
        d.stop()


def test_without_an_iommu_run_is_refused_and_leaves_nothing(lab_ready, no_leftover_qemu, host_binaries):
    bins = host_binaries
    with Guest(devices=["e1000"], extra_append="intel_iommu=off") as g:
        bdf = g.pci_address("nic0")
        g.run("modprobe vfio-pci && modprobe tun", check=True)
        d = Daemon(g, bins, "bad-message")
        res = d.cli("run", "--device", bdf, "--module", e1000_module(g))
        assert res.returncode == 1
        assert f"{bdf} has no IOMMU group" in res.err and "intel_iommu=on" in res.err
        assert not interface_exists(g, "us0") and not driver_processes(g, bins)
        assert d.status() == {}
        d.stop()


@pytest.mark.parametrize("mode", ["echo", "tap-garbage"])
def test_frames_go_out_and_come_back_through_the_drivers_queue_of_the_tap(mode, lab_ready, no_leftover_qemu,
                                                                          host_binaries):
    """With a stand-in that loops every frame it reads from its queue of the
    TAP back to that queue, what the stack sends on us0 comes back as
    received frames. One that first abuses that queue (detaching it, writing
    frames no NIC receives) harms neither the guest's kernel nor the daemon."""
    bins = host_binaries
    with Guest(devices=["e1000"]) as g:
        bdf = g.pci_address("nic0")
        g.run("modprobe vfio-pci && modprobe tun && modprobe e1000", check=True)
        bind_vfio(g, bdf)
        g.run(f"rm -rf {REMOTE} && mkdir -p {REMOTE}", check=True)
        d = Daemon(g, bins, mode, remote_dir=REMOTE)
        assert d.cli("run", "--device", bdf, "--module", e1000_module(g)).returncode == 0
        d.wait_state(bdf, "registered")
        g.run("ip link set us0 up && ip addr add 192.0.2.1/24 dev us0", check=True)
        d.wait_state(bdf, "open")
        taken = 0
        deadline = time.monotonic() + 30
        while mode == "tap-garbage" and (taken := garbage_taken(g)) is None:
            assert time.monotonic() < deadline, "the stand-in did not write its garbage"
            time.sleep(0.3)
        g.run("ping -c 3 -i 0.2 -W 1 192.0.2.2")  # unanswered ARP requests: frames out
        deadline = time.monotonic() + 30
        while True:
            c = d.status()[bdf]["counters"]
            # Every frame sent came back, besides the garbage the TAP took.
            if c["tx_packets"] >= 3 and c["rx_packets"] == c["tx_packets"] + taken:
                break
            assert time.monotonic() < deadline, c
            time.sleep(0.3)
        assert c["tx_dropped"] == 0
        assert d.status()[bdf]["state"] == "open" and d.alive()
        log = d.stop()
        if mode == "tap-garbage":
            assert "garbage write 3: " in log, log
            assert g.run("dmesg | grep -E 'BUG|Oops|general protection|WARNING'").returncode != 0
