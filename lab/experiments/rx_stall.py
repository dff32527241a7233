"""Transfers through a NIC until one stops moving, then what the driver and its NIC say.

Boots a lab guest with one NIC on the bridged TAP (as `bench net`), brings up
us0 behind understudyd (the release build) -- or, with --kernel, the NIC's
in-kernel driver -- and runs iperf3 for 5 s at a time until a run does not
finish in 25 s or the runs are used up:

    python3 -m lab.experiments.rx_stall --driver e100 [--direction rx] [--runs 40]
    python3 -m lab.experiments.rx_stall --driver e100 --kernel --starve-ms 10

--starve-ms runs a SCHED_FIFO busy loop on each vCPU for that long every
100 ms, so that the driver falls behind its NIC and the NIC's receive ring
runs out, as it does more often under understudy.

At a stall it prints the NIC's interrupt count a second apart and, for e100,
the SCB status word, read through QEMU's monitor so that no driver is
involved: receive and command unit states, pending interrupt causes, the
interrupt mask; under understudy also the device's `understudy status
--json`, the driver process's threads (state and wait channel) and their
stacks (gdb). Exit code 0: no stall in all the runs; 1: a stall, described
above.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from .. import net, understudy
from ..devices import lookup
from ..errors import LabError
from ..guest import Guest
from ..netns import LabNetwork

TRANSFER_S = 5
STALLED_AFTER_S = 25
STARVE_PERIOD_S = 0.1

# Keeps everything else off one vCPU for a while, every period: the guest runs
# the host's python3, and SCHED_FIFO outranks the kernel's ksoftirqd.
STARVE = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
burst, period = float(sys.argv[2]), float(sys.argv[3])
while True:
    start = time.monotonic()
    while time.monotonic() - start < burst:
        pass
    time.sleep(period - burst)
"""


def e100_scb(word: int) -> str:
    """The i8255x's System Control Block status word, as its manual names the fields."""
    status, stat_ack, cmd_hi = word & 0xff, (word >> 8) & 0xff, (word >> 24) & 0xff
    return (f"RU state {(status >> 2) & 0xf} (4: ready, 2: no resources, 1: suspended), "
            f"CU state {(status >> 6) & 3}, pending causes {stat_ack:#04x}, interrupt mask {cmd_hi:#04x}")


def describe_stall(g: Guest, daemon: understudy.Daemon | None, bdf: str, driver: str) -> None:
    if daemon:
        status = daemon.status()[bdf]
        print(json.dumps(status, indent=1))
        pid = status["pid"]
        print(g.run(f"for t in /proc/{pid}/task/*; do echo $(cat $t/comm) $(cut -d' ' -f3 $t/stat) "
                    f"$(cat $t/wchan); done").out)
        print(g.run(f"gdb -p {pid} -batch -ex 'thread apply all bt 8' 2>&1 | grep '^#\\|^Thread'",
                    timeout=120).out)
    irq = g.run(f"cat /sys/bus/pci/devices/{bdf}/irq").out.strip()
    for _ in range(2):
        print(g.run(f"grep '^ *{irq}:' /proc/interrupts").out.strip())
        if driver == "e100":
            print("SCB:", e100_scb(g.read_phys_u32(g.bar_address(bdf, 0))))
        time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m lab.experiments.rx_stall",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", default="e100", help="the NIC's driver (default: e100)")
    parser.add_argument("--direction", choices=["rx", "tx"], default="rx",
                        help="rx: host -> guest (iperf3 -R), tx: guest -> host (default: rx)")
    parser.add_argument("--runs", type=int, default=40, help="transfers before giving up (default: 40)")
    parser.add_argument("--kernel", action="store_true", help="the in-kernel driver instead of understudy")
    parser.add_argument("--starve-ms", type=float, default=0,
                        help="keep every vCPU busy this long every 100 ms (default: 0, never)")
    args = parser.parse_args(argv)
    dev = lookup(args.driver)
    bins = None if args.kernel else understudy.build(release=True)
    with LabNetwork() as network, Guest(devices=[dev.name], netdev=network) as g:
        bdf = g.pci_address("nic0")
        understudy.prepare(g)
        daemon = None if args.kernel else understudy.Daemon(g, bins)
        stalled = False
        try:
            if daemon:
                understudy.understudy_up(g, daemon, bdf, understudy.module_chain(g, dev.driver), network)
            else:
                understudy.bind_kernel(g, bdf, dev.driver)
                net.bring_up(g, "nic0", network=network)
            if args.starve_ms:
                for cpu in range(g.cpus):
                    g.spawn(["python3", "-c", STARVE, str(cpu), str(args.starve_ms / 1000),
                             str(STARVE_PERIOD_S)])
            for run in range(args.runs):
                try:
                    mbps = net.iperf3(g, reverse=args.direction == "rx", seconds=TRANSFER_S,
                                      network=network, timeout=STALLED_AFTER_S)
                except (LabError, TimeoutError) as e:
                    print(f"run {run + 1}: stalled ({e})", flush=True)
                    describe_stall(g, daemon, bdf, dev.driver)
                    stalled = True
                    return 1
                print(f"run {run + 1}: {mbps:.0f} Mbit/s", flush=True)
        finally:
            log = daemon.stop() if daemon else ""
            if stalled:
                # A driver that died says why: its PANIC event and the daemon's line.
                print("\n".join(line for line in log.splitlines() if "PANIC" in line or "died" in line))
    print(f"no stall in {args.runs} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
