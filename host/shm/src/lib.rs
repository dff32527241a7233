// SPDX-License-Identifier: GPL-2.0
//! The shared memory of docs/protocol.md: the DMA arena with its packet pool,
//! the two rings and the TAP's state, from the host's side.
//!
//! The driver process is untrusted: every index, length and flag it writes
//! is checked here, and a violation comes back as [`ShmError::Violation`]
//! (which ends that driver), never as a panic.

mod block;
#[cfg(any(test, feature = "block-driver"))]
pub mod block_driver;
mod physical;
mod region;
mod ring;
mod tap_state;

use std::collections::VecDeque;

use understudy_protocol::{
    rings_size, tx_span, Hello, RingEntry, CLASS_NET, PROTOCOL_VERSION, RING_COUNT, RING_TX, RING_TX_DONE, TX_DONE_DROPPED,
    TX_MAX_FRAME, TX_TAILROOM,
};

pub use physical::CHUNK;
pub use region::SharedRegion;
pub use block::{BlockCompletion, BlockMemory, BlockOp, BlockRequest, DEFAULT_SLOT_BYTES};
pub use ring::{BlockRings, Consumer, NetRings, Producer, RingLayout, Rings, RING_NAMES};
pub use tap_state::{Reclaimed, TapCounts};

/// At most this many frames longer than a buffer (GSO frames) in flight at
/// once. Each takes a slot of `tx_span(TX_MAX_FRAME)` consecutive buffers
/// (33 of 2 KiB) at the pool's end; 32 is twice what e1000's 256-descriptor
/// TX ring holds of 64 KiB TSO frames.
const MAX_SPAN_SLOTS: u32 = 32;

#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("shared memory: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad geometry: {0}")]
    Geometry(String),
    /// The driver broke the protocol; the text names the offending value.
    #[error("{0}")]
    Violation(String),
}

/// What every class's shared memory gives a driver process and its device:
/// the arena the device reaches, the rings, and HELLO, which describes them.
pub trait DriverMemory {
    fn geometry(&self) -> Geometry;
    /// HELLO: the geometry, and the class whose rings these are.
    fn hello(&self) -> Hello;
    fn arena(&self) -> &SharedRegion;
    fn rings_region(&self) -> &SharedRegion;
    /// Without an IOMMU, the device address of each 2 MiB of the arena;
    /// empty when an IOMMU maps it at `arena_iova`.
    fn bus_chunks(&self) -> &[u64];
    /// `bus_chunks` for the driver process (`--dma-chunks-fd`); `None` with an IOMMU.
    fn bus_chunks_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub arena_size: u64,
    pub arena_iova: u64,
    pub pool_buffers: u32,
    pub buffer_size: u32,
    pub ring_size: u32,
}

impl Default for Geometry {
    fn default() -> Self {
        use understudy_protocol::*;
        Geometry { arena_size: ARENA_SIZE, arena_iova: ARENA_IOVA, pool_buffers: POOL_BUFFERS, buffer_size: BUFFER_SIZE, ring_size: RING_SIZE }
    }
}

/// The granule of the IOMMU mappings (and of the driver's memory protections).
const IOMMU_PAGE: u64 = 4096;

impl Geometry {
    pub fn pool_size(&self) -> u64 {
        self.pool_buffers as u64 * self.buffer_size as u64
    }

    pub fn rings_size(&self) -> u64 {
        rings_size(self.ring_size)
    }

    fn check(&self) -> Result<(), ShmError> {
        let bad = |why: String| Err(ShmError::Geometry(why));
        if !self.ring_size.is_power_of_two() {
            return bad(format!("ring size {} is not a power of two", self.ring_size));
        }
        if self.buffer_size == 0 || self.buffer_size > u16::MAX as u32 {
            return bad(format!("buffer size {} does not fit a ring entry's u16 length", self.buffer_size));
        }
        if self.pool_size() & (IOMMU_PAGE - 1) != 0 {
            // The IOMMU maps the pool on its own (read-only for the device).
            return bad(format!("a pool of {} bytes is not whole 4 KiB pages", self.pool_size()));
        }
        if self.pool_size() >= self.arena_size {
            return bad(format!("a pool of {} bytes leaves no runtime memory in a {}-byte arena", self.pool_size(), self.arena_size));
        }
        if self.arena_iova.checked_add(self.arena_size).is_none_or(|end| end > 1 << 32) {
            return bad("the arena must end below 4 GiB (32-bit DMA devices)".into());
        }
        Ok(())
    }

    /// HELLO for a driver of `device_class` (`CLASS_NET`, `CLASS_BLOCK`).
    pub fn hello(&self, device_class: u32) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            ring_size: self.ring_size,
            pool_buffers: self.pool_buffers,
            buffer_size: self.buffer_size,
            arena_size: self.arena_size,
            arena_iova: self.arena_iova,
            pool_size: self.pool_size(),
            rings_size: self.rings_size(),
            device_class,
            reserved: 0,
        }
    }
}

/// The DMA arena behind an IOMMU: in 2 MiB hugepages when the machine has
/// enough free, else in base pages (`SharedMemory::create` says why).
fn arena_region(geometry: Geometry) -> Result<SharedRegion, ShmError> {
    let len = geometry.arena_size as usize;
    Ok(match len.is_multiple_of(CHUNK as usize) {
        true => SharedRegion::create_hugetlb(c"understudy-arena", len).or_else(|_| SharedRegion::create(c"understudy-arena", len))?,
        false => SharedRegion::create(c"understudy-arena", len)?,
    })
}

/// Who holds a pool buffer. The host lends buffers through `tx` and must
/// get each back exactly once, through `tx_done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Host,
    DriverTx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxDone {
    pub buf: u32,
    pub dropped: bool,
}

/// What the driver must still do to a tx frame (the `US_TX_*` flags and
/// their fields, from the TAP's virtio_net_hdr).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxOffload {
    pub flags: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

/// A frame in pool buffers starting at `buf`: `tx_span(len)` of them.
/// Frames lent through `tx` and never completed are kept as these: after
/// the driver's death the buffers are the host's again but still hold the
/// frames, so a new driver can be given them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxFrame {
    pub buf: u32,
    pub len: u32,
    pub offload: TxOffload,
    /// The transmit queue it goes to (`MAX_QUEUES` at most): the one it was read for.
    pub queue: u16,
}

pub struct SharedMemory {
    geometry: Geometry,
    arena: SharedRegion,
    rings: Rings,
    owners: Vec<Owner>,
    /// Free single buffers, `[0, slots_start)`: frames that fit one.
    free: Vec<u32>,
    /// Free span slots (their first buffer), `[slots_start, pool_buffers)`.
    free_slots: Vec<u32>,
    slots_start: u32,
    tx: Producer,
    tx_done: Consumer,
    /// Frames lent through tx and not yet returned. At most ring_size, so
    /// whatever the driver does with what it holds, its tx_done always has
    /// room for every buffer it can return.
    lent: u32,
    /// The frames lent through `tx` and not yet completed, oldest first: what
    /// a restarted driver must send again (and nothing it already completed).
    tx_in_flight: VecDeque<TxFrame>,
    /// Copy mode (`create_unconfined`): the host's own pool, which the
    /// frames it sends are kept in, and copied from into the arena's pool
    /// buffer of the same number each time they are lent.
    private_pool: Option<Vec<u8>>,
    /// The device address of each `CHUNK` of the arena, in copy mode.
    bus_chunks: Vec<u64>,
    /// The same as a memfd for the driver process (`--dma-chunks-fd`): a
    /// little-endian u64 each.
    bus_table: Option<SharedRegion>,
}

impl SharedMemory {
    /// The shared memory of a device behind an IOMMU: the arena in 2 MiB
    /// hugepages when the machine has enough free, else in base pages
    /// (`arena_in_hugepages` says which). Hugepages make each 2 MiB of the
    /// arena physically contiguous: the IOMMU maps it with one entry, and a
    /// device model that maps each DMA buffer of a descriptor as one piece of
    /// guest memory (QEMU's e1000e and vmxnet3: a buffer it cannot map
    /// whole is dropped unsent) gets the frames that cross a base page,
    /// which real hardware, translating page by page, always does
    /// (docs/design.md §4, "The arena's pages").
    pub fn create(geometry: Geometry) -> Result<Self, ShmError> {
        geometry.check()?;
        let arena = arena_region(geometry)?;
        let rings = Rings::create(geometry.ring_size)?;
        Ok(Self::assemble(geometry, arena, rings, None))
    }

    /// Whether the arena is in 2 MiB hugepages (`create`).
    pub fn arena_in_hugepages(&self) -> bool {
        self.arena.in_hugepages()
    }

    /// The shared memory of a device no IOMMU confines (docs/design.md §4,
    /// "Without an IOMMU"): the arena in hugepages, whose physical addresses
    /// are the device's (`bus_chunks`), and copy mode: a frame the host
    /// sends (a dead driver's) lives in its private pool and only a copy of
    /// it is ever where the device can reach, so a device that writes
    /// anywhere in the arena cannot change what the host resends after
    /// another restart.
    pub fn create_unconfined(geometry: Geometry) -> Result<Self, ShmError> {
        geometry.check()?;
        if !geometry.pool_size().is_multiple_of(CHUNK) || !geometry.arena_size.is_multiple_of(CHUNK) {
            // The runtime's allocator aligns its blocks from the pool's end:
            // on a chunk boundary, no block up to a chunk's size crosses one.
            return Err(ShmError::Geometry(format!("without an IOMMU the pool ({} bytes) and the arena ({} bytes) are whole 2 MiB hugepages",
                                                  geometry.pool_size(), geometry.arena_size)));
        }
        let arena = SharedRegion::create_hugetlb(c"understudy-arena", geometry.arena_size as usize)?;
        let chunks = physical::physical_chunks(arena.base(), arena.len(), CHUNK)?;
        let table = SharedRegion::create(c"understudy-dma-chunks", chunks.len() * 8)?;
        table.write(0, &chunks.iter().flat_map(|c| c.to_le_bytes()).collect::<Vec<u8>>());
        let rings = Rings::create(geometry.ring_size)?;
        Ok(SharedMemory { bus_table: Some(table), ..Self::assemble(geometry, arena, rings, Some(chunks)) })
    }

    /// `bus_chunks`: copy mode, with the arena's device addresses.
    fn assemble(geometry: Geometry, arena: SharedRegion, rings: Rings, bus_chunks: Option<Vec<u64>>) -> Self {
        // Slots take at most half the pool; a small pool has none, and then
        // only frames that fit one buffer can be sent.
        let slot = Self::slot_buffers(geometry);
        let slots = MAX_SPAN_SLOTS.min(geometry.pool_buffers / 2 / slot);
        let slots_start = geometry.pool_buffers - slots * slot;
        let physical = bus_chunks.is_some();
        SharedMemory {
            geometry,
            arena,
            rings,
            owners: vec![Owner::Host; geometry.pool_buffers as usize],
            // Popped from the end: buffer 0 is lent first.
            free: (0..slots_start).rev().collect(),
            free_slots: (0..slots).rev().map(|i| slots_start + i * slot).filter(|&b| Self::slot_usable(geometry, physical, b)).collect(),
            slots_start,
            tx: Producer::new(RING_TX),
            tx_done: Consumer::new(RING_TX_DONE),
            lent: 0,
            tx_in_flight: VecDeque::new(),
            private_pool: bus_chunks.as_ref().map(|_| vec![0; geometry.pool_size() as usize]),
            bus_chunks: bus_chunks.unwrap_or_default(),
            bus_table: None,
        }
    }

    /// The device address of each 2 MiB of the arena; empty when an IOMMU
    /// maps the arena at `arena_iova`.
    pub fn bus_chunks(&self) -> &[u64] {
        &self.bus_chunks
    }

    /// `bus_chunks` for the driver process; `None` with an IOMMU.
    pub fn bus_chunks_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.bus_table.as_ref().map(|t| t.as_fd())
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    pub fn arena(&self) -> &SharedRegion {
        &self.arena
    }

    pub fn rings(&self) -> &Rings {
        &self.rings
    }

    /// Frames the driver holds for transmission.
    pub fn lent(&self) -> u32 {
        self.lent
    }

    /// A frame's bytes must be contiguous for the device: with physical
    /// addresses a slot that would cross from one hugepage into the next is
    /// not used (the pages need not be neighbours).
    fn slot_usable(geometry: Geometry, physical: bool, first: u32) -> bool {
        let bytes = |b: u32| b as u64 * geometry.buffer_size as u64;
        !physical || bytes(first) / CHUNK == (bytes(first + Self::slot_buffers(geometry)) - 1) / CHUNK
    }

    fn slot_buffers(geometry: Geometry) -> u32 {
        tx_span(TX_MAX_FRAME, geometry.buffer_size)
    }

    /// Buffers the host holds free (neither lent nor holding an uncompleted
    /// frame): after a restart settles it is back where it was, or a
    /// buffer has leaked.
    pub fn free_count(&self) -> u32 {
        self.free.len() as u32 + self.free_slots.len() as u32 * Self::slot_buffers(self.geometry)
    }

    fn buffer_offset(&self, buf: u32) -> usize {
        buf as usize * self.geometry.buffer_size as usize
    }

    /// The longest frame a buffer taken with `take_free(large)` holds.
    pub fn capacity(&self, large: bool) -> usize {
        let buffers = if large { Self::slot_buffers(self.geometry) } else { 1 };
        (buffers * self.geometry.buffer_size - TX_TAILROOM) as usize
    }

    /// A free buffer the host owns, for a frame about to be sent: one
    /// buffer, or if `large` a slot of consecutive ones (`capacity(true)`
    /// bytes). `None` if the driver holds them all.
    pub fn take_free(&mut self, large: bool) -> Option<u32> {
        if large { self.free_slots.pop() } else { self.free.pop() }
    }

    /// Gives back what `take_free` returned, or a completed frame's buffers.
    pub fn put_free(&mut self, buf: u32) {
        debug_assert_eq!(self.owners[buf as usize], Owner::Host);
        if buf >= self.slots_start { self.free_slots.push(buf) } else { self.free.push(buf) }
    }

    /// The bytes from `buf` to the end of what `take_free` gave (to `read(2)`
    /// a frame into them, or to copy one in).
    pub fn host_buffer(&mut self, buf: u32) -> &mut [u8] {
        assert_eq!(self.owners[buf as usize], Owner::Host, "buffer {buf} is lent to the driver");
        let len = self.capacity(buf >= self.slots_start) + TX_TAILROOM as usize;
        let offset = self.buffer_offset(buf);
        if let Some(pool) = &mut self.private_pool {
            return &mut pool[offset..offset + len];
        }
        // SAFETY: the driver holds none of these buffers (a slot is lent and
        // returned whole), and &mut self keeps the slice unique on the host's side.
        unsafe { self.arena.slice_mut(offset, len) }
    }

    /// Whether the host should ask to be woken for transmit completions:
    /// once the driver holds half of what it may. Below that they wait for
    /// the host's next look (its timers, a handover's wait for a frame),
    /// which saves the driver an eventfd write and the host a wakeup per
    /// completion batch (sDDF: signal only when the consumer asked).
    pub fn tx_done_urgent(&self) -> bool {
        self.lent >= self.geometry.ring_size / 2
    }

    /// Lends `frame` (its bytes in the buffers from `frame.buf`, taken with
    /// `take_free`) to the driver through `tx`. Returns `Ok(false)` if the
    /// ring is full or the driver already holds ring_size tx frames (the
    /// buffers stay the host's), `Ok(true)` when sent.
    pub fn send(&mut self, frame: TxFrame) -> Result<bool, ShmError> {
        if self.tx.space(&self.rings)? == 0 || self.lent >= self.geometry.ring_size {
            return Ok(false);
        }
        let span = tx_span(frame.len, self.geometry.buffer_size);
        assert!(frame.buf >= self.slots_start || span == 1, "a {}-byte frame in a single buffer", frame.len);
        if let Some(pool) = &self.private_pool {
            // Copy mode: the device gets a copy, made afresh for every lending
            // (a resend after a restart too), whatever it did to the last one.
            let offset = self.buffer_offset(frame.buf);
            self.arena.write(offset, &pool[offset..offset + frame.len as usize]);
        }
        for b in frame.buf..frame.buf + span {
            self.owners[b as usize] = Owner::DriverTx;
        }
        self.lent += 1;
        self.tx_in_flight.push_back(frame);
        let TxOffload { flags, gso_size, csum_start, csum_offset } = frame.offload;
        self.tx.push(&self.rings, RingEntry { buf: frame.buf, len: frame.len, flags, gso_size, csum_start, csum_offset,
                                                   queue: frame.queue, reserved: 0 });
        Ok(true)
    }

    /// Whether the driver asked to be woken for `tx` and has entries it
    /// has not been told of (and clears the request).
    pub fn driver_wants_kick(&mut self) -> bool {
        self.tx.take_wakeup(&self.rings)
    }

    /// Takes a completed frame's buffers back after checking the driver
    /// held them for `tx`: they are free again.
    fn reclaim(&mut self, entry: RingEntry) -> Result<(), ShmError> {
        let (buf, len) = (entry.buf, entry.len);
        let violation = |what: String| Err(ShmError::Violation(format!("tx_done ring: {what}")));
        if buf >= self.geometry.pool_buffers {
            return violation(format!("buffer {buf} is outside the pool of {}", self.geometry.pool_buffers));
        }
        let owner = self.owners[buf as usize];
        if owner != Owner::DriverTx {
            return violation(format!("buffer {buf} was not lent through tx (it is {owner:?})"));
        }
        if len > self.geometry.buffer_size {
            return violation(format!("length {len} of buffer {buf} exceeds the buffer size {}", self.geometry.buffer_size));
        }
        // Drivers complete in order almost always, so this is the front; a
        // driver may also complete out of order (at most ring_size entries
        // to look through).
        let Some(at) = self.tx_in_flight.iter().position(|t| t.buf == buf) else {
            return violation(format!("buffer {buf} is inside a frame, not its first buffer"));
        };
        let frame = self.tx_in_flight.remove(at).expect("found");
        for b in buf..buf + tx_span(frame.len, self.geometry.buffer_size) {
            self.owners[b as usize] = Owner::Host;
        }
        self.lent -= 1;
        self.put_free(buf);
        Ok(())
    }

    /// The next transmit completion, with its buffer back in the host's hands.
    pub fn reap_tx_done(&mut self) -> Result<Option<TxDone>, ShmError> {
        let Some(entry) = self.tx_done.pop(&self.rings)? else { return Ok(None) };
        let flags = entry.flags;
        if flags & !TX_DONE_DROPPED != 0 {
            return Err(ShmError::Violation(format!("tx_done ring: reserved flags {flags:#x} set on buffer {}", { entry.buf })));
        }
        self.reclaim(entry)?;
        Ok(Some(TxDone { buf: entry.buf, dropped: flags & TX_DONE_DROPPED != 0 }))
    }

    /// Before sleeping on the driver's eventfd: asks to be woken for
    /// transmit completions if `tx_done` (see `tx_done_urgent`); true if
    /// there are none to take (or none were asked for).
    pub fn prepare_to_sleep(&self, tx_done: bool) -> bool {
        if !tx_done {
            self.tx_done.no_wakeup(&self.rings);
            return true;
        }
        self.tx_done.prepare_to_sleep(&self.rings)
    }

    /// After the driver is gone: every buffer is the host's again and the
    /// rings start empty, ready for the next driver process. Returns the
    /// frames it was given and never completed, oldest first; their buffers
    /// are not free: the caller sends them again (`send`) or frees them
    /// (`put_free`).
    pub fn reclaim_all(&mut self) -> Vec<TxFrame> {
        let uncompleted: Vec<TxFrame> = self.tx_in_flight.drain(..).collect();
        self.owners.iter_mut().for_each(|o| *o = Owner::Host);
        let mut held = vec![false; self.geometry.pool_buffers as usize];
        uncompleted.iter().for_each(|t| held[t.buf as usize] = true);
        let slot = Self::slot_buffers(self.geometry);
        self.free = (0..self.slots_start).rev().filter(|&b| !held[b as usize]).collect();
        let physical = self.private_pool.is_some();
        self.free_slots = (self.slots_start..self.geometry.pool_buffers).step_by(slot as usize).rev()
            .filter(|&b| !held[b as usize] && Self::slot_usable(self.geometry, physical, b)).collect();
        self.lent = 0;
        for ring in 0..RING_COUNT {
            for counter in [self.rings.head(ring), self.rings.tail(ring), self.rings.consumer_waiting(ring)] {
                counter.store(0, std::sync::atomic::Ordering::SeqCst);
            }
        }
        self.tx = Producer::new(RING_TX);
        self.tx_done = Consumer::new(RING_TX_DONE);
        uncompleted
    }
}

impl DriverMemory for SharedMemory {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn hello(&self) -> Hello {
        self.geometry.hello(CLASS_NET)
    }

    fn arena(&self) -> &SharedRegion {
        &self.arena
    }

    fn rings_region(&self) -> &SharedRegion {
        self.rings.region()
    }

    fn bus_chunks(&self) -> &[u64] {
        &self.bus_chunks
    }

    fn bus_chunks_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        SharedMemory::bus_chunks_fd(self)
    }
}

#[cfg(test)]
mod tests;
