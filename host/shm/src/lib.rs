// SPDX-License-Identifier: GPL-2.0
//! The shared memory of docs/protocol.md: the DMA arena with its packet pool,
//! and the four rings, from the host's side.
//!
//! The driver process is untrusted: every index, length and flag it writes
//! is checked here, and a violation comes back as [`ShmError::Violation`]
//! (which ends that driver), never as a panic.

mod region;
mod ring;

use std::collections::VecDeque;

use understudy_protocol::{
    ring_stride, Hello, RingEntry, PROTOCOL_VERSION, RING_COUNT, RING_RX, RING_RX_FILL, RING_TX, RING_TX_DONE,
    TX_DONE_DROPPED,
};

pub use region::SharedRegion;
pub use ring::{Consumer, Producer, Rings, RING_NAMES};

/// The smallest frame a driver may report: an Ethernet header.
pub const MIN_RX_FRAME: u16 = 14;

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

impl Geometry {
    pub fn pool_size(&self) -> u64 {
        self.pool_buffers as u64 * self.buffer_size as u64
    }

    pub fn rings_size(&self) -> u64 {
        RING_COUNT as u64 * ring_stride(self.ring_size)
    }

    fn check(&self) -> Result<(), ShmError> {
        let bad = |why: String| Err(ShmError::Geometry(why));
        if !self.ring_size.is_power_of_two() {
            return bad(format!("ring size {} is not a power of two", self.ring_size));
        }
        if self.buffer_size == 0 || self.buffer_size > u16::MAX as u32 {
            return bad(format!("buffer size {} does not fit a ring entry's u16 length", self.buffer_size));
        }
        if self.pool_size() >= self.arena_size {
            return bad(format!("a pool of {} bytes leaves no runtime memory in a {}-byte arena", self.pool_size(), self.arena_size));
        }
        if self.arena_iova.checked_add(self.arena_size).is_none_or(|end| end > 1 << 32) {
            return bad("the arena must end below 4 GiB (32-bit DMA devices)".into());
        }
        Ok(())
    }

    pub fn hello(&self) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            ring_size: self.ring_size,
            pool_buffers: self.pool_buffers,
            buffer_size: self.buffer_size,
            arena_size: self.arena_size,
            arena_iova: self.arena_iova,
            pool_size: self.pool_size(),
            rings_size: self.rings_size(),
        }
    }
}

/// Who holds a pool buffer. The host lends buffers through `tx` and `rx_fill`
/// and must get each back exactly once, through the matching ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Host,
    DriverTx,
    DriverRxFill,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxDone {
    pub buf: u32,
    pub dropped: bool,
}

/// A frame lent through `tx` that the driver never completed: after its
/// death the buffer is the host's again but still holds the frame, so a new
/// driver can be given it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UncompletedTx {
    pub buf: u32,
    pub len: u16,
}

/// Counts for `status`: how many buffers the driver holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lent {
    pub tx: u32,
    pub rx_fill: u32,
}

pub struct SharedMemory {
    geometry: Geometry,
    arena: SharedRegion,
    rings: Rings,
    owners: Vec<Owner>,
    free: Vec<u32>,
    tx: Producer,
    rx_fill: Producer,
    tx_done: Consumer,
    rx: Consumer,
    /// Buffers lent through tx / rx_fill and not yet returned. Each stays at
    /// most ring_size, so whatever the driver does with what it holds, its
    /// tx_done and rx always have room for every buffer it can return.
    lent: Lent,
    /// The frames lent through `tx` and not yet completed, oldest first: what
    /// a restarted driver must send again (and nothing it already completed).
    tx_in_flight: VecDeque<UncompletedTx>,
}

impl SharedMemory {
    pub fn create(geometry: Geometry) -> Result<Self, ShmError> {
        geometry.check()?;
        let arena = SharedRegion::create(c"understudy-arena", geometry.arena_size as usize)?;
        let rings = Rings::create(geometry.ring_size)?;
        Ok(Self::assemble(geometry, arena, rings))
    }

    fn assemble(geometry: Geometry, arena: SharedRegion, rings: Rings) -> Self {
        SharedMemory {
            geometry,
            arena,
            rings,
            owners: vec![Owner::Host; geometry.pool_buffers as usize],
            // Popped from the end: buffer 0 is lent first.
            free: (0..geometry.pool_buffers).rev().collect(),
            tx: Producer::new(RING_TX),
            rx_fill: Producer::new(RING_RX_FILL),
            tx_done: Consumer::new(RING_TX_DONE),
            rx: Consumer::new(RING_RX),
            lent: Lent::default(),
            tx_in_flight: VecDeque::new(),
        }
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

    pub fn lent(&self) -> Lent {
        self.lent
    }

    /// Buffers the host holds free (neither lent nor holding an uncompleted
    /// frame): after a restart settles it is back where it was, or a
    /// buffer has leaked.
    pub fn free_count(&self) -> u32 {
        self.free.len() as u32
    }

    fn buffer_offset(&self, buf: u32) -> usize {
        buf as usize * self.geometry.buffer_size as usize
    }

    /// A buffer the host owns, for a frame about to be sent; `None` if the
    /// driver holds them all.
    pub fn take_free(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Gives back a buffer taken with `take_free` and not sent.
    pub fn put_free(&mut self, buf: u32) {
        debug_assert_eq!(self.owners[buf as usize], Owner::Host);
        self.free.push(buf);
    }

    /// The bytes of a buffer the host owns (to `read(2)` a frame into it).
    pub fn host_buffer(&mut self, buf: u32) -> &mut [u8] {
        assert_eq!(self.owners[buf as usize], Owner::Host, "buffer {buf} is lent to the driver");
        // SAFETY: the driver does not hold this buffer, and &mut self keeps
        // the slice unique on the host's side.
        let (offset, len) = (self.buffer_offset(buf), self.geometry.buffer_size as usize);
        unsafe { self.arena.slice_mut(offset, len) }
    }

    /// Whether `send` would take a frame now: the tx ring has a free slot and
    /// the driver holds fewer than ring_size tx buffers. Checked before a
    /// frame is read from the TAP, so a full driver leaves frames queued
    /// there (the stack's queue) instead of having them dropped here.
    pub fn can_send(&mut self) -> Result<bool, ShmError> {
        Ok(self.tx.space(&self.rings)? > 0 && self.lent.tx < self.geometry.ring_size)
    }

    /// Whether the host should ask to be woken for transmit completions:
    /// only once the driver holds half of what it may. Below that the
    /// completions wait for the next wakeup the host has anyway (a frame
    /// from the TAP, a received frame), which saves the driver an eventfd
    /// write and the host a wakeup per completion batch (sDDF: signal only
    /// when the consumer asked).
    pub fn tx_done_urgent(&self) -> bool {
        self.lent.tx >= self.geometry.ring_size / 2
    }

    /// Lends `buf` (holding a `len`-byte frame) to the driver through `tx`.
    /// Returns `Ok(false)` if the ring is full or the driver already holds
    /// ring_size tx buffers (the buffer stays the host's), `Ok(true)` when sent.
    pub fn send(&mut self, buf: u32, len: u16) -> Result<bool, ShmError> {
        if self.tx.space(&self.rings)? == 0 || self.lent.tx >= self.geometry.ring_size {
            return Ok(false);
        }
        self.owners[buf as usize] = Owner::DriverTx;
        self.lent.tx += 1;
        self.tx_in_flight.push_back(UncompletedTx { buf, len });
        self.tx.push(&self.rings, RingEntry { buf, len, flags: 0 });
        Ok(true)
    }

    /// Lends free buffers through `rx_fill` until the ring is full, the
    /// driver holds ring_size of them, or only `keep_for_tx` free buffers
    /// remain. Returns how many were lent.
    pub fn fill_rx(&mut self, keep_for_tx: usize) -> Result<u32, ShmError> {
        let mut space = self.rx_fill.space(&self.rings)?.min(self.geometry.ring_size - self.lent.rx_fill);
        let mut lent = 0;
        while space > 0 && self.free.len() > keep_for_tx {
            let buf = self.free.pop().expect("checked non-empty");
            self.owners[buf as usize] = Owner::DriverRxFill;
            self.lent.rx_fill += 1;
            self.rx_fill.push(&self.rings, RingEntry { buf, len: 0, flags: 0 });
            space -= 1;
            lent += 1;
        }
        Ok(lent)
    }

    /// Whether the driver asked to be woken for `tx` or `rx_fill` (and clears it).
    pub fn driver_wants_kick(&self) -> bool {
        // Both flags are taken: one eventfd covers both rings the driver consumes.
        let tx = self.tx.take_wakeup(&self.rings);
        let fill = self.rx_fill.take_wakeup(&self.rings);
        tx || fill
    }

    /// Returns a buffer through `ring` after checking the driver held it for that ring.
    fn reclaim(&mut self, ring: usize, entry: RingEntry, expected: Owner) -> Result<(), ShmError> {
        let name = RING_NAMES[ring];
        let (buf, len) = (entry.buf, entry.len);
        let violation = |what: String| Err(ShmError::Violation(format!("{name} ring: {what}")));
        if buf >= self.geometry.pool_buffers {
            return violation(format!("buffer {buf} is outside the pool of {}", self.geometry.pool_buffers));
        }
        let owner = self.owners[buf as usize];
        if owner != expected {
            return violation(format!("buffer {buf} was not lent through {} (it is {owner:?})",
                                     if expected == Owner::DriverTx { "tx" } else { "rx_fill" }));
        }
        if len as u32 > self.geometry.buffer_size {
            return violation(format!("length {len} of buffer {buf} exceeds the buffer size {}", self.geometry.buffer_size));
        }
        self.owners[buf as usize] = Owner::Host;
        self.free.push(buf);
        match expected {
            Owner::DriverTx => {
                self.lent.tx -= 1;
                // Drivers complete in order almost always, so this is the
                // front; a driver may also complete out of order (at most
                // ring_size entries to look through).
                let at = self.tx_in_flight.iter().position(|t| t.buf == buf).expect("a lent tx buffer is in flight");
                self.tx_in_flight.remove(at);
            }
            _ => self.lent.rx_fill -= 1,
        }
        Ok(())
    }

    /// The next transmit completion, with its buffer back in the host's hands.
    pub fn reap_tx_done(&mut self) -> Result<Option<TxDone>, ShmError> {
        let Some(entry) = self.tx_done.pop(&self.rings)? else { return Ok(None) };
        let flags = entry.flags;
        if flags & !TX_DONE_DROPPED != 0 {
            return Err(ShmError::Violation(format!("tx_done ring: reserved flags {flags:#x} set on buffer {}", { entry.buf })));
        }
        self.reclaim(RING_TX_DONE, entry, Owner::DriverTx)?;
        Ok(Some(TxDone { buf: entry.buf, dropped: flags & TX_DONE_DROPPED != 0 }))
    }

    /// The next received frame, copied into `frame` (so a driver rewriting the
    /// buffer afterwards changes nothing); its buffer is back in the host's hands.
    pub fn take_rx(&mut self, frame: &mut Vec<u8>) -> Result<bool, ShmError> {
        let Some(entry) = self.rx.pop(&self.rings)? else { return Ok(false) };
        let (buf, len, flags) = (entry.buf, entry.len, entry.flags);
        if flags != 0 {
            return Err(ShmError::Violation(format!("rx ring: reserved flags {flags:#x} set on buffer {buf}")));
        }
        if len < MIN_RX_FRAME {
            return Err(ShmError::Violation(format!("rx ring: frame of {len} bytes in buffer {buf} is shorter than an Ethernet header")));
        }
        self.reclaim(RING_RX, entry, Owner::DriverRxFill)?;
        frame.resize(len as usize, 0);
        self.arena.read(self.buffer_offset(buf), frame);
        Ok(true)
    }

    /// Before sleeping on the driver's eventfd: asks to be woken for
    /// received frames, and for transmit completions if `tx_done` (see
    /// `tx_done_urgent`); true if the rings asked for are still empty.
    pub fn prepare_to_sleep(&self, tx_done: bool) -> bool {
        let rx = self.rx.prepare_to_sleep(&self.rings);
        if !tx_done {
            self.tx_done.no_wakeup(&self.rings);
            return rx;
        }
        self.tx_done.prepare_to_sleep(&self.rings) && rx
    }

    /// After the driver is gone: every buffer is the host's again and the
    /// rings start empty, ready for the next driver process. Returns the
    /// frames it was given and never completed, oldest first; their buffers
    /// are not free: the caller sends them again (`send`) or frees them
    /// (`put_free`).
    pub fn reclaim_all(&mut self) -> Vec<UncompletedTx> {
        let uncompleted: Vec<UncompletedTx> = self.tx_in_flight.drain(..).collect();
        self.owners.iter_mut().for_each(|o| *o = Owner::Host);
        let mut held = vec![false; self.geometry.pool_buffers as usize];
        uncompleted.iter().for_each(|t| held[t.buf as usize] = true);
        self.free = (0..self.geometry.pool_buffers).rev().filter(|&b| !held[b as usize]).collect();
        self.lent = Lent::default();
        for ring in 0..RING_COUNT {
            for counter in [self.rings.head(ring), self.rings.tail(ring), self.rings.consumer_waiting(ring)] {
                counter.store(0, std::sync::atomic::Ordering::SeqCst);
            }
        }
        self.tx = Producer::new(RING_TX);
        self.rx_fill = Producer::new(RING_RX_FILL);
        self.tx_done = Consumer::new(RING_TX_DONE);
        self.rx = Consumer::new(RING_RX);
        uncompleted
    }
}

#[cfg(test)]
mod tests;
