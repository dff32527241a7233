// SPDX-License-Identifier: GPL-2.0
//! Restarting a dead driver process: how often it may happen, and what one
//! restart is waiting for (DESIGN.md decisions 7 and 8: recovery, live update
//! and migration are one mechanism, "restart a driver process and replay").
//!
//! While a fresh process starts the shadow impersonates the driver: the
//! TAP keeps its carrier, and frames the stack sends wait in the TAP's own
//! transmit queue (txqueuelen frames, tun's ring): the daemon does not read
//! the TAP until the fresh driver is open again. When that queue is full
//! the kernel drops the newest frame (tail drop), as a NIC's full ring does;
//! TCP retransmits it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use understudy_api::{RecoveryRecord, StartKind, RECOVERIES_KEPT};
use understudy_protocol::Request;
use understudy_shm::TxFrame;

use crate::shadow::PassiveLog;

/// At most `max` restarts of a device's driver within `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    pub max: u32,
    pub window: Duration,
    /// Fork restarts from a post-probe template (template.rs) when the driver allows it.
    pub template: bool,
}

/// The restarts a device has had within its policy's window.
pub struct RestartBudget {
    policy: RestartPolicy,
    recent: VecDeque<Instant>,
}

impl RestartBudget {
    pub fn new(policy: RestartPolicy) -> Self {
        RestartBudget { policy, recent: VecDeque::new() }
    }

    pub fn policy(&self) -> RestartPolicy {
        self.policy
    }

    /// Counts a restart at `now` if the policy allows one, else says why not.
    pub fn take(&mut self, now: Instant) -> Result<(), String> {
        while self.recent.front().is_some_and(|&t| now.duration_since(t) >= self.policy.window) {
            self.recent.pop_front();
        }
        if self.recent.len() as u32 >= self.policy.max {
            return Err(match self.policy.max {
                0 => "restarts are off (understudyd --max-restarts)".to_string(),
                max => format!("{max} restart(s) within {} s already (understudyd --max-restarts, --restart-window-s)",
                               self.policy.window.as_secs()),
            });
        }
        self.recent.push_back(now);
        Ok(())
    }
}

/// What a restart under way is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A fresh driver started (forked from the template, or HELLO and PROBE
    /// sent to a new process); waiting for its REGISTERED.
    Registering,
    /// Replaying the log, one request at a time.
    Replaying,
    /// The log is replayed; waiting for the fresh driver's link (its carrier,
    /// at most CARRIER_HOLD) before it gets frames: without carrier it would
    /// drop them, as the kernel's stack would not even hand them over.
    LinkUp,
}

/// One restart under way.
pub struct Recovery {
    pub step: Step,
    /// The dead driver's log: what the fresh one must be given.
    pub log: PassiveLog,
    /// Frames the dead driver took and never completed, oldest first.
    pub uncompleted: Vec<TxFrame>,
    /// The replay's requests not sent yet (filled at REGISTERED).
    pub replay: VecDeque<Request>,
    pub seen_dead: Instant,
    /// The last frame through the dead driver.
    pub last_packet: Option<Instant>,
    pub record: RecoveryRecord,
}

impl Recovery {
    pub fn new(cause: String, log: PassiveLog, uncompleted: Vec<TxFrame>, seen_dead: Instant,
               last_packet: Option<Instant>) -> Self {
        Recovery {
            step: Step::Registering,
            log,
            uncompleted,
            replay: VecDeque::new(),
            seen_dead,
            last_packet,
            record: RecoveryRecord {
                cause,
                outcome: "under way".into(),
                stop_ms: 0.0,
                device_stop_ms: 0.0,
                start: StartKind::Probe,
                start_ms: None,
                replay_ms: None,
                link_ms: None,
                first_packet_ms: None,
                downtime_ms: None,
                tx_resubmitted: 0,
            },
        }
    }

    /// Milliseconds since the death was seen.
    pub fn elapsed_ms(&self, now: Instant) -> f64 {
        round_ms(now.duration_since(self.seen_dead))
    }

    /// The fresh driver serves (passive mode again): the restart is over. What
    /// is left is to time its first frame, which an idle interface may never pass.
    pub fn finish(mut self) -> FirstFrameWatch {
        self.record.outcome = "recovered".into();
        FirstFrameWatch { seen_dead: self.seen_dead, last_packet: self.last_packet, record: self.record }
    }
}

/// A finished restart whose first frame has not passed yet: when it does, the
/// record gets its first frame and the downtime (from the dead driver's last).
pub struct FirstFrameWatch {
    seen_dead: Instant,
    last_packet: Option<Instant>,
    pub record: RecoveryRecord,
}

impl FirstFrameWatch {
    pub fn frame_passed(mut self, now: Instant) -> RecoveryRecord {
        self.record.first_packet_ms = Some(round_ms(now.duration_since(self.seen_dead)));
        self.record.downtime_ms = self.last_packet.map(|t| round_ms(now.duration_since(t)));
        self.record
    }
}

/// Appends a restart's record to `status`'s list, dropping the oldest
/// beyond `RECOVERIES_KEPT`.
pub fn keep_record(records: &mut Vec<RecoveryRecord>, record: RecoveryRecord) {
    if records.len() >= RECOVERIES_KEPT {
        records.drain(..=records.len() - RECOVERIES_KEPT);
    }
    records.push(record);
}

/// A phase's milliseconds for a log line, "-" if it did not happen.
pub fn ms_or_dash(ms: Option<f64>) -> String {
    ms.map_or("-".to_string(), |v| format!("{v:.1}"))
}

pub fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// A phase's length from times since the death: a difference of rounded
/// figures, rounded again so that status shows 28.0, not 27.999999999999993.
pub fn phase_ms(until: f64, before: f64) -> f64 {
    ((until - before) * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_max_restarts_within_the_window() {
        let t0 = Instant::now();
        let mut budget = RestartBudget::new(RestartPolicy { max: 2, window: Duration::from_secs(60), template: true });
        assert_eq!(budget.take(t0), Ok(()));
        assert_eq!(budget.take(t0 + Duration::from_secs(10)), Ok(()));
        assert_eq!(budget.take(t0 + Duration::from_secs(20)).unwrap_err(),
                   "2 restart(s) within 60 s already (understudyd --max-restarts, --restart-window-s)");
        // The refused attempt is not counted; the first restart leaves the window at 60 s.
        assert_eq!(budget.take(t0 + Duration::from_secs(60)), Ok(()));
        assert!(budget.take(t0 + Duration::from_secs(69)).is_err());
        assert_eq!(budget.take(t0 + Duration::from_secs(70)), Ok(()));
    }

    #[test]
    fn status_keeps_the_newest_records_only() {
        let record = |n: usize| RecoveryRecord {
            cause: format!("death {n}"),
            outcome: "recovered".into(),
            stop_ms: 1.0,
            device_stop_ms: 0.0,
            start: StartKind::Template,
            start_ms: None,
            replay_ms: None,
            link_ms: None,
            first_packet_ms: None,
            downtime_ms: None,
            tx_resubmitted: 0,
        };
        let mut records = Vec::new();
        for n in 0..RECOVERIES_KEPT + 5 {
            keep_record(&mut records, record(n));
        }
        assert_eq!(records.len(), RECOVERIES_KEPT);
        assert_eq!(records[0].cause, "death 5");
        assert_eq!(records.last().unwrap().cause, format!("death {}", RECOVERIES_KEPT + 4));
    }

    #[test]
    fn no_restart_when_the_policy_allows_none() {
        let mut budget = RestartBudget::new(RestartPolicy { max: 0, window: Duration::from_secs(60), template: true });
        assert_eq!(budget.take(Instant::now()).unwrap_err(), "restarts are off (understudyd --max-restarts)");
    }
}
