// SPDX-License-Identifier: GPL-2.0
//! A block device's shared memory, from the host's side (docs/protocol.md,
//! "Block devices"): the arena, whose pool is cut into one data slot per
//! request, and the two block rings with the requests in flight.
//!
//! The driver is untrusted. A completion is accepted only if its tag names
//! a request this incarnation of the driver holds and every field but
//! `status` is the request's own: a driver that completes a request it
//! never had, completes one twice, or changes its length, sector or data
//! slot is caught here, and the request stays in flight for the successor.
//! The tags carry the driver's incarnation (`generation`), so what a dead
//! driver left on `blk_done` is never taken for its successor's.

use std::collections::BTreeMap;

use understudy_protocol::{BlkEntry, Wire, BLK_FUA, BLK_OP_DISCARD, BLK_OP_FLUSH, BLK_OP_READ, BLK_OP_WRITE,
                          BLK_OP_WRITE_ZEROES, BLK_RING_DONE, BLK_RING_SUBMIT, CLASS_BLOCK, Hello};

use crate::region::SharedRegion;
use crate::ring::{BlockRings, Consumer, Producer, Rings};
use crate::{arena_region, DriverMemory, Geometry, ShmError};

/// The largest errno a completion may carry (the kernel's MAX_ERRNO).
const MAX_ERRNO: i16 = 4095;

/// What a request asks of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockOp {
    Read,
    Write { fua: bool },
    Flush,
    Discard,
    WriteZeroes,
}

impl BlockOp {
    fn wire(self) -> (u16, u16) {
        match self {
            BlockOp::Read => (BLK_OP_READ, 0),
            BlockOp::Write { fua } => (BLK_OP_WRITE, if fua { BLK_FUA } else { 0 }),
            BlockOp::Flush => (BLK_OP_FLUSH, 0),
            BlockOp::Discard => (BLK_OP_DISCARD, 0),
            BlockOp::WriteZeroes => (BLK_OP_WRITE_ZEROES, 0),
        }
    }

    /// Whether its bytes travel in the request's slot.
    pub fn has_data(self) -> bool {
        matches!(self, BlockOp::Read | BlockOp::Write { .. })
    }
}

/// One request as the host made it; its data (if any) is in `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRequest {
    pub op: BlockOp,
    /// The first 512-byte sector.
    pub sector: u64,
    /// Bytes: of data for a read or write, of the range for discard and
    /// write-zeroes; 0 for a flush.
    pub len: u32,
    /// The hardware queue.
    pub queue: u16,
    /// The pool slot that holds its data, or its place in the table
    /// without data: every request in flight has a slot of its own.
    pub slot: u32,
}

/// A request the driver completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCompletion {
    pub request: BlockRequest,
    /// 0 or a negative errno.
    pub status: i16,
}

/// Where a slot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Free,
    /// The host's: being filled, or holding a completed read's data.
    Host,
    /// Submitted to the driver, the `seq`-th request submitted.
    Driver { request: BlockRequest, seq: u64 },
}

/// The default data slot: the most one request carries (design §11).
pub const DEFAULT_SLOT_BYTES: u32 = 128 << 10;

impl Geometry {
    /// A block device's default: 128 requests in flight, a 128 KiB slot
    /// each (16 MiB of pool), the rest of the 64 MiB arena the runtime's
    /// for the device's read buffers and rings.
    pub fn block_default() -> Geometry {
        let ring_size = 128;
        let buffer_size = 4096;
        Geometry { ring_size, buffer_size, pool_buffers: ring_size * (DEFAULT_SLOT_BYTES / buffer_size), ..Geometry::default() }
    }
}

pub struct BlockMemory {
    geometry: Geometry,
    arena: SharedRegion,
    rings: Rings<BlockRings>,
    submit: Producer,
    done: Consumer,
    /// Bytes of data one slot holds: the most one request carries.
    slot_bytes: u32,
    slots: Vec<Slot>,
    /// Popped from the end: slot 0 first.
    free: Vec<u32>,
    /// The driver's incarnation: the high half of every tag it is given.
    generation: u32,
    /// Requests submitted, counting from 1: their order, for a successor.
    submitted: u64,
    /// Slots submitted and not completed, by `seq`.
    in_flight: BTreeMap<u64, u32>,
    /// A violation met after good completions, which were returned first.
    violation: Option<ShmError>,
}

impl BlockMemory {
    /// The arena of `geometry` with `ring_size` slots of `slot_bytes` each
    /// as its pool: one per request the ring can have in flight, so the
    /// lending limit and the slots run out together.
    pub fn create(geometry: Geometry, slot_bytes: u32) -> Result<Self, ShmError> {
        geometry.check()?;
        if slot_bytes == 0 || !slot_bytes.is_multiple_of(geometry.buffer_size) {
            return Err(ShmError::Geometry(format!("a slot of {slot_bytes} bytes is not whole {}-byte buffers", geometry.buffer_size)));
        }
        let buffers = geometry.ring_size as u64 * (slot_bytes / geometry.buffer_size) as u64;
        if buffers != geometry.pool_buffers as u64 {
            return Err(ShmError::Geometry(format!(
                "a block pool is one {slot_bytes}-byte slot per ring entry: {} buffers, not {}", buffers, geometry.pool_buffers)));
        }
        let arena = arena_region(geometry)?;
        let rings = Rings::create(geometry.ring_size)?;
        Ok(BlockMemory {
            geometry,
            arena,
            rings,
            submit: Producer::new(BLK_RING_SUBMIT),
            done: Consumer::new(BLK_RING_DONE),
            slot_bytes,
            slots: vec![Slot::Free; geometry.ring_size as usize],
            free: (0..geometry.ring_size).rev().collect(),
            generation: 1,
            submitted: 0,
            in_flight: BTreeMap::new(),
            violation: None,
        })
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    pub fn arena(&self) -> &SharedRegion {
        &self.arena
    }

    pub fn rings(&self) -> &Rings<BlockRings> {
        &self.rings
    }

    /// The most bytes one request carries.
    pub fn slot_bytes(&self) -> u32 {
        self.slot_bytes
    }

    /// Requests the driver holds.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// A free slot for a new request, which the host may then fill; `None`
    /// while every one is in use (the caller waits for completions).
    pub fn take_slot(&mut self) -> Option<u32> {
        let slot = self.free.pop()?;
        self.slots[slot as usize] = Slot::Host;
        Some(slot)
    }

    /// A slot the host is done with (its request completed and answered).
    pub fn release_slot(&mut self, slot: u32) {
        assert_eq!(self.slots[slot as usize], Slot::Host, "release of a slot the host does not hold");
        self.slots[slot as usize] = Slot::Free;
        self.free.push(slot);
    }

    fn slot_offset(&self, slot: u32) -> usize {
        slot as usize * self.slot_bytes as usize
    }

    /// Writes a request's data into its slot (a write's, before it is submitted).
    pub fn write_data(&self, slot: u32, at: u32, bytes: &[u8]) {
        assert_eq!(self.slots[slot as usize], Slot::Host);
        assert!(at as usize + bytes.len() <= self.slot_bytes as usize);
        self.arena.write(self.slot_offset(slot) + at as usize, bytes);
    }

    /// Reads a request's data from its slot (a completed read's).
    pub fn read_data(&self, slot: u32, at: u32, bytes: &mut [u8]) {
        assert_eq!(self.slots[slot as usize], Slot::Host);
        assert!(at as usize + bytes.len() <= self.slot_bytes as usize);
        self.arena.read(self.slot_offset(slot) + at as usize, bytes);
    }

    fn entry(&self, r: &BlockRequest) -> BlkEntry {
        let (op, flags) = r.op.wire();
        let buffers_per_slot = self.slot_bytes / self.geometry.buffer_size;
        BlkEntry {
            tag: (self.generation as u64) << 32 | r.slot as u64,
            sector: r.sector,
            len: r.len,
            buf: if r.op.has_data() { r.slot * buffers_per_slot } else { 0 },
            op,
            flags,
            status: 0,
            queue: r.queue,
        }
    }

    /// Gives the driver a request whose slot the host holds (and has
    /// filled, for a write). There is always room: a slot per ring entry.
    pub fn submit(&mut self, request: BlockRequest) -> Result<(), ShmError> {
        assert_eq!(self.slots[request.slot as usize], Slot::Host, "submit of a slot the host does not hold");
        // A slot is whole buffers, so a request that fits its slot fits its span.
        assert!(!request.op.has_data() || request.len <= self.slot_bytes);
        if self.submit.space(&self.rings)? == 0 {
            // Only a driver that moved its tail backwards could fill it: the
            // host never has more requests out than slots.
            return Err(ShmError::Violation("blk_submit ring: full with a slot free".into()));
        }
        self.submitted += 1;
        self.slots[request.slot as usize] = Slot::Driver { request, seq: self.submitted };
        self.in_flight.insert(self.submitted, request.slot);
        self.submit.push(&self.rings, self.entry(&request));
        Ok(())
    }

    /// Whether the driver sleeps waiting for requests and must be kicked.
    pub fn take_submit_wakeup(&mut self) -> bool {
        self.submit.take_wakeup(&self.rings)
    }

    /// Before the host sleeps: true if `blk_done` is still empty.
    pub fn prepare_to_sleep(&self) -> bool {
        self.done.prepare_to_sleep(&self.rings)
    }

    /// The completions the driver has published, each checked against the
    /// request it names. A completion that names no request of this
    /// incarnation, or changes one, is a violation; completions before it
    /// are returned first by an earlier call (the caller ends the driver).
    pub fn completions(&mut self) -> Result<Vec<BlockCompletion>, ShmError> {
        if let Some(violation) = self.violation.take() {
            return Err(violation);
        }
        let mut done = Vec::new();
        loop {
            let accepted = self.done.pop(&self.rings).and_then(|e| e.map(|e| self.accept(e)).transpose());
            match accepted {
                Ok(Some(completion)) => done.push(completion),
                Ok(None) => return Ok(done),
                Err(violation) if done.is_empty() => return Err(violation),
                // The good ones are the host's now: they go back first.
                Err(violation) => {
                    self.violation = Some(violation);
                    return Ok(done);
                }
            }
        }
    }

    fn accept(&mut self, e: BlkEntry) -> Result<BlockCompletion, ShmError> {
        let (tag, status) = (e.tag, e.status);
        let (generation, slot) = ((tag >> 32) as u32, tag as u32);
        if generation != self.generation || slot >= self.geometry.ring_size {
            return Err(ShmError::Violation(format!(
                "blk_done: tag {tag:#x} names no request of this driver (incarnation {}, {} slots)", self.generation, self.geometry.ring_size)));
        }
        let Slot::Driver { request, seq } = self.slots[slot as usize] else {
            return Err(ShmError::Violation(format!("blk_done: tag {tag:#x} names a request the driver does not hold (completed twice?)")));
        };
        let expected = BlkEntry { status, ..self.entry(&request) };
        if e.as_bytes() != expected.as_bytes() {
            let (es, el, eb, eo, eq) = (e.sector, e.len, e.buf, e.op, e.queue);
            return Err(ShmError::Violation(format!(
                "blk_done: the completion of tag {tag:#x} is not its request's (sector {es}, len {el}, buf {eb}, op {eo}, queue {eq}; \
                 the request: sector {}, len {}, op {:?}, queue {})", request.sector, request.len, request.op, request.queue)));
        }
        if !(-MAX_ERRNO..=0).contains(&status) {
            return Err(ShmError::Violation(format!("blk_done: tag {tag:#x} completed with status {status}, not 0 or -errno")));
        }
        self.in_flight.remove(&seq);
        self.slots[slot as usize] = Slot::Host;
        Ok(BlockCompletion { request, status })
    }

    /// After the driver's death (its device stopped, so nothing of it
    /// touches the arena any more): every request it held and did not
    /// complete, oldest first, back in the host's hands with its data
    /// still in its slot; the rings are emptied for a successor, whose
    /// tags carry the next incarnation.
    pub fn reclaim(&mut self) -> Vec<BlockRequest> {
        let held: Vec<BlockRequest> = std::mem::take(&mut self.in_flight)
            .into_values()
            .map(|slot| {
                let Slot::Driver { request, .. } = self.slots[slot as usize] else { unreachable!("in flight is the driver's") };
                self.slots[slot as usize] = Slot::Host;
                request
            })
            .collect();
        self.rings.region().write(0, &vec![0; self.rings.region().len()]);
        self.submit = Producer::new(BLK_RING_SUBMIT);
        self.done = Consumer::new(BLK_RING_DONE);
        self.generation = self.generation.wrapping_add(1).max(1);
        self.violation = None;
        held
    }
}

impl DriverMemory for BlockMemory {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn hello(&self) -> Hello {
        self.geometry.hello(CLASS_BLOCK)
    }

    fn arena(&self) -> &SharedRegion {
        &self.arena
    }

    fn rings_region(&self) -> &SharedRegion {
        self.rings.region()
    }

    /// Block devices run behind an IOMMU only.
    fn bus_chunks(&self) -> &[u64] {
        &[]
    }

    fn bus_chunks_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}
