"""The net shadow in the lab: what the admin does to us0 (ip link, ip maddr)
reaches the driver as requests, refusals are undone on us0, ethtool queries
are answered by the driver, a config file starts two devices, a driver whose
control loop goes silent is declared hung, and a driver's log flood is cut.

The driver process is tests/daemon/hostile_driver.c, the test stand-in, with
UNDERSTUDY_TEST_DRIVER_DIR as its remote control: it records every request
it gets and refuses or goes silent when told."""
import json
import time

import pytest

from lab.guest import Guest

from .test_daemon import Daemon, bind_vfio, bus_master_on, driver_processes, e1000_module, interface_exists

pytestmark = pytest.mark.lab
REMOTE = "/run/us-stand-in"


class Remote:
    """The stand-in's remote control directory in the guest."""

    def __init__(self, g: Guest):
        self.g = g
        g.run(f"rm -rf {REMOTE} && mkdir -p {REMOTE}", check=True)

    def requests(self) -> list[str]:
        res = self.g.run(f"cat {REMOTE}/requests")
        return res.out.splitlines() if res.returncode == 0 else []

    def wait_request(self, line: str, after: int = 0, timeout: float = 20) -> int:
        """Index of the first request `line` after the first `after` ones."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.requests()
            if line in got[after:]:
                return got.index(line, after)
            assert time.monotonic() < deadline, f"the stand-in never got {line!r}; it got {got[after:]}"
            time.sleep(0.2)

    def refuse(self, name: str, errno: int) -> None:
        self.g.write_file(f"{REMOTE}/refuse", f"{name} {errno}\n".encode())

    def accept_all(self) -> None:
        self.g.run(f"rm -f {REMOTE}/refuse", check=True)


def sysfs(g: Guest, attr: str) -> str:
    return g.run(f"cat /sys/class/net/us0/{attr}", check=True).out.strip()


def wait_sysfs(g: Guest, attr: str, value: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while (got := sysfs(g, attr)) != value:
        assert time.monotonic() < deadline, f"us0 {attr} is {got}, never {value}"
        time.sleep(0.2)


def test_link_changes_reach_the_driver_and_ethtool_answers(lab_ready, no_leftover_qemu, host_binaries):
    bins = host_binaries
    with Guest(devices=["e1000"]) as g:
        bdf = g.pci_address("nic0")
        g.run("modprobe vfio-pci && modprobe tun && modprobe e1000", check=True)
        bind_vfio(g, bdf)
        remote = Remote(g)
        d = Daemon(g, bins, "obedient", remote_dir=REMOTE)
        assert d.cli("run", "--device", bdf, "--module", e1000_module(g)).returncode == 0, "run"
        d.wait_state(bdf, "registered")
        time.sleep(1)
        assert "OPEN" not in remote.requests(), "the driver is opened only when us0 is set up"

        # up: OPEN, then the receive mode (what dev_open does after ndo_open).
        g.run("ip link set us0 up", check=True)
        i = remote.wait_request("OPEN")
        assert remote.requests()[i + 1].startswith("SET_RX_MODE 0 ")
        assert d.wait_state(bdf, "open")["carrier"]

        g.run("ip link set us0 mtu 1400", check=True)
        remote.wait_request("SET_MTU 1400")
        deadline = time.monotonic() + 10
        while d.status()[bdf]["mtu"] != 1400:
            assert time.monotonic() < deadline
            time.sleep(0.2)

        # Refused by the driver: undone on us0, and the log says why.
        remote.refuse("SET_MTU", 22)
        n = len(remote.requests())
        g.run("ip link set us0 mtu 1300", check=True)
        remote.wait_request("SET_MTU 1300", after=n)
        wait_sysfs(g, "mtu", "1400")
        remote.accept_all()
        # Beyond the driver's max_mtu (16110): undone without asking the driver.
        g.run("ip link set us0 mtu 20000", check=True)
        wait_sysfs(g, "mtu", "1400")
        assert not any(r == "SET_MTU 20000" for r in remote.requests())
        assert d.status()[bdf]["mtu"] == 1400

        g.run("ip link set us0 address 02:00:00:00:00:01", check=True)
        remote.wait_request("SET_MAC 02:00:00:00:00:01")

        n = len(remote.requests())
        g.run("ip link set us0 promisc on", check=True)
        next(_wait_prefix(remote, "SET_RX_MODE 0x1 ", n))
        n = len(remote.requests())
        g.run("ip link set us0 allmulticast on", check=True)
        next(_wait_prefix(remote, "SET_RX_MODE 0x3 ", n))
        n = len(remote.requests())
        g.run("ip maddr add 01:00:5e:01:02:03 dev us0", check=True)
        added = next(r for r in _wait_prefix(remote, "SET_RX_MODE 0x3 ", n))
        assert "01005e010203" in added.split()[2].split(",")
        n = len(remote.requests())
        g.run("ip link set us0 promisc off && ip link set us0 allmulticast off && ip maddr del 01:00:5e:01:02:03 dev us0",
              check=True)
        deadline = time.monotonic() + 20
        while not (last := [r for r in remote.requests()[n:] if r.startswith("SET_RX_MODE")]) or \
                not last[-1].startswith("SET_RX_MODE 0 ") or "01005e010203" in last[-1]:
            assert time.monotonic() < deadline, remote.requests()[n:]
            time.sleep(0.2)

        # down/up: STOP/OPEN; a refused OPEN leaves us0 down, as dev_open would.
        n = len(remote.requests())
        g.run("ip link set us0 down", check=True)
        remote.wait_request("STOP", after=n)
        d.wait_state(bdf, "stopped")
        g.run("ip link set us0 up", check=True)
        remote.wait_request("OPEN", after=n)
        d.wait_state(bdf, "open")
        g.run("ip link set us0 down", check=True)
        d.wait_state(bdf, "stopped")
        remote.refuse("OPEN", 12)
        n = len(remote.requests())
        g.run("ip link set us0 up", check=True)
        remote.wait_request("OPEN", after=n)
        deadline = time.monotonic() + 20
        while int(sysfs(g, "flags"), 16) & 1:
            assert time.monotonic() < deadline, "us0 stayed up after a refused OPEN"
            time.sleep(0.2)
        assert d.status()[bdf]["state"] == "stopped"
        remote.accept_all()
        g.run("ip link set us0 up", check=True)
        d.wait_state(bdf, "open")

        # ethtool: text, JSON, one part, by interface and by PCI address.
        res = d.cli("ethtool", "us0")
        assert res.returncode == 0, res.err
        for line in ["driver: hostile-test", "version: 0-stand-in", f"bus-info: {bdf}", "Speed: 1000Mb/s",
                     "Duplex: Full", "Link detected: yes", "stand_in_stat_00: 1000", "stand_in_stat_19: 1019"]:
            assert line in res.out, res.out
        res = d.cli("ethtool", bdf, "--stats", "--json")
        assert res.returncode == 0, res.err
        report = json.loads(res.out)["ethtool"]
        assert [s["name"] for s in report["stats"]] == [f"stand_in_stat_{i:02}" for i in range(20)]
        assert "driver_info" not in report and report["ifname"] == "us0"
        assert "ETHTOOL 3 12" in remote.requests(), "the second page was asked for"
        res = d.cli("ethtool", "us0", "--driver-info", "--json")
        assert json.loads(res.out)["ethtool"]["driver_info"]["bus_info"] == bdf
        remote.refuse("ETHTOOL", 95)
        res = d.cli("ethtool", "us0", "--link")
        assert res.returncode == 1 and "Operation not supported" in res.err, res.err
        res = d.cli("ethtool", "us7")
        assert res.returncode == 1 and "no device or interface us7" in res.err
        assert d.status()[bdf]["state"] == "open", "a refused query leaves the driver alone"

        log = d.stop()
        assert "the driver refused SET_MTU 1300: Invalid argument" in log, log
        assert "MTU 20000 is outside the driver's range 46..16110; its MTU is back to 1400" in log, log
        assert "the driver's ndo_open failed: Cannot allocate memory" in log, log


def _wait_prefix(remote: Remote, prefix: str, after: int, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while not (found := [r for r in remote.requests()[after:] if r.startswith(prefix)]):
        assert time.monotonic() < deadline, f"no {prefix!r}: {remote.requests()[after:]}"
        time.sleep(0.2)
    return iter(found)


def test_config_starts_two_devices_hangs_are_detected_and_log_floods_cut(lab_ready, no_leftover_qemu, host_binaries):
    bins = host_binaries
    with Guest(devices=["e1000", "e1000"]) as g:
        bdfs = [g.pci_address("nic0"), g.pci_address("nic1")]
        g.run("modprobe vfio-pci && modprobe tun && modprobe e1000", check=True)
        for bdf in bdfs:
            bind_vfio(g, bdf)
        ko = e1000_module(g)
        config = "".join(f'[[device]]\npci = "{bdf}"\nmodules = ["{ko}"]\nifname = "usc{i}"\n\n'
                         for i, bdf in enumerate(bdfs))
        g.write_file("/run/us-test.toml", config.encode())
        remote = Remote(g)
        d = Daemon(g, bins, "obedient", "--config", "/run/us-test.toml",
                   "--ping-interval-ms", "50", "--ping-timeout-ms", "100", remote_dir=REMOTE)
        for i, bdf in enumerate(bdfs):
            st = d.wait_state(bdf, "registered")
            assert st["ifname"] == f"usc{i}" and interface_exists(g, f"usc{i}")

        # Both stand-ins share the remote directory; the second device is
        # stopped so only one answers PINGs while the other goes silent.
        assert d.cli("stop", bdfs[1]).returncode == 0
        pid = d.status()[bdfs[0]]["pid"]
        deadline = time.monotonic() + 30
        while int(g.run(f"cat {REMOTE}/pings").out.strip() or 0) < 20:
            assert time.monotonic() < deadline, "the driver is not pinged every 50 ms"
            time.sleep(0.2)
        assert d.status()[bdfs[0]]["state"] == "registered", "a live driver was taken for hung"

        # Go silent; the guest watches for the daemon's verdict (it ends the
        # process) on CLOCK_MONOTONIC, as the stand-in records the silence.
        watch = (f"import time\nopen('{REMOTE}/hang', 'w').close()\n"
                 f"def alive():\n"
                 f"    try:\n"
                 f"        return open('/proc/{pid}/stat').read().split()[2] != 'Z'\n"
                 f"    except OSError:\n"
                 f"        return False\n"
                 f"while alive():\n"
                 f"    time.sleep(0.0005)\n"
                 f"print(time.monotonic_ns())\n")
        res = g.run(["python3", "-c", watch], check=True, timeout=60)
        verdict_ns = int(res.out.strip())
        silent_ns = int(next(r for r in remote.requests() if r.startswith("SILENT")).split()[1])
        latency_ms = (verdict_ns - silent_ns) / 1e6
        print(f"hang detection latency: {latency_ms:.1f} ms (PING every 50 ms idle, reply deadline 100 ms)")
        assert 90 <= latency_ms < 1000, latency_ms
        dead = d.wait_state(bdfs[0], "dead")
        assert dead["death"].startswith("hung: no reply to PING within 100 ms"), dead
        assert dead["device_stop"]["bus_master_off"] and dead["device_stop"]["iommu_unmapped"]
        assert not bus_master_on(g, bdfs[0]) and interface_exists(g, "usc0") and d.alive()
        log = d.stop()
        assert "hung: no reply to PING within 100 ms" in log, log
        assert not driver_processes(g, bins)

        # A driver printing 1000 lines: 20 reach the log, the rest are counted.
        g.run(f"rm -f {REMOTE}/hang")
        d = Daemon(g, bins, "log-flood", remote_dir=REMOTE)
        assert d.cli("run", "--device", bdfs[0], "--module", ko).returncode == 0
        d.wait_state(bdfs[0], "registered")
        deadline = time.monotonic() + 30
        while d.status()[bdfs[0]]["log_lines_suppressed"] < 960:
            assert time.monotonic() < deadline, d.status()[bdfs[0]]
            time.sleep(0.3)
        log = d.stop()
        # A burst of 20, then 10 a second while the daemon reads the flood.
        passed = log.count("driver: flood line")
        dropped = sum(int(line.split(" driver log line(s) dropped")[0].split()[-1])
                      for line in log.splitlines() if "driver log line(s) dropped by the rate limit" in line)
        print(f"log flood: {passed} lines logged, {dropped} dropped")
        assert 20 <= passed < 40 and passed + dropped == 1000, log
