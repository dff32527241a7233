// SPDX-License-Identifier: GPL-2.0
//! The checker's side of the gate (docs/checking.md, "The gate"): it checks
//! events in order and publishes `approved`, the count of events checked
//! and found harmless, which the driver's device writes wait on in
//! stringent mode and which frees ring slots in every mode.
//!
//! `approved` never passes a fatal event: at the first one, at index i,
//! `verdict_at` becomes i + 1, `approved` stops at i, and neither moves
//! again. The checker then goes on reading what the ring still holds, for
//! the findings, without approving it. In triage mode nothing is fatal:
//! findings are only reported and `approved` keeps up with the trace.

use std::sync::atomic::Ordering::{Acquire, Release, SeqCst};
use std::time::Duration;

use thiserror::Error;

use crate::engine::{Engine, EventError};
use crate::record::Recorder;
use crate::region::{futex_wait, futex_wake, Config, GateMode, Region};

/// Events between two publications of `approved` within one batch: often
/// enough that a stringent-mode write waits little, rarely enough that the
/// producer's cache line is not stolen on every event.
const PUBLISH_EVERY: u64 = 256;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum GateError {
    #[error("head went from {before} back to {head}: the producer's counter is garbage")]
    HeadBackwards { before: u64, head: u64 },
    #[error("head {head} is more than a ring ({entries} events) ahead of approved {approved}: the producer overwrote events the checker had not read")]
    Overrun { head: u64, approved: u64, entries: u32 },
    #[error(transparent)]
    Event(#[from] EventError),
}

pub struct Gate<'r> {
    region: &'r Region,
    config: &'r Config,
    /// The next event to check.
    next: u64,
    /// What was last published in `approved`.
    approved: u64,
    /// The index of the first fatal event, once there is one.
    verdict: Option<u64>,
    /// Where every event checked is also written (`--record`).
    recorder: Option<Recorder>,
}

impl<'r> Gate<'r> {
    pub fn new(region: &'r Region, config: &'r Config) -> Gate<'r> {
        Gate { region, config, next: 0, approved: 0, verdict: None, recorder: None }
    }

    /// Writes every event checked to `recorder` as well.
    pub fn record(self, recorder: Recorder) -> Gate<'r> {
        Gate { recorder: Some(recorder), ..self }
    }

    /// Ends the recording, if there is one.
    pub fn finish_recording(&mut self) -> std::io::Result<()> {
        self.recorder.take().map_or(Ok(()), Recorder::finish)
    }

    /// Events checked so far.
    pub fn checked(&self) -> u64 {
        self.next
    }

    /// `verdict_at` as the header has it: 1 + the first fatal event's index.
    pub fn verdict_at(&self) -> Option<u64> {
        self.verdict.map(|i| i + 1)
    }

    /// Checks up to `max` of the events published so far; returns how many.
    pub fn poll(&mut self, engine: &mut Engine, max: u64) -> Result<u64, GateError> {
        let head = self.region.head().load(Acquire);
        if head < self.next {
            return Err(self.refuse(GateError::HeadBackwards { before: self.next, head }));
        }
        let entries = self.config.ring_entries;
        if head - self.approved > entries as u64 {
            return Err(self.refuse(GateError::Overrun { head, approved: self.approved, entries }));
        }
        let (start, end) = (self.next, head.min(self.next.saturating_add(max)));
        while self.next < end {
            let index = self.next;
            let event = self.region.event(self.config, index);
            if let Some(Err(e)) = self.recorder.as_mut().map(|r| r.event(&event)) {
                log::error!("cannot write the recording: {e}; recording stops");
                self.recorder = None;
            }
            if let Err(e) = engine.process(index, &event) {
                return Err(self.refuse(e.into()));
            }
            self.next += 1;
            if self.verdict.is_some() {
                continue;
            }
            if let Some(fatal) = engine.reporter().first_fatal().filter(|_| self.config.gate_mode != GateMode::Triage) {
                self.stop_at(fatal);
            } else if self.next % PUBLISH_EVERY == 0 {
                self.publish(self.next);
            }
        }
        if self.verdict.is_none() {
            self.publish(self.next);
        }
        Ok(end - start)
    }

    fn publish(&mut self, upto: u64) {
        if upto == self.approved {
            return;
        }
        self.approved = upto;
        self.region.approved().store(upto, Release);
        if self.region.producer_waiting().load(SeqCst) != 0 {
            futex_wake(self.region.low_word(self.region.approved()));
        }
    }

    /// The verdict: event `index` and everything after it are never approved.
    fn stop_at(&mut self, index: u64) {
        self.verdict = Some(index);
        self.region.verdict_at().store(index + 1, Release);
        // Everything published so far came before `index`.
        debug_assert!(self.approved <= index);
        self.approved = index;
        self.region.approved().store(index, Release);
        // Whether or not it said it waits: a driver waiting for approval
        // must learn that none will come.
        futex_wake(self.region.low_word(self.region.approved()));
    }

    /// The trace broke the contract at the next event: it is the verdict.
    fn refuse(&mut self, e: GateError) -> GateError {
        if self.verdict.is_none() {
            self.stop_at(self.next);
        }
        e
    }

    /// Whether the producer sleeps until the checker approves more (a full
    /// ring, a stringent write): then the checker must not nap.
    pub fn producer_waits(&self) -> bool {
        self.region.producer_waiting().load(SeqCst) != 0
    }

    /// Sleeps until the producer publishes more, at most `timeout`.
    pub fn wait(&self, timeout: Duration) {
        let region = self.region;
        region.checker_waiting().store(1, SeqCst);
        // The producer checks checker_waiting after publishing head: either
        // it sees the flag and wakes us, or we see its new head here.
        if region.head().load(SeqCst) == self.next {
            futex_wait(region.low_word(region.head()), self.next as u32, timeout);
        }
        region.checker_waiting().store(0, SeqCst);
    }
}
