// SPDX-License-Identifier: GPL-2.0
//! The TAP's state after the rings (docs/protocol.md, "Sending"): the gate
//! the host opens when the driver may read its queue of the TAP, the
//! driver's counts of what it read and finished, and its records of the
//! frames it holds, which the host reads only once the driver is gone.
//!
//! Everything but the gate and `host_waiting` is the driver's word: the
//! counts only time the host's patience (a transmitter that holds frames
//! and finishes none is hung), and a record is checked before its frame is
//! copied out of the arena for a successor.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use understudy_protocol::{tap_state_offset, Held, Wire, HELD_OFFSET, MAX_QUEUES, TX_CSUM, TX_GSO_ECN, TX_GSO_TCPV4, TX_GSO_TCPV6,
                          TX_MAX_FRAME};

use crate::{SharedMemory, TxFrame, TxOffload};

const GATE: usize = 0;
const TAKEN: usize = 64;
const SENT: usize = 68;
const DROPPED: usize = 72;
const LAST_SENT_NS: usize = 80;
const HOST_WAITING: usize = 128;
const ETH_HLEN: u32 = 14;

/// The driver's counts of the frames it read from the TAP (free-running).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapCounts {
    pub taken: u32,
    pub sent: u32,
    pub dropped: u32,
}

impl TapCounts {
    /// Frames read and not yet finished, as the driver says (at most `limit`:
    /// a count that says more is a driver's lie, and a lie is read as "all").
    pub fn held(&self, limit: u32) -> u32 {
        self.taken.wrapping_sub(self.sent).wrapping_sub(self.dropped).min(limit)
    }
}

/// What the host made of the records of a driver that is gone.
#[derive(Debug, Default)]
pub struct Reclaimed {
    /// The frames to give a successor, in the order they were read.
    pub frames: Vec<TxFrame>,
    /// Records refused, each with why (a frame outside the driver's memory, ...).
    pub refused: Vec<String>,
    /// Good records left behind for want of a free pool buffer.
    pub no_room: u32,
}

impl SharedMemory {
    fn tap_counter(&self, at: usize) -> &AtomicU32 {
        let offset = tap_state_offset(self.geometry.ring_size) as usize + at;
        assert!(offset + 4 <= self.rings.region().len());
        // SAFETY: in bounds, 4-byte aligned (the state starts on a page), and
        // only ever accessed atomically by the host.
        unsafe { &*self.rings.region().base().add(offset).cast::<AtomicU32>() }
    }

    /// Opens or closes the gate; true if it opened now (the caller kicks the driver).
    pub fn set_gate(&mut self, open: bool) -> bool {
        let was = self.tap_counter(GATE).swap(open.into(), Ordering::SeqCst);
        open && was == 0
    }

    pub fn tap_counts(&self) -> TapCounts {
        TapCounts {
            taken: self.tap_counter(TAKEN).load(Ordering::Acquire),
            sent: self.tap_counter(SENT).load(Ordering::Acquire),
            dropped: self.tap_counter(DROPPED).load(Ordering::Acquire),
        }
    }

    /// CLOCK_MONOTONIC_COARSE when the driver says it last sent a frame
    /// of the TAP's, in nanoseconds (0: none yet).
    pub fn last_sent_ns(&self) -> u64 {
        let offset = tap_state_offset(self.geometry.ring_size) as usize + LAST_SENT_NS;
        assert!(offset + 8 <= self.rings.region().len());
        // SAFETY: in bounds, 8-byte aligned (the state starts on a page), and
        // only ever accessed atomically by the host.
        let at = unsafe { &*self.rings.region().base().add(offset).cast::<AtomicU64>() };
        at.load(Ordering::Relaxed)
    }

    /// Asks the driver to signal at its next finished frame; returns the
    /// counts read after asking (one that raced the request is seen here).
    pub fn wait_for_tap_progress(&self) -> TapCounts {
        self.tap_counter(HOST_WAITING).store(1, Ordering::SeqCst);
        self.tap_counts()
    }

    pub fn no_tap_wakeup(&self) {
        self.tap_counter(HOST_WAITING).store(0, Ordering::Relaxed);
    }

    /// The frames a dead driver held, copied from its part of the arena into
    /// free pool buffers, oldest first; the records are cleared, the gate
    /// closed and the counts zeroed for the next driver.
    pub fn reclaim_held(&mut self) -> Reclaimed {
        let mut records = Vec::new();
        let mut reclaimed = Reclaimed::default();
        let base = tap_state_offset(self.geometry.ring_size) as usize + HELD_OFFSET;
        for i in 0..self.geometry.ring_size as usize {
            let offset = base + i * size_of::<Held>();
            let mut bytes = [0u8; size_of::<Held>()];
            self.rings.region().read(offset, &mut bytes);
            let held = Held::from_prefix(&bytes).expect("sized");
            if held.seq != 0 {
                match self.check_held(&held) {
                    Ok(()) => records.push(held),
                    Err(why) => reclaimed.refused.push(why),
                }
            }
        }
        records.sort_by_key(|h| h.seq);
        for held in records {
            match self.copy_held(&held) {
                Some(frame) => reclaimed.frames.push(frame),
                None => reclaimed.no_room += 1,
            }
        }
        let state_len = self.rings.region().len() - tap_state_offset(self.geometry.ring_size) as usize;
        self.rings.region().write(tap_state_offset(self.geometry.ring_size) as usize, &vec![0; state_len]);
        reclaimed
    }

    /// A record names a frame in the runtime's part of the arena (never the
    /// pool, which is the host's), of a length a frame can have, with
    /// offloads the protocol knows.
    fn check_held(&self, held: &Held) -> Result<(), String> {
        let (seq, offset, len, flags) = (held.seq, held.offset as u64, held.len, held.flags);
        let known = TX_CSUM | TX_GSO_TCPV4 | TX_GSO_TCPV6 | TX_GSO_ECN;
        if offset < self.geometry.pool_size() || offset + len as u64 > self.geometry.arena_size {
            return Err(format!("frame {seq}: {len} bytes at arena offset {offset:#x} are not in the driver's memory"));
        }
        if !(ETH_HLEN..=TX_MAX_FRAME).contains(&len) {
            return Err(format!("frame {seq}: length {len} is not a frame's"));
        }
        if flags & !known != 0 {
            return Err(format!("frame {seq}: unknown flags {flags:#x}"));
        }
        let queue = held.queue;
        if queue as usize >= MAX_QUEUES {
            return Err(format!("frame {seq}: queue {queue} (at most {MAX_QUEUES} queues)"));
        }
        Ok(())
    }

    fn copy_held(&mut self, held: &Held) -> Option<TxFrame> {
        let len = held.len as usize;
        let buf = self.take_free(len > self.capacity(false))?;
        let mut frame = vec![0; len];
        self.arena.read(held.offset as usize, &mut frame);
        self.host_buffer(buf)[..len].copy_from_slice(&frame);
        let offload = TxOffload { flags: held.flags, gso_size: held.gso_size, csum_start: held.csum_start,
                                  csum_offset: held.csum_offset };
        Some(TxFrame { buf, len: held.len, offload, queue: held.queue })
    }
}
