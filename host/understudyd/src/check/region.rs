// SPDX-License-Identifier: GPL-2.0
//! The trace region (include/understudy/trace.h): a memfd the daemon
//! creates for each checked driver process and hands to it and its checker.
//! The daemon never maps it: what is in it is the driver's and the
//! checker's business, and only its size is the daemon's.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `US_TRACE_REGION_SIZE` of include/understudy/trace.h (a test compares them).
pub const TRACE_REGION_SIZE: u64 = 64 << 20;

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
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
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
        std::fs::create_dir_all(work).unwrap();
        let (src, exe) = (work.join("region_size.c"), work.join("region_size"));
        std::fs::write(&src, "#include <stdio.h>\n#include <understudy/trace.h>\n\
                              int main(void) { printf(\"%llu\\n\", (unsigned long long)US_TRACE_REGION_SIZE); return 0; }\n")
            .unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let status = Command::new(&cc).args(["-std=c11", "-Wall", "-Werror", "-I"])
            .arg(header.parent().unwrap().parent().unwrap()).arg("-o").arg(&exe).arg(&src)
            .status().unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?}: {e}"));
        assert!(status.success(), "{} does not compile", header.display());
        let out = Command::new(&exe).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().parse().unwrap()
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
