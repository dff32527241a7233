# SPDX-License-Identifier: GPL-2.0
"""What a NIC's capture (Guest(pcap=True): QEMU's filter-dump on the NIC's
backend, both directions or only what the NIC sent, the first PCAP_SNAPLEN
bytes of each frame, host wall clock) says: when a MAC sent frames -- the gaps on the wire of a
restart (lab/scenario.py) or a move (lab/migrate_loop.py) -- and when it
announced its addresses after a move.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator

from .errors import LabError

ETH_P_ARP, ETH_P_IPV6 = 0x0806, 0x86DD
ICMPV6, NEIGHBOUR_ADVERTISEMENT = 58, 136


def records(pcap: bytes) -> Iterator[tuple[float, bytes]]:
    """Each frame's timestamp (s) and its captured bytes."""
    if len(pcap) < 24 or pcap[:4] not in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4"):
        raise LabError("the NIC's capture is not a pcap file")
    order = "<" if pcap[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    off = 24
    while off + 16 <= len(pcap):
        sec, usec, incl, _ = struct.unpack_from(order + "IIII", pcap, off)
        yield sec + usec / 1e6, pcap[off + 16:off + 16 + incl]
        off += 16 + incl


def _mac(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def frames_from(pcap: bytes, mac: str) -> list[float]:
    """Timestamps (s) of the frames in a pcap file whose source MAC is `mac`."""
    src = _mac(mac)
    return [t for t, frame in records(pcap) if frame[6:12] == src]


def is_announcement(frame: bytes) -> bool:
    """A gratuitous ARP (its sender and target protocol addresses alike, RFC 5227
    §2.3: an ordinary ARP request for a peer is not one) or an unsolicited
    neighbour advertisement (ICMPv6 type 136 to all nodes, RFC 4861 §7.2.6)."""
    ethertype = int.from_bytes(frame[12:14], "big")
    if ethertype == ETH_P_ARP and len(frame) >= 42:
        return frame[28:32] == frame[38:42]
    if ethertype == ETH_P_IPV6 and len(frame) >= 55:
        return frame[20] == ICMPV6 and frame[54] == NEIGHBOUR_ADVERTISEMENT and frame[0:6] == b"\x33\x33\0\0\0\x01"
    return False


def announcements_from(pcap: bytes, mac: str) -> list[float]:
    """Timestamps (s) of the announcements in a pcap file whose source MAC is `mac`."""
    src = _mac(mac)
    return [t for t, frame in records(pcap) if frame[6:12] == src and is_announcement(frame)]
