// SPDX-License-Identifier: GPL-2.0
//! Restarting a dead driver process: how often it may happen, and the
//! records of the handovers (handover.rs) that restarts and updates are.
//!
//! While a successor starts the shadow impersonates the driver: the
//! TAP keeps its carrier, and frames the stack sends wait in the TAP's own
//! transmit queue (txqueuelen frames, tun's ring): the daemon does not read
//! the TAP until the fresh driver is open again. When that queue is full
//! the kernel drops the newest frame (tail drop), as a NIC's full ring does;
//! TCP retransmits it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use understudy_api::{HandoverRecord, RECOVERIES_KEPT};

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

/// A handover whose successor serves but has not passed a frame yet: when
/// one passes, the record gets its first frame and the downtime (from the
/// predecessor's last frame). An idle interface may never pass one.
pub struct FirstFrameWatch {
    began: Instant,
    last_packet: Option<Instant>,
}

impl FirstFrameWatch {
    pub fn new(began: Instant, last_packet: Option<Instant>) -> Self {
        FirstFrameWatch { began, last_packet }
    }

    pub fn frame_passed(self, record: &mut HandoverRecord, now: Instant) {
        record.first_packet_ms = Some(round_ms(now.duration_since(self.began)));
        record.downtime_ms = self.last_packet.map(|t| round_ms(now.duration_since(t)));
    }
}

/// Appends a restart's record to `status`'s list, dropping the oldest
/// beyond `RECOVERIES_KEPT`.
pub fn keep_record(records: &mut Vec<HandoverRecord>, record: HandoverRecord) {
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
        let record = |n: usize| HandoverRecord { cause: format!("death {n}"), ..HandoverRecord::default() };
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
