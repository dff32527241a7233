// SPDX-License-Identifier: GPL-2.0
//! Acknowledged writes that no flush has covered yet (docs/design.md §11,
//! "Acknowledged writes and the volatile cache").
//!
//! A device with a volatile write cache may acknowledge a write it holds
//! only in that cache, and the reset that follows its driver's death may
//! drop it. Every write, discard and write-zeroes the device acknowledged
//! is kept here, data and all, until a flush that was sent after it
//! completes; after a handover they are done again, in the order they were
//! acknowledged, before anything else reaches the successor. Done again,
//! they change nothing if the cache had kept them, and restore them if it
//! had not.

use std::collections::VecDeque;
use std::rc::Rc;

use understudy_shm::BlockOp;

/// Past this many bytes of kept data, the front-end sends a flush of its own.
pub const KEEP_MAX: u64 = 64 << 20;

/// One acknowledged change to the disk.
#[derive(Debug, Clone)]
pub struct Change {
    /// The order the device acknowledged it in, from 1.
    pub ack: u64,
    pub op: BlockOp,
    pub sector: u64,
    pub len: u32,
    /// A write's data: bytes `[at, at + len)` of `data`.
    pub data: Option<Rc<Vec<u8>>>,
    pub at: u32,
}

impl Change {
    /// The 512-byte sectors it touches.
    pub fn sectors(&self) -> std::ops::Range<u64> {
        self.sector..self.sector + (self.len as u64).div_ceil(512)
    }

    fn bytes_kept(&self) -> u64 {
        if self.data.is_some() { self.len as u64 } else { 0 }
    }
}

#[derive(Debug, Default)]
pub struct Kept {
    changes: VecDeque<Change>,
    /// Changes acknowledged so far; the last one's `ack`.
    acked: u64,
    bytes: u64,
}

impl Kept {
    /// Keeps a change the device has just acknowledged.
    pub fn acknowledged(&mut self, op: BlockOp, sector: u64, len: u32, data: Option<Rc<Vec<u8>>>, at: u32) {
        self.acked += 1;
        let change = Change { ack: self.acked, op, sector, len, data, at };
        self.bytes += change.bytes_kept();
        self.changes.push_back(change);
    }

    /// What a flush sent now covers once it completes: every change
    /// acknowledged before it was sent.
    pub fn flush_sent(&self) -> u64 {
        self.acked
    }

    /// A flush sent when `covers` changes had been acknowledged completed:
    /// those are on stable storage and need not be kept.
    pub fn flushed(&mut self, covers: u64) {
        while self.changes.front().is_some_and(|c| c.ack <= covers) {
            let c = self.changes.pop_front().expect("a change");
            self.bytes -= c.bytes_kept();
        }
    }

    /// Whether the kept data has grown past `KEEP_MAX`.
    pub fn wants_flush(&self) -> bool {
        self.bytes > KEEP_MAX
    }

    /// The changes to do again after a handover, oldest first. They stay
    /// kept: done again, they are still only in the cache until a flush.
    pub fn to_replay(&self) -> VecDeque<Change> {
        self.changes.clone()
    }

    pub fn len(&self) -> usize {
        self.changes.len()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Nobody will serve the disk again: what is kept is given up.
    pub fn give_up(&mut self) -> (usize, u64) {
        let lost = (self.changes.len(), self.bytes);
        self.changes.clear();
        self.bytes = 0;
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_covers_only_what_was_acknowledged_before_it_was_sent() {
        let mut kept = Kept::default();
        let data = Rc::new(vec![1u8; 8192]);
        kept.acknowledged(BlockOp::Write { fua: false }, 0, 4096, Some(data.clone()), 0);
        kept.acknowledged(BlockOp::Discard, 64, 1 << 20, None, 0);
        let covers = kept.flush_sent();
        kept.acknowledged(BlockOp::Write { fua: false }, 8, 4096, Some(data), 4096);
        assert_eq!((kept.len(), kept.bytes()), (3, 8192));
        kept.flushed(covers);
        let left: Vec<_> = kept.to_replay().into_iter().map(|c| (c.ack, c.sector, c.at)).collect();
        assert_eq!(left, vec![(3, 8, 4096)]);
        assert_eq!(kept.bytes(), 4096);
    }

    #[test]
    fn kept_data_past_the_bound_asks_for_a_flush() {
        let mut kept = Kept::default();
        let data = Rc::new(vec![0u8; 128 << 10]);
        while !kept.wants_flush() {
            kept.acknowledged(BlockOp::Write { fua: false }, 0, 128 << 10, Some(data.clone()), 0);
        }
        assert_eq!(kept.len() as u64, KEEP_MAX / (128 << 10) + 1);
        kept.flushed(kept.flush_sent());
        assert!(!kept.wants_flush() && kept.len() == 0);
    }
}
