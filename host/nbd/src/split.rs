// SPDX-License-Identifier: GPL-2.0
//! A request of the kernel's against the export: whether it lies on the
//! disk as the disk is cut into blocks, and the pieces it is served in.
//!
//! nbd lets the kernel send up to 32 MiB in one request (and a discard of
//! any length), while a block driver takes at most its `max_sectors` and the
//! daemon's data slots hold a fixed amount: the daemon cuts a request into
//! pieces no larger than either and answers the kernel once every piece is
//! done. Pieces are independent requests to the device; none overlaps
//! another of the same request.

/// Why a request is answered with an error before any device sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not on block boundaries (EINVAL).
    Unaligned,
    /// Past the disk's end (ENOSPC for a write, EINVAL otherwise: what
    /// Linux's own block layer answers).
    OutOfRange,
}

impl Refusal {
    pub fn errno(self, write: bool) -> u32 {
        match self {
            Refusal::OutOfRange if write => libc::ENOSPC as u32,
            _ => libc::EINVAL as u32,
        }
    }
}

/// Whether `len` bytes at byte `offset` lie on a disk of `size` bytes cut
/// into `block_size`-byte blocks.
pub fn check_range(offset: u64, len: u32, size: u64, block_size: u32) -> Result<(), Refusal> {
    let block = block_size as u64;
    if !offset.is_multiple_of(block) || !(len as u64).is_multiple_of(block) {
        return Err(Refusal::Unaligned);
    }
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Refusal::OutOfRange),
    }
}

/// One piece of a request: `len` bytes from 512-byte sector `sector`,
/// which are bytes `[at, at + len)` of the request's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub sector: u64,
    pub len: u32,
    pub at: u32,
}

/// The pieces of `len` bytes at byte `offset` (checked with
/// `check_range`), each at most `max` bytes; `max` is a multiple of the
/// block size. A request without length (a flush) is one empty piece.
pub fn pieces(offset: u64, len: u32, max: u32) -> impl Iterator<Item = Piece> {
    assert!(max >= 512 && max.is_multiple_of(512));
    let count = len.div_ceil(max).max(1);
    (0..count).map(move |i| {
        let at = i * max;
        Piece { sector: (offset + at as u64) >> 9, len: (len - at).min(max), at }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_off_its_blocks_or_past_the_end_is_refused() {
        assert_eq!(check_range(4096, 8192, 1 << 20, 4096), Ok(()));
        assert_eq!(check_range(512, 4096, 1 << 20, 4096), Err(Refusal::Unaligned));
        assert_eq!(check_range(0, 1024, 1 << 20, 4096), Err(Refusal::Unaligned));
        assert_eq!(check_range((1 << 20) - 4096, 8192, 1 << 20, 4096), Err(Refusal::OutOfRange));
        assert_eq!(check_range(u64::MAX - 511, 512, u64::MAX, 512), Err(Refusal::OutOfRange));
        assert_eq!(Refusal::OutOfRange.errno(true), libc::ENOSPC as u32);
        assert_eq!(Refusal::OutOfRange.errno(false), libc::EINVAL as u32);
    }

    #[test]
    fn pieces_cover_the_request_exactly_and_none_is_too_long() {
        let p: Vec<_> = pieces(1 << 20, 300 << 10, 128 << 10).collect();
        assert_eq!(p, vec![
            Piece { sector: 2048, len: 128 << 10, at: 0 },
            Piece { sector: 2048 + 256, len: 128 << 10, at: 128 << 10 },
            Piece { sector: 2048 + 512, len: 44 << 10, at: 256 << 10 },
        ]);
        assert_eq!(pieces(0, 4096, 128 << 10).count(), 1);
        assert_eq!(pieces(0, 0, 4096).collect::<Vec<_>>(), vec![Piece { sector: 0, len: 0, at: 0 }]);
    }
}
