"""The whole stack in the lab: understudyd runs understudy-driver with Debian's NIC driver.

understudyd (host/) owns the device, the arena, the rings and the TAP us0 and
speaks docs/protocol.md to the driver process; the guest's own network stack
uses us0. Traffic therefore goes: guest stack -> us0 -> understudyd -> rings ->
understudy-driver -> the unmodified driver module -> the emulated NIC -> slirp,
and back.
"""
import json
import re
import subprocess
import time

import pytest

from lab import net
from lab.guest import Guest

from tests.runtime.conftest import DRIVER, REPO, events
from tests.runtime.test_nic_lab import DRIVERS

pytestmark = pytest.mark.lab
SOCKET = "/run/understudy-runtime-test.sock"
HOST = REPO / "host"
BIN = HOST / "target" / "debug"
# us0 has the driver's carrier. A ping sent before it is there fails its ARP
# after 3 s and ends `ping -c 1`: e1000e on MSI-X finds its link from its
# watchdog, 2-3 s after it opens (in-kernel too, on QEMU's 82574L).
CARRIER_THEN_PING = ("for i in $(seq 300); do [ \"$(cat /sys/class/net/us0/carrier)\" = 1 ] && break; "
                     "sleep 0.1; done; ping -n -c 1 -i 0.1 -w 30 10.0.2.2")


def driver_uid(bdf: str) -> str:
    """The user a device's driver process runs as: understudyd's default
    --driver-uid-base plus the PCI address as a number."""
    domain, bus, rest = bdf.split(":")
    dev, fn = rest.split(".")
    return str(0x4000_0000 + (int(domain, 16) << 16 | int(bus, 16) << 8 | int(dev, 16) << 3 | int(fn, 16)))


def proc_status(g, pid: int) -> dict:
    """The credentials and confinement lines of a process's /proc status."""
    keys = ("Uid", "Gid", "Groups", "CapEff", "NoNewPrivs", "Seccomp", "Seccomp_filters")
    lines = g.run(f"cat /proc/{pid}/status", check=True).out.splitlines()
    return {k: v.split() for k, _, v in (line.partition(":") for line in lines) if k in keys}


@pytest.fixture(scope="session")
def understudyd() -> dict:
    subprocess.run(["cargo", "build", "--locked", "--quiet", "--manifest-path",
                    str(HOST / "Cargo.toml")], check=True)
    return {"daemon": BIN / "understudyd", "cli": BIN / "understudy"}


@pytest.mark.parametrize("device", list(DRIVERS))
def test_guest_traffic_through_us0_and_the_driver_process(lab_ready, no_leftover_qemu,
                                                          runtime_built, debian_modules,
                                                          understudyd, device):
    name, chain, _ = DRIVERS[device]
    with Guest(devices=[device]) as g:
        bdf = g.pci_address("nic0")
        g.run(f"modprobe -a vfio-pci tun && echo vfio-pci > /sys/bus/pci/devices/{bdf}/driver_override"
              f" && echo {bdf} > /sys/bus/pci/drivers_probe", check=True)
        modules = ", ".join(f'"{debian_modules / m}"' for m in chain)
        g.write_file("/run/us.toml", f'[[device]]\npci = "{bdf}"\nmodules = [{modules}]\n'
                                     f'ifname = "us0"\n'.encode())
        daemon = g.spawn([str(understudyd["daemon"]), "--socket", SOCKET, "--driver", str(DRIVER),
                          "--config", "/run/us.toml"])

        def cli(*args):
            return g.run([str(understudyd["cli"]), "--socket", SOCKET, *args], timeout=60)

        deadline = time.monotonic() + 60
        while True:
            res = cli("status", "--json")
            devices = json.loads(res.out)["devices"] if res.returncode == 0 else []
            if devices and devices[0]["state"] == "registered":
                break
            assert daemon.poll() is None, daemon.wait(1).err
            if time.monotonic() > deadline:
                daemon.kill(15)
                pytest.fail(f"the device never registered:\n{res.out}\n{daemon.wait(30).err}")
            time.sleep(0.3)

        up = g.run("ip link set us0 up && ip addr replace 10.0.2.15/24 dev us0 && "
                   "ip route replace default via 10.0.2.2 dev us0 && "
                   f"{CARRIER_THEN_PING}", timeout=60)
        assert up.returncode == 0, up.out + up.err
        p = net.ping(g, count=50, interval=0.02)
        assert p["loss_pct"] == 0, p
        # Every driver is offered checksums and TSO: frames longer than the MTU
        # cross the rings, and the runtime cuts them for a driver without TSO
        # (the hash shows the segments were right).
        def counters():
            return json.loads(cli("status", "--json").out)["devices"][0]["counters"]

        for direction in ("tx", "rx"):
            before = counters()
            s = net.bulk(g, direction, 2 << 20, timeout=300).summary()
            assert s["hash_ok"] and not s["errors"], s
            if direction == "tx":
                after = counters()
                frame = (after["tx_bytes"] - before["tx_bytes"]) / (after["tx_packets"] - before["tx_packets"])
                assert frame > 1514, (before, after)

        # Statistics only where the driver has them (pcnet32 has none: EOPNOTSUPP, as in-kernel).
        info = cli("ethtool", "--driver-info", "--link", bdf)
        assert info.returncode == 0 and name in info.out, info.out + info.err
        if name in ("e1000", "e1000e", "e100", "8139cp"):
            stats = cli("ethtool", "--stats", bdf)
            # e1000, e1000e and e100 call it rx_packets, 8139cp rx_ok: any counter > 0 will do.
            counts = [int(v) for v in re.findall(r"^\s*\w+: (\d+)$", stats.out, re.M)]
            assert stats.returncode == 0 and max(counts) > 50, stats.out + stats.err

        # Down and up again: STOP (ndo_stop: free_irq, napi_disable, ...) then OPEN.
        # (After the statistics: 8139cp's hardware counters restart with the chip.)
        again = g.run("ip link set us0 down && sleep 1 && ip link set us0 up && "
                      f"{CARRIER_THEN_PING}", timeout=60)
        assert again.returncode == 0, again.out + again.err
        assert net.ping(g, count=20, interval=0.02)["loss_pct"] == 0

        [status] = json.loads(cli("status", "--json").out)["devices"]
        sandbox = proc_status(g, status["pid"])
        daemon.kill(15)   # SIGTERM: stop the driver, release the device
        out = daemon.wait(30)
    # All of it ran in the sandbox (docs/design.md §0): the device's own
    # user, no capabilities, the two seccomp filters (I/O ports granted before).
    assert sandbox == {"Uid": [driver_uid(bdf)] * 4, "Gid": [driver_uid(bdf)] * 4, "Groups": [],
                       "CapEff": ["0000000000000000"], "NoNewPrivs": ["1"], "Seccomp": ["2"],
                       "Seccomp_filters": ["2"]}, sandbox
    assert status["state"] == "open" and status["carrier"], status
    assert status["driver_name"] == name and status["mac"] == "52:54:00:12:34:56", status
    assert {"tx-checksum", "tso4", "tso6", "tso-ecn"} <= set(status["offloads"]), status
    assert status["counters"]["tx_dropped"] == 0, status
    assert status["counters"]["rx_packets"] > 50, status
    # The driver's event lines reach the daemon's stdout.
    assert events(out.out, "REGISTERED")[0]["driver"] == name
