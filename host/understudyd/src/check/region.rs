// SPDX-License-Identifier: GPL-2.0
//! The trace region (include/understudy/trace.h): a memfd the daemon
//! creates for each checked driver process and hands to it and its checker.
//! The daemon never maps it: what is in it is the driver's and the
//! checker's business. The daemon's are its size and, when a driver hangs,
//! three of the header's counters (`counters`), read with `pread`. Both as
//! understudy-trace lays them out, whose test holds it against trace.h.

use std::ffi::CStr;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use understudy_trace::{TraceHeader, TRACE_REGION_SIZE};

/// How far the driver has traced and the checker approved, as they last
/// wrote it. The driver writes the region, so these are its word: good
/// for describing a hang, never for deciding what the device may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Events published.
    pub head: u64,
    /// The driver sleeps until the checker approves more.
    pub producer_waiting: bool,
    /// Events checked and approved.
    pub approved: u64,
}

/// Reads the counters of `region`'s header.
pub fn counters(region: BorrowedFd) -> io::Result<Counters> {
    let mut bytes = [0u8; size_of::<TraceHeader>()];
    // The region is sealed at its full size, so the whole header is there.
    if nix::sys::uio::pread(region, &mut bytes, 0)? < bytes.len() {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    // SAFETY: as many bytes as a TraceHeader, read unaligned; it is integers
    // only (repr(C), no padding), so any bytes are a value of it.
    let header = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<TraceHeader>()) };
    Ok(Counters { head: header.head, producer_waiting: header.producer_waiting != 0, approved: header.approved })
}

/// A fresh, zero-filled trace region, close-on-exec (each child is given
/// it by name), sealed against shrinking and growing: the checker maps all
/// of it, and a driver that shrank it would end its checker with SIGBUS.
pub fn create() -> io::Result<OwnedFd> {
    const NAME: &CStr = c"understudy-trace";
    // SAFETY: plain syscall with a NUL-terminated name.
    let raw = unsafe { libc::memfd_create(NAME.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a fresh fd we now own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: plain syscalls on our own fd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), TRACE_REGION_SIZE as libc::off_t) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own fd; no memory is passed.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Writes the counters as a driver and its checker would.
#[cfg(test)]
pub fn write_counters(region: BorrowedFd, c: Counters) {
    use std::mem::offset_of;
    let write = |at: usize, bytes: &[u8]| nix::sys::uio::pwrite(region, bytes, at as libc::off_t).unwrap();
    write(offset_of!(TraceHeader, head), &c.head.to_le_bytes());
    write(offset_of!(TraceHeader, producer_waiting), &u32::from(c.producer_waiting).to_le_bytes());
    write(offset_of!(TraceHeader, approved), &c.approved.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;

    #[test]
    fn a_region_is_zero_filled_of_the_contracts_size_and_cannot_be_resized() {
        let fd = create().unwrap();
        let mut file = std::fs::File::from(fd);
        assert_eq!(file.metadata().unwrap().len(), TRACE_REGION_SIZE);
        let mut start = [0xffu8; 4096];
        file.read_exact(&mut start).unwrap();
        assert!(start.iter().all(|&b| b == 0));
        // SAFETY: plain syscalls on the test's own fd.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        assert_eq!(seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW), libc::F_SEAL_SHRINK | libc::F_SEAL_GROW);
        assert!(file.set_len(4096).is_err());
        assert!(file.set_len(TRACE_REGION_SIZE + 4096).is_err());
    }

    #[test]
    fn the_counters_are_read_as_the_driver_and_the_checker_wrote_them() {
        let fd = create().unwrap();
        assert_eq!(counters(fd.as_fd()).unwrap(), Counters { head: 0, producer_waiting: false, approved: 0 });
        let written = Counters { head: 0x1_0000_0005, producer_waiting: true, approved: 0x1_0000_0002 };
        write_counters(fd.as_fd(), written);
        assert_eq!(counters(fd.as_fd()).unwrap(), written);
    }
}
