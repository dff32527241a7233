"""Live migration of a lab guest while a TCP stream runs through its NIC.

The lab side of the live-migration paper (papers/live-migration.txt): a running
guest moves to a second QEMU process on the same host, optionally landing on a
different NIC model, and a hash-checked TCP stream to a peer survives it.

1. The guest boots as usual (host root over 9p), loads the in-kernel drivers it
   will need -- for a model swap the destination model's driver too, as the
   paper's shadow driver pre-loads it -- and addresses its NIC on a LabNetwork
   (lab/netns.py): slirp's connections are sockets of the source QEMU process
   and cannot move; a bridge in a namespace of our own carries both QEMUs' TAPs.
2. Guest.detach_host_root(): QEMU refuses to migrate while 9p is mounted.  From
   then on the guest runs busybox from its initramfs, where the agent lives;
   loaded modules stay loaded.
3. The stream: busybox `cat /dev/urandom | tee | nc`, hashed by sha256sum on
   the way out, to `lab.workload bulk serve` inside the namespace.
4. Same model: a twin QEMU waits with -incoming, migrate_to() moves the guest,
   the destination announces the guest's MAC (RARP) so the bridge forwards to
   its TAP, the source QEMU exits.
   Model swap, the way the paper's Xen prototype did it (sections 4.1, 5.2):
   hot-unplug the NIC on the source before migrating (QEMU refuses device_del
   during a migration) and its driver unbinds; migrate to a twin without that
   NIC; plug the new model there, its pre-loaded driver probes it, the same
   address goes on it and a gratuitous ARP (busybox arping -U) tells the peer
   the new MAC.  TCP retransmits over the outage.
5. Stop the stream; both ends' SHA-256 must match, with no reset.

`python3 -m lab.migration [--swap-to rtl8139] [--runs N]` measures the outage.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass

from .devices import lookup
from .errors import LabError
from .guest import Guest
from .net import HostBulk
from .netns import PEER_ADDRESS, LabNetwork, guest_address

GUEST_ADDRESS = guest_address(1)
MEMORY_MIB = 512       # half the lab default: less to copy, same behaviour
TRAFFIC_PROOF_BYTES = 2 << 20   # what the peer must receive to call the stream flowing

# The guest end of the stream, for the initramfs's busybox: random bytes until
# the source `cat` is killed; tee then sees EOF, nc half-closes and exits when
# the peer, having seen EOF, closes too.  Prints the SHA-256 of what was sent;
# the exit status is nc's.
STREAM_SCRIPT = r"""
fifo=/tmp/stream.fifo
rm -f $fifo && mkfifo $fifo || exit 1
sha256sum < $fifo > /tmp/stream.sha256 &
sh -c 'echo $$ > /tmp/stream.source.pid; exec cat /dev/urandom' | tee $fifo | nc "$1" "$2"
status=$?
wait
cut -d" " -f1 /tmp/stream.sha256
exit $status
"""

# Brings a NIC up on the lab network, for busybox: wait for the driver to
# register it, address it, wait for carrier, announce its (maybe new) MAC,
# wait for the peer's answer.  Prints "step centiseconds" lines (guest uptime).
BRING_UP_SCRIPT = r"""
dev=/sys/bus/pci/devices/$1 address=$2 peer=$3
now() { read up _ < /proc/uptime; echo ${up%.*}${up#*.}; }
deadline=$(( $(now) + $4 * 100 ))
wait_until() {
	until eval "$1"; do
		[ $(now) -gt $deadline ] && { echo "timed out waiting for: $1" >&2; exit 1; }
		usleep 10000
	done
}
echo start $(now)
wait_until '[ -d $dev/net ]'
iface=$(ls $dev/net)
echo probed $(now)
ip link set $iface up && ip addr replace $address dev $iface || exit 1
wait_until 'read carrier < /sys/class/net/$iface/carrier && [ "$carrier" = 1 ]'
echo carrier $(now)
arping -q -U -c 1 -I $iface -s ${address%/*} ${address%/*}
wait_until 'ping -q -c 1 -W 1 $peer >/dev/null'
echo answered $(now)
"""


@dataclass(frozen=True)
class NicIdentity:
    """A NIC as the guest sees it."""
    iface: str
    driver: str
    vendor_device: str    # "8086:100e"
    mac: str


def nic_identity(guest: Guest, dev_id: str) -> NicIdentity:
    dev = f"/sys/bus/pci/devices/{guest.pci_address(dev_id)}"
    res = guest.run(f"cd {dev} && i=$(ls net) && echo $i $(basename $(readlink driver)) "
                    f"$(cat vendor device net/$i/address)", in_initramfs=True, check=True)
    iface, driver, vendor, device, mac = res.out.split()
    return NicIdentity(iface, driver, f"{vendor.removeprefix('0x')}:{device.removeprefix('0x')}",
                       mac)


def bring_up(guest: Guest, dev_id: str, timeout: int = 60) -> dict[str, float]:
    """Addresses the NIC on the lab network until the peer answers; seconds each step took."""
    res = guest.run(["sh", "-c", BRING_UP_SCRIPT, "bring-up", guest.pci_address(dev_id),
                     GUEST_ADDRESS, PEER_ADDRESS, str(timeout)],
                    in_initramfs=True, timeout=timeout + 30)
    if res.returncode != 0:
        raise LabError(f"{dev_id} did not come up on the lab network: {res.err.strip()}")
    stamps = dict(line.split() for line in res.out.splitlines())
    start = int(stamps.pop("start"))
    return {f"{step}_s": (int(cs) - start) / 100 for step, cs in stamps.items()}


class GuestStream:
    """A TCP stream from the guest to a HostBulk peer, until stop(), hashed at both ends."""

    def __init__(self, guest: Guest, peer: HostBulk):
        self.proc = guest.spawn(["sh", "-c", STREAM_SCRIPT, "stream", peer.host, str(peer.port)],
                                in_initramfs=True)

    def stop(self, guest: Guest, timeout: float = 120) -> tuple[int, str]:
        """Ends the stream in `guest` (wherever it runs now): nc's exit status, sent SHA-256."""
        guest.run("kill $(cat /tmp/stream.source.pid)", in_initramfs=True, check=True)
        res = self.proc.wait(timeout)
        return res.returncode, res.out.strip()


def await_traffic(network: LabNetwork, nbytes: int = TRAFFIC_PROOF_BYTES,
                  timeout: float = 60) -> int:
    """Waits until the peers have received nbytes more; returns the bridge's count then."""
    start = network.bridge_rx_bytes()
    deadline = time.monotonic() + timeout
    while (now := network.bridge_rx_bytes()) < start + nbytes:
        if time.monotonic() > deadline:
            raise LabError(f"the stream carried {now - start} bytes in {timeout} s")
        time.sleep(0.1)
    return now


@dataclass
class MigrationRun:
    """What one migration under traffic did; the tests' evidence and the CLI's output."""
    network: str                   # the namespace, deleted by the time run() returns
    source_nic: NicIdentity
    dest_nic: NicIdentity
    timeline: dict[str, float]     # seconds, see run()
    migration: dict                # QEMU's last query-migrate (times in ms)
    peer: dict                     # the peer's bulk report: bytes, sha256, stalls, resets
    sent_sha256: str
    sender_status: int             # busybox nc's exit status
    bytes_after_switchover: int    # what the peer received after the guest moved
    peer_neighbour: str            # the peer's ARP entry for the guest at the end

    @property
    def intact(self) -> bool:
        return (self.sender_status == 0 and self.peer["resets"] == 0 and not self.peer["error"]
                and self.peer["sha256"] == self.sent_sha256 and self.peer["bytes"] > 0)

    def summary(self) -> dict:
        return {"nic": f"{self.source_nic.driver} -> {self.dest_nic.driver}",
                "intact": self.intact, "bytes": self.peer["bytes"],
                "max_stall_s": self.peer["max_stall_ms"] / 1000,
                "qemu_downtime_s": self.migration["downtime"] / 1000,
                "qemu_total_s": self.migration["total-time"] / 1000, **self.timeline}


def run(swap_to: str | None = None, source_model: str = "e1000",
        memory_mib: int = MEMORY_MIB) -> MigrationRun:
    """Boots a guest, starts the stream, live-migrates it (onto `swap_to` if given), ends it.

    Timeline, in seconds from the first step that takes the NIC away (the
    unplug with a swap, else the migration): unplugged_s, migrated_s (the
    guest runs in the destination QEMU), plugged_s, probed_s, carrier_s,
    answered_s (the peer answers a ping from the guest's new NIC).
    """
    source_dev = lookup(source_model)
    drivers = [source_dev.driver] + ([lookup(swap_to).driver] if swap_to else [])
    with LabNetwork() as network, \
            Guest(devices=[source_model], memory_mib=memory_mib, netdev=network) as source:
        source.run(["modprobe", "-a", *drivers], check=True)
        bring_up(source, "nic0")
        source_nic = nic_identity(source, "nic0")
        source.detach_host_root()
        peer = HostBulk("tx", 0, network=network)
        stream = GuestStream(source, peer)
        await_traffic(network)

        t0 = time.monotonic()
        timeline = {}
        if swap_to:
            source.hot_unplug("nic0")
            timeline["unplugged_s"] = time.monotonic() - t0
        with source.incoming_twin() as dest:
            report = source.migrate_to(dest)
            timeline["migrated_s"] = time.monotonic() - t0
            dest_id = "nic0"
            if swap_to:
                dest_id = dest.hot_plug(swap_to, "nic1").id
                plugged = time.monotonic() - t0
                timeline["plugged_s"] = plugged
                timeline.update({k: plugged + v for k, v in bring_up(dest, dest_id).items()})
            at_switchover = network.bridge_rx_bytes()
            after = await_traffic(network) - at_switchover
            dest_nic = nic_identity(dest, dest_id)
            status, sent = stream.stop(dest)
            # While the destination's TAP still holds the bridge's carrier up:
            # losing it flushes the peer's neighbour table.
            neighbour = network.ip("neigh", "show", GUEST_ADDRESS.split("/")[0]).strip()
        peer_report = peer.result()
    return MigrationRun(network.name, source_nic, dest_nic,
                        {k: round(v, 3) for k, v in timeline.items()}, report, peer_report,
                        sent, status, after, neighbour)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m lab.migration", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", default="e1000", help="the guest's NIC model before (e1000)")
    p.add_argument("--swap-to", help="land on this NIC model instead (e.g. rtl8139, e1000e)")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--mem", type=int, default=MEMORY_MIB, help="guest memory in MiB")
    a = p.parse_args(argv)
    summaries = []
    for _ in range(a.runs):
        summaries.append(run(a.swap_to, a.source, a.mem).summary())
        print(json.dumps(summaries[-1]), flush=True)
    numeric = [k for k, v in summaries[0].items() if isinstance(v, float)]
    print(json.dumps({"median": {k: statistics.median(s[k] for s in summaries) for k in numeric},
                      "runs": a.runs, "all_intact": all(s["intact"] for s in summaries)}))
    return 0 if all(s["intact"] for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
