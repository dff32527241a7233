// SPDX-License-Identifier: GPL-2.0
//! The SPSC rings of docs/protocol.md, seen from the host: a network
//! device's two (`NetRings`: the rings memfd also holds the TAP's state
//! after them, tap_state.rs) and a block device's two (`BlockRings`). Both
//! kinds have the same header and counters; they differ in their entries.
//!
//! The host produces one ring of each pair (`tx`, `blk_submit`) and
//! consumes the other (`tx_done`, `blk_done`). What it reads back from
//! shared memory (the driver's `head` on rings it consumes, the driver's
//! `tail` on rings it produces) is checked before use; the host's own
//! counters are kept in host memory, never re-read from the ring.
//!
//! The layout is understudy-protocol's (`RingHeader`, `ring_stride`,
//! `blk_ring_stride`) and so is the counters' arithmetic (`ring_slot`,
//! `ring_used`): the twins of include/understudy/protocol.h's, which the
//! driver's ends call.

use std::marker::PhantomData;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, Ordering};

use understudy_protocol::{
    blk_ring_stride, blk_rings_size, ring_slot, ring_stride, ring_used, rings_size, BlkEntry, RingEntry, RingHeader, Wire,
    RING_ENTRIES_OFFSET,
};

use crate::region::SharedRegion;
use crate::ShmError;

/// What one kind of rings memfd holds: its rings' entries, names and sizes.
pub trait RingLayout {
    type Entry: Wire + Default;
    /// Each ring's name, by its index (`US_RING_*`, `US_BLK_RING_*`).
    const NAMES: &'static [&'static str];
    /// Bytes from one ring's start to the next's.
    fn stride(ring_size: u32) -> u64;
    /// Bytes of the whole memfd.
    fn memfd_size(ring_size: u32) -> u64;
}

/// A network device's rings: `tx` and `tx_done`, then the TAP's state.
pub struct NetRings;

impl RingLayout for NetRings {
    type Entry = RingEntry;
    const NAMES: &'static [&'static str] = &["tx", "tx_done"];
    fn stride(ring_size: u32) -> u64 {
        ring_stride(ring_size)
    }
    fn memfd_size(ring_size: u32) -> u64 {
        rings_size(ring_size)
    }
}

/// A block device's rings: `blk_submit` and `blk_done` (docs/protocol.md, "Block devices").
pub struct BlockRings;

impl RingLayout for BlockRings {
    type Entry = BlkEntry;
    const NAMES: &'static [&'static str] = &["blk_submit", "blk_done"];
    fn stride(ring_size: u32) -> u64 {
        blk_ring_stride(ring_size)
    }
    fn memfd_size(ring_size: u32) -> u64 {
        blk_rings_size(ring_size)
    }
}

pub const RING_NAMES: &[&str] = NetRings::NAMES;

pub struct Rings<L: RingLayout = NetRings> {
    region: SharedRegion,
    ring_size: u32,
    layout: PhantomData<L>,
}

impl<L: RingLayout> Rings<L> {
    pub fn create(ring_size: u32) -> Result<Self, ShmError> {
        if !ring_size.is_power_of_two() {
            return Err(ShmError::Geometry(format!("ring size {ring_size} is not a power of two")));
        }
        let len = L::memfd_size(ring_size) as usize;
        Ok(Rings { region: SharedRegion::create(c"understudy-rings", len)?, ring_size, layout: PhantomData })
    }

    /// Wraps an existing mapping (tests map the same memfd a second time to
    /// play the driver).
    pub fn from_region(region: SharedRegion, ring_size: u32) -> Self {
        assert!(region.len() >= L::memfd_size(ring_size) as usize);
        Rings { region, ring_size, layout: PhantomData }
    }

    pub fn region(&self) -> &SharedRegion {
        &self.region
    }

    pub fn ring_size(&self) -> u32 {
        self.ring_size
    }

    fn counter(&self, ring: usize, at: usize) -> &AtomicU32 {
        let offset = ring * L::stride(self.ring_size) as usize + at;
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
        ring * L::stride(self.ring_size) as usize + RING_ENTRIES_OFFSET + slot * size_of::<L::Entry>()
    }

    pub fn read_entry(&self, ring: usize, counter: u32) -> L::Entry {
        let mut entry = L::Entry::default();
        // SAFETY: Wire types are packed plain old data: any bytes are a value.
        let bytes = unsafe { std::slice::from_raw_parts_mut((&mut entry as *mut L::Entry).cast::<u8>(), size_of::<L::Entry>()) };
        self.region.read(self.entry_offset(ring, counter), bytes);
        entry
    }

    pub fn write_entry(&self, ring: usize, counter: u32, entry: L::Entry) {
        self.region.write(self.entry_offset(ring, counter), entry.as_bytes());
    }
}

/// The host's end of a ring it produces (`tx`, `blk_submit`).
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
    fn refresh_tail<L: RingLayout>(&mut self, rings: &Rings<L>) -> Result<(), ShmError> {
        let tail = rings.tail(self.ring).load(Ordering::Acquire);
        // How far tail moved, against how far it could (the entries out).
        if ring_used(tail, self.tail) > ring_used(self.head, self.tail) {
            return Err(ShmError::Violation(format!(
                "{} ring: the driver set tail to {tail}, outside [{}, {}] (its previous tail and the host's head)",
                L::NAMES[self.ring], self.tail, self.head
            )));
        }
        self.tail = tail;
        Ok(())
    }

    /// Free slots, after checking what the driver has consumed.
    pub fn space<L: RingLayout>(&mut self, rings: &Rings<L>) -> Result<u32, ShmError> {
        self.refresh_tail(rings)?;
        Ok(rings.ring_size - ring_used(self.head, self.tail))
    }

    /// Entries published and not yet consumed by the driver.
    pub fn outstanding(&self) -> u32 {
        ring_used(self.head, self.tail)
    }

    /// Writes one entry and publishes it; the caller checked `space()`.
    pub fn push<L: RingLayout>(&mut self, rings: &Rings<L>, entry: L::Entry) {
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
    pub fn take_wakeup<L: RingLayout>(&mut self, rings: &Rings<L>) -> bool {
        if self.head == self.announced {
            return false;
        }
        self.announced = self.head;
        rings.consumer_waiting(self.ring).swap(0, Ordering::AcqRel) != 0
    }
}

/// The host's end of a ring it consumes (`tx_done`, `blk_done`).
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
    pub fn pop<L: RingLayout>(&mut self, rings: &Rings<L>) -> Result<Option<L::Entry>, ShmError> {
        let head = rings.head(self.ring).load(Ordering::Acquire);
        let available = ring_used(head, self.tail);
        if available > rings.ring_size {
            return Err(ShmError::Violation(format!(
                "{} ring: head {head} is {available} entries past tail {} (ring size {})",
                L::NAMES[self.ring], self.tail, rings.ring_size
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
    pub fn no_wakeup<L: RingLayout>(&self, rings: &Rings<L>) {
        rings.consumer_waiting(self.ring).store(0, Ordering::Relaxed);
    }

    /// Before sleeping: announce it, then re-check for a producer that raced.
    /// Returns true if the ring is still empty (safe to sleep).
    pub fn prepare_to_sleep<L: RingLayout>(&self, rings: &Rings<L>) -> bool {
        rings.consumer_waiting(self.ring).store(1, Ordering::SeqCst);
        rings.head(self.ring).load(Ordering::SeqCst) == self.tail
    }
}
