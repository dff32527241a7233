"""Debian's e1000.ko, run by understudyd in a driver process, carries the guest's traffic.

The whole path: the stack sends on the TAP us0, understudyd puts each frame on
the tx ring, understudy-driver hands it to e1000's ndo_start_xmit, the NIC
(QEMU's e1000 behind the emulated IOMMU) sends it to slirp, and the replies come
back through e1000's NAPI poll straight to the driver's queue of the TAP. The stack's TCP frames
cross the rings unsegmented and e1000's own TSO cuts them (its statistics
count the segments). Then the driver process is killed mid-transfer and the
daemon, the device and us0 are checked. In guests of their own: the daemon
stalls under a fast transfer and the driver drops nothing; the daemon itself is
killed and a new one takes the device over.
"""
import re
import signal
import subprocess
import time

import pytest

from lab import net, traffic, understudy
from lab.guest import SLIRP_GATEWAY, Guest
from lab.netns import LabNetwork, guest_address

pytestmark = pytest.mark.lab

MAC = "52:54:00:12:34:56"
BULK_BYTES = 200 * 1000 * 1000


def e1000_stat(d: understudy.Daemon, bdf: str, name: str) -> int:
    """One of e1000's ethtool statistics, through `understudy ethtool --stats`."""
    res = d.cli("ethtool", "--stats", bdf)
    assert res.returncode == 0, res.out + res.err
    found = re.search(rf"^\s*{name}: (\d+)$", res.out, re.M)
    assert found, res.out
    return int(found.group(1))


def thread_nice(g: Guest, pid: int) -> dict[str, int]:
    """A process's threads' nice values, by thread name."""
    rows = g.run(["ps", "-L", "-o", "ni=,comm=", "-p", str(pid)], check=True).out.splitlines()
    return {comm: int(ni) for ni, comm in (row.split(None, 1) for row in rows)}


def test_e1000_passes_traffic_through_us0_and_survives_its_driver_dying(no_leftover_qemu, bins):
    with Guest(devices=["e1000"]) as g:
        bdf, ko = understudy.hand_over(g, "nic0", "e1000")
        d = understudy.Daemon(g, bins)
        d.run(bdf, [ko])
        registered = d.wait_state(bdf, "registered", timeout=120)
        assert registered["mac"] == MAC and registered["driver_name"] == "e1000", registered

        g.run(f"ip link set us0 up && ip addr add {net.GUEST_ADDRESS} dev us0 && "
              f"ip route replace default via {SLIRP_GATEWAY} dev us0", check=True)
        opened = d.wait_state(bdf, "open", timeout=30, carrier=True)
        assert MAC in g.run("ip link show us0", check=True).out
        assert understudy.carrier(g, "us0")

        # The softirq thread gets a larger share of the CPU; the task threads
        # keep the default. e1000's INTx line, requested at open, has no IRQ
        # thread: the TX thread serves it (runtime/kernel/irq.c).
        driver_nice = thread_nice(g, opened["pid"])
        print("driver threads' nice", driver_nice)
        assert driver_nice["ksoftirqd/0"] == -10 and not any(t.startswith("irq/") for t in driver_nice), driver_nice
        assert driver_nice["understudy-driv"] == driver_nice["kworker/0"] == driver_nice["understudy-tx"] == 0, \
            driver_nice

        p = net.ping(g, count=100, interval=0.02)
        print("ping", p)
        assert p["loss_pct"] == 0, p

        # The TAP leaves checksums and TSO to every driver process; e1000's own
        # TSO takes the IPv4 frames.
        assert opened["offloads"] == ["tx-checksum", "tso4", "tso6", "tso-ecn"], opened
        assert "tcp-segmentation-offload: on" in g.run("ethtool -k us0", check=True).out
        tso_before = e1000_stat(d, bdf, "tx_tcp_seg_good")
        for direction in ("tx", "rx"):
            before = d.status()[bdf]["counters"]
            b = net.bulk(g, direction, BULK_BYTES, timeout=900)
            print("bulk", b.summary())
            assert b.hash_ok and b.host["bytes"] == BULK_BYTES, b.summary()
            if direction == "tx":
                # Frames longer than the MTU crossed the rings (GSO frames), and
                # the NIC cut them into segments itself (e1000's TSO counter).
                after = d.status()[bdf]["counters"]
                frame = (after["tx_bytes"] - before["tx_bytes"]) / (after["tx_packets"] - before["tx_packets"])
                print(f"average tx frame {frame:.0f} bytes")
                assert frame > 1514, (before, after)
                assert e1000_stat(d, bdf, "tx_tcp_seg_good") > tso_before
        tx_mbps = net.iperf3(g, reverse=False, seconds=5)
        rx_mbps = net.iperf3(g, reverse=True, seconds=5)
        print(f"iperf3 tx {tx_mbps:.1f} Mbit/s rx {rx_mbps:.1f} Mbit/s")
        assert tx_mbps > 0 and rx_mbps > 0

        # SIGKILL the driver process while a transfer runs through it.
        assert understudy.bus_master_on(g, bdf), "e1000's probe enabled bus mastering"
        crash = traffic.crash_mid_transfer(g, d, bdf, BULK_BYTES, kill_after=5_000_000, restarted=False)
        dead = crash.status
        assert crash.killed_pid == opened["pid"]
        print("dead", dead)
        assert "killed by signal 9" in dead["death"], dead
        assert dead["device_stop"]["bus_master_off"] and dead["device_stop"]["iommu_unmapped"]
        assert dead["pid"] is None and not dead["carrier"]
        assert not understudy.bus_master_on(g, bdf)
        assert understudy.interface_exists(g, "us0"), "the TAP survives its driver"
        assert d.alive()
        log = d.stop()
        assert "driver died" in log, log


def softirq_sleeps(g: Guest, pid: int) -> int:
    """How often the driver process's softirq thread has gone to sleep."""
    script = (f"for t in /proc/{pid}/task/*; do grep -q '^ksoftirqd/0$' $t/comm && "
              "sed -n 's/^voluntary_ctxt_switches:\\s*//p' $t/status; done; true")
    return int(g.run(["sh", "-c", script], check=True).out)


def test_an_interface_that_sends_nothing_still_receives(no_leftover_qemu, bins):
    """us0 up with no address and IPv6 off: the stack sends nothing, so no frame
    through the TAP wakes the daemon. The driver receives all the same, without
    polling its NIC meanwhile (its softirq thread sleeps), and the ARP requests
    of a host pinging the guest's address reach us0."""
    with LabNetwork() as network, Guest(devices=["e1000"], netdev=network) as g:
        bdf = g.pci_address("nic0")
        understudy.prepare(g)
        d = understudy.Daemon(g, bins)
        understudy.bind_vfio(g, bdf)
        d.run(bdf, [understudy.module_path(g, "e1000")], "us0")
        d.wait_state(bdf, "registered", timeout=120)
        g.run("sysctl -qw net.ipv6.conf.us0.disable_ipv6=1 && ip link set us0 up", check=True)
        opened = d.wait_state(bdf, "open", timeout=30, carrier=True)
        time.sleep(1)
        idle = d.status()[bdf]
        assert idle["counters"]["tx_packets"] == 0, idle["counters"]
        before = softirq_sleeps(g, opened["pid"])
        time.sleep(2)
        slept = softirq_sleeps(g, opened["pid"]) - before
        assert slept < 100, f"the softirq thread woke {slept} times in 2 s of silence"
        network.spawn(["ping", "-c", "3", "-W", "1", guest_address(1).split("/")[0]],
                      stdout=subprocess.DEVNULL).wait(timeout=30)
        heard = d.status()[bdf]["counters"]
        assert heard["rx_packets"] >= 2 and heard["tx_packets"] == 0, heard
        d.stop()


def test_a_stalled_daemon_makes_the_nic_hold_frames_and_the_driver_drop_none(no_leftover_qemu, bins):
    """understudyd stops (SIGSTOP) for a second while the host sends as fast as it
    can. Received frames do not pass the daemon, but the guest's ACKs do: they
    wait in the TAP's queue, the host's TCP waits for them, the NIC holds what
    came meanwhile in its ring, and the stack drops none of what the driver
    writes (the TAP's rx_dropped); the stall is not taken for a driver hang."""
    with LabNetwork() as network, Guest(devices=["e1000"], netdev=network) as g:
        bdf = g.pci_address("nic0")
        understudy.prepare(g)
        d = understudy.Daemon(g, bins)
        understudy.understudy_up(g, d, bdf, [understudy.module_path(g, "e1000")], network)
        opened = d.status()[bdf]
        with traffic.Us0Transfer(g, BULK_BYTES, timeout=300, network=network) as transfer:
            traffic.wait_received(d, bdf, opened["counters"]["rx_bytes"] + 20_000_000, transfer)
            d.proc.kill(signal.SIGSTOP)
            time.sleep(1)
            d.proc.kill(signal.SIGCONT)
            result = transfer.result(600)
        after = d.status()[bdf]
        print("through a stalled daemon", result.summary(), after["counters"])
        assert result.hash_ok, result.summary()
        assert after["counters"]["rx_dropped"] == 0, after["counters"]
        assert after["state"] == "open" and after["pid"] == opened["pid"], "the stall is not a driver hang"
        d.stop()


def test_a_killed_daemon_leaves_nothing_behind_and_a_new_one_takes_over(no_leftover_qemu, bins):
    """SIGKILL of understudyd itself: nobody can clean up after it, so what it owns must
    be released by the kernel (its driver processes die with it, the device is quiesced
    when its VFIO fds close, the TAP goes with its fd), and a new daemon started on the
    same socket path takes the same device and carries traffic again."""
    with Guest(devices=["e1000"]) as g:
        bdf, ko = understudy.hand_over(g, "nic0", "e1000")
        first = understudy.Daemon(g, bins)
        first.run(bdf, [ko])
        pid = first.wait_state(bdf, "registered", timeout=120)["pid"]
        assert understudy.bus_master_on(g, bdf)

        first.proc.kill(9)
        first.proc.wait(30)
        deadline = time.monotonic() + 10
        while (understudy.driver_pids(g, bins["driver"]) or understudy.interface_exists(g, "us0")) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not understudy.driver_pids(g, bins["driver"]), f"driver process {pid} outlived its daemon"
        assert not understudy.interface_exists(g, "us0"), "us0 outlived the daemon that held its fd"
        assert not understudy.bus_master_on(g, bdf), "the device still masters the bus"
        assert understudy.bound_driver(g, bdf) == "vfio-pci"

        second = understudy.Daemon(g, bins)   # the same socket path: the stale socket is replaced
        second.run(bdf, [ko])
        assert second.wait_state(bdf, "registered", timeout=120)["pid"] != pid
        net.bring_up_iface(g, "us0")
        p = net.ping(g, count=20, interval=0.05)
        assert p["loss_pct"] == 0, p
        assert second.status()[bdf]["recovery_count"] == 0
        second.stop()


RX_WRITER = "understudy-rxw"


def cpus_allowed(g: Guest, pid: int, comm_prefix: str = "", but: str | None = None) -> set[str]:
    """The Cpus_allowed_list of a process's threads (those whose name starts with
    comm_prefix, and not with `but`)."""
    skip = f"{but}*) ;; " if but else ""
    script = (f"for t in /proc/{pid}/task/*; do case $(cat $t/comm) in {skip}{comm_prefix}*) "
              f"grep Cpus_allowed_list $t/status;; esac; done")
    return {line.split()[-1] for line in g.run(["sh", "-c", script], check=True).out.splitlines()}


def interrupt_cpus(g: Guest, bdf: str) -> str:
    """Where the device's interrupt line is routed (/proc/irq/N/smp_affinity_list), or
    "none" while nobody has requested it."""
    return g.run(f"cat /proc/irq/$(cat /sys/bus/pci/devices/{bdf}/irq)/smp_affinity_list 2>/dev/null "
                 "|| echo none", check=True).out.strip()


def test_run_cpu_places_the_driver_process_its_interrupt_and_keeps_the_daemon_thread_off_it(
        no_leftover_qemu, bins):
    with Guest(devices=["e1000"], cpus=2) as g:
        bdf, ko = understudy.hand_over(g, "nic0", "e1000")
        d = understudy.Daemon(g, bins, None, "--max-restarts", "1")
        refused = d.cli("run", "--device", bdf, "--module", ko, "--cpu", "7")
        assert refused.returncode != 0
        assert "CPU 7 is not one the daemon may run on (allowed: 0-1)" in refused.err, refused.err
        assert d.status() == {} and not understudy.interface_exists(g, "us0")

        d.run(bdf, [ko], cpu=1)
        first = d.wait_state(bdf, "registered", timeout=120)
        # "registered" waits for the probe's reply, when the process that probed has
        # become the template and its fork drives the device: `pid` is the fork's.
        assert first["template_pid"] not in (None, first["pid"]), first
        assert first["cpu"] == 1, first
        assert cpus_allowed(g, first["template_pid"]) == {"1"}
        assert cpus_allowed(g, first["pid"]) == {"1"}
        daemon_pid = int(g.run(["pgrep", "-x", "understudyd"], check=True).out.split()[0])
        assert cpus_allowed(g, daemon_pid, "dev-") == {"0"}
        assert interrupt_cpus(g, bdf) == "none", "e1000 requests its interrupt when opened"
        g.run("ip link set us0 up", check=True)
        d.wait_state(bdf, "open", timeout=30)
        assert interrupt_cpus(g, bdf) == "1", "the device's interrupt follows the driver"
        # Sending, the peer's ACKs are written to the TAP by a thread beside the
        # driver's CPU (runtime/ddekit/rx_writer.c), the rest of the process stays on it.
        net.bring_up_iface(g, "us0")
        assert net.iperf3(g, reverse=False, seconds=3) > 0
        assert cpus_allowed(g, first["pid"], but=RX_WRITER) == {"1"}
        assert cpus_allowed(g, first["pid"], RX_WRITER) == {"0"}
        writes = g.run(f"for t in /proc/{first['pid']}/task/*; do grep -q {RX_WRITER} $t/comm && "
                       "grep syscw $t/io; done", check=True).out.split()
        assert int(writes[-1]) > 100, f"the writer wrote {writes}"

        # A restarted driver process (a template's fork or a fresh probe) runs there too.
        g.run(["kill", "-9", str(first["pid"])], check=True)
        deadline = time.monotonic() + 120
        while (now := d.status()[bdf])["pid"] in (first["pid"], None) or now["state"] != "open":
            assert time.monotonic() < deadline, {k: now[k] for k in ("state", "pid", "death", "recovery_count")}
            time.sleep(0.5)
        assert now["recovery_count"] == 1, now
        assert cpus_allowed(g, now["pid"], but=RX_WRITER) == {"1"}
        assert interrupt_cpus(g, bdf) == "1"
        d.stop()
        assert interrupt_cpus(g, bdf) in ("none", "0-1"), "the interrupt is left where the daemon found it"


def tx_thread_sleeps_and_cpu_s(g: Guest, pid: int) -> tuple[int, float]:
    """The driver process's TX thread's voluntary context switches (each a sleep)
    and the CPU time it has used, in seconds."""
    script = (f"for t in /proc/{pid}/task/*; do grep -qx understudy-tx $t/comm || continue; "
              "grep ^voluntary_ctxt_switches $t/status | cut -f2; cut -d' ' -f14,15 $t/stat; "
              "getconf CLK_TCK; done")
    sleeps, utime, stime, hz = map(int, g.run(["sh", "-c", script], check=True).out.split())
    return sleeps, (utime + stime) / hz


def test_run_poll_us_polls_through_sparse_traffic_and_sleeps_under_load_and_when_idle(no_leftover_qemu, bins):
    with Guest(devices=["e1000"], cpus=2) as g:
        bdf, ko = understudy.hand_over(g, "nic0", "e1000")
        d = understudy.Daemon(g, bins, None, "--max-restarts", "1")
        refused = d.cli("run", "--device", bdf, "--module", ko, "--poll-us", "30000")
        assert refused.returncode == 2 and "--cpu" in refused.err, refused.err
        d.run(bdf, [ko], cpu=1, poll_us=30000)
        d.wait_state(bdf, "registered", timeout=120)
        g.run("ip link set us0 up", check=True)
        opened = d.wait_state(bdf, "open", timeout=30, carrier=True)
        assert opened["poll_us"] == 30000, opened
        net.bring_up_iface(g, "us0")

        def sleeps_per_ping(pid: int, count: int = 50) -> float:
            before, _ = tx_thread_sleeps_and_cpu_s(g, pid)
            p = net.ping(g, count=count, interval=0.02)
            assert p["loss_pct"] == 0, p
            per_ping = (tx_thread_sleeps_and_cpu_s(g, pid)[0] - before) / count
            print(f"TX thread of {pid}: {per_ping} sleeps a ping")
            return per_ping

        # Pings 20 ms apart: a thread that slept would sleep at least once a ping
        # (it idles between them); one that polls through the window hardly ever.
        assert sleeps_per_ping(opened["pid"]) < 0.5
        # Idle, it stops polling when the window has passed.
        time.sleep(0.5)
        _, cpu0 = tx_thread_sleeps_and_cpu_s(g, opened["pid"])
        time.sleep(2)
        _, cpu1 = tx_thread_sleeps_and_cpu_s(g, opened["pid"])
        print(f"idle TX thread: {cpu1 - cpu0:.2f} s of CPU in 2 s")
        assert cpu1 - cpu0 < 0.2, f"the idle TX thread used {cpu1 - cpu0:.2f} s of CPU in 2 s"
        # Under load it sleeps whenever it has nothing, as without --poll-us.
        before, _ = tx_thread_sleeps_and_cpu_s(g, opened["pid"])
        assert net.iperf3(g, reverse=False, seconds=3) > 0
        slept = tx_thread_sleeps_and_cpu_s(g, opened["pid"])[0] - before
        print(f"sending 3 s, the TX thread slept {slept} times")
        assert slept > 300, f"the TX thread slept {slept} times in 3 s of sending"

        # A restarted driver process polls too.
        g.run(["kill", "-9", str(opened["pid"])], check=True)
        deadline = time.monotonic() + 120
        while (now := d.status()[bdf])["pid"] in (opened["pid"], None) or now["state"] != "open":
            assert time.monotonic() < deadline, {k: now[k] for k in ("state", "pid", "death", "recovery_count")}
            time.sleep(0.5)
        assert now["poll_us"] == 30000
        assert sleeps_per_ping(now["pid"]) < 0.5
        d.stop()
