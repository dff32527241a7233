// SPDX-License-Identifier: GPL-2.0
//! The frames' path between the TAP and the driver. The driver reads the
//! stack's frames from its own queue of the TAP and writes received ones to
//! it (docs/protocol.md, "Sending", "Receiving"); the daemon holds that
//! queue across driver processes, opens the gate while the driver may read
//! it, watches the driver's counts, and after a death gives a successor the
//! frames the driver held. The shared pool and its rings carry only what
//! the daemon itself sends: a predecessor's frames, announcements. It all
//! outlives driver processes: a successor gets the same pool and rings,
//! emptied, and the same queue.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use log::{info, warn};
use understudy_shm::{SharedMemory, ShmError, TapCounts, TxFrame};

use crate::class::net::shadow::offload_names;
use crate::class::net::tap::Tap;
use crate::class::InFlight;
use crate::os::fd;

pub struct Datapath {
    pub shm: SharedMemory,
    /// Host → driver: "a ring you consume has entries", "the gate opened".
    kick: OwnedFd,
    /// Driver → host.
    notify: OwnedFd,
    /// The driver's queues of the TAP; a prober's datapath has none.
    tap_queues: Vec<OwnedFd>,
    /// The offloads the TAP was told the driver takes (`Tap::set_offloads`).
    offloads: u32,
    /// The driver's counts of the TAP's frames when last read, and when.
    counts: TapCounts,
    counts_read: Instant,
    /// The driver held no frame when the daemon last looked (`move_frames`).
    was_idle: bool,
    /// Log lines' prefix: the device.
    pub label: String,
}

/// What one `move_frames` saw: frames the driver finished and, of those,
/// the ones it sent and the ones it dropped; whether it made progress.
#[derive(Default)]
pub struct Moved {
    pub completed: u64,
    pub sent: u64,
    pub dropped: u64,
    /// When the last of the sent ones went out, as far as the daemon can tell.
    pub last_sent: Option<Instant>,
    /// It finished a frame, holds none, or held none when last seen: the
    /// daemon sees no frame taken, so a transmitter's clock starts when it
    /// is first seen holding one.
    pub progressed: bool,
}

impl Datapath {
    pub fn new(shm: SharedMemory, tap_queues: Vec<OwnedFd>, label: String) -> Result<Self, String> {
        let (kick, notify) = (fd::eventfd().map_err(|e| e.to_string())?, fd::eventfd().map_err(|e| e.to_string())?);
        Ok(Datapath { shm, kick, notify, tap_queues, offloads: 0, counts: TapCounts::default(), counts_read: Instant::now(),
                      was_idle: true, label })
    }

    pub fn kick_fd(&self) -> BorrowedFd<'_> {
        self.kick.as_fd()
    }

    pub fn notify_fd(&self) -> BorrowedFd<'_> {
        self.notify.as_fd()
    }

    pub fn tap_queues(&self) -> Vec<BorrowedFd<'_>> {
        self.tap_queues.iter().map(|q| q.as_fd()).collect()
    }

    /// Wakes the driver's consumer of `tx`.
    pub fn kick(&self) {
        fd::signal(self.kick.as_fd());
    }

    /// Lets the driver read its queue of the TAP, or stops it (a successor
    /// replays first; an interface that is down sends nothing).
    pub fn set_gate(&mut self, open: bool) {
        if self.shm.set_gate(open) {
            self.kick();
        }
    }

    /// Frames the driver holds for transmission: lent through `tx`, and
    /// read from the TAP and not finished, as it says.
    pub fn tx_held(&self) -> u32 {
        let limit = self.shm.geometry().ring_size;
        self.shm.lent() + self.shm.tap_counts().held(limit)
    }

    /// Completions of what the daemon sent; the driver's progress with the
    /// TAP's frames; one kick if the driver asked for one. If `want_progress`
    /// the driver is asked to signal its next finished frame (a handover
    /// waits for its successor's first).
    pub fn move_frames(&mut self, want_progress: bool) -> Result<Moved, ShmError> {
        let mut moved = Moved::default();
        loop {
            self.reap_tx_done(&mut moved)?;
            if self.shm.prepare_to_sleep(self.shm.tx_done_urgent() || want_progress) {
                break;
            }
        }
        // Asked for before the counts are read: a frame finished after the
        // read signals, one finished before is in them.
        let counts = if want_progress {
            self.shm.wait_for_tap_progress()
        } else {
            self.shm.no_tap_wakeup();
            self.shm.tap_counts()
        };
        self.count_progress(counts, &mut moved);
        if self.shm.driver_wants_kick() {
            self.kick();
        }
        let idle = self.tx_held() == 0;
        moved.progressed = moved.completed > 0 || idle || self.was_idle;
        self.was_idle = idle;
        Ok(moved)
    }

    fn count_progress(&mut self, counts: TapCounts, moved: &mut Moved) {
        let now = Instant::now();
        let sent = counts.sent.wrapping_sub(self.counts.sent) as u64;
        let dropped = counts.dropped.wrapping_sub(self.counts.dropped) as u64;
        if sent > 0 {
            let when = sent_at(self.shm.last_sent_ns(), coarse_now_ns(), now, self.counts_read);
            moved.last_sent = moved.last_sent.max(Some(when));
        }
        moved.sent += sent;
        moved.dropped += dropped;
        moved.completed += sent + dropped;
        self.counts = counts;
        self.counts_read = now;
    }

    /// When the last frame went out through a driver that is gone, if it
    /// sent any since the daemon last looked: a handover's outage counts
    /// from there.
    pub fn last_frame_of_the_dead(&mut self) -> Option<Instant> {
        let mut moved = Moved::default();
        self.count_progress(self.shm.tap_counts(), &mut moved);
        moved.last_sent
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

    /// Takes the driver's transmit completions.
    fn reap_tx_done(&mut self, moved: &mut Moved) -> Result<(), ShmError> {
        while let Some(done) = self.shm.reap_tx_done()? {
            moved.dropped += done.dropped as u64;
            moved.completed += 1;
            if !done.dropped {
                moved.sent += 1;
                moved.last_sent = Some(Instant::now());
            }
        }
        Ok(())
    }
}

/// The net class's requests in flight are the frames the stack sent
/// (class/mod.rs).
impl InFlight for Datapath {
    type Held = TxFrame;
    type Error = ShmError;

    /// The driver is gone: every buffer is the host's again. Returns the
    /// frames it was given and never completed, then those it read from the
    /// TAP and never finished, each oldest first.
    fn reclaim(&mut self) -> Vec<TxFrame> {
        let mut uncompleted = self.shm.reclaim_all();
        let held = self.shm.reclaim_held();
        self.counts = TapCounts::default();
        self.counts_read = Instant::now();
        self.was_idle = true;
        if !held.refused.is_empty() {
            warn!("{}: {} record(s) of frames the driver held were refused: {}", self.label, held.refused.len(),
                  held.refused.join("; "));
        }
        if held.no_room > 0 {
            warn!("{}: {} frame(s) the driver held are lost: no free pool buffer to keep them in", self.label,
                  held.no_room);
        }
        uncompleted.extend(held.frames);
        uncompleted
    }

    /// Gives a successor the frames its predecessor never completed, in
    /// order; returns how many it took, then kicks it.
    fn resubmit(&mut self, frames: Vec<TxFrame>) -> Result<u32, ShmError> {
        let mut resubmitted = 0;
        for frame in frames {
            if self.shm.send(frame)? {
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
    fn give_up(&mut self, frames: Vec<TxFrame>) {
        for lost in frames {
            self.shm.put_free(lost.buf);
        }
    }
}

/// The daemon's reading of the driver's word that it last sent a frame at
/// `claimed_ns` on the coarse clock, which reads `coarse_now_ns` at `now`:
/// the daemon knows only that a frame went out after it last read the
/// counts (`since`) and before `now`, and holds the driver's word to that.
fn sent_at(claimed_ns: u64, coarse_now_ns: u64, now: Instant, since: Instant) -> Instant {
    let ago = Duration::from_nanos(coarse_now_ns.saturating_sub(claimed_ns));
    now.checked_sub(ago).unwrap_or(since).clamp(since, now)
}

/// CLOCK_MONOTONIC_COARSE, the clock the driver stamps its last sent frame with.
fn coarse_now_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC_COARSE).expect("a coarse monotonic clock");
    now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64
}

#[cfg(test)]
mod tests {
    use understudy_protocol::tap_state_offset;
    use understudy_shm::Geometry;

    use super::*;

    const GEOMETRY: Geometry =
        Geometry { arena_size: 1 << 20, arena_iova: 0x1000_0000, pool_buffers: 16, buffer_size: 2048, ring_size: 8 };

    /// The driver's counts, written where the protocol puts them (taken, sent, dropped).
    fn driver_counts(datapath: &Datapath, taken: u32, sent: u32) {
        let at = tap_state_offset(GEOMETRY.ring_size) as usize + 64;
        let bytes: Vec<u8> = [taken, sent, 0].iter().flat_map(|c| c.to_ne_bytes()).collect();
        datapath.shm.rings().region().write(at, &bytes);
    }

    fn look(datapath: &mut Datapath) -> Moved {
        datapath.move_frames(false).unwrap_or_else(|_| panic!("an honest driver broke no rule"))
    }

    #[test]
    fn a_transmitters_clock_starts_when_it_is_first_seen_holding_a_frame() {
        let mut datapath = Datapath::new(SharedMemory::create(GEOMETRY).unwrap(), Vec::new(), "test".into()).unwrap();
        assert!(look(&mut datapath).progressed, "holding nothing");
        driver_counts(&datapath, 1, 0);
        let first_seen = look(&mut datapath);
        assert!(first_seen.progressed && first_seen.completed == 0, "held none when last seen");
        assert_eq!(datapath.tx_held(), 1);
        assert!(!look(&mut datapath).progressed, "the same frame, still held: the clock runs");
        driver_counts(&datapath, 2, 1);
        let moved = look(&mut datapath);
        assert!(moved.progressed && moved.sent == 1 && moved.completed == 1);
        assert!(!look(&mut datapath).progressed, "the second frame is held on");
    }

    #[test]
    fn the_drivers_word_on_its_last_frame_is_held_to_what_the_daemon_knows() {
        let since = Instant::now();
        let now = since + Duration::from_millis(500);
        let second = 1_000_000_000;
        assert_eq!(sent_at(10 * second, 10 * second + 200_000_000, now, since), now - Duration::from_millis(200));
        assert_eq!(sent_at(1, 10 * second, now, since), since, "before the daemon last looked: a lie");
        assert_eq!(sent_at(11 * second, 10 * second, now, since), now, "in the future: a lie");
        assert_eq!(sent_at(0, u64::MAX, now, since), since, "no clock reads so far back");
    }

    #[test]
    fn a_dead_drivers_last_frames_are_timed_by_its_stamp() {
        let mut datapath = Datapath::new(SharedMemory::create(GEOMETRY).unwrap(), Vec::new(), "test".into()).unwrap();
        let looked = Instant::now();
        assert_eq!(datapath.last_frame_of_the_dead(), None, "it sent nothing");
        std::thread::sleep(Duration::from_millis(30));
        driver_counts(&datapath, 5, 5);
        let at = tap_state_offset(GEOMETRY.ring_size) as usize + 80;
        datapath.shm.rings().region().write(at, &coarse_now_ns().to_ne_bytes());
        let last = datapath.last_frame_of_the_dead().expect("five frames went out");
        assert!(last > looked && last <= Instant::now(), "between the last look and now");
        assert_eq!(datapath.last_frame_of_the_dead(), None, "and none since");
    }

    #[test]
    fn a_handover_asks_the_driver_to_signal_its_next_finished_frame_and_only_then() {
        let mut datapath = Datapath::new(SharedMemory::create(GEOMETRY).unwrap(), Vec::new(), "test".into()).unwrap();
        let host_waiting = |datapath: &Datapath| {
            let mut word = [0u8; 4];
            datapath.shm.rings().region().read(tap_state_offset(GEOMETRY.ring_size) as usize + 128, &mut word);
            u32::from_ne_bytes(word)
        };
        driver_counts(&datapath, 3, 2);
        let moved = datapath.move_frames(true).unwrap_or_else(|_| panic!("an honest driver broke no rule"));
        assert_eq!((moved.sent, host_waiting(&datapath)), (2, 1), "asked, and what was finished before counted");
        look(&mut datapath);
        assert_eq!(host_waiting(&datapath), 0, "not asked once the handover has its frame");
    }
}
