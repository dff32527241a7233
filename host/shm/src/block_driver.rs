// SPDX-License-Identifier: GPL-2.0
//! The driver's end of the rings (any layout), and of a block device's in full,, written directly as the
//! driver process writes them (runtime/ddekit/block.c), for the tests of
//! what drives a `BlockMemory`: the host's own checks here, the block
//! class's front-end in understudyd. A test plays a well-behaved device
//! with it, or a hostile driver that completes what it never had.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use understudy_protocol::{BlkEntry, BLK_RING_DONE, BLK_RING_SUBMIT};

use crate::{BlockMemory, BlockRings, RingLayout, Rings, SharedRegion};

/// A driver's consumer end: the next entry of a host-produced ring, if any.
pub fn take_entry<L: RingLayout>(rings: &Rings<L>, ring: usize) -> Option<L::Entry> {
    let tail = rings.tail(ring).load(Ordering::Acquire);
    if rings.head(ring).load(Ordering::Acquire) == tail {
        return None;
    }
    let e = rings.read_entry(ring, tail);
    rings.tail(ring).store(tail.wrapping_add(1), Ordering::Release);
    Some(e)
}

/// A driver's producer end: publishes `entry` on a driver-produced ring, whatever it holds.
pub fn publish_entry<L: RingLayout>(rings: &Rings<L>, ring: usize, entry: L::Entry) {
    let head = rings.head(ring).load(Ordering::Acquire);
    rings.write_entry(ring, head, entry);
    rings.head(ring).store(head.wrapping_add(1), Ordering::Release);
}

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
        take_entry(&self.rings, BLK_RING_SUBMIT)
    }

    /// Publishes `e` on blk_done as it is (a completion is its request with `status` set).
    pub fn complete(&self, e: BlkEntry) {
        publish_entry(&self.rings, BLK_RING_DONE, e);
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
