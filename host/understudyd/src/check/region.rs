// SPDX-License-Identifier: GPL-2.0
//! The trace region (include/understudy/trace.h): a memfd the daemon
//! creates for each checked driver process and hands to it and its checker.
//! The daemon never maps it: what is in it is the driver's and the
//! checker's business. The daemon's are its size and, when a driver hangs,
//! three of the header's counters (`counters`), read with `pread`.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `US_TRACE_REGION_SIZE` of include/understudy/trace.h (a test compares them).
pub const TRACE_REGION_SIZE: u64 = 64 << 20;
/// Offsets in `struct us_trace_header` (a test compares them with trace.h's).
const HEAD: usize = 128;
const PRODUCER_WAITING: usize = 136;
const APPROVED: usize = 192;

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
    let mut header = [0u8; APPROVED + 8];
    // The region is sealed at its full size, so the whole header is there.
    if nix::sys::uio::pread(region, &mut header, 0)? < header.len() {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let u64_at = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    Ok(Counters { head: u64_at(HEAD), producer_waiting: u32_at(PRODUCER_WAITING) != 0, approved: u64_at(APPROVED) })
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
    let write = |at: usize, bytes: &[u8]| nix::sys::uio::pwrite(region, bytes, at as libc::off_t).unwrap();
    write(HEAD, &c.head.to_le_bytes());
    write(PRODUCER_WAITING, &u32::from(c.producer_waiting).to_le_bytes());
    write(APPROVED, &c.approved.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::path::{Path, PathBuf};
    use std::process::Command;

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

    fn trace_h() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../include/understudy/trace.h")
    }

    /// `US_TRACE_REGION_SIZE` as the C compiler reads `header`
    /// (`.../understudy/trace.h`); `work` is the test's own directory.
    fn region_size_in(header: &Path, work: &Path) -> u64 {
        let text = std::fs::read_to_string(header).unwrap();
        assert!(text.lines().any(|l| l.split_whitespace().take(2).eq(["#define", "US_TRACE_REGION_SIZE"])),
                "{} no longer defines US_TRACE_REGION_SIZE", header.display());
        c_values(header, work, &["US_TRACE_REGION_SIZE"])[0]
    }

    /// The C expressions `exprs` as the C compiler reads `header`.
    fn c_values(header: &Path, work: &Path, exprs: &[&str]) -> Vec<u64> {
        std::fs::create_dir_all(work).unwrap();
        let (src, exe) = (work.join("values.c"), work.join("values"));
        let prints: String = exprs.iter().map(|e| format!("printf(\"%llu\\n\", (unsigned long long)({e}));\n")).collect();
        std::fs::write(&src, format!("#include <stddef.h>\n#include <stdio.h>\n#include <understudy/trace.h>\n\
                                      int main(void) {{\n{prints}return 0;\n}}\n"))
            .unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let status = Command::new(&cc).args(["-std=c11", "-Wall", "-Werror", "-I"])
            .arg(header.parent().unwrap().parent().unwrap()).arg("-o").arg(&exe).arg(&src)
            .status().unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?}: {e}"));
        assert!(status.success(), "{} does not compile", header.display());
        let out = Command::new(&exe).output().unwrap();
        String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect()
    }

    fn work_dir(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("understudyd-test-{}-{name}", std::process::id()))
    }

    #[test]
    fn the_region_size_is_trace_hs() {
        let work = work_dir("trace-h");
        assert_eq!(region_size_in(&trace_h(), &work), TRACE_REGION_SIZE,
                   "include/understudy/trace.h and check/region.rs disagree on US_TRACE_REGION_SIZE");
        let _ = std::fs::remove_dir_all(work);
    }

    #[test]
    fn the_counters_offsets_are_trace_hs() {
        let work = work_dir("trace-h-offsets");
        let members = ["head", "producer_waiting", "approved"].map(|m| format!("offsetof(struct us_trace_header, {m})"));
        assert_eq!(c_values(&trace_h(), &work, &members.each_ref().map(String::as_str)),
                   [HEAD, PRODUCER_WAITING, APPROVED].map(|o| o as u64),
                   "include/understudy/trace.h and check/region.rs disagree on the header's counters");
        let _ = std::fs::remove_dir_all(work);
    }

    #[test]
    fn the_counters_are_read_as_the_driver_and_the_checker_wrote_them() {
        let fd = create().unwrap();
        assert_eq!(counters(fd.as_fd()).unwrap(), Counters { head: 0, producer_waiting: false, approved: 0 });
        let written = Counters { head: 0x1_0000_0005, producer_waiting: true, approved: 0x1_0000_0002 };
        write_counters(fd.as_fd(), written);
        assert_eq!(counters(fd.as_fd()).unwrap(), written);
    }

    /// The comparison above sees a change to the header alone.
    #[test]
    fn a_changed_region_size_in_the_header_is_seen() {
        let original = std::fs::read_to_string(trace_h()).unwrap();
        let from = "#define US_TRACE_REGION_SIZE  (64u << 20)";
        assert!(original.contains(from), "trace.h no longer has {from:?}: update this test");
        let work = work_dir("trace-h-changed");
        let dir = work.join("include/understudy");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("trace.h"), original.replace(from, "#define US_TRACE_REGION_SIZE  (128u << 20)")).unwrap();
        assert_ne!(region_size_in(&dir.join("trace.h"), &work), TRACE_REGION_SIZE);
        let _ = std::fs::remove_dir_all(work);
    }
}
