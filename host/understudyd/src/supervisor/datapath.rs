// SPDX-License-Identifier: GPL-2.0
//! The frames' path between the TAP and the driver: the shared pool and its
//! rings for transmission (docs/protocol.md), the eventfds that signal them,
//! and the driver's own queue of the TAP, which its received frames go to.
//! It outlives driver processes: a successor gets the same pool and rings,
//! emptied, and the same queue.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use log::{info, warn};
use understudy_protocol::{OFFLOAD_TSO4, OFFLOAD_TSO6};
use understudy_shm::{SharedMemory, ShmError, TxFrame};

use super::Fault;
use crate::fd;
use crate::shadow::offload_names;
use crate::tap::Tap;

const ETH_HLEN: usize = 14;
/// The longest Ethernet header: with one VLAN tag.
const VLAN_ETH_HLEN: usize = 18;

pub struct Datapath {
    pub shm: SharedMemory,
    /// Host → driver: "a ring you consume has entries".
    kick: OwnedFd,
    /// Driver → host.
    notify: OwnedFd,
    /// The driver's queue of the TAP, which its received frames go to; a
    /// prober's datapath has none.
    tap_queue: Option<OwnedFd>,
    /// The driver stopped its transmit queue (TX_QUEUE).
    pub tx_stopped: bool,
    /// The offloads the TAP was told the driver takes (`Tap::set_offloads`).
    offloads: u32,
    /// Log lines' prefix: the device.
    pub label: String,
}

/// What one `move_frames` moved: the transmit counters for `status`, the
/// completions (the driver made progress) and those it did not drop.
#[derive(Default)]
pub struct Moved {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Frames the TAP gave that could not go, and those the driver dropped.
    pub tx_dropped: u64,
    pub completed: u64,
    pub sent: u64,
}

impl Datapath {
    pub fn new(shm: SharedMemory, tap_queue: Option<OwnedFd>, label: String) -> Result<Self, String> {
        let (kick, notify) = (fd::eventfd().map_err(|e| e.to_string())?, fd::eventfd().map_err(|e| e.to_string())?);
        Ok(Datapath {
            shm,
            kick,
            notify,
            tap_queue,
            tx_stopped: false,
            offloads: 0,
            label,
        })
    }

    pub fn kick_fd(&self) -> BorrowedFd<'_> {
        self.kick.as_fd()
    }

    pub fn notify_fd(&self) -> BorrowedFd<'_> {
        self.notify.as_fd()
    }

    pub fn tap_queue(&self) -> Option<BorrowedFd<'_>> {
        self.tap_queue.as_ref().map(|q| q.as_fd())
    }

    /// The driver's signal, once poll has seen it (a read of an unsignalled eventfd blocks).
    pub fn drain_notify(&self) {
        fd::drain(self.notify.as_fd());
    }

    /// Wakes the driver's consumer of `tx`.
    pub fn kick(&self) {
        fd::signal(self.kick.as_fd());
    }

    /// Whether the TAP's frames may be read now: the driver takes them and
    /// holds fewer than its limit (`can_send`; the completions it then owes
    /// wake the daemon, `tx_done_urgent`).
    pub fn takes_frames(&mut self, mtu: Option<u32>) -> bool {
        !self.tx_stopped && self.shm.can_send(self.large(mtu)).unwrap_or(true)
    }

    /// Frames the driver holds for transmission.
    pub fn tx_held(&self) -> u32 {
        self.shm.lent()
    }

    /// New frames from the TAP (if `tap_ready`); completions from the
    /// driver; one kick if the driver asked for one.
    /// The TAP goes first so that the wakeups asked for before sleeping
    /// reflect how many buffers the driver holds after it. Completions are
    /// asked for when the driver holds many buffers, or if `want_tx_done`.
    pub fn move_frames(&mut self, tap: &Tap, tap_ready: bool, mtu: Option<u32>, want_tx_done: bool)
                       -> Result<Moved, Fault> {
        let violation = |e: ShmError| Fault::Violation(e.to_string());
        let mut moved = Moved::default();
        let large = self.large(mtu);
        if tap_ready && !self.tx_stopped {
            loop {
                // A driver holding its limit leaves the frames in the TAP's queue.
                if !self.shm.can_send(large).map_err(violation)? {
                    self.reap_tx_done(&mut moved)?;
                    if !self.shm.can_send(large).map_err(violation)? {
                        break;
                    }
                }
                let Some(frame) = self.read_tap_frame(tap, large, &mut moved.tx_dropped)? else { break };
                if !self.shm.send(frame).map_err(violation)? {
                    // Not expected after can_send; dropped, as a NIC's full queue would.
                    self.shm.put_free(frame.buf);
                    moved.tx_dropped += 1;
                    break;
                }
                moved.tx_packets += 1;
                moved.tx_bytes += frame.len as u64;
            }
        }
        loop {
            self.reap_tx_done(&mut moved)?;
            if self.shm.prepare_to_sleep(self.shm.tx_done_urgent(large) || want_tx_done) {
                break;
            }
        }
        if self.shm.driver_wants_kick() {
            self.kick();
        }
        Ok(moved)
    }

    /// The TAP leaves to the driver the offloads it takes (REGISTERED's).
    /// A TAP that refuses them sends finished frames, as before offloads.
    /// Returns the offloads in force, by name.
    pub fn set_offloads(&mut self, tap: &Tap, offloads: u32) -> Vec<String> {
        if offloads != self.offloads {
            match tap.set_offloads(offloads) {
                Ok(()) => {
                    info!("{}: {} leaves to the driver: {}", self.label, tap.name(), offload_names(offloads).join(", "));
                    self.offloads = offloads;
                }
                Err(e) => warn!("{}: {e}; frames reach the driver checksummed and segmented", self.label),
            }
        }
        offload_names(self.offloads)
    }

    /// Whether the TAP may hand over frames longer than one pool buffer
    /// holds (GSO frames, or a large MTU): those are read into a slot.
    fn large(&self, mtu: Option<u32>) -> bool {
        let mtu = mtu.unwrap_or(1500) as usize;
        self.offloads & (OFFLOAD_TSO4 | OFFLOAD_TSO6) != 0 || mtu + VLAN_ETH_HLEN > self.shm.capacity(false)
    }

    /// The next frame from the TAP in free pool buffers (a slot if `large`;
    /// one that fits a single buffer is moved to one, keeping the slots for
    /// GSO frames), or `None` if the TAP has none. A frame that cannot go
    /// (cut short, or an offload the driver was not offered) is counted as
    /// dropped and the next one read.
    fn read_tap_frame(&mut self, tap: &Tap, large: bool, dropped: &mut u64) -> Result<Option<TxFrame>, Fault> {
        loop {
            let Some(buf) = self.shm.take_free(large) else { return Ok(None) };
            let capacity = self.shm.capacity(large);
            let (len, offload) = match tap.read_frame(&mut self.shm.host_buffer(buf)[..capacity]) {
                Ok(Some(read)) => read,
                Ok(None) => {
                    self.shm.put_free(buf);
                    return Ok(None);
                }
                Err(e) => {
                    self.shm.put_free(buf);
                    return Err(Fault::Io(format!("TAP read: {e}")));
                }
            };
            let offload = match offload {
                Ok(offload) if (ETH_HLEN..=capacity).contains(&len) => offload,
                refused => {
                    warn!("{}: dropped a {len}-byte frame from {}: {}", self.label, tap.name(),
                          refused.err().unwrap_or_else(|| "longer than a buffer holds".into()));
                    self.shm.put_free(buf);
                    *dropped += 1;
                    continue;
                }
            };
            let single = if large && len <= self.shm.capacity(false) { self.shm.move_to_single(buf, len) } else { None };
            return Ok(Some(TxFrame { buf: single.unwrap_or(buf), len: len as u32, offload }));
        }
    }

    /// Takes the driver's transmit completions.
    fn reap_tx_done(&mut self, moved: &mut Moved) -> Result<(), Fault> {
        while let Some(done) = self.shm.reap_tx_done().map_err(|e| Fault::Violation(e.to_string()))? {
            moved.tx_dropped += done.dropped as u64;
            moved.completed += 1;
            moved.sent += !done.dropped as u64;
        }
        Ok(())
    }

    /// The driver is gone: every buffer is the host's again. Returns the
    /// frames it took and never completed, oldest first.
    pub fn reclaim(&mut self) -> Vec<TxFrame> {
        let uncompleted = self.shm.reclaim_all();
        self.tx_stopped = false;
        uncompleted
    }

    /// Gives a successor the frames its predecessor never completed, in
    /// order; returns how many it took, then kicks it.
    pub fn resubmit(&mut self, frames: Vec<TxFrame>) -> Result<u32, Fault> {
        let mut resubmitted = 0;
        for frame in frames {
            if self.shm.send(frame).map_err(|e| Fault::Violation(e.to_string()))? {
                resubmitted += 1;
            } else {
                // Cannot happen (the rings are empty and held at most ring_size), but a frame is never lost silently.
                self.shm.put_free(frame.buf);
                warn!("{}: handover: a frame of the predecessor did not fit the successor's tx ring", self.label);
            }
        }
        Ok(resubmitted)
    }

    /// Frames nobody will send.
    pub fn free(&mut self, frames: Vec<TxFrame>) {
        for lost in frames {
            self.shm.put_free(lost.buf);
        }
    }
}
