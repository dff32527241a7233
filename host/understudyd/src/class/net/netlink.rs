// SPDX-License-Identifier: GPL-2.0
//! Watching the TAP through rtnetlink (RTNLGRP_LINK): an admin's
//! `ip link set us0 up/down/mtu/address/promisc/allmulticast` changes the TAP,
//! and the kernel announces each change as an RTM_NEWLINK message.
//!
//! The netlink itself (socket, message walk, attributes) is understudy-netlink's.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use understudy_netlink::{attributes, messages, u32_at, Message, Socket, NLMSG_ERROR, NLM_F_REQUEST};

const RTMGRP_LINK: u32 = 1;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const IFINFOMSG_LEN: usize = 16;
const IFLA_ADDRESS: u16 = 1;
const IFLA_MTU: u16 = 4;
const IFLA_PROMISCUITY: u16 = 30;
/// Linux >= 6.7; older kernels (the lab's 6.1) report only the admin's flag.
const IFLA_ALLMULTI: u16 = 61;
pub const IFF_UP: u32 = 0x1;
pub const IFF_PROMISC: u32 = 0x100;
pub const IFF_ALLMULTI: u32 = 0x200;

/// What one RTM_NEWLINK says about an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    pub ifindex: i32,
    /// Administratively up (IFF_UP).
    pub up: bool,
    pub mtu: Option<u32>,
    pub mac: Option<[u8; 6]>,
    /// Promiscuous in effect: the promiscuity count (tcpdump, bridges and
    /// `ip link set promisc on` all add to it) when reported, else the admin's flag.
    pub promisc: bool,
    /// All-multicast in effect, the same way (the count needs Linux >= 6.7).
    pub allmulti: bool,
}

/// Every RTM_NEWLINK in one datagram from the kernel (which may batch
/// several messages); anything else (RTM_DELLINK, errors, truncated bytes) is skipped.
pub fn parse_link_messages(buf: &[u8]) -> Vec<LinkInfo> {
    messages(buf).filter(|m| m.type_ == RTM_NEWLINK).filter_map(|m| parse_newlink(m.body)).collect()
}

fn parse_newlink(body: &[u8]) -> Option<LinkInfo> {
    if body.len() < IFINFOMSG_LEN {
        return None;
    }
    let ifindex = u32_at(body, 4) as i32;
    let flags = u32_at(body, 8);
    let (mut mtu, mut mac, mut promiscuity, mut allmulti) = (None, None, None, None);
    for (type_, payload) in attributes(&body[IFINFOMSG_LEN..]) {
        match (type_, payload.len()) {
            (IFLA_MTU, 4) => mtu = Some(u32_at(payload, 0)),
            (IFLA_ADDRESS, 6) => mac = Some(payload.try_into().expect("6 bytes")),
            (IFLA_PROMISCUITY, 4) => promiscuity = Some(u32_at(payload, 0)),
            (IFLA_ALLMULTI, 4) => allmulti = Some(u32_at(payload, 0)),
            _ => {}
        }
    }
    Some(LinkInfo {
        ifindex,
        up: flags & IFF_UP != 0,
        mtu,
        mac,
        promisc: promiscuity.map_or(flags & IFF_PROMISC != 0, |n| n > 0),
        allmulti: allmulti.map_or(flags & IFF_ALLMULTI != 0, |n| n > 0),
    })
}

/// A netlink socket subscribed to link changes.
pub struct LinkMonitor {
    socket: Socket,
}

/// What one drain of the socket brought.
pub enum Events {
    Links(Vec<LinkInfo>),
    /// The socket's queue overflowed (ENOBUFS): changes were lost, so the
    /// state must be queried again.
    Overrun,
}

impl LinkMonitor {
    pub fn open() -> io::Result<LinkMonitor> {
        Ok(LinkMonitor { socket: Socket::open(libc::NETLINK_ROUTE, RTMGRP_LINK, true)? })
    }

    /// Asks the kernel for interface `ifindex`'s state; the answer arrives
    /// on this socket like any change.
    pub fn request_link(&self, ifindex: i32) -> io::Result<()> {
        let mut ifinfomsg = [0u8; IFINFOMSG_LEN]; // family, pad, type, then index, flags, change
        ifinfomsg[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        self.socket.send(&Message::new(RTM_GETLINK, NLM_F_REQUEST).push(&ifinfomsg).finish())
    }

    /// Everything queued now, without blocking.
    pub fn drain(&mut self) -> io::Result<Events> {
        let mut links = Vec::new();
        loop {
            let msgs = match self.socket.recv() {
                Ok(msgs) => msgs,
                Err(e) => {
                    return match e.raw_os_error() {
                        Some(libc::EAGAIN) => Ok(Events::Links(links)),
                        Some(libc::ENOBUFS) => Ok(Events::Overrun),
                        _ => Err(e),
                    }
                }
            };
            if let Some(m) = messages(msgs).find(|m| m.type_ == NLMSG_ERROR) {
                let errno = m.body.get(..4).map_or(0, |b| u32_at(b, 0) as i32);
                if errno != 0 {
                    return Err(io::Error::other(format!("netlink RTM_GETLINK: {}", io::Error::from_raw_os_error(-errno))));
                }
            }
            links.extend(parse_link_messages(msgs));
        }
    }
}

impl AsFd for LinkMonitor {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use understudy_netlink::NLMSG_HDRLEN;

    fn attr(type_: u16, payload: &[u8]) -> Vec<u8> {
        Message::new(0, 0).attr(type_, payload).finish()[NLMSG_HDRLEN..].to_vec()
    }

    fn newlink(ifindex: i32, flags: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut body = vec![0u8, 0, 1, 0]; // AF_UNSPEC, pad, ARPHRD_ETHER
        body.extend_from_slice(&ifindex.to_ne_bytes());
        body.extend_from_slice(&flags.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        attrs.iter().for_each(|a| body.extend_from_slice(a));
        let mut m = ((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn newlink_fields_are_read_and_the_promiscuity_count_wins_over_the_flag() {
        let mut batch = newlink(7, IFF_UP | IFF_ALLMULTI, &[
            attr(3, b"us0\0"),
            attr(IFLA_MTU, &1400u32.to_ne_bytes()),
            attr(IFLA_ADDRESS, &[2, 0, 0, 0, 0, 1]),
            attr(IFLA_PROMISCUITY, &1u32.to_ne_bytes()),
        ]);
        // A second message in the same datagram: RTM_DELLINK is skipped, then a
        // flag-only NEWLINK without attributes.
        let mut del = newlink(7, 0, &[]);
        del[4] = 17;
        batch.extend_from_slice(&del);
        batch.extend_from_slice(&newlink(8, IFF_PROMISC, &[attr(IFLA_ALLMULTI, &0u32.to_ne_bytes())]));
        let links = parse_link_messages(&batch);
        assert_eq!(links, vec![
            LinkInfo { ifindex: 7, up: true, mtu: Some(1400), mac: Some([2, 0, 0, 0, 0, 1]), promisc: true, allmulti: true },
            LinkInfo { ifindex: 8, up: false, mtu: None, mac: None, promisc: true, allmulti: false },
        ]);
    }

    #[test]
    fn truncated_or_lying_lengths_never_panic() {
        let m = newlink(3, IFF_UP, &[attr(IFLA_MTU, &1500u32.to_ne_bytes())]);
        for cut in 0..m.len() {
            let _ = parse_link_messages(&m[..cut]);
        }
        let mut lying = m.clone();
        lying[NLMSG_HDRLEN + IFINFOMSG_LEN] = 200; // attribute longer than the message
        assert_eq!(parse_link_messages(&lying)[0].mtu, None);
        lying[0] = 3; // nlmsg_len below the header
        assert!(parse_link_messages(&lying).is_empty());
    }

    /// Real bytes from this kernel: the loopback interface, as RTM_GETLINK returns it.
    #[test]
    fn the_kernel_describes_loopback() {
        let mut mon = LinkMonitor::open().expect("a netlink socket (any user may open one)");
        mon.request_link(1).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            if let Events::Links(links) = mon.drain().unwrap() {
                if let Some(lo) = links.iter().find(|l| l.ifindex == 1) {
                    assert!(lo.mtu.is_some_and(|m| m >= 1280), "{lo:?}");
                    assert_eq!(lo.mac, Some([0; 6]));
                    break;
                }
            }
            assert!(std::time::Instant::now() < deadline, "no answer about ifindex 1");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
