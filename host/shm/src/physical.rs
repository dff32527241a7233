// SPDX-License-Identifier: GPL-2.0
//! A DMA arena for a device no IOMMU confines (docs/design.md §4, "Without
//! an IOMMU"): the device reaches memory by physical address, so the arena
//! is made of hugepages, each physically contiguous and never moved or
//! swapped while mapped, and a device address is the page's physical one
//! from /proc/self/pagemap (which only a process with CAP_SYS_ADMIN reads).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The chunk the device sees contiguous: a 2 MiB hugepage.
pub const CHUNK: u64 = 2 << 20;

const PAGEMAP_PRESENT: u64 = 1 << 63;
const PAGEMAP_PFN: u64 = (1 << 55) - 1;
const BASE_PAGE: u64 = 4096;

/// The physical address of the page a pagemap entry describes, if any: not
/// present, or a PFN hidden from a process without CAP_SYS_ADMIN (zero), is none.
fn physical_page(entry: u64) -> Option<u64> {
    let pfn = entry & PAGEMAP_PFN;
    (entry & PAGEMAP_PRESENT != 0 && pfn != 0).then_some(pfn * BASE_PAGE)
}

/// The physical address of each `chunk`-sized piece of `[base, base + len)`
/// in this process, which must be mapped, populated and locked.
pub fn physical_chunks(base: *const u8, len: usize, chunk: u64) -> io::Result<Vec<u64>> {
    let pagemap = File::open("/proc/self/pagemap")?;
    (0..len as u64).step_by(chunk as usize).map(|offset| {
        let va = base as u64 + offset;
        let mut entry = [0u8; 8];
        pagemap.read_exact_at(&mut entry, va / BASE_PAGE * 8)?;
        physical_page(u64::from_le_bytes(entry)).ok_or_else(|| io::Error::new(io::ErrorKind::PermissionDenied,
            format!("/proc/self/pagemap gives no physical address for {va:#x} (not present, or no CAP_SYS_ADMIN)")))
    }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pagemap_entries_read_as_the_kernel_writes_them() {
        assert_eq!(physical_page(PAGEMAP_PRESENT | 0x1234), Some(0x1234 * 4096));
        assert_eq!(physical_page(0x1234), None, "not present");
        assert_eq!(physical_page(PAGEMAP_PRESENT), None, "PFN hidden without CAP_SYS_ADMIN");
        // Bits 55-62 are flags (soft-dirty, exclusive, file/shared), not the PFN.
        assert_eq!(physical_page(PAGEMAP_PRESENT | 1 << 61 | 1 << 55 | 7), Some(7 * 4096));
    }

    #[test]
    fn a_locked_page_has_a_physical_address() {
        // An ordinary page stands in for a hugepage: the lookup is the same.
        let page = Box::new([1u8; 4096 * 2]);
        let base = ((page.as_ptr() as u64).div_ceil(BASE_PAGE) * BASE_PAGE) as *const u8;
        // SAFETY: one page inside our own allocation.
        assert_eq!(unsafe { libc::mlock(base.cast(), BASE_PAGE as usize) }, 0);
        let got = physical_chunks(base, BASE_PAGE as usize, BASE_PAGE);
        // SAFETY: geteuid has no arguments and cannot fail.
        let privileged = unsafe { libc::geteuid() } == 0;
        match got {
            Ok(chunks) => assert!(chunks.len() == 1 && chunks[0] % BASE_PAGE == 0 && chunks[0] != 0, "{chunks:?}"),
            Err(e) => assert!(!privileged, "as root: {e}"),
        }
        // SAFETY: the page locked above, still ours.
        unsafe { libc::munlock(base.cast(), BASE_PAGE as usize) };
    }
}
