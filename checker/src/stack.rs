// SPDX-License-Identifier: GPL-2.0
//! The driver's live stack frames, as its FRAME and RETURN probes report
//! them (docs/checking.md, "Stack frames"): where each frame lies, and the
//! probe and event that made it, so that the memory checker can judge reads
//! of bytes in it that nothing wrote.
//!
//! A frame is born at FRAME (`sub $size,%rsp`) and dies when a RETURN
//! passes above it, or when a new frame on its thread is made over or above
//! it (a return the probes did not see). The events carry no thread, and
//! the driver process has several threads, each on its own stack; so
//! "this thread's frames below" is bounded by an address window:
//! everything within [`STACK_WINDOW`] below a new frame or a returning
//! `%rsp` is taken to be on the same thread's stack, and everything further
//! away on another's. That holds because the driver is kernel code, written
//! for a 16 KiB kernel stack, so one thread's live driver frames span a few
//! tens of KiB at most, while the runtime's threads have pthread's default
//! stacks, 8 MiB apart. Stacks closer together than the window would let
//! one thread's call end another's frames, which loses findings but
//! invents none.

use std::cell::Cell;
use std::collections::BTreeMap;

use crate::symbols::SiteRef;

/// How far below a new frame, or a returning `%rsp`, frames count as the
/// same thread's (and so as dead); see the module comment.
pub const STACK_WINDOW: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The frame's lowest byte: `%rsp` after its `sub`.
    pub start: u64,
    /// start + the site's size; does not wrap (the engine refuses such a FRAME).
    pub end: u64,
    /// The FRAME probe.
    pub site: SiteRef,
    pub event: u64,
}

impl Frame {
    pub fn size(&self) -> u64 {
        self.end - self.start
    }

    fn holds(&self, address: u64) -> bool {
        address >= self.start && address < self.end
    }
}

pub struct Stack {
    /// By start; disjoint.
    live: BTreeMap<u64, Frame>,
    /// [lowest start, highest end) of the live frames: most accesses that
    /// are not `%rsp`-based fall outside it and need no search.
    span: (u64, u64),
    /// The frame the last search found or the last FRAME made: a
    /// function's stack accesses go to its own frame, the deepest.
    last: Cell<Option<Frame>>,
}

impl Default for Stack {
    fn default() -> Stack {
        Stack { live: BTreeMap::new(), span: (u64::MAX, 0), last: Cell::new(None) }
    }
}

impl Stack {
    /// The live frame holding `address`.
    pub fn frame_at(&self, address: u64) -> Option<Frame> {
        if address < self.span.0 || address >= self.span.1 {
            return None;
        }
        if let Some(f) = self.last.get().filter(|f| f.holds(address)) {
            return Some(f);
        }
        let found = self.live.range(..=address).next_back().map(|(_, f)| *f).filter(|f| f.holds(address));
        if found.is_some() {
            self.last.set(found);
        }
        found
    }

    /// A new frame: the deepest live one on its thread, so this thread's
    /// frames it overlaps or that lie below it (within the window) are dead.
    pub fn push(&mut self, frame: Frame) {
        self.drop_between(frame.start.saturating_sub(STACK_WINDOW), frame.end);
        self.live.insert(frame.start, frame);
        self.last.set(Some(frame));
        self.update_span();
    }

    /// A function returned with `%rsp` at `sp`: this thread's frames that
    /// start below it are dead.
    pub fn unwind(&mut self, sp: u64) {
        self.drop_between(sp.saturating_sub(STACK_WINDOW), sp);
        self.update_span();
    }

    /// Drops the frames with a byte in [low, high): frames are disjoint, so
    /// walking down from `high` their ends fall too, and the walk stops at
    /// the first that ends at or below `low`.
    fn drop_between(&mut self, low: u64, high: u64) {
        while let Some((&start, f)) = self.live.range(..high).next_back() {
            if f.end <= low {
                break;
            }
            if self.last.get().is_some_and(|l| l.start == start) {
                self.last.set(None);
            }
            self.live.remove(&start);
        }
    }

    fn update_span(&mut self) {
        self.span = match (self.live.first_key_value(), self.live.last_key_value()) {
            (Some((&low, _)), Some((_, high))) => (low, high.end),
            _ => (u64::MAX, 0),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(start: u64, size: u64) -> Frame {
        Frame { start, end: start + size, site: SiteRef::Stub(1), event: 0 }
    }

    const TOP: u64 = 0x7fff_0000_0000;

    #[test]
    fn calls_and_returns() {
        let mut s = Stack::default();
        s.push(frame(TOP - 0x100, 0xf0)); // f
        s.push(frame(TOP - 0x200, 0xc0)); // g, called by f
        assert_eq!(s.frame_at(TOP - 0x180), Some(frame(TOP - 0x200, 0xc0)));
        assert_eq!(s.frame_at(TOP - 0x140), None, "between g's frame and f's: the return address, pushes");
        // g returns: %rsp is back where f's call left it.
        s.unwind(TOP - 0x100);
        assert_eq!(s.frame_at(TOP - 0x180), None);
        assert_eq!(s.frame_at(TOP - 0x100), Some(frame(TOP - 0x100, 0xf0)));
        // f calls h, whose frame reuses part of g's.
        s.push(frame(TOP - 0x1c0, 0x40));
        assert_eq!(s.frame_at(TOP - 0x1a0), Some(frame(TOP - 0x1c0, 0x40)));
        s.unwind(TOP + 8);
        assert_eq!((s.frame_at(TOP - 0x100), s.frame_at(TOP - 0x1a0)), (None, None));
    }

    #[test]
    fn a_new_frame_ends_this_threads_frames_below_it_and_nobody_elses() {
        let mut s = Stack::default();
        let other_thread = TOP - (8 << 20) - 0x100;
        s.push(frame(other_thread, 0x40));
        // A return the probes missed left a deeper frame behind.
        s.push(frame(TOP - 0x400, 0x40));
        s.push(frame(TOP - 0x100, 0x40));
        assert_eq!(s.frame_at(TOP - 0x3f0), None);
        // A frame overlapping another replaces it.
        s.push(frame(TOP - 0x120, 0x40));
        assert_eq!(s.frame_at(TOP - 0xd0), None);
        assert_eq!(s.frame_at(other_thread), Some(frame(other_thread, 0x40)));
        s.unwind(TOP);
        assert_eq!(s.frame_at(TOP - 0x120), None);
        assert_eq!(s.frame_at(other_thread + 0x3f), Some(frame(other_thread, 0x40)));
    }
}
