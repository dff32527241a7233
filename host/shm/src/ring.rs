// SPDX-License-Identifier: GPL-2.0
//! The two SPSC rings of docs/protocol.md, seen from the host (the rings
//! memfd also holds the TAP's state after them: tap_state.rs).
//!
//! The host produces `tx` and consumes `tx_done`. What
//! it reads back from shared memory (the driver's `head` on rings it consumes,
//! the driver's `tail` on rings it produces) is checked before use; the host's
//! own counters are kept in host memory, never re-read from the ring.
//!
//! The layout is understudy-protocol's (`RingHeader`, `ring_stride`) and so
//! is the counters' arithmetic (`ring_slot`, `ring_used`): the twins of
//! include/understudy/protocol.h's, which the driver's ends call.

use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, Ordering};

use understudy_protocol::{
    ring_slot, ring_stride, ring_used, rings_size, RingEntry, RingHeader, Wire, RING_COUNT, RING_ENTRIES_OFFSET,
};

use crate::region::SharedRegion;
use crate::ShmError;

pub const RING_NAMES: [&str; RING_COUNT] = ["tx", "tx_done"];

pub struct Rings {
    region: SharedRegion,
    ring_size: u32,
}

impl Rings {
    pub fn create(ring_size: u32) -> Result<Self, ShmError> {
        if !ring_size.is_power_of_two() {
            return Err(ShmError::Geometry(format!("ring size {ring_size} is not a power of two")));
        }
        let len = rings_size(ring_size) as usize;
        Ok(Rings { region: SharedRegion::create(c"understudy-rings", len)?, ring_size })
    }

    /// Wraps an existing mapping (tests map the same memfd a second time to
    /// play the driver).
    pub fn from_region(region: SharedRegion, ring_size: u32) -> Self {
        assert!(region.len() >= rings_size(ring_size) as usize);
        Rings { region, ring_size }
    }

    pub fn region(&self) -> &SharedRegion {
        &self.region
    }

    pub fn ring_size(&self) -> u32 {
        self.ring_size
    }

    fn counter(&self, ring: usize, at: usize) -> &AtomicU32 {
        let offset = ring * ring_stride(self.ring_size) as usize + at;
        assert!(offset + 4 <= self.region.len());
        // SAFETY: in bounds, 4-byte aligned (page-aligned rings, 64-byte lines),
        // and only ever accessed atomically by the host.
        unsafe { &*self.region.base().add(offset).cast::<AtomicU32>() }
    }

    pub fn head(&self, ring: usize) -> &AtomicU32 {
        self.counter(ring, offset_of!(RingHeader, head))
    }

    pub fn tail(&self, ring: usize) -> &AtomicU32 {
        self.counter(ring, offset_of!(RingHeader, tail))
    }

    pub fn consumer_waiting(&self, ring: usize) -> &AtomicU32 {
        self.counter(ring, offset_of!(RingHeader, consumer_waiting))
    }

    fn entry_offset(&self, ring: usize, counter: u32) -> usize {
        let slot = ring_slot(counter, self.ring_size) as usize;
        ring * ring_stride(self.ring_size) as usize + RING_ENTRIES_OFFSET + slot * size_of::<RingEntry>()
    }

    pub fn read_entry(&self, ring: usize, counter: u32) -> RingEntry {
        let mut bytes = [0u8; size_of::<RingEntry>()];
        self.region.read(self.entry_offset(ring, counter), &mut bytes);
        RingEntry::from_prefix(&bytes).expect("sized")
    }

    pub fn write_entry(&self, ring: usize, counter: u32, entry: RingEntry) {
        self.region.write(self.entry_offset(ring, counter), entry.as_bytes());
    }
}

/// The host's end of a ring it produces (`tx`).
pub struct Producer {
    ring: usize,
    head: u32,
    tail: u32,
    /// `head` when a wakeup was last considered (`take_wakeup`).
    announced: u32,
}

impl Producer {
    pub fn new(ring: usize) -> Self {
        Producer { ring, head: 0, tail: 0, announced: 0 }
    }

    /// Re-reads the driver's `tail`; it may only have moved forward, up to `head`.
    fn refresh_tail(&mut self, rings: &Rings) -> Result<(), ShmError> {
        let tail = rings.tail(self.ring).load(Ordering::Acquire);
        // How far tail moved, against how far it could (the entries out).
        if ring_used(tail, self.tail) > ring_used(self.head, self.tail) {
            return Err(ShmError::Violation(format!(
                "{} ring: the driver set tail to {tail}, outside [{}, {}] (its previous tail and the host's head)",
                RING_NAMES[self.ring], self.tail, self.head
            )));
        }
        self.tail = tail;
        Ok(())
    }

    /// Free slots, after checking what the driver has consumed.
    pub fn space(&mut self, rings: &Rings) -> Result<u32, ShmError> {
        self.refresh_tail(rings)?;
        Ok(rings.ring_size - ring_used(self.head, self.tail))
    }

    /// Entries published and not yet consumed by the driver.
    pub fn outstanding(&self) -> u32 {
        ring_used(self.head, self.tail)
    }

    /// Writes one entry and publishes it; the caller checked `space()`.
    pub fn push(&mut self, rings: &Rings, entry: RingEntry) {
        assert!(ring_used(self.head, self.tail) < rings.ring_size, "push into a full ring");
        rings.write_entry(self.ring, self.head, entry);
        self.head = self.head.wrapping_add(1);
        rings.head(self.ring).store(self.head, Ordering::Release);
    }

    /// sDDF's rule: signal only a consumer that said it sleeps, and clear its
    /// flag — and only for entries published since the last call. A consumer
    /// that announced its sleep after those re-checked `head` and saw them,
    /// so without new entries a signal would only wake it for nothing (as
    /// every batch of received frames woke the driver's transmit thread).
    pub fn take_wakeup(&mut self, rings: &Rings) -> bool {
        if self.head == self.announced {
            return false;
        }
        self.announced = self.head;
        rings.consumer_waiting(self.ring).swap(0, Ordering::AcqRel) != 0
    }
}

/// The host's end of a ring it consumes (`tx_done`).
pub struct Consumer {
    ring: usize,
    tail: u32,
}

impl Consumer {
    pub fn new(ring: usize) -> Self {
        Consumer { ring, tail: 0 }
    }

    /// The next entry, if the driver published one. The entry itself is
    /// returned unchecked: its meaning (buffer ownership, length) is the pool's.
    pub fn pop(&mut self, rings: &Rings) -> Result<Option<RingEntry>, ShmError> {
        let head = rings.head(self.ring).load(Ordering::Acquire);
        let available = ring_used(head, self.tail);
        if available > rings.ring_size {
            return Err(ShmError::Violation(format!(
                "{} ring: head {head} is {available} entries past tail {} (ring size {})",
                RING_NAMES[self.ring], self.tail, rings.ring_size
            )));
        }
        if available == 0 {
            return Ok(None);
        }
        let entry = rings.read_entry(self.ring, self.tail);
        self.tail = self.tail.wrapping_add(1);
        rings.tail(self.ring).store(self.tail, Ordering::Release);
        Ok(Some(entry))
    }

    /// Not woken for this ring (its entries wait for another wakeup).
    pub fn no_wakeup(&self, rings: &Rings) {
        rings.consumer_waiting(self.ring).store(0, Ordering::Relaxed);
    }

    /// Before sleeping: announce it, then re-check for a producer that raced.
    /// Returns true if the ring is still empty (safe to sleep).
    pub fn prepare_to_sleep(&self, rings: &Rings) -> bool {
        rings.consumer_waiting(self.ring).store(1, Ordering::SeqCst);
        rings.head(self.ring).load(Ordering::SeqCst) == self.tail
    }
}
