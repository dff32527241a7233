"""The settings a user gives us0 before its driver dies, and what the NIC model
itself filters on, read through QEMU with no driver of the guest involved.

The device is reset between a dead driver and its successor, so what the
device filters on after a restart is what the fresh driver wrote from the
settings the daemon replayed to it (docs/recovery.md): the recovery tests
compare the two readings, before the kill and after.
"""
import re

from lab.guest import Guest

MTU = 1400
MAC = "52:54:00:12:34:99"     # the NICs' own addresses end in :56
GROUP = "01:00:5e:00:00:42"

# e1000 and e1000e registers (Intel 8254x and 82574 manuals, same offsets):
# receive control with the unicast and multicast promiscuous bits, the
# receive-address filters, the multicast table.
RCTL, RCTL_UPE, RCTL_MPE = 0x0100, 1 << 3, 1 << 4
RAL, RAH_AV, RECEIVE_ADDRESSES = 0x5400, 1 << 31, 16
MTA = 0x5200


def wanted(promisc: bool = True) -> dict:
    """What the device filters on once the settings are in. Promiscuous mode
    is on unless asked otherwise: a fresh driver's own open turns it off, so
    only a replay turns it on again. (e1000e writes no multicast table while
    promiscuous -- its MPE bit lets every group in -- so its test leaves the
    mode off and the table shows the group.)"""
    return {"mac": MAC, "promisc": promisc, "group_let_in": True}


def apply(g: Guest, ifname: str = "us0", promisc: bool = True) -> None:
    g.run(f"ip link set {ifname} mtu {MTU} promisc {'on' if promisc else 'off'} address {MAC} && "
          f"ip maddr add {GROUP} dev {ifname}", check=True)


def intel_filters(g: Guest, bdf: str) -> dict:
    """e1000's or e1000e's filters, read from the device's registers by QEMU's
    monitor: the address in filter 0, the promiscuous bits, and whether GROUP
    is let in -- e1000 puts its first multicast addresses into filters 1-15,
    e1000e none; both hash the rest into the multicast table (filter type 0)."""
    bar0 = g.bar_address(bdf, 0)

    def reg(offset: int) -> int:
        return g.read_phys_u32(bar0 + offset)

    def receive_address(i: int) -> str | None:
        ral, rah = reg(RAL + 8 * i), reg(RAL + 8 * i + 4)
        mac = (ral | (rah & 0xFFFF) << 32).to_bytes(6, "little")
        return ":".join(f"{b:02x}" for b in mac) if rah & RAH_AV else None

    group = bytes.fromhex(GROUP.replace(":", ""))
    hashed = (group[4] >> 4 | group[5] << 4) & 0xFFF    # filter type 0: bits 36..47
    rctl = reg(RCTL)
    return {"mac": receive_address(0),
            "promisc": rctl & (RCTL_UPE | RCTL_MPE) == RCTL_UPE | RCTL_MPE,
            "group_let_in": GROUP in map(receive_address, range(1, RECEIVE_ADDRESSES))
                            or bool(reg(MTA + 4 * (hashed >> 5)) >> (hashed & 0x1F) & 1)}


def virtio_net_filters(g: Guest, dev_id: str) -> dict:
    """virtio-net's filters as QEMU keeps them (`query-rx-filter`): what the
    driver set through the control queue. A reset puts back the device's own
    address, promiscuous mode on and an empty multicast table."""
    [nic] = g.qmp.cmd("query-rx-filter", name=dev_id)
    return {"mac": nic["main-mac"],
            "promisc": nic["promiscuous"],
            "group_let_in": nic["multicast"] == "all" or GROUP in nic["multicast-table"]}


def given_to_successors(log: str, promisc: bool = True) -> list[str]:
    """The daemon's log lines of what it gave fresh drivers, checked to hold
    the settings: the MTU, the address, the receive mode that the dead driver
    took last (promiscuous or not), and OPEN."""
    given = [line for line in log.splitlines() if "handover: giving the successor" in line]
    assert any(f"SET_MTU {MTU}" in line for line in given), log[-3000:]
    assert any(f"SET_MAC {MAC}" in line for line in given), given
    modes = re.findall(r"the driver took (SET_RX_MODE.*)", log)
    assert modes and ("promisc" in modes[-1]) == promisc, log[-3000:]
    assert any(line.endswith(modes[-1]) for line in given), (modes[-1], given)
    assert any(line.endswith(" OPEN") for line in given), log[-3000:]
    return given
