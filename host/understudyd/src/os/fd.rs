// SPDX-License-Identifier: GPL-2.0
//! The file descriptors a device's thread waits on and hands to driver
//! processes: eventfds, the control socket, fd passing. Small wrappers over
//! nix, so the rest of the daemon reads as what it does, not as syscalls.

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::socket::{sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType};

/// A new eventfd (close-on-exec: only the fds docs/protocol.md names reach a driver).
pub fn eventfd() -> io::Result<OwnedFd> {
    Ok(EventFd::from_flags(EfdFlags::EFD_CLOEXEC)?.into())
}

/// Adds one to an eventfd: wakes whoever polls it.
pub fn signal(fd: BorrowedFd) {
    // A full counter (2^64 - 2 signals unread) is the only failure, and the
    // reader is awake then anyway.
    let _ = nix::unistd::write(fd, &1u64.to_ne_bytes());
}

/// Reads an eventfd that poll reported readable, so it stops being readable.
pub fn drain(fd: BorrowedFd) {
    let mut value = [0u8; 8];
    let _ = nix::unistd::read(fd.as_raw_fd(), &mut value);
}

/// A connected pair of close-on-exec SOCK_SEQPACKET sockets: one message per
/// packet, which is what the control protocol's framing relies on.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)?)
}

pub fn set_nonblocking(fd: BorrowedFd) -> io::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)?);
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Sends `bytes` on `socket` with `fd` attached (SCM_RIGHTS).
pub fn send_with_fd(socket: BorrowedFd, bytes: &[u8], fd: BorrowedFd) -> io::Result<()> {
    let fds = [fd.as_raw_fd()];
    sendmsg::<()>(socket.as_raw_fd(), &[IoSlice::new(bytes)], &[ControlMessage::ScmRights(&fds)],
                  MsgFlags::MSG_NOSIGNAL, None)?;
    Ok(())
}

/// A poll(2) entry waiting for `fd` to become readable.
pub fn readable(fd: impl AsFd) -> libc::pollfd {
    libc::pollfd { fd: fd.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eventfd_is_readable_once_signalled_until_drained() {
        let fd = eventfd().unwrap();
        let poll = |fd: &OwnedFd| {
            let mut p = [readable(fd)];
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(p.as_mut_ptr(), 1, 0) }
        };
        assert_eq!(poll(&fd), 0);
        signal(fd.as_fd());
        signal(fd.as_fd());
        assert_eq!(poll(&fd), 1);
        drain(fd.as_fd());
        assert_eq!(poll(&fd), 0);
    }

    #[test]
    fn a_passed_fd_arrives_as_a_new_descriptor_of_the_same_file() {
        let (a, b) = seqpacket_pair().unwrap();
        let passed = eventfd().unwrap();
        send_with_fd(a.as_fd(), b"hi", passed.as_fd()).unwrap();
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let mut buf = [0u8; 8];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let msg = nix::sys::socket::recvmsg::<()>(b.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::empty()).unwrap();
        let got: Vec<_> = msg.cmsgs().unwrap().collect();
        assert_eq!(msg.bytes, 2);
        assert!(matches!(got.as_slice(), [nix::sys::socket::ControlMessageOwned::ScmRights(fds)] if fds.len() == 1));
    }
}
