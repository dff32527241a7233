// SPDX-License-Identifier: GPL-2.0
//! The driver's end of a block device's rings, written directly as the
//! driver process writes them (runtime/ddekit/block.c), for the tests of
//! what drives a `BlockMemory`: the host's own checks here, the block
//! class's front-end in understudyd. A test plays a well-behaved device
//! with it, or a hostile driver that completes what it never had.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use understudy_protocol::{BlkEntry, BLK_RING_DONE, BLK_RING_SUBMIT};

use crate::{BlockMemory, BlockRings, Rings, SharedRegion};

pub struct BlockDriver {
    rings: Rings<BlockRings>,
    arena: SharedRegion,
    buffer_size: u32,
}

impl BlockDriver {
    /// Maps `host`'s rings and arena again, as the driver process does.
    pub fn attach(host: &BlockMemory) -> BlockDriver {
        let map = |r: &SharedRegion| SharedRegion::map(r.as_fd().try_clone_to_owned().expect("dup"), r.len()).expect("map");
        BlockDriver {
            rings: Rings::from_region(map(host.rings().region()), host.geometry().ring_size),
            arena: map(host.arena()),
            buffer_size: host.geometry().buffer_size,
        }
    }

    /// The rings themselves, for a driver that breaks them.
    pub fn rings(&self) -> &Rings<BlockRings> {
        &self.rings
    }

    /// The next request on blk_submit, if any.
    pub fn take(&self) -> Option<BlkEntry> {
        let tail = self.rings.tail(BLK_RING_SUBMIT).load(Ordering::Acquire);
        if self.rings.head(BLK_RING_SUBMIT).load(Ordering::Acquire) == tail {
            return None;
        }
        let e = self.rings.read_entry(BLK_RING_SUBMIT, tail);
        self.rings.tail(BLK_RING_SUBMIT).store(tail.wrapping_add(1), Ordering::Release);
        Some(e)
    }

    /// Publishes `e` on blk_done as it is (a completion is its request with `status` set).
    pub fn complete(&self, e: BlkEntry) {
        let head = self.rings.head(BLK_RING_DONE).load(Ordering::Acquire);
        self.rings.write_entry(BLK_RING_DONE, head, e);
        self.rings.head(BLK_RING_DONE).store(head.wrapping_add(1), Ordering::Release);
    }

    fn data_offset(&self, e: &BlkEntry) -> usize {
        e.buf as usize * self.buffer_size as usize
    }

    /// A write's data, as the device reads it from the pool.
    pub fn data(&self, e: &BlkEntry) -> Vec<u8> {
        let mut bytes = vec![0; e.len as usize];
        self.arena.read(self.data_offset(e), &mut bytes);
        bytes
    }

    /// A read's data, put where the host reads it (the driver process's copy).
    pub fn fill(&self, e: &BlkEntry, bytes: &[u8]) {
        assert_eq!(bytes.len(), e.len as usize);
        self.arena.write(self.data_offset(e), bytes);
    }
}
