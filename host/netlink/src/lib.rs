// SPDX-License-Identifier: GPL-2.0
//! The netlink understudyd speaks: rtnetlink to watch its TAP
//! (class/net/netlink.rs) and generic netlink to configure the kernel's NBD
//! client (understudy-nbd). A socket, a message builder with nested
//! attributes, a reader of what the kernel sends, and a request that waits
//! for the kernel's ack.
//!
//! Raw netlink over libc rather than `neli` or the `netlink-packet-*`
//! family: the daemon uses two messages of rtnetlink and three commands of
//! one generic family, and those crates bring a proc-macro stack (or an
//! async runtime) to build on a 2-core machine for nothing we use.
//!
//! Whatever the kernel sends is read defensively: a truncated or lying
//! length ends the walk, never a panic.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

pub const NLMSG_HDRLEN: usize = 16;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLM_F_REQUEST: u16 = 1;
pub const NLM_F_ACK: u16 = 4;
pub const NLA_F_NESTED: u16 = 1 << 15;

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// Generic netlink's header after nlmsghdr: cmd, version, reserved.
pub const GENL_HDRLEN: usize = 4;

pub fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// One message the kernel sent: its type and what follows its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received<'a> {
    pub type_: u16,
    pub body: &'a [u8],
}

/// Every message in one datagram (the kernel batches several); a message
/// whose length is below its header or past the datagram ends the walk.
pub fn messages(mut buf: &[u8]) -> impl Iterator<Item = Received<'_>> {
    std::iter::from_fn(move || {
        if buf.len() < NLMSG_HDRLEN {
            return None;
        }
        let len = u32_at(buf, 0) as usize;
        if len < NLMSG_HDRLEN || len > buf.len() {
            return None;
        }
        let m = Received { type_: u16_at(buf, 4), body: &buf[NLMSG_HDRLEN..len] };
        buf = &buf[align4(len).min(buf.len())..];
        Some(m)
    })
}

/// The attributes in `bytes`: (type without the nested flag, payload).
pub fn attributes(mut bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if bytes.len() < 4 {
            return None;
        }
        let len = u16_at(bytes, 0) as usize;
        if len < 4 || len > bytes.len() {
            return None;
        }
        let a = (u16_at(bytes, 2) & !NLA_F_NESTED, &bytes[4..len]);
        bytes = &bytes[align4(len).min(bytes.len())..];
        Some(a)
    })
}

/// A message being built: the header is filled in by `finish`.
pub struct Message {
    bytes: Vec<u8>,
    /// Where each open nest's length goes.
    nests: Vec<usize>,
}

impl Message {
    pub fn new(type_: u16, flags: u16) -> Message {
        let mut bytes = vec![0; NLMSG_HDRLEN];
        bytes[4..6].copy_from_slice(&type_.to_ne_bytes());
        bytes[6..8].copy_from_slice(&flags.to_ne_bytes());
        Message { bytes, nests: Vec::new() }
    }

    /// A generic netlink request of `family`: `cmd` at `version`, acked.
    pub fn genl(family: u16, cmd: u8, version: u8) -> Message {
        let mut m = Message::new(family, NLM_F_REQUEST | NLM_F_ACK);
        m.push(&[cmd, version, 0, 0]);
        m
    }

    /// Fixed body bytes (a family header such as ifinfomsg).
    pub fn push(&mut self, bytes: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(bytes);
        self
    }

    pub fn attr(&mut self, type_: u16, payload: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        self.bytes.extend_from_slice(&type_.to_ne_bytes());
        self.bytes.extend_from_slice(payload);
        self.bytes.resize(align4(self.bytes.len()), 0);
        self
    }

    pub fn attr_u32(&mut self, type_: u16, v: u32) -> &mut Self {
        self.attr(type_, &v.to_ne_bytes())
    }

    pub fn attr_u64(&mut self, type_: u16, v: u64) -> &mut Self {
        self.attr(type_, &v.to_ne_bytes())
    }

    /// A NUL-terminated string attribute.
    pub fn attr_str(&mut self, type_: u16, s: &str) -> &mut Self {
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        self.attr(type_, &b)
    }

    /// Opens a nested attribute; what is added until `end_nest` is inside it.
    pub fn begin_nest(&mut self, type_: u16) -> &mut Self {
        self.nests.push(self.bytes.len());
        self.bytes.extend_from_slice(&[0, 0]);
        self.bytes.extend_from_slice(&(type_ | NLA_F_NESTED).to_ne_bytes());
        self
    }

    pub fn end_nest(&mut self) -> &mut Self {
        let at = self.nests.pop().expect("end_nest without begin_nest");
        let len = (self.bytes.len() - at) as u16;
        self.bytes[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    pub fn finish(&mut self) -> Vec<u8> {
        assert!(self.nests.is_empty(), "a nested attribute left open");
        let len = self.bytes.len() as u32;
        self.bytes[0..4].copy_from_slice(&len.to_ne_bytes());
        std::mem::take(&mut self.bytes)
    }
}

/// A netlink socket of one protocol.
pub struct Socket {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl Socket {
    /// `groups`: the multicast groups to join (rtnetlink's RTMGRP_*), 0 for none.
    pub fn open(protocol: i32, groups: u32, nonblocking: bool) -> io::Result<Socket> {
        let flags = libc::SOCK_RAW | libc::SOCK_CLOEXEC | if nonblocking { libc::SOCK_NONBLOCK } else { 0 };
        // SAFETY: plain syscall; the result is a new fd we own.
        let raw = unsafe { libc::socket(libc::AF_NETLINK, flags, protocol) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: socket returned a fresh fd nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an all-zero sockaddr_nl is valid; we fill family and groups.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = groups;
        // SAFETY: binding our socket to a valid sockaddr_nl.
        let r = unsafe {
            libc::bind(fd.as_raw_fd(), (&addr as *const libc::sockaddr_nl).cast(), std::mem::size_of_val(&addr) as u32)
        };
        if r < 0 {
            return Err(io::Error::other(format!("netlink bind: {}", io::Error::last_os_error())));
        }
        Ok(Socket { fd, buf: vec![0; 32 << 10] })
    }

    /// Sends one message to the kernel.
    pub fn send(&self, msg: &[u8]) -> io::Result<()> {
        // SAFETY: an all-zero sockaddr_nl addresses the kernel.
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: sending our own buffer to a valid address.
        let n = unsafe {
            libc::sendto(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0,
                         (&kernel as *const libc::sockaddr_nl).cast(), std::mem::size_of_val(&kernel) as u32)
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// One datagram (EAGAIN on a nonblocking socket with nothing queued).
    pub fn recv(&mut self) -> io::Result<&[u8]> {
        loop {
            // SAFETY: receiving into our own buffer.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), self.buf.as_mut_ptr().cast(), self.buf.len(), 0) };
            if n >= 0 {
                return Ok(&self.buf[..n as usize]);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Sends an acked request on a blocking socket and returns the bodies
    /// of the messages the kernel answered with before its ack; a negative
    /// ack is the errno it carries.
    pub fn request(&mut self, msg: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        self.send(msg)?;
        let mut answers = Vec::new();
        loop {
            let datagram = self.recv()?;
            for m in messages(datagram) {
                match m.type_ {
                    NLMSG_ERROR => {
                        let errno = m.body.get(..4).map_or(-libc::EPROTO, |b| u32_at(b, 0) as i32);
                        return match errno {
                            0 => Ok(answers),
                            e => Err(io::Error::from_raw_os_error(-e)),
                        };
                    }
                    NLMSG_DONE => return Ok(answers),
                    _ => answers.push(m.body.to_vec()),
                }
            }
        }
    }

    /// Generic netlink: the id of the family called `name`.
    pub fn genl_family(&mut self, name: &str) -> io::Result<u16> {
        let msg = Message::genl(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1).attr_str(CTRL_ATTR_FAMILY_NAME, name).finish();
        let answers = self.request(&msg).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => io::Error::new(io::ErrorKind::NotFound, format!("no generic netlink family {name:?} (is its module loaded?)")),
            _ => e,
        })?;
        let found = answers
            .iter()
            .filter_map(|body| body.get(GENL_HDRLEN..))
            .flat_map(attributes)
            .find(|&(t, p)| t == CTRL_ATTR_FAMILY_ID && p.len() == 2)
            .map(|(_, p)| u16_at(p, 0))
            .ok_or_else(|| io::Error::other(format!("generic netlink family {name:?}: the kernel's answer has no id")));
        found
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_attributes_are_built_and_read_back() {
        let mut m = Message::new(0x20, NLM_F_REQUEST);
        m.push(&[1, 2, 0, 0]).attr_u64(2, 1 << 40).begin_nest(7).begin_nest(1).attr_u32(1, 9).end_nest().end_nest();
        let bytes = m.finish();
        let [msg] = messages(&bytes).collect::<Vec<_>>()[..] else { panic!("one message") };
        assert_eq!(msg.type_, 0x20);
        let attrs: Vec<_> = attributes(&msg.body[4..]).collect();
        assert_eq!(attrs.len(), 2);
        assert_eq!(attrs[0], (2, &(1u64 << 40).to_ne_bytes()[..]));
        let (nest_type, nest) = attrs[1];
        assert_eq!(nest_type, 7);
        let (item_type, item) = attributes(nest).next().unwrap();
        assert_eq!(item_type, 1);
        assert_eq!(attributes(item).collect::<Vec<_>>(), vec![(1, &9u32.to_ne_bytes()[..])]);
    }

    #[test]
    fn lying_lengths_end_the_walk_without_a_panic() {
        let bytes = Message::new(5, 0).attr_u32(1, 1).attr_u32(2, 2).finish();
        for cut in 0..bytes.len() {
            let _ = messages(&bytes[..cut]).map(|m| attributes(m.body).count()).sum::<usize>();
        }
        let mut lying = bytes.clone();
        lying[NLMSG_HDRLEN] = 200;
        assert_eq!(attributes(messages(&lying).next().unwrap().body).count(), 0);
        lying[0] = 3;
        assert_eq!(messages(&lying).count(), 0);
    }

    /// The real kernel: generic netlink's controller knows itself.
    #[test]
    fn the_kernel_names_its_controller_family() {
        let mut s = Socket::open(libc::NETLINK_GENERIC, 0, false).expect("a generic netlink socket");
        assert_eq!(s.genl_family("nlctrl").unwrap(), GENL_ID_CTRL);
        let e = s.genl_family("no-such-family").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    }
}
