// SPDX-License-Identifier: GPL-2.0
//! The handover: a driver hands its device's interface to a successor, which
//! is given the predecessor's log and the requests it never completed
//! (docs/recovery.md). It is the same for every device class: a class gives
//! it its shadow's log (`L`, class/mod.rs) and the requests it holds (`F`).
//!
//! Recovery, `understudy recover`, live update and migration are one move
//! with four reasons, as MINIX 3's reincarnation server restarts a service by
//! updating it to a fresh copy of itself. A successor is a `Driver`: modules
//! on a device; only a move changes the device.
//!
//! ```text
//!  Update, Migrate:   Loading ─▶ Quiescing ─┐  (the successor loads -- a move's also probes its
//!                                           │   device on scratch memory -- while the predecessor serves)
//!  Death, Requested,
//!  Failover:          (the predecessor is gone already)
//!                                           └─▶ Registering ─▶ Replaying ─▶ AwaitingReady ─▶ resubmit ─┐
//!  Death, Requested,
//!  Failover:          recovered, moved ◀────────────────────────────────────────────────────────────────┤
//!  Update, Migrate:   Probation ──(the window passes)──▶ updated, moved ◀───────────────────────────────┘
//! ```
//!
//! An update or a move whose successor fails -- it dies, hangs, offers less
//! than its predecessor exposed, refuses a setting of the log, or fails on
//! probation -- rolls back: the predecessor's driver goes through the same
//! phases with the same log and held requests. One refused at load changes nothing:
//! the predecessor never stopped. After a move, and after its rollback, the
//! device announces where it now is (the net class: its MAC).
//!
//! This module decides; the device's thread (supervisor/) acts. Events go
//! in, actions come out, and no device, process or clock is touched here, so
//! every path is unit-tested without a device. `F` is a held request (the
//! net class's `TxFrame`), `L` the class's log (its `PassiveLog`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use understudy_api::{HandoverOutcome, HandoverReason, HandoverRecord, ModuleInfo, StartKind};
use understudy_protocol::Request;
use understudy_vfio::PciAddress;

use crate::class::{Log, Place};
use record::round_ms;

pub mod policy;
pub mod record;

/// What serves an interface: these modules (dependencies first) on this device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Driver {
    pub device: PciAddress,
    pub modules: Vec<ModuleInfo>,
}

/// Why the interface changes hands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The driver died, hung or broke the protocol; its device is stopped.
    Death { cause: String },
    /// `understudy recover`: a fresh copy of the same driver.
    Requested,
    /// `understudy update`: another build of the driver.
    Update { modules: Vec<ModuleInfo>, allow_feature_loss: bool },
    /// `understudy migrate`: another device, usually with another driver.
    Migrate { to: Driver },
    /// The serving device is being removed, or its driver exceeded the
    /// restart limit: the interface moves to a standby. There is nothing to
    /// roll back to.
    Failover { to: Driver, cause: String },
    /// The serving device is being removed and no standby can take the
    /// interface: it waits without a device until it is given one
    /// (`Event::Attach`), then goes on as a failover -- the VM's live
    /// migration to a host without the device (docs/migration.md).
    Park { cause: String },
}

/// What the handover waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The successor loads and checks its modules (LOAD) while the predecessor
    /// still serves; a move's successor also probes its device.
    Loading,
    /// The predecessor is being ended and its device stopped.
    Quiescing,
    /// The successor started; waiting for its REGISTERED.
    Registering,
    /// Giving the successor the log, one request at a time.
    Replaying,
    /// The log is replayed; waiting for the successor to be ready before it
    /// gets the held requests (the net class: its carrier; a driver without
    /// link drops frames).
    AwaitingReady,
    /// An update's successor serves; a failure before the window ends rolls back.
    Probation,
    /// No device: the interface waits for one (`Reason::Park`).
    Parked,
}

#[derive(Debug, PartialEq)]
pub enum Event<L: Log, F> {
    /// The successor's answer to LOAD (and a move's, to its probe), or every problem.
    Loaded(Result<Loaded<L>, String>),
    /// The predecessor is gone and its device stopped: the requests it took and
    /// never completed, oldest first, and how long the device's stop took.
    Quiesced { uncompleted: Vec<F>, device_stop_ms: f64 },
    /// The successor process started (forked from the template, or probing).
    Started(StartKind),
    Registered(L::Offer),
    /// The successor answered the replay request the last `Send` named.
    ReplayAnswered { status: i32 },
    /// The successor says whether it is ready (the net class: its carrier).
    Ready(bool),
    /// The successor did not get ready in time: it is given its requests anyway.
    ReadyWaitOver,
    /// The successor died, hung or was ended (`EndSuccessor`); its device is
    /// stopped and these are the requests it held.
    SuccessorFailed { cause: String, uncompleted: Vec<F> },
    ProbationOver,
    /// A parked interface is given this driver on this device.
    Attach(Driver),
}

/// A successor that loaded while its predecessor served.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded<L: Log> {
    /// The kernel half LOAD chose.
    pub kernel_half: String,
    /// What it registered when it probed its device: a move's successor
    /// probes (on scratch memory), an update's cannot (its device is busy).
    pub registration: Option<L::Offer>,
}

#[derive(Debug, PartialEq)]
pub enum Action<L: Log, F> {
    /// Start a process for this driver and send it LOAD -- and, on a device
    /// other than the serving one, HELLO and PROBE on scratch memory; then `Loaded`.
    Load(Driver),
    /// End the serving driver, stop its device, take back its buffers; then `Quiesced`.
    StopPredecessor,
    /// Start a successor for this driver: the process that loaded it (an
    /// update), else a fork of the template made from it, else a probe. On
    /// another device than the serving one, that device serves from now on.
    Start(Driver),
    /// End the successor for this reason; the daemon then reports `SuccessorFailed`.
    EndSuccessor(String),
    /// The successor registered: the class's shadow starts from what it offers.
    Adopt(L::Offer),
    Send(Request),
    /// Hold the successor's requests until it is ready (the net class: lend
    /// it receive buffers, hold its frames until its link is up).
    WaitForReady,
    /// Give the successor these held requests, in order, and the class's after them.
    Resubmit(Vec<F>),
    /// A failure of the successor within this window still rolls the update back.
    StartProbation(Duration),
    /// After a move, tell the device's peers where it now is (the net
    /// class: gratuitous ARP and unsolicited neighbour advertisements).
    Announce,
    /// Give the predecessor's device back to the kernel; the interface keeps
    /// its readiness, its log and its held requests until `Attach`.
    Park,
    /// The handover is over.
    Done(Outcome<L, F>),
}

/// How a handover ended.
#[derive(Debug, PartialEq)]
pub enum Outcome<L, F> {
    /// The successor serves: recovered, or updated or moved and through probation.
    Committed,
    /// An update or a move failed and its predecessor serves again.
    RolledBack { why: String },
    /// An update or a move refused at load: nothing changed.
    Refused { why: String },
    /// Nobody serves. The daemon's death handling decides what follows, with
    /// this log and these requests; `replaceable` is false when a fresh copy
    /// could do no better (it registered another device, refused a setting).
    Failed { why: String, log: L, uncompleted: Vec<F>, replaceable: bool },
}

/// How long an updated driver serves before the update is final: a crash
/// soon after the switch is the new version's (the live-update paper's rollback).
pub const PROBATION: Duration = Duration::from_secs(5);

pub struct Handover<L: Log, F> {
    reason: Reason,
    phase: Phase,
    /// The predecessor's log: what every successor is given.
    log: L,
    /// What served before: what a rollback runs.
    predecessor: Driver,
    /// Why the update failed, once it is rolling back.
    rolling_back: Option<String>,
    /// Why the handover asked for its successor's end (`EndSuccessor`), until it failed.
    ending: Option<String>,
    /// The successor was ended because no fresh copy could do better.
    unreplaceable: bool,
    /// Whether the successor is ready, as it last said.
    ready: bool,
    uncompleted: Vec<F>,
    replay: VecDeque<Request>,
    began: Instant,
    /// When the last phase ended: each phase's time is measured from here.
    mark: Instant,
    record: HandoverRecord,
}

impl<L: Log, F> Handover<L, F> {
    /// A restart: the predecessor is gone, its device stopped since `began`
    /// (`device_stop_ms` of it the device's own stop), and `uncompleted` its
    /// held requests. Death and `recover`.
    pub fn restart(reason: Reason, log: L, predecessor: Driver, uncompleted: Vec<F>,
                   began: Instant, device_stop_ms: f64, now: Instant) -> (Self, Vec<Action<L, F>>) {
        let mut h = Self::new(reason, log, predecessor, began);
        h.uncompleted = uncompleted;
        h.record.device_stop_ms = device_stop_ms;
        h.record.stop_ms = h.lap(now);
        h.phase = Phase::Registering;
        let start = Action::Start(h.successor());
        (h, vec![start])
    }

    /// The serving device is being removed and no standby is left: as
    /// `restart`, but the interface waits for `Event::Attach`.
    pub fn park(cause: String, log: L, predecessor: Driver, uncompleted: Vec<F>, began: Instant,
                device_stop_ms: f64, now: Instant) -> (Self, Vec<Action<L, F>>) {
        let (mut h, _) = Self::restart(Reason::Park { cause }, log, predecessor, uncompleted, began, device_stop_ms, now);
        h.phase = Phase::Parked;
        (h, vec![Action::Park])
    }

    /// A failover: as `restart`, but to the standby `to` for `cause`.
    #[allow(clippy::too_many_arguments)] // a restart's arguments, and where to
    pub fn failover(to: Driver, cause: String, log: L, predecessor: Driver, uncompleted: Vec<F>,
                    began: Instant, device_stop_ms: f64, now: Instant) -> (Self, Vec<Action<L, F>>) {
        Self::restart(Reason::Failover { to, cause }, log, predecessor, uncompleted, began, device_stop_ms, now)
    }

    /// An update of the serving `predecessor` to the modules `to`.
    pub fn update(to: Vec<ModuleInfo>, allow_feature_loss: bool, log: L, predecessor: Driver, now: Instant)
                  -> (Self, Vec<Action<L, F>>) {
        Self::loading(Reason::Update { modules: to, allow_feature_loss }, log, predecessor, now)
    }

    /// A move of the serving `predecessor`'s interface to the driver `to`.
    pub fn migrate(to: Driver, log: L, predecessor: Driver, now: Instant) -> (Self, Vec<Action<L, F>>) {
        Self::loading(Reason::Migrate { to }, log, predecessor, now)
    }

    fn loading(reason: Reason, log: L, predecessor: Driver, now: Instant) -> (Self, Vec<Action<L, F>>) {
        let mut h = Self::new(reason, log, predecessor, now);
        h.phase = Phase::Loading;
        let load = Action::Load(h.successor());
        (h, vec![load])
    }

    fn new(reason: Reason, log: L, predecessor: Driver, began: Instant) -> Self {
        let (kind, cause) = match &reason {
            Reason::Death { cause } => (HandoverReason::Death, cause.clone()),
            Reason::Requested => (HandoverReason::Requested, "restart requested (`understudy recover`)".into()),
            Reason::Update { .. } => (HandoverReason::Update, "update requested (`understudy update`)".into()),
            Reason::Migrate { to } => (HandoverReason::Migrate, format!("move to {} requested (`understudy migrate`)", to.device)),
            Reason::Failover { to, cause } => (HandoverReason::Failover, format!("{cause}: failing over to {}", to.device)),
            Reason::Park { cause } => (HandoverReason::Failover, format!("{cause}: waiting for a device")),
        };
        let mut record = HandoverRecord { reason: kind, cause, outcome: HandoverOutcome::UnderWay, ..HandoverRecord::default() };
        if !matches!(reason, Reason::Death { .. } | Reason::Requested) {
            record.from_modules = Some(predecessor.modules.clone());
        }
        if matches!(reason, Reason::Park { .. }) {
            record.from_device = Some(predecessor.device.to_string());
        }
        Self::name_successor(&mut record, &reason, &predecessor);
        Self { reason, phase: Phase::Registering, log, predecessor, rolling_back: None, ending: None, unreplaceable: false,
                   ready: false, uncompleted: Vec::new(), replay: VecDeque::new(), began, mark: began, record }
    }

    pub fn reason(&self) -> &Reason {
        &self.reason
    }

    /// The driver the handover hands the interface to (before any rollback).
    pub fn successor(&self) -> Driver {
        Self::successor_of(&self.reason, &self.predecessor)
    }

    /// The record says what the interface is handed to: the modules, and for
    /// a move the devices (a hot-plugged one may take the removed one's address).
    fn name_successor(record: &mut HandoverRecord, reason: &Reason, predecessor: &Driver) {
        if matches!(reason, Reason::Death { .. } | Reason::Requested | Reason::Park { .. }) {
            return;
        }
        let to = Self::successor_of(reason, predecessor);
        record.to_modules = Some(to.modules.clone());
        if matches!(reason, Reason::Migrate { .. } | Reason::Failover { .. }) {
            record.from_device = Some(predecessor.device.to_string());
            record.to_device = Some(to.device.to_string());
        }
    }

    fn successor_of(reason: &Reason, predecessor: &Driver) -> Driver {
        match reason {
            Reason::Death { .. } | Reason::Requested | Reason::Park { .. } => predecessor.clone(),
            Reason::Update { modules, .. } => Driver { device: predecessor.device.clone(), modules: modules.clone() },
            Reason::Migrate { to } | Reason::Failover { to, .. } => to.clone(),
        }
    }

    fn moves(&self) -> bool {
        matches!(self.reason, Reason::Migrate { .. } | Reason::Failover { .. } | Reason::Park { .. })
    }

    /// Whether the interface waits for a device.
    pub fn parked(&self) -> bool {
        self.phase == Phase::Parked
    }

    /// The device's new place was announced with this many frames.
    pub fn announced(&mut self, frames: u32) {
        self.record.announced += frames;
    }

    /// The log every successor is given.
    pub fn log(&self) -> &L {
        &self.log
    }

    pub fn record(&self) -> &HandoverRecord {
        &self.record
    }

    pub fn began(&self) -> Instant {
        self.began
    }

    /// Whether a driver carries the class's requests meanwhile: the predecessor
    /// while its successor loads, the successor on probation.
    pub fn serving(&self) -> bool {
        matches!(self.phase, Phase::Loading | Phase::Probation)
    }

    /// Whether the interface's own changes must wait: the replay follows the
    /// log, and the interface is reconciled after it.
    pub fn holds_configuration(&self) -> bool {
        matches!(self.phase, Phase::Quiescing | Phase::Registering | Phase::Replaying)
    }

    /// Whether the predecessor still serves: a death of the serving driver
    /// then ends the update before it changed anything.
    pub fn predecessor_serves(&self) -> bool {
        self.phase == Phase::Loading
    }

    /// Milliseconds since the last phase ended; the next one starts now.
    fn lap(&mut self, now: Instant) -> f64 {
        let ms = round_ms(now.saturating_duration_since(self.mark));
        self.mark = now;
        ms
    }

    pub fn on(&mut self, event: Event<L, F>, now: Instant) -> Vec<Action<L, F>> {
        match (self.phase, event) {
            (Phase::Loading, Event::Loaded(Ok(loaded))) => {
                self.record.load_ms = Some(self.lap(now));
                self.record.kernel_half = Some(loaded.kernel_half);
                if self.moves() {
                    // Checked before anything stops: the probe said what it offers.
                    let unfit = match &loaded.registration {
                        None => Some(format!("it registered no {} when it probed", L::REGISTERS)),
                        Some(info) => self.log.incompatibility(info, Place::OtherDevice),
                    };
                    if let Some(why) = unfit {
                        return self.finish(Outcome::Refused { why: format!("it cannot take the interface: {why}") });
                    }
                }
                self.phase = Phase::Quiescing;
                vec![Action::StopPredecessor]
            }
            (Phase::Loading, Event::Loaded(Err(why))) | (Phase::Loading, Event::SuccessorFailed { cause: why, .. }) => {
                self.record.load_ms = Some(self.lap(now));
                self.finish(Outcome::Refused { why })
            }
            (Phase::Quiescing, Event::Quiesced { uncompleted, device_stop_ms }) => {
                self.uncompleted = uncompleted;
                self.record.device_stop_ms = device_stop_ms;
                self.record.stop_ms = self.lap(now);
                self.phase = Phase::Registering;
                vec![Action::Start(self.successor())]
            }
            (Phase::Registering, Event::Started(kind)) => {
                self.record.start = kind;
                Vec::new()
            }
            (Phase::Registering, Event::Registered(info)) => self.registered(info, now),
            (Phase::Replaying, Event::ReplayAnswered { status }) if status < 0 => {
                let refused = self.replay.front().map_or_else(|| "a setting".into(), Request::describe);
                self.replay.clear();
                self.end_successor(format!("it refused {refused}, which its predecessor had accepted: {}",
                                           std::io::Error::from_raw_os_error(-status)))
            }
            (Phase::Replaying, Event::ReplayAnswered { .. }) => {
                self.replay.pop_front();
                self.replay_next(now)
            }
            (_, Event::Ready(on)) => {
                self.ready = on;
                if self.phase == Phase::AwaitingReady && on {
                    self.record.link_ms = Some(self.lap(now));
                    return self.resubmit(now);
                }
                Vec::new()
            }
            (Phase::AwaitingReady, Event::ReadyWaitOver) => {
                self.record.link_ms = Some(self.lap(now));
                self.resubmit(now)
            }
            (Phase::Probation, Event::ProbationOver) => self.finish(Outcome::Committed),
            (Phase::Parked, Event::Attach(to)) => {
                let Reason::Park { cause } = &self.reason else { unreachable!("only a park parks") };
                self.reason = Reason::Failover { to, cause: cause.clone() };
                Self::name_successor(&mut self.record, &self.reason, &self.predecessor);
                self.record.parked_ms = Some(self.lap(now));
                self.phase = Phase::Registering;
                vec![Action::Start(self.successor())]
            }
            (_, Event::SuccessorFailed { cause, mut uncompleted }) => {
                // They never reached the successor: they are still the oldest.
                self.uncompleted.append(&mut uncompleted);
                self.failed(cause, now)
            }
            // Anything else belongs to a phase already left.
            _ => Vec::new(),
        }
    }

    fn registered(&mut self, info: L::Offer, now: Instant) -> Vec<Action<L, F>> {
        // A rollback returns to what served before: it is never held to the update's override.
        let place = match (&self.reason, self.rolling_back.is_some()) {
            (Reason::Migrate { .. } | Reason::Failover { .. }, false) => Place::OtherDevice,
            (Reason::Update { allow_feature_loss, .. }, false) => Place::SameDevice { allow_feature_loss: *allow_feature_loss },
            _ => Place::SameDevice { allow_feature_loss: false },
        };
        if let Some(why) = self.log.incompatibility(&info, place) {
            return self.end_successor(format!("it cannot take its predecessor's place: {why}"));
        }
        self.record.start_ms = Some(self.lap(now));
        self.phase = Phase::Replaying;
        self.replay = self.log.replay(&info).into();
        // A template's fork says it is ready right after REGISTERED; a probe's later.
        self.ready = false;
        let mut actions = vec![Action::Adopt(info)];
        actions.extend(self.replay_next(now));
        actions
    }

    /// A successor that offers less than its predecessor, or refuses what it
    /// accepted, is ended; a fresh copy of the same modules would do no better.
    fn end_successor(&mut self, why: String) -> Vec<Action<L, F>> {
        self.unreplaceable = true;
        self.ending = Some(why.clone());
        vec![Action::EndSuccessor(why)]
    }

    fn replay_next(&mut self, now: Instant) -> Vec<Action<L, F>> {
        if let Some(request) = self.replay.front() {
            return vec![Action::Send(request.clone())];
        }
        self.record.replay_ms = Some(self.lap(now));
        if self.log.waits_for_ready() && !self.ready {
            self.phase = Phase::AwaitingReady;
            return vec![Action::WaitForReady];
        }
        self.resubmit(now)
    }

    fn resubmit(&mut self, now: Instant) -> Vec<Action<L, F>> {
        let frames = std::mem::take(&mut self.uncompleted);
        self.record.tx_resubmitted = frames.len() as u32;
        self.record.serving_ms = Some(round_ms(now.saturating_duration_since(self.began)));
        let mut actions = vec![Action::Resubmit(frames)];
        if self.moves() {
            actions.push(Action::Announce);
        }
        match (&self.reason, self.rolling_back.take()) {
            (_, Some(why)) => actions.extend(self.finish(Outcome::RolledBack { why })),
            (Reason::Update { .. } | Reason::Migrate { .. }, None) => {
                self.phase = Phase::Probation;
                actions.push(Action::StartProbation(PROBATION));
            }
            _ => actions.extend(self.finish(Outcome::Committed)),
        }
        actions
    }

    /// The successor cannot serve. An update or a move not rolled back yet
    /// goes back to its predecessor; anything else ends here.
    fn failed(&mut self, cause: String, now: Instant) -> Vec<Action<L, F>> {
        let cause = self.ending.take().unwrap_or(cause);
        let first_failure = self.rolling_back.is_none();
        if matches!(self.reason, Reason::Update { .. } | Reason::Migrate { .. }) && first_failure {
            self.record.rolled_back_at_ms = Some(round_ms(now.saturating_duration_since(self.began)));
            self.rolling_back = Some(format!("the new driver failed: {cause}"));
            self.unreplaceable = false;
            self.phase = Phase::Registering;
            self.mark = now;
            self.record.start_ms = None;
            self.record.replay_ms = None;
            self.record.link_ms = None;
            return vec![Action::Start(self.predecessor.clone())];
        }
        let why = match self.rolling_back.take() {
            Some(update) => format!("{update}; rolling back failed too: {cause}"),
            None => cause,
        };
        let uncompleted = std::mem::take(&mut self.uncompleted);
        let log = self.log.clone();
        self.finish(Outcome::Failed { why, log, uncompleted, replaceable: !self.unreplaceable })
    }

    fn finish(&mut self, outcome: Outcome<L, F>) -> Vec<Action<L, F>> {
        self.record.outcome = match &outcome {
            Outcome::Committed if matches!(self.reason, Reason::Update { .. }) => HandoverOutcome::Updated,
            Outcome::Committed if self.moves() => HandoverOutcome::Moved,
            Outcome::Committed => HandoverOutcome::Recovered,
            Outcome::RolledBack { why } => HandoverOutcome::RolledBack(why.clone()),
            Outcome::Refused { why } => HandoverOutcome::Refused(why.clone()),
            Outcome::Failed { why, .. } => HandoverOutcome::Failed(why.clone()),
        };
        vec![Action::Done(outcome)]
    }
}

#[cfg(test)]
mod tests;
