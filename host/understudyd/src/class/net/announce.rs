// SPDX-License-Identifier: GPL-2.0
//! After a move the interface's MAC is behind another port: switches and
//! peers learn it at once from a gratuitous ARP for each IPv4 address and an
//! unsolicited neighbour advertisement for each IPv6 address (RFC 5227
//! §2.3, RFC 4861 §7.2.6), sent from the interface like any frame of the
//! stack, through the new driver (docs/migration.md).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::ifaddrs::getifaddrs;

const ETH_P_ARP: u16 = 0x0806;
const ETH_P_IPV6: u16 = 0x86dd;
const BROADCAST: [u8; 6] = [0xff; 6];
/// ff02::1, all nodes, as an Ethernet multicast address.
const ALL_NODES_MAC: [u8; 6] = [0x33, 0x33, 0, 0, 0, 1];
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// The interface's addresses, as the stack has them now.
pub fn addresses(ifname: &str) -> io::Result<(Vec<Ipv4Addr>, Vec<Ipv6Addr>)> {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for ifa in getifaddrs().map_err(io::Error::from)?.filter(|a| a.interface_name == ifname) {
        let Some(address) = ifa.address else { continue };
        if let Some(a) = address.as_sockaddr_in() {
            v4.push(a.ip());
        } else if let Some(a) = address.as_sockaddr_in6() {
            v6.push(a.ip());
        }
    }
    Ok((v4, v6))
}

/// An ARP announcement: a request for our own address, sender and target alike.
pub fn gratuitous_arp(mac: [u8; 6], ip: Ipv4Addr) -> Vec<u8> {
    let mut f = ethernet(BROADCAST, mac, ETH_P_ARP);
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]); // Ethernet, IPv4, request
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&ip.octets());
    f
}

/// An unsolicited neighbour advertisement of `ip` to all nodes, with the
/// override flag (replace the cached link-layer address) and our MAC as option.
pub fn unsolicited_na(mac: [u8; 6], ip: Ipv6Addr) -> Vec<u8> {
    let mut icmp = vec![136, 0, 0, 0, 0x20, 0, 0, 0];
    icmp.extend_from_slice(&ip.octets());
    icmp.extend_from_slice(&[2, 1]); // target link-layer address, 8 bytes
    icmp.extend_from_slice(&mac);
    let sum = icmpv6_checksum(ip, ALL_NODES, &icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut f = ethernet(ALL_NODES_MAC, mac, ETH_P_IPV6);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, 255]); // ICMPv6, hop limit 255 as RFC 4861 requires
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&ALL_NODES.octets());
    f.extend_from_slice(&icmp);
    f
}

fn ethernet(dst: [u8; 6], src: [u8; 6], ethertype: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(86);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// RFC 4443 §2.3: over the IPv6 pseudo-header and the message.
fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, message: &[u8]) -> u16 {
    let mut bytes = Vec::with_capacity(40 + message.len());
    bytes.extend_from_slice(&src.octets());
    bytes.extend_from_slice(&dst.octets());
    bytes.extend_from_slice(&(message.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&[0, 0, 0, 58]);
    bytes.extend_from_slice(message);
    let mut sum: u32 = bytes.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Sends the announcements for every address of `ifname` (index `ifindex`)
/// with `mac`; returns how many frames went out.
pub fn announce(ifname: &str, ifindex: i32, mac: [u8; 6]) -> io::Result<u32> {
    let (v4, v6) = addresses(ifname)?;
    let frames: Vec<Vec<u8>> = v4.into_iter().map(|ip| gratuitous_arp(mac, ip))
        .chain(v6.into_iter().map(|ip| unsolicited_na(mac, ip)))
        .collect();
    if frames.is_empty() {
        return Ok(0);
    }
    // SAFETY: plain socket(2); the fd is owned at once.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd that nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut sent = 0;
    for frame in &frames {
        // SAFETY: sockaddr_ll is plain data; zero is a valid start.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_ifindex = ifindex;
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&frame[..6]);
        // SAFETY: `frame` and `to` are valid for the lengths given.
        let r = unsafe {
            libc::sendto(socket.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0,
                         (&to as *const libc::sockaddr_ll).cast(), std::mem::size_of::<libc::sockaddr_ll>() as u32)
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        sent += 1;
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

    #[test]
    fn a_gratuitous_arp_asks_for_its_own_address() {
        let f = gratuitous_arp(MAC, Ipv4Addr::new(10, 0, 2, 15));
        assert_eq!(f.len(), 42);
        assert_eq!((&f[..6], &f[6..12], &f[12..14]), (&BROADCAST[..], &MAC[..], &[8u8, 6][..]));
        assert_eq!(&f[20..22], &[0, 1], "a request");
        assert_eq!((&f[22..28], &f[28..32], &f[38..42]), (&MAC[..], &[10u8, 0, 2, 15][..], &[10u8, 0, 2, 15][..]));
    }

    #[test]
    fn a_neighbour_advertisement_overrides_and_checksums_to_zero() {
        let ip: Ipv6Addr = "fe80::5054:ff:fe12:3456".parse().unwrap();
        let f = unsolicited_na(MAC, ip);
        assert_eq!(f.len(), 14 + 40 + 32);
        assert_eq!((&f[..6], &f[12..14]), (&ALL_NODES_MAC[..], &[0x86u8, 0xdd][..]));
        assert_eq!((f[20], f[21]), (58, 255));
        let icmp = &f[54..];
        assert_eq!((icmp[0], icmp[4]), (136, 0x20), "an advertisement with the override flag");
        assert_eq!(&icmp[8..24], &ip.octets());
        assert_eq!(&icmp[26..32], &MAC);
        // A message carrying its checksum sums to zero (RFC 1071).
        assert_eq!(icmpv6_checksum(ip, ALL_NODES, icmp), 0);
    }
}
