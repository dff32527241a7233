// SPDX-License-Identifier: GPL-2.0
//! The handover: a driver hands its interface to a successor, which is given
//! the predecessor's log and the frames it never sent (docs/recovery.md).
//!
//! Recovery, `understudy recover` and live update are one move with three
//! reasons, as MINIX 3's reincarnation server restarts a service by updating
//! it to a fresh copy of itself:
//!
//! ```text
//!  Update:            Loading ─▶ Quiescing ─┐  (the successor loads while the predecessor serves)
//!  Death, Requested:  (the predecessor is gone already)
//!                                           └─▶ Registering ─▶ Replaying ─▶ LinkUp ─▶ resubmit ─┐
//!  Death, Requested:  recovered ◀───────────────────────────────────────────────────────────────┤
//!  Update:            Probation ──(the window passes)──▶ updated ◀───────────────────────────────┘
//! ```
//!
//! An update whose successor fails -- it dies, hangs, offers less than its
//! predecessor exposed, refuses a setting of the log, or fails on probation --
//! rolls back: the predecessor's modules go through the same phases with the
//! same log and frames. An update refused at load changes nothing: the
//! predecessor never stopped.
//!
//! This module decides; the device's thread (supervisor.rs) acts. Events go
//! in, actions come out, and no device, process or clock is touched here, so
//! every path is unit-tested without a device. `F` is a held frame (the
//! pool's `TxFrame` in the daemon).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use understudy_api::{HandoverReason, HandoverRecord, ModuleInfo, StartKind};
use understudy_protocol::{RegisteredInfo, Request};

use crate::recovery::round_ms;
use crate::shadow::{self, PassiveLog};

/// Why the interface changes hands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The driver died, hung or broke the protocol; its device is stopped.
    Death { cause: String },
    /// `understudy recover`: a fresh copy of the same driver.
    Requested,
    /// `understudy update`: another build of the driver.
    Update { modules: Vec<ModuleInfo>, allow_feature_loss: bool },
}

/// What the handover waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The successor loads and checks its modules (LOAD) while the predecessor still serves.
    Loading,
    /// The predecessor is being ended and its device stopped.
    Quiescing,
    /// The successor started; waiting for its REGISTERED.
    Registering,
    /// Giving the successor the log, one request at a time.
    Replaying,
    /// The log is replayed; waiting for the successor's carrier before it
    /// gets frames (without carrier a driver drops them).
    LinkUp,
    /// An update's successor serves; a failure before the window ends rolls back.
    Probation,
}

#[derive(Debug, PartialEq)]
pub enum Event<F> {
    /// The successor's answer to LOAD: the kernel half it chose, or every problem.
    Loaded(Result<String, String>),
    /// The predecessor is gone and its device stopped: the frames it took and
    /// never completed, oldest first, and how long the device's stop took.
    Quiesced { uncompleted: Vec<F>, device_stop_ms: f64 },
    /// The successor process started (forked from the template, or probing).
    Started(StartKind),
    Registered(RegisteredInfo),
    /// The successor answered the replay request the last `Send` named.
    ReplayAnswered { status: i32 },
    /// The successor's carrier changed.
    Carrier(bool),
    /// The successor's link did not come up in time: frames go to it anyway.
    LinkWaitOver,
    /// The successor died, hung or was ended (`EndSuccessor`); its device is
    /// stopped and these are the frames it held.
    SuccessorFailed { cause: String, uncompleted: Vec<F> },
    ProbationOver,
}

#[derive(Debug, PartialEq)]
pub enum Action<F> {
    /// Start a process for `modules` and send it LOAD, nothing else yet.
    Load(Vec<ModuleInfo>),
    /// End the serving driver, stop its device, take back its buffers; then `Quiesced`.
    StopPredecessor,
    /// Start a successor for `modules`: the process that loaded them (an
    /// update), else a fork of the template made from them, else a probe.
    Start { modules: Vec<ModuleInfo> },
    /// End the successor for this reason; the daemon then reports `SuccessorFailed`.
    EndSuccessor(String),
    /// The successor registered: the net shadow starts from it.
    Adopt(RegisteredInfo),
    Send(Request),
    /// Lend the successor its receive buffers, hold its frames until its link is up.
    WaitForLink,
    /// Give the successor these frames, in order, and the TAP's after them.
    Resubmit(Vec<F>),
    /// A failure of the successor within this window still rolls the update back.
    StartProbation(Duration),
    /// The handover is over.
    Done(Outcome<F>),
}

/// How a handover ended.
#[derive(Debug, PartialEq)]
pub enum Outcome<F> {
    /// The successor serves: recovered, or updated and through probation.
    Committed,
    /// An update failed and its predecessor's modules serve again.
    RolledBack { why: String },
    /// An update refused at load: nothing changed.
    Refused { why: String },
    /// Nobody serves. The daemon's death handling decides what follows, with
    /// this log and these frames; `replaceable` is false when a fresh copy
    /// could do no better (it registered another device, refused a setting).
    Failed { why: String, log: PassiveLog, uncompleted: Vec<F>, replaceable: bool },
}

/// How long an updated driver serves before the update is final: a crash
/// soon after the switch is the new version's (the live-update paper's rollback).
pub const PROBATION: Duration = Duration::from_secs(5);

pub struct Handover<F> {
    reason: Reason,
    phase: Phase,
    /// The predecessor's log: what every successor is given.
    log: PassiveLog,
    /// The predecessor's modules: what a rollback runs.
    predecessor: Vec<ModuleInfo>,
    /// Why the update failed, once it is rolling back.
    rolling_back: Option<String>,
    /// Why the handover asked for its successor's end (`EndSuccessor`), until it failed.
    ending: Option<String>,
    /// The successor was ended because no fresh copy could do better.
    unreplaceable: bool,
    /// The successor's carrier, as it last said.
    carrier: bool,
    uncompleted: Vec<F>,
    replay: VecDeque<Request>,
    began: Instant,
    /// When the last phase ended: each phase's time is measured from here.
    mark: Instant,
    record: HandoverRecord,
}

impl<F> Handover<F> {
    /// A restart: the predecessor running `modules` is gone, its device
    /// stopped since `began` (`device_stop_ms` of it the device's own stop),
    /// and `uncompleted` its frames. Death and `recover`.
    pub fn restart(reason: Reason, log: PassiveLog, modules: Vec<ModuleInfo>, uncompleted: Vec<F>,
                   began: Instant, device_stop_ms: f64, now: Instant) -> (Self, Vec<Action<F>>) {
        let mut h = Handover::new(reason, log, modules.clone(), began);
        h.uncompleted = uncompleted;
        h.record.device_stop_ms = device_stop_ms;
        h.record.stop_ms = h.lap(now);
        h.phase = Phase::Registering;
        (h, vec![Action::Start { modules }])
    }

    /// An update of a serving driver that runs `modules`, to `to`.
    pub fn update(to: Vec<ModuleInfo>, allow_feature_loss: bool, log: PassiveLog, modules: Vec<ModuleInfo>, now: Instant)
                  -> (Self, Vec<Action<F>>) {
        let load = Action::Load(to.clone());
        let mut h = Handover::new(Reason::Update { modules: to, allow_feature_loss }, log, modules, now);
        h.phase = Phase::Loading;
        (h, vec![load])
    }

    fn new(reason: Reason, log: PassiveLog, predecessor: Vec<ModuleInfo>, began: Instant) -> Self {
        let (kind, cause, to) = match &reason {
            Reason::Death { cause } => (HandoverReason::Death, cause.clone(), None),
            Reason::Requested => (HandoverReason::Requested, "restart requested (`understudy recover`)".into(), None),
            Reason::Update { modules, .. } => {
                (HandoverReason::Update, "update requested (`understudy update`)".into(), Some(modules.clone()))
            }
        };
        let record = HandoverRecord {
            reason: kind,
            cause,
            outcome: "under way".into(),
            from_modules: to.is_some().then(|| predecessor.clone()),
            to_modules: to,
            ..HandoverRecord::default()
        };
        Handover { reason, phase: Phase::Registering, log, predecessor, rolling_back: None, ending: None, unreplaceable: false,
                   carrier: false, uncompleted: Vec::new(), replay: VecDeque::new(), began, mark: began, record }
    }

    pub fn reason(&self) -> &Reason {
        &self.reason
    }

    /// The log every successor is given.
    pub fn log(&self) -> &PassiveLog {
        &self.log
    }

    pub fn record(&self) -> &HandoverRecord {
        &self.record
    }

    pub fn began(&self) -> Instant {
        self.began
    }

    /// Whether a driver carries the TAP's frames meanwhile: the predecessor
    /// while its successor loads, the successor on probation.
    pub fn serving(&self) -> bool {
        matches!(self.phase, Phase::Loading | Phase::Probation)
    }

    /// Whether the TAP's own changes must wait: the replay follows the log,
    /// and the TAP is reconciled after it.
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

    pub fn on(&mut self, event: Event<F>, now: Instant) -> Vec<Action<F>> {
        match (self.phase, event) {
            (Phase::Loading, Event::Loaded(Ok(half))) => {
                self.record.load_ms = Some(self.lap(now));
                self.record.kernel_half = Some(half);
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
                let Reason::Update { modules, .. } = &self.reason else { unreachable!("only an update quiesces") };
                vec![Action::Start { modules: modules.clone() }]
            }
            (Phase::Registering, Event::Started(kind)) => {
                self.record.start = kind;
                Vec::new()
            }
            (Phase::Registering, Event::Registered(info)) => self.registered(info, now),
            (Phase::Replaying, Event::ReplayAnswered { status }) if status < 0 => {
                let refused = self.replay.front().map_or_else(|| "a setting".into(), describe);
                self.replay.clear();
                self.end_successor(format!("it refused {refused}, which its predecessor had accepted: {}",
                                           std::io::Error::from_raw_os_error(-status)))
            }
            (Phase::Replaying, Event::ReplayAnswered { .. }) => {
                self.replay.pop_front();
                self.replay_next(now)
            }
            (_, Event::Carrier(on)) => {
                self.carrier = on;
                if self.phase == Phase::LinkUp && on {
                    self.record.link_ms = Some(self.lap(now));
                    return self.resubmit(now);
                }
                Vec::new()
            }
            (Phase::LinkUp, Event::LinkWaitOver) => {
                self.record.link_ms = Some(self.lap(now));
                self.resubmit(now)
            }
            (Phase::Probation, Event::ProbationOver) => self.finish(Outcome::Committed),
            (_, Event::SuccessorFailed { cause, mut uncompleted }) => {
                // They never reached the successor: they are still the oldest.
                self.uncompleted.append(&mut uncompleted);
                self.failed(cause, now)
            }
            // Anything else belongs to a phase already left.
            _ => Vec::new(),
        }
    }

    fn registered(&mut self, info: RegisteredInfo, now: Instant) -> Vec<Action<F>> {
        // A rollback returns to what served before: it is never held to the update's override.
        let allow_feature_loss =
            matches!(self.reason, Reason::Update { allow_feature_loss: true, .. }) && self.rolling_back.is_none();
        if let Some(why) = self.log.incompatibility(&info, allow_feature_loss) {
            return self.end_successor(format!("it cannot take its predecessor's place: {why}"));
        }
        self.record.start_ms = Some(self.lap(now));
        self.phase = Phase::Replaying;
        self.replay = self.log.replay(&info).into();
        // A template's fork says its carrier right after REGISTERED; a probe's comes later.
        self.carrier = false;
        let mut actions = vec![Action::Adopt(info)];
        actions.extend(self.replay_next(now));
        actions
    }

    /// A successor that offers less than its predecessor, or refuses what it
    /// accepted, is ended; a fresh copy of the same modules would do no better.
    fn end_successor(&mut self, why: String) -> Vec<Action<F>> {
        self.unreplaceable = true;
        self.ending = Some(why.clone());
        vec![Action::EndSuccessor(why)]
    }

    fn replay_next(&mut self, now: Instant) -> Vec<Action<F>> {
        if let Some(request) = self.replay.front() {
            return vec![Action::Send(request.clone())];
        }
        self.record.replay_ms = Some(self.lap(now));
        if self.log.phase == shadow::Phase::Open && !self.carrier {
            self.phase = Phase::LinkUp;
            return vec![Action::WaitForLink];
        }
        self.resubmit(now)
    }

    fn resubmit(&mut self, now: Instant) -> Vec<Action<F>> {
        let frames = std::mem::take(&mut self.uncompleted);
        self.record.tx_resubmitted = frames.len() as u32;
        self.record.serving_ms = Some(round_ms(now.saturating_duration_since(self.began)));
        let mut actions = vec![Action::Resubmit(frames)];
        match (&self.reason, self.rolling_back.take()) {
            (_, Some(why)) => actions.extend(self.finish(Outcome::RolledBack { why })),
            (Reason::Update { .. }, None) => {
                self.phase = Phase::Probation;
                actions.push(Action::StartProbation(PROBATION));
            }
            _ => actions.extend(self.finish(Outcome::Committed)),
        }
        actions
    }

    /// The successor cannot serve. An update not rolled back yet goes back
    /// to its predecessor's modules; anything else ends here.
    fn failed(&mut self, cause: String, now: Instant) -> Vec<Action<F>> {
        let cause = self.ending.take().unwrap_or(cause);
        let first_failure = self.rolling_back.is_none();
        if matches!(self.reason, Reason::Update { .. }) && first_failure {
            self.record.rolled_back_at_ms = Some(round_ms(now.saturating_duration_since(self.began)));
            self.rolling_back = Some(format!("the new driver failed: {cause}"));
            self.unreplaceable = false;
            self.phase = Phase::Registering;
            self.mark = now;
            self.record.start_ms = None;
            self.record.replay_ms = None;
            self.record.link_ms = None;
            return vec![Action::Start { modules: self.predecessor.clone() }];
        }
        let why = match self.rolling_back.take() {
            Some(update) => format!("{update}; rolling back failed too: {cause}"),
            None => cause,
        };
        let uncompleted = std::mem::take(&mut self.uncompleted);
        let log = self.log.clone();
        self.finish(Outcome::Failed { why, log, uncompleted, replaceable: !self.unreplaceable })
    }

    fn finish(&mut self, outcome: Outcome<F>) -> Vec<Action<F>> {
        self.record.outcome = match &outcome {
            Outcome::Committed if matches!(self.reason, Reason::Update { .. }) => "updated".into(),
            Outcome::Committed => "recovered".into(),
            Outcome::RolledBack { why } => format!("rolled back: {why}"),
            Outcome::Refused { why } => format!("refused: {why}"),
            Outcome::Failed { why, .. } => format!("failed: {why}"),
        };
        vec![Action::Done(outcome)]
    }
}

/// A request of the log, for log lines.
pub fn describe(request: &Request) -> String {
    use understudy_protocol::{RX_MODE_ALLMULTI, RX_MODE_PROMISC};
    match request {
        Request::SetMtu(mtu) => format!("SET_MTU {mtu}"),
        Request::SetMac(mac) => format!("SET_MAC {}", shadow::format_mac(mac)),
        Request::SetRxMode { flags, multicast } => format!(
            "SET_RX_MODE{}{} with {} multicast address(es)",
            if flags & RX_MODE_PROMISC != 0 { " promisc" } else { "" },
            if flags & RX_MODE_ALLMULTI != 0 { " allmulti" } else { "" },
            multicast.len()
        ),
        other => other.name().to_string(),
    }
}

#[cfg(test)]
mod tests;
