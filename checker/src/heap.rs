// SPDX-License-Identifier: GPL-2.0
//! The driver's heap as the runtime reported it: the live blocks (ALLOC,
//! FREE) and a quarantine of recently freed ones, so that an access can be
//! placed: inside a live block, past its end, in freed memory or nowhere
//! the checker knows. The memory checker judges the place; the DMA and race
//! checkers ask it too (whose bytes share a cache line, what memory is
//! tracked for races).

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound::{Excluded, Unbounded};

use crate::symbols::SiteRef;

/// Bytes past the end (or before the start) of a live block in which an
/// access that no other live block holds counts as out of bounds: a
/// kmalloc size class's slack or a neighbour's redzone, as KASAN sees them.
pub const REDZONE: u64 = 64;

/// How much freed memory is remembered for use-after-free; beyond it the
/// oldest is forgotten (an access to it then goes unreported).
const QUARANTINE_BYTES: u64 = 64 << 20;
const QUARANTINE_BLOCKS: usize = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub start: u64,
    /// start + size does not wrap (the engine refuses such an ALLOC).
    pub size: u64,
    pub site: SiteRef,
    pub event: u64,
}

impl Block {
    pub fn end(&self) -> u64 {
        self.start + self.size
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freed {
    pub block: Block,
    pub site: SiteRef,
    pub event: u64,
}

/// Where an access of [address, address + size) falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Wholly inside a live block.
    Inside(Block),
    /// Starts in a live block or its redzone and runs out of it, or lies in
    /// the redzone before or after one, touching no other live block.
    OutOfBounds(Block),
    /// In freed memory that no live block has taken again.
    Freed(Freed),
    /// Not heap the runtime reported.
    Untracked,
}

pub struct Heap {
    /// By start; disjoint.
    live: BTreeMap<u64, Block>,
    /// By start; disjoint, and disjoint from live blocks.
    freed: BTreeMap<u64, Freed>,
    /// Freeing order, for forgetting the oldest: (start, free event).
    freed_order: VecDeque<(u64, u64)>,
    freed_bytes: u64,
    /// Live blocks recent accesses fell in, most recent first: a driver's
    /// accesses go to a few hot blocks (its adapter, its rings, the skb at
    /// hand) in turn.
    recent: [Option<Block>; RECENT],
    /// [lowest start, highest end) of every block ever allocated: an
    /// access far from it (a descriptor ring, per-cpu data) is nobody's
    /// heap, with no tree to search.
    extent: (u64, u64),
}

const RECENT: usize = 4;

impl Default for Heap {
    fn default() -> Heap {
        Heap {
            live: BTreeMap::new(), freed: BTreeMap::new(), freed_order: VecDeque::new(), freed_bytes: 0,
            recent: [None; RECENT], extent: (u64::MAX, 0),
        }
    }
}

impl Heap {
    /// The live block holding `address`.
    pub fn live_at(&self, address: u64) -> Option<Block> {
        if let Some(&b) = self.recent.iter().flatten().find(|b| address >= b.start && address < b.end()) {
            return Some(b);
        }
        self.live.range(..=address).next_back().map(|(_, b)| *b).filter(|b| address < b.end())
    }

    pub fn freed_starting_at(&self, address: u64) -> Option<Freed> {
        self.freed.get(&address).copied()
    }

    /// Whether any byte of [start, end) is in a live block.
    pub fn any_live(&self, start: u64, end: u64) -> bool {
        start < end && self.live.range(..end).next_back().is_some_and(|(_, b)| b.end() > start)
    }

    pub fn place(&mut self, address: u64, size: u64) -> Place {
        let end = address.saturating_add(size.max(1));
        if end.saturating_add(REDZONE) <= self.extent.0 || address >= self.extent.1.saturating_add(REDZONE) {
            return Place::Untracked;
        }
        if let Some(b) = self.live_at(address) {
            if self.recent[0] != Some(b) {
                self.forget_recent(b.start);
                self.recent.rotate_right(1);
                self.recent[0] = Some(b);
            }
            return if end <= b.end() { Place::Inside(b) } else { Place::OutOfBounds(b) };
        }
        if let Some(f) = self.freed.range(..=address).next_back().map(|(_, f)| *f).filter(|f| address < f.block.end()) {
            return Place::Freed(f);
        }
        let before = self.live.range(..address).next_back().map(|(_, b)| *b);
        if let Some(b) = before.filter(|b| address < b.end().saturating_add(REDZONE)) {
            return Place::OutOfBounds(b);
        }
        let after = self.live.range((Excluded(address), Unbounded)).next().map(|(_, b)| *b);
        if let Some(b) = after.filter(|b| end.saturating_add(REDZONE) > b.start) {
            return Place::OutOfBounds(b);
        }
        Place::Untracked
    }

    /// Drops the block starting at `start` from `recent`, if it is there.
    fn forget_recent(&mut self, start: u64) {
        if let Some(i) = self.recent.iter().position(|b| b.is_some_and(|b| b.start == start)) {
            self.recent[i..].rotate_left(1);
            self.recent[RECENT - 1] = None;
        }
    }

    /// Records a new live block. Live blocks it overlaps must have been
    /// freed without a FREE event: they are dropped, and returned so the
    /// caller can say so. Freed blocks it overlaps are forgotten: their
    /// memory is in use again.
    pub fn allocate(&mut self, block: Block) -> Vec<Block> {
        let end = block.end();
        self.extent = (self.extent.0.min(block.start), self.extent.1.max(end));
        // Walking down from `end`, the first block that ends at or below
        // the new one's start is the last to look at: blocks are disjoint.
        let mut stale = Vec::new();
        while let Some((_, &b)) = self.live.range(..end).next_back().filter(|(_, b)| b.end() > block.start) {
            self.live.remove(&b.start);
            self.forget_recent(b.start);
            stale.push(b);
        }
        while let Some((_, &f)) = self.freed.range(..end).next_back().filter(|(_, f)| f.block.end() > block.start) {
            self.freed.remove(&f.block.start);
            self.freed_bytes -= f.block.size;
        }
        self.live.insert(block.start, block);
        stale
    }

    /// Frees the live block starting at `start`, if there is one, into the
    /// quarantine.
    pub fn free(&mut self, start: u64, site: SiteRef, event: u64) -> Option<Block> {
        let block = self.live.remove(&start)?;
        self.forget_recent(start);
        self.freed.insert(start, Freed { block, site, event });
        self.freed_order.push_back((start, event));
        self.freed_bytes += block.size;
        while self.freed_bytes > QUARANTINE_BYTES || self.freed.len() > QUARANTINE_BLOCKS {
            let Some((oldest, freed_at)) = self.freed_order.pop_front() else { break };
            // An entry whose block was reallocated (or freed again later) is stale.
            if self.freed.get(&oldest).is_some_and(|f| f.event == freed_at) {
                let f = self.freed.remove(&oldest).unwrap();
                self.freed_bytes -= f.block.size;
            }
        }
        Some(block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(start: u64, size: u64) -> Block {
        Block { start, size, site: SiteRef::Runtime(1), event: 0 }
    }

    #[test]
    fn places_accesses_around_blocks() {
        let mut heap = Heap::default();
        heap.allocate(block(0x1000, 60));
        heap.allocate(block(0x1040, 64));
        assert!(matches!(heap.place(0x1000, 8), Place::Inside(b) if b.start == 0x1000));
        // 60..64 is the slack of the first block's size class.
        assert!(matches!(heap.place(0x103c, 4), Place::OutOfBounds(b) if b.start == 0x1000));
        // Straddling the first block's end into the second.
        assert!(matches!(heap.place(0x1038, 8), Place::OutOfBounds(b) if b.start == 0x1000));
        assert!(matches!(heap.place(0x1040, 8), Place::Inside(b) if b.start == 0x1040));
        // Just before the first block, and far from everything.
        assert!(matches!(heap.place(0xff8, 8), Place::OutOfBounds(b) if b.start == 0x1000));
        assert_eq!(heap.place(0x9000, 8), Place::Untracked);
        heap.free(0x1040, SiteRef::Runtime(2), 5);
        assert!(matches!(heap.place(0x1048, 4), Place::Freed(f) if f.event == 5));
        // Reallocated: live again, no longer freed.
        heap.allocate(block(0x1040, 32));
        assert!(matches!(heap.place(0x1048, 4), Place::Inside(_)));
        assert!(heap.freed_starting_at(0x1040).is_none());
    }

    #[test]
    fn an_allocation_over_a_live_block_replaces_it() {
        let mut heap = Heap::default();
        heap.allocate(block(0x1000, 64));
        let stale = heap.allocate(block(0x1020, 64));
        assert_eq!(stale, [block(0x1000, 64)]);
        assert!(heap.live_at(0x1000).is_none());
    }
}
