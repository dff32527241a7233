// SPDX-License-Identifier: GPL-2.0
//! The disk's requests on their way between the kernel's NBD client and
//! the driver (docs/design.md §11).
//!
//! A request of the kernel's is checked against the disk, cut into pieces
//! no larger than a data slot or the driver's `max_sectors`, and answered
//! once every piece is done: with a read's data, or with the first
//! piece's error. A piece waits for a free slot; slots run out only when
//! the ring is full, so nothing else limits how much is in flight.
//!
//! Across a handover nothing the kernel was told is lost and nothing it
//! was not told is assumed: the pieces the dead driver held go to its
//! successor in the order they were first sent, after the acknowledged
//! changes no flush has covered are done again (kept.rs), none of them
//! while an overlapping one is outstanding. While that replay runs,
//! nothing else reaches the driver: a read must not see the disk before
//! the replay made it what the kernel was told it is.
//!
//! The driver is untrusted (`BlockMemory` checks what it completes); the
//! kernel is trusted but checked: a request off the disk's blocks or past
//! its end is answered with an error and never reaches the driver.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::rc::Rc;

use log::{error, warn};
use understudy_api::DiskCounts;
use understudy_nbd::{check_range, pieces, Command, Incoming};
use understudy_protocol::{DiskInfo, DISK_FUA, DISK_READ_ONLY, DISK_WRITE_CACHE};
use understudy_shm::{BlockCompletion, BlockMemory, BlockOp, BlockRequest, DriverMemory, ShmError};

use super::kept::{Change, Kept};
use super::log::DiskLog;
use crate::class::{InFlight, Shared};
use crate::os::fd;

/// The answer to one request of the kernel's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The NBD connection it came on.
    pub conn: usize,
    pub handle: [u8; 8],
    /// 0, or the errno the kernel is given.
    pub errno: u32,
    /// A read's data.
    pub data: Vec<u8>,
}

/// Who waits for a piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// The kernel's request of this id.
    Request(u64),
    /// The replay of a kept change.
    Replay,
    /// The front-end's own flush, which keeps the kept data bounded.
    OwnFlush,
}

/// One request to the driver.
#[derive(Debug, Clone)]
pub struct Piece {
    owner: Owner,
    op: BlockOp,
    sector: u64,
    len: u32,
    /// A write's data: bytes `[at, at + len)` of it. A read's data goes to
    /// the same bytes of its request's answer.
    data: Option<Rc<Vec<u8>>>,
    at: u32,
    /// The NBD connection it came on: it goes to hardware queue
    /// `conn % queues`.
    conn: usize,
    /// A flush: the kept changes it covers (set when it is sent).
    covers: u64,
}

/// A request of the kernel's that has not been answered.
#[derive(Debug)]
struct Pending {
    conn: usize,
    handle: [u8; 8],
    pieces_left: u32,
    /// The first error a piece had.
    errno: u32,
    /// A read's answer, filled piece by piece.
    read: Vec<u8>,
    /// A FUA write to a device without FUA: a flush once its pieces are done.
    flush_after: bool,
    /// What the kernel asked (its pieces' operation), and of how many bytes.
    op: BlockOp,
    len: u32,
}

/// What the driver serving now does (DISK): its abilities may differ from
/// its predecessor's where `DiskLog::incompatibility` allows it.
#[derive(Debug, Clone, Copy)]
struct Abilities {
    write_cache: bool,
    fua: bool,
    queues: u16,
}

impl Abilities {
    fn of(disk: &DiskInfo) -> Abilities {
        Abilities { write_cache: disk.has(DISK_WRITE_CACHE), fua: disk.has(DISK_FUA), queues: disk.n_queues.max(1) }
    }
}

/// What a block driver process shares with the daemon from its start,
/// before it has registered a disk: the block memory and the eventfds
/// beside it. The datapath takes them over at the first DISK.
pub struct Channel {
    mem: BlockMemory,
    kick: OwnedFd,
    notify: OwnedFd,
}

impl Channel {
    pub fn new(mem: BlockMemory) -> Result<Self, String> {
        let (kick, notify) = (fd::eventfd().map_err(|e| e.to_string())?, fd::eventfd().map_err(|e| e.to_string())?);
        Ok(Channel { mem, kick, notify })
    }

    /// The most bytes one request carries.
    pub fn slot_bytes(&self) -> u32 {
        self.mem.slot_bytes()
    }
}

impl Shared for Channel {
    fn memory(&self) -> &dyn DriverMemory {
        &self.mem
    }

    fn kick_fd(&self) -> BorrowedFd<'_> {
        self.kick.as_fd()
    }

    fn notify_fd(&self) -> BorrowedFd<'_> {
        self.notify.as_fd()
    }

    fn frontend_queues(&self) -> Vec<BorrowedFd<'_>> {
        Vec::new()
    }
}

pub struct Datapath {
    mem: BlockMemory,
    kick: OwnedFd,
    notify: OwnedFd,
    log: DiskLog,
    abilities: Abilities,
    pending: HashMap<u64, Pending>,
    next_id: u64,
    /// Pieces waiting for a slot, in the order they are to be sent.
    waiting: VecDeque<Piece>,
    /// The piece each slot carries, by slot.
    slots: Vec<Option<Piece>>,
    kept: Kept,
    /// Kept changes still to be done again after a handover.
    replay: VecDeque<Change>,
    /// A flush of the front-end's own is waiting or outstanding.
    own_flush: bool,
    replies: Vec<Reply>,
    /// A driver serves: false from its death until its successor is given
    /// what it held, while requests wait.
    serving: bool,
    /// Nobody serves the disk: every request is answered with EIO.
    given_up: bool,
    counts: DiskCounts,
    label: String,
}

impl Datapath {
    /// The disk `log` describes, served through `channel`.
    pub fn new(channel: Channel, log: DiskLog, label: String) -> Self {
        let Channel { mem, kick, notify } = channel;
        // The driver signals a completion only to a host that says it waits for one.
        mem.prepare_to_sleep();
        let slots = vec![None; mem.geometry().ring_size as usize];
        let abilities = Abilities::of(&log.disk);
        Datapath { mem, kick, notify, log, abilities, pending: HashMap::new(), next_id: 1, waiting: VecDeque::new(),
                   slots, kept: Kept::default(), replay: VecDeque::new(), own_flush: false, replies: Vec::new(),
                   serving: true, given_up: false, counts: DiskCounts::default(), label }
    }

    /// The disk as the kernel was told it.
    pub fn log(&self) -> &DiskLog {
        &self.log
    }

    /// A test's driver attaches to the rings.
    #[cfg(test)]
    pub fn block_memory(&self) -> &BlockMemory {
        &self.mem
    }

    /// Requests the driver holds.
    pub fn in_flight(&self) -> u32 {
        self.mem.in_flight() as u32
    }

    /// The hardware queues of the driver serving now.
    pub fn queues(&self) -> u16 {
        self.abilities.queues
    }

    pub fn relabel(&mut self, label: &str) {
        self.label = label.to_string();
    }

    pub fn counts(&self) -> DiskCounts {
        self.counts
    }

    /// Acknowledged changes kept until a flush covers them: how many, and their bytes.
    pub fn kept(&self) -> (usize, u64) {
        (self.kept.len(), self.kept.bytes())
    }

    /// Requests of the kernel's not yet answered.
    pub fn unanswered(&self) -> usize {
        self.pending.len()
    }

    /// A successor (checked with `DiskLog::incompatibility`) reported `disk`.
    pub fn served_by(&mut self, disk: &DiskInfo) {
        self.abilities = Abilities::of(disk);
    }

    /// The answers ready for the kernel.
    pub fn take_replies(&mut self) -> Vec<Reply> {
        std::mem::take(&mut self.replies)
    }

    /// Takes one request of the kernel's from NBD connection `conn`.
    pub fn accept(&mut self, conn: usize, incoming: Incoming) -> Result<(), ShmError> {
        let Incoming { request, data } = incoming;
        let answer = |this: &mut Self, errno: u32| this.answer(conn, request.handle, errno, Vec::new());
        if self.given_up {
            answer(self, libc::EIO as u32);
            return Ok(());
        }
        let (op, max, data) = match request.command {
            // The front-end ends the connection; there is nothing to answer.
            Command::Disconnect => return Ok(()),
            Command::Read => (BlockOp::Read, self.log.piece_max, None),
            Command::Write { .. } if self.log.disk.has(DISK_READ_ONLY) => {
                answer(self, libc::EPERM as u32);
                return Ok(());
            }
            Command::Write { fua } => (BlockOp::Write { fua: fua && self.abilities.fua }, self.log.piece_max, Some(Rc::new(data))),
            Command::Trim if !self.log.discards() => {
                answer(self, libc::EINVAL as u32);
                return Ok(());
            }
            // Sector counts are whole blocks: the largest discard is too.
            Command::Trim => (BlockOp::Discard, self.discard_max(), None),
            Command::Flush if !self.abilities.write_cache => {
                // Nothing volatile to flush: Linux's block layer answers it at once too.
                answer(self, 0);
                return Ok(());
            }
            Command::Flush => (BlockOp::Flush, 512, None),
        };
        if op != BlockOp::Flush {
            if let Err(refusal) = check_range(request.offset, request.len, self.log.size_bytes(), self.log.disk.logical_block_size) {
                answer(self, refusal.errno(matches!(op, BlockOp::Write { .. })));
                return Ok(());
            }
            if request.len == 0 {
                answer(self, 0);
                return Ok(());
            }
        }
        let flush_after = matches!(request.command, Command::Write { fua: true }) && !self.abilities.fua && self.abilities.write_cache;
        let id = self.next_id;
        self.next_id += 1;
        let len = if op == BlockOp::Flush { 0 } else { request.len };
        let mut count = 0;
        for p in pieces(request.offset, len, max) {
            self.waiting.push_back(Piece { owner: Owner::Request(id), op, sector: p.sector, len: p.len, data: data.clone(),
                                           at: p.at, conn, covers: 0 });
            count += 1;
        }
        let read = if op == BlockOp::Read { vec![0; request.len as usize] } else { Vec::new() };
        self.pending.insert(id, Pending { conn, handle: request.handle, pieces_left: count, errno: 0, read, flush_after, op, len });
        self.pump()
    }

    /// The most bytes of one discard: the driver's limit in whole blocks.
    fn discard_max(&self) -> u32 {
        let block = self.log.disk.logical_block_size.max(512);
        let max = (self.log.disk.max_discard_sectors as u64 * 512).min(u32::MAX as u64) as u32;
        (max / block * block).max(block)
    }

    fn answer(&mut self, conn: usize, handle: [u8; 8], errno: u32, data: Vec<u8>) {
        if errno != 0 {
            self.counts.errors += 1;
        }
        self.replies.push(Reply { conn, handle, errno, data });
    }

    /// Sends what may go: the replay first and alone, then the pieces in
    /// order while there are slots; kicks the driver if it sleeps.
    fn pump(&mut self) -> Result<(), ShmError> {
        if !self.serving {
            return Ok(());
        }
        if self.kept.wants_flush() && !self.own_flush && self.abilities.write_cache {
            self.own_flush = true;
            self.waiting.push_front(Piece { owner: Owner::OwnFlush, op: BlockOp::Flush, sector: 0, len: 0, data: None, at: 0,
                                            conn: 0, covers: 0 });
        }
        while let Some(change) = self.replay.front() {
            if self.replay_overlaps(change) {
                break;
            }
            let change = change.clone();
            let piece = Piece { owner: Owner::Replay, op: change.op, sector: change.sector, len: change.len, data: change.data,
                                at: change.at, conn: 0, covers: 0 };
            if !self.send(piece)? {
                break;
            }
            self.replay.pop_front();
            self.counts.replayed += 1;
        }
        let replaying = !self.replay.is_empty() || self.slots.iter().flatten().any(|p| p.owner == Owner::Replay);
        while !replaying {
            let Some(piece) = self.waiting.front().cloned() else { break };
            if !self.send(piece)? {
                break;
            }
            self.waiting.pop_front();
        }
        if self.mem.take_submit_wakeup() {
            fd::signal(self.kick.as_fd());
        }
        Ok(())
    }

    /// Whether a replayed change that overlaps `change` is outstanding: the
    /// device may reorder what is outstanding together.
    fn replay_overlaps(&self, change: &Change) -> bool {
        let range = change.sectors();
        self.slots.iter().flatten().filter(|p| p.owner == Owner::Replay)
            .any(|p| p.sector < range.end && range.start < p.sector + (p.len as u64).div_ceil(512))
    }

    /// Gives the driver `piece` in a free slot; false if there is none.
    fn send(&mut self, mut piece: Piece) -> Result<bool, ShmError> {
        let Some(slot) = self.mem.take_slot() else { return Ok(false) };
        if let (Some(data), BlockOp::Write { .. }) = (&piece.data, piece.op) {
            let at = piece.at as usize;
            self.mem.write_data(slot, 0, &data[at..at + piece.len as usize]);
        }
        if piece.op == BlockOp::Flush {
            piece.covers = self.kept.flush_sent();
        }
        let queue = (piece.conn % self.abilities.queues as usize) as u16;
        let request = BlockRequest { op: piece.op, sector: piece.sector, len: piece.len, queue, slot };
        self.slots[slot as usize] = Some(piece);
        if let Err(e) = self.mem.submit(request) {
            self.slots[slot as usize] = None;
            self.mem.release_slot(slot);
            return Err(e);
        }
        Ok(true)
    }

    /// Takes what the driver completed, answers the requests it finished
    /// and sends what waited for their slots; says how many it took. The
    /// driver is told the host waits for its next completion. A violation
    /// (`BlockMemory` checks every completion) leaves the requests to the successor.
    pub fn complete(&mut self) -> Result<u32, ShmError> {
        let mut taken = 0;
        // Good completions before a violation come first; the violation with the next call.
        loop {
            let batch = self.mem.completions()?;
            if batch.is_empty() {
                if self.mem.prepare_to_sleep() {
                    break;
                }
                continue;
            }
            taken += batch.len() as u32;
            self.take_completions(batch);
        }
        self.pump()?;
        Ok(taken)
    }

    fn take_completions(&mut self, batch: Vec<BlockCompletion>) {
        for done in batch {
            let slot = done.request.slot;
            let piece = self.slots[slot as usize].take().expect("a completed request's slot carries its piece");
            let ok = done.status == 0;
            if let (true, BlockOp::Read, Owner::Request(id)) = (ok, piece.op, piece.owner) {
                if let Some(p) = self.pending.get_mut(&id) {
                    let at = piece.at as usize;
                    self.mem.read_data(slot, 0, &mut p.read[at..at + piece.len as usize]);
                }
            }
            self.mem.release_slot(slot);
            self.completed(piece, done.status);
        }
    }

    fn completed(&mut self, piece: Piece, status: i16) {
        let ok = status == 0;
        // What the device acknowledged may be only in its cache (a FUA write is not).
        let volatile = matches!(piece.op, BlockOp::Write { fua: false } | BlockOp::Discard | BlockOp::WriteZeroes);
        if ok && volatile && self.abilities.write_cache && piece.owner != Owner::Replay {
            self.kept.acknowledged(piece.op, piece.sector, piece.len, piece.data.clone(), piece.at);
        }
        if ok && piece.op == BlockOp::Flush {
            self.kept.flushed(piece.covers);
        }
        match piece.owner {
            Owner::Request(id) => self.piece_done(id, &piece, status),
            Owner::Replay if !ok => {
                error!("{}: an acknowledged change done again after a handover failed (status {status}, sector {}, {} bytes): \
                        it may be missing from the disk", self.label, piece.sector, piece.len);
            }
            Owner::Replay => {}
            Owner::OwnFlush => {
                self.own_flush = false;
                if !ok {
                    warn!("{}: the daemon's flush failed (status {status}); the acknowledged writes stay kept", self.label);
                }
            }
        }
    }

    fn piece_done(&mut self, id: u64, piece: &Piece, status: i16) {
        let Some(p) = self.pending.get_mut(&id) else { return };
        if status != 0 && p.errno == 0 {
            p.errno = (-(status as i32)) as u32;
        }
        p.pieces_left -= 1;
        if p.pieces_left > 0 {
            return;
        }
        if p.flush_after && p.errno == 0 {
            p.flush_after = false;
            p.pieces_left = 1;
            self.waiting.push_front(Piece { owner: Owner::Request(id), op: BlockOp::Flush, sector: 0, len: 0, data: None,
                                            at: 0, conn: piece.conn, covers: 0 });
            return;
        }
        let p = self.pending.remove(&id).expect("pending");
        self.count(&p);
        let data = if p.errno == 0 { p.read } else { Vec::new() };
        self.answer(p.conn, p.handle, p.errno, data);
    }

    fn count(&mut self, p: &Pending) {
        let c = &mut self.counts;
        match p.op {
            BlockOp::Read => {
                c.reads += 1;
                c.bytes_read += p.len as u64;
            }
            BlockOp::Write { .. } => {
                c.writes += 1;
                c.bytes_written += p.len as u64;
            }
            BlockOp::Flush => c.flushes += 1,
            BlockOp::Discard | BlockOp::WriteZeroes => c.discards += 1,
        }
    }

    /// Every request of the kernel's is answered with `errno`, now.
    fn fail_everything(&mut self, errno: u32) {
        let mut failed: Vec<(u64, Pending)> = self.pending.drain().collect();
        failed.sort_by_key(|(id, _)| *id);
        for (_, p) in failed {
            self.answer(p.conn, p.handle, errno, Vec::new());
        }
        self.waiting.clear();
        self.replay.clear();
    }
}

impl Shared for Datapath {
    fn memory(&self) -> &dyn DriverMemory {
        &self.mem
    }

    fn kick_fd(&self) -> BorrowedFd<'_> {
        self.kick.as_fd()
    }

    fn notify_fd(&self) -> BorrowedFd<'_> {
        self.notify.as_fd()
    }

    fn frontend_queues(&self) -> Vec<BorrowedFd<'_>> {
        Vec::new()
    }
}

impl InFlight for Datapath {
    type Held = Piece;
    type Error = ShmError;

    /// The driver is gone (its device stopped): every slot is the host's
    /// again, and the pieces it held come back oldest first, their data
    /// still with their requests. The replay pieces it held are not among
    /// them: the successor's replay starts over from what is kept.
    fn reclaim(&mut self) -> Vec<Piece> {
        self.serving = false;
        let mut held = Vec::new();
        for request in self.mem.reclaim() {
            let piece = self.slots[request.slot as usize].take().expect("a held request's slot carries its piece");
            self.mem.release_slot(request.slot);
            if piece.owner != Owner::Replay {
                held.push(piece);
            }
        }
        held
    }

    /// Gives a successor what its predecessor held, after the replay of
    /// what is kept; returns how many pieces it was given back.
    fn resubmit(&mut self, held: Vec<Piece>) -> Result<u32, ShmError> {
        let n = held.len() as u32;
        for piece in held.into_iter().rev() {
            self.waiting.push_front(piece);
        }
        self.given_up = false;
        self.serving = true;
        self.replay = self.kept.to_replay();
        self.pump()?;
        Ok(n)
    }

    /// Nobody will serve the disk: every request is answered with EIO, and
    /// what is kept is lost with the device's cache.
    fn give_up(&mut self, held: Vec<Piece>) {
        drop(held);
        self.given_up = true;
        self.own_flush = false;
        self.fail_everything(libc::EIO as u32);
        let (changes, bytes) = self.kept.give_up();
        if changes > 0 {
            error!("{}: no driver serves the disk: {changes} acknowledged change(s) ({bytes} bytes) that no flush covered \
                    may be missing from it", self.label);
        }
    }
}

#[cfg(test)]
#[path = "datapath_tests.rs"]
mod tests;
