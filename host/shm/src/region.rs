// SPDX-License-Identifier: GPL-2.0
//! A memfd mapped shared: the host keeps the fd (to hand a duplicate to the
//! driver process) and its own mapping.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

pub struct SharedRegion {
    fd: OwnedFd,
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; every access through it goes through
// raw-pointer copies and atomics, or through slices of ranges the protocol
// gives this side (`slice`, `slice_mut`).
unsafe impl Send for SharedRegion {}

impl SharedRegion {
    /// A new zero-filled memfd of `len` bytes, mapped read/write and shared.
    pub fn create(name: &CStr, len: usize) -> io::Result<Self> {
        // SAFETY: plain syscalls; results are checked.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a fresh fd we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on an fd we own; no memory is passed.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Self::map(fd, len)
    }

    /// A new memfd of `len` bytes (whole 2 MiB pages) in 2 MiB hugepages,
    /// mapped shared, every page faulted in and locked: memory whose pages
    /// a device may be given by physical address (`physical::physical_chunks`).
    /// Fails with ENOMEM when the kernel has too few hugepages free.
    pub fn create_hugetlb(name: &CStr, len: usize) -> io::Result<Self> {
        // SAFETY: plain syscalls; results are checked.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_HUGETLB | libc::MFD_HUGE_2MB) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a fresh fd we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on an fd we own; no memory is passed.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let region = Self::map(fd, len)?;
        // Faulting every page in now makes a shortage of hugepages an error
        // here rather than a SIGBUS later; locking keeps them where they are.
        for offset in (0..len).step_by(2 << 20) {
            // SAFETY: inside our own mapping.
            unsafe { region.base().add(offset).write_volatile(0) };
        }
        // SAFETY: the range is our own mapping of `len` bytes; mlock only pins it.
        if unsafe { libc::mlock(region.base().cast(), len) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(region)
    }

    /// Maps `len` bytes of an existing memfd (tests use this to play the driver).
    pub fn map(fd: OwnedFd, len: usize) -> io::Result<Self> {
        // SAFETY: a fresh shared mapping of a file we hold; checked below.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedRegion { fd, base: NonNull::new(p.cast()).expect("mmap never returns NULL on success"), len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether its memfd is in hugepages (`create_hugetlb`): hugetlbfs backs it.
    pub fn in_hugepages(&self) -> bool {
        const HUGETLBFS_MAGIC: libc::c_long = 0x9584_58f6;
        let mut fs = std::mem::MaybeUninit::<libc::statfs>::zeroed();
        // SAFETY: fstatfs fills the struct for a descriptor we own.
        let ok = unsafe { libc::fstatfs(self.fd.as_raw_fd(), fs.as_mut_ptr()) } == 0;
        // SAFETY: filled by the successful call.
        ok && unsafe { fs.assume_init() }.f_type as libc::c_long == HUGETLBFS_MAGIC
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Copies `dst.len()` bytes from `offset`. The other side may be writing
    /// concurrently; the copy is what the host then trusts and checks.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset.checked_add(dst.len()).is_some_and(|end| end <= self.len), "read outside the region");
        // SAFETY: bounds checked above.
        unsafe { std::ptr::copy_nonoverlapping(self.base().add(offset), dst.as_mut_ptr(), dst.len()) }
    }

    pub fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset.checked_add(src.len()).is_some_and(|end| end <= self.len), "write outside the region");
        // SAFETY: bounds checked above.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base().add(offset), src.len()) }
    }

    /// A slice of the region, for bytes the host reads where they lie.
    ///
    /// # Safety
    /// No `&mut` to that range may exist meanwhile; the other process may
    /// still write it, so the bytes are to be treated as changing under the reader.
    pub unsafe fn slice(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len), "slice outside the region");
        std::slice::from_raw_parts(self.base().add(offset), len)
    }

    /// A mutable slice of the region, for `read(2)` straight into a buffer.
    ///
    /// # Safety
    /// The caller must own that range (a pool buffer the driver does not hold):
    /// another process may write anywhere else.
    pub unsafe fn slice_mut(&mut self, offset: usize, len: usize) -> &mut [u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len), "slice outside the region");
        std::slice::from_raw_parts_mut(self.base().add(offset), len)
    }
}

impl AsFd for SharedRegion {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.base().cast(), self.len) };
    }
}
