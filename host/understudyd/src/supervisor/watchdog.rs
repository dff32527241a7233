// SPDX-License-Identifier: GPL-2.0
//! Is the driver's control loop alive? Every request must be answered within
//! its timeout, and an idle driver is sent a PING every interval.
//!
//! The driver answers requests one after another, so only the oldest
//! unanswered request has a running clock, started when it was sent or when
//! the driver answered the one before it: a request queued behind a slow
//! PROBE is not blamed for the PROBE's time. PINGs go only to an idle driver
//! for the same reason: a long OPEN is judged by OPEN's own timeout.
//!
//! A driver whose control loop answers may still have a dead data path:
//! `TxProgress` applies the kernel's transmit-timeout rule (dev_watchdog)
//! from outside. Or it may keep running into its own assertions:
//! `WarnStorm` counts its WARNs.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// When a driver is declared failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detection {
    /// How long the driver may stay idle before it is sent a PING.
    pub ping_interval: Duration,
    /// The reply deadline of a PING.
    pub ping: Duration,
    /// The reply deadline of every other request but HELLO and PROBE.
    pub request: Duration,
    /// LOAD, HELLO and PROBE: loading modules and probing take seconds under TCG.
    pub probe: Duration,
    /// Frames given to a driver with its link up must see a completion within this.
    pub tx: Duration,
    /// This many WARNs within `warn_window` are a failing driver; 0: never.
    pub warns: u32,
    pub warn_window: Duration,
}

pub struct Watchdog {
    detection: Detection,
    /// (seq, request name, its timeout), oldest first.
    outstanding: VecDeque<(u32, &'static str, Duration)>,
    head_since: Instant,
    idle_since: Instant,
}

impl Watchdog {
    pub fn new(detection: Detection, now: Instant) -> Self {
        Watchdog { detection, outstanding: VecDeque::new(), head_since: now, idle_since: now }
    }

    pub fn sent(&mut self, seq: u32, name: &'static str, now: Instant) {
        let timeout = match name {
            "PING" => self.detection.ping,
            "LOAD" | "HELLO" | "PROBE" => self.detection.probe,
            _ => self.detection.request,
        };
        if self.outstanding.is_empty() {
            self.head_since = now;
        }
        self.outstanding.push_back((seq, name, timeout));
    }

    /// The reply to `seq` arrived; false if no request has that seq.
    pub fn answered(&mut self, seq: u32, now: Instant) -> bool {
        let Some(i) = self.outstanding.iter().position(|&(s, ..)| s == seq) else { return false };
        self.outstanding.remove(i);
        self.head_since = now;
        if self.outstanding.is_empty() {
            self.idle_since = now;
        }
        true
    }

    pub fn ping_due(&self, now: Instant) -> bool {
        self.outstanding.is_empty() && now >= self.idle_since + self.detection.ping_interval
    }

    /// The verdict on a driver that let its oldest request's deadline pass.
    pub fn overdue(&self, now: Instant) -> Option<String> {
        let &(_, name, timeout) = self.outstanding.front()?;
        (now >= self.head_since + timeout)
            .then(|| format!("hung: no reply to {name} within {} ms", timeout.as_millis()))
    }

    /// When the next PING or deadline falls.
    pub fn next_event(&self) -> Instant {
        match self.outstanding.front() {
            Some(&(_, _, timeout)) => self.head_since + timeout,
            None => self.idle_since + self.detection.ping_interval,
        }
    }
}

/// Whether a driver that holds requests completes any: requests it owes
/// progress on (the net class's: frames to send while its link is up) with
/// no completion for `Detection::tx` mean a stuck device path (a dead
/// interrupt path, a wedged ring).
pub struct TxProgress {
    since: Instant,
}

impl TxProgress {
    pub fn new(now: Instant) -> Self {
        TxProgress { since: now }
    }

    /// Completions came back, or the driver holds no request: the clock starts again.
    pub fn progressed(&mut self, now: Instant) {
        self.since = now;
    }

    /// The verdict on a driver that owes progress on `owed` requests, each a `what`.
    pub fn overdue(&self, now: Instant, owed: u32, what: &str, timeout: Duration) -> Option<String> {
        (owed > 0 && now >= self.since + timeout).then(|| {
            format!("hung: it holds {owed} {what}(s) and completed none within {} ms", timeout.as_millis())
        })
    }

    pub fn deadline(&self, timeout: Duration) -> Instant {
        self.since + timeout
    }
}

/// A driver that WARNs again and again: the kernel's `kernel.warn_limit`,
/// counted over a sliding window instead of a lifetime, so that a WARN now
/// and then (a driver's WARN_ON in a rare path) is only logged, but one in
/// the data path, hit by every frame, ends the driver before its log
/// drowns everything else.
pub struct WarnStorm {
    limit: u32,
    window: Duration,
    /// The times of the latest WARNs within the window, oldest first.
    recent: VecDeque<Instant>,
}

impl WarnStorm {
    pub fn new(limit: u32, window: Duration) -> Self {
        WarnStorm { limit, window, recent: VecDeque::new() }
    }

    /// A WARN arrived at `now`; the verdict if it makes a storm.
    pub fn warned(&mut self, now: Instant) -> Option<String> {
        if self.limit == 0 {
            return None;
        }
        while self.recent.front().is_some_and(|&t| now.saturating_duration_since(t) >= self.window) {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        if self.recent.len() < self.limit as usize {
            return None;
        }
        self.recent.clear();
        Some(format!("failing: {} WARNs within {} ms", self.limit, self.window.as_millis()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn watchdog(t0: Instant) -> Watchdog {
        Watchdog::new(Detection { ping_interval: 100 * MS, ping: 50 * MS, request: 500 * MS, probe: 5000 * MS, tx: 300 * MS,
                                  warns: 3, warn_window: 1000 * MS }, t0)
    }

    #[test]
    fn an_idle_driver_is_pinged_and_a_silent_one_is_hung() {
        let t0 = Instant::now();
        let mut w = watchdog(t0);
        assert!(!w.ping_due(t0 + 99 * MS));
        assert!(w.ping_due(t0 + 100 * MS));
        assert_eq!(w.next_event(), t0 + 100 * MS);
        w.sent(1, "PING", t0 + 100 * MS);
        assert!(!w.ping_due(t0 + 300 * MS), "no second PING while one is out");
        assert_eq!(w.overdue(t0 + 149 * MS), None);
        assert_eq!(w.next_event(), t0 + 150 * MS);
        assert_eq!(w.overdue(t0 + 150 * MS).as_deref(), Some("hung: no reply to PING within 50 ms"));
        assert!(w.answered(1, t0 + 120 * MS));
        assert_eq!(w.overdue(t0 + 10_000 * MS), None);
        assert_eq!(w.next_event(), t0 + 220 * MS);
        assert!(!w.answered(1, t0 + 130 * MS), "a seq is answered once");
    }

    #[test]
    fn only_the_oldest_request_has_a_running_clock() {
        let t0 = Instant::now();
        let mut w = watchdog(t0);
        w.sent(1, "PROBE", t0);
        w.sent(2, "SET_MTU", t0);
        assert_eq!(w.overdue(t0 + 4000 * MS), None, "SET_MTU waits behind PROBE");
        w.answered(1, t0 + 4000 * MS);
        assert_eq!(w.overdue(t0 + 4499 * MS), None);
        assert_eq!(w.overdue(t0 + 4500 * MS).as_deref(), Some("hung: no reply to SET_MTU within 500 ms"));
        let mut w = watchdog(t0);
        w.sent(1, "PROBE", t0);
        assert_eq!(w.overdue(t0 + 5000 * MS).as_deref(), Some("hung: no reply to PROBE within 5000 ms"));
    }

    #[test]
    fn owed_requests_must_complete() {
        let t0 = Instant::now();
        let mut tx = TxProgress::new(t0);
        assert_eq!(tx.overdue(t0 + 299 * MS, 3, "frame", 300 * MS), None);
        assert_eq!(tx.overdue(t0 + 300 * MS, 3, "frame", 300 * MS).as_deref(),
                   Some("hung: it holds 3 frame(s) and completed none within 300 ms"));
        assert_eq!(tx.overdue(t0 + 900 * MS, 0, "frame", 300 * MS), None, "nothing owed");
        tx.progressed(t0 + 500 * MS);
        assert_eq!(tx.overdue(t0 + 799 * MS, 3, "frame", 300 * MS), None);
        assert_eq!(tx.deadline(300 * MS), t0 + 800 * MS);
    }

    #[test]
    fn warns_close_together_are_a_storm_and_scattered_ones_are_not() {
        let t0 = Instant::now();
        let mut storm = WarnStorm::new(3, 1000 * MS);
        assert_eq!(storm.warned(t0), None);
        assert_eq!(storm.warned(t0 + 600 * MS), None);
        assert_eq!(storm.warned(t0 + 1000 * MS), None, "the first has left the window");
        assert_eq!(storm.warned(t0 + 1599 * MS).as_deref(), Some("failing: 3 WARNs within 1000 ms"));
        assert_eq!(storm.warned(t0 + 1600 * MS), None, "a verdict starts the count again");
        let mut off = WarnStorm::new(0, 1000 * MS);
        assert!((0..1000).all(|_| off.warned(t0).is_none()), "0: never");
    }
}
