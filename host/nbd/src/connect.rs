// SPDX-License-Identifier: GPL-2.0
//! Configuring the kernel's NBD client over generic netlink: the export's
//! size and flags and one connected socket per hardware queue
//! (NBD_CMD_CONNECT), and taking it down (NBD_CMD_DISCONNECT).
//!
//! The request timeout is long on purpose. The daemon answers every
//! request — with an error when the disk cannot be served — so nbd's own
//! timer is only a backstop for a daemon that hangs; with several
//! connections, a request past it makes nbd mark its socket dead and
//! resend on another, which a driver's restart must never cause.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use understudy_netlink::{attributes, u32_at, Message, Socket, GENL_HDRLEN};

const FAMILY: &str = "nbd";
const VERSION: u8 = 1;
const CMD_CONNECT: u8 = 1;
const CMD_DISCONNECT: u8 = 2;
const ATTR_INDEX: u16 = 1;
const ATTR_SIZE_BYTES: u16 = 2;
const ATTR_BLOCK_SIZE_BYTES: u16 = 3;
const ATTR_TIMEOUT: u16 = 4;
const ATTR_SERVER_FLAGS: u16 = 5;
const ATTR_SOCKETS: u16 = 7;
const ATTR_BACKEND_IDENTIFIER: u16 = 10;
const SOCK_ITEM: u16 = 1;
const SOCK_FD: u16 = 1;

pub const FLAG_HAS_FLAGS: u64 = 1 << 0;
pub const FLAG_READ_ONLY: u64 = 1 << 1;
pub const FLAG_SEND_FLUSH: u64 = 1 << 2;
pub const FLAG_SEND_FUA: u64 = 1 << 3;
pub const FLAG_SEND_TRIM: u64 = 1 << 5;
pub const FLAG_CAN_MULTI_CONN: u64 = 1 << 8;

/// nbd's backstop timer, in seconds (see above): a day.
pub const REQUEST_TIMEOUT_S: u64 = 24 * 3600;

/// The disk as the kernel's client is to show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub size_bytes: u64,
    /// The logical block size: 512 .. 4096, a power of two.
    pub block_size: u32,
    pub read_only: bool,
    /// A volatile write cache: the client sends flushes and FUA writes.
    pub write_cache: bool,
    pub trim: bool,
    /// Names the export in sysfs (`/sys/block/nbdN/backend`): the PCI device.
    pub backend: String,
}

impl Export {
    fn server_flags(&self, connections: usize) -> u64 {
        let mut f = FLAG_HAS_FLAGS;
        if self.read_only {
            f |= FLAG_READ_ONLY;
        }
        if self.write_cache {
            f |= FLAG_SEND_FLUSH | FLAG_SEND_FUA;
        }
        if self.trim {
            f |= FLAG_SEND_TRIM;
        }
        if connections > 1 {
            // One server behind every socket: a flush on one covers writes
            // completed on all.
            f |= FLAG_CAN_MULTI_CONN;
        }
        f
    }

    /// NBD_CMD_CONNECT's message, for `family`.
    pub fn connect_message(&self, family: u16, sockets: &[BorrowedFd<'_>]) -> Vec<u8> {
        let mut m = Message::genl(family, CMD_CONNECT, VERSION);
        m.attr_u64(ATTR_SIZE_BYTES, self.size_bytes)
            .attr_u64(ATTR_BLOCK_SIZE_BYTES, self.block_size as u64)
            .attr_u64(ATTR_SERVER_FLAGS, self.server_flags(sockets.len()))
            .attr_u64(ATTR_TIMEOUT, REQUEST_TIMEOUT_S)
            .attr_str(ATTR_BACKEND_IDENTIFIER, &self.backend)
            .begin_nest(ATTR_SOCKETS);
        for s in sockets {
            m.begin_nest(SOCK_ITEM).attr_u32(SOCK_FD, s.as_raw_fd() as u32).end_nest();
        }
        m.end_nest();
        m.finish()
    }
}

fn family(sock: &mut Socket) -> io::Result<u16> {
    sock.genl_family(FAMILY).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(e.kind(), "the kernel has no NBD client: `modprobe nbd` (CONFIG_BLK_DEV_NBD)"),
        _ => e,
    })
}

/// Connects a new `/dev/nbdN` to `sockets` (the kernel's ends of connected
/// stream sockets, one per hardware queue; understudyd keeps the other
/// ends) and returns N.
pub fn connect(export: &Export, sockets: &[BorrowedFd<'_>]) -> io::Result<u32> {
    assert!(!sockets.is_empty());
    let mut sock = Socket::open(libc::NETLINK_GENERIC, 0, false)?;
    let id = family(&mut sock)?;
    let answers = sock.request(&export.connect_message(id, sockets)).map_err(|e| io::Error::new(e.kind(), format!("NBD_CMD_CONNECT: {e}")))?;
    let found = answers
        .iter()
        .filter_map(|body| body.get(GENL_HDRLEN..))
        .flat_map(attributes)
        .find(|&(t, p)| t == ATTR_INDEX && p.len() == 4)
        .map(|(_, p)| u32_at(p, 0))
        .ok_or_else(|| io::Error::other("NBD_CMD_CONNECT: the kernel's answer names no device"));
    found
}

/// Takes `/dev/nbd{index}` down: requests still queued fail with an error.
pub fn disconnect(index: u32) -> io::Result<()> {
    let mut sock = Socket::open(libc::NETLINK_GENERIC, 0, false)?;
    let id = family(&mut sock)?;
    let msg = Message::genl(id, CMD_DISCONNECT, VERSION).attr_u32(ATTR_INDEX, index).finish();
    sock.request(&msg).map(|_| ()).map_err(|e| io::Error::new(e.kind(), format!("NBD_CMD_DISCONNECT nbd{index}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use understudy_netlink::messages;

    #[test]
    fn connect_names_every_socket_and_the_exports_flags() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let export = Export { size_bytes: 64 << 20, block_size: 512, read_only: false, write_cache: true, trim: true,
                              backend: "0000:00:03.0".into() };
        let bytes = export.connect_message(0x1f, &[a.as_fd(), b.as_fd()]);
        let msg = messages(&bytes).next().unwrap();
        assert_eq!(msg.type_, 0x1f);
        assert_eq!(msg.body[0], CMD_CONNECT);
        let attrs: Vec<_> = attributes(&msg.body[GENL_HDRLEN..]).collect();
        let u64_of = |t| attrs.iter().find(|a| a.0 == t).map(|a| u64::from_ne_bytes(a.1.try_into().unwrap()));
        assert_eq!(u64_of(ATTR_SIZE_BYTES), Some(64 << 20));
        assert_eq!(u64_of(ATTR_SERVER_FLAGS),
                   Some(FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA | FLAG_SEND_TRIM | FLAG_CAN_MULTI_CONN));
        let (_, socks) = attrs.iter().find(|a| a.0 == ATTR_SOCKETS).unwrap();
        let fds: Vec<u32> = attributes(socks).flat_map(|(_, item)| attributes(item)).map(|(_, p)| u32_at(p, 0)).collect();
        assert_eq!(fds, vec![a.as_raw_fd() as u32, b.as_raw_fd() as u32]);
    }

    #[test]
    fn a_kernel_without_nbd_is_told_to_load_it() {
        // This machine's kernel may have nbd; a family that does not exist
        // shows the same path.
        let mut sock = Socket::open(libc::NETLINK_GENERIC, 0, false).unwrap();
        if sock.genl_family(FAMILY).is_err() {
            let e = connect(&Export { size_bytes: 1 << 20, block_size: 512, read_only: true, write_cache: false, trim: false,
                                      backend: "t".into() }, &[std::io::stdin().as_fd()]).unwrap_err();
            assert!(e.to_string().contains("modprobe nbd"), "{e}");
        }
    }
}
