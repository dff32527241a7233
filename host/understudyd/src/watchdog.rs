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
//! from outside.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// How long the driver may stay idle before it is sent a PING.
    pub ping_interval: Duration,
    /// The reply deadline of a PING.
    pub ping: Duration,
    /// The reply deadline of every other request but HELLO and PROBE.
    pub request: Duration,
    /// HELLO and PROBE: loading modules and probing take seconds under TCG.
    pub probe: Duration,
    /// Frames given to a driver with its link up must see a completion within this.
    pub tx: Duration,
}

pub struct Watchdog {
    timeouts: Timeouts,
    /// (seq, request name, its timeout), oldest first.
    outstanding: VecDeque<(u32, &'static str, Duration)>,
    head_since: Instant,
    idle_since: Instant,
}

impl Watchdog {
    pub fn new(timeouts: Timeouts, now: Instant) -> Self {
        Watchdog { timeouts, outstanding: VecDeque::new(), head_since: now, idle_since: now }
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    pub fn sent(&mut self, seq: u32, name: &'static str, now: Instant) {
        let timeout = match name {
            "PING" => self.timeouts.ping,
            "HELLO" | "PROBE" => self.timeouts.probe,
            _ => self.timeouts.request,
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
        self.outstanding.is_empty() && now >= self.idle_since + self.timeouts.ping_interval
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
            None => self.idle_since + self.timeouts.ping_interval,
        }
    }
}

/// Whether a driver that holds frames to send completes any: while its
/// link is up, frames it holds with no completion for `Timeouts::tx` mean a
/// stuck transmitter (a dead interrupt path, a wedged ring).
pub struct TxProgress {
    since: Instant,
}

impl TxProgress {
    pub fn new(now: Instant) -> Self {
        TxProgress { since: now }
    }

    /// Completions came back, or the driver holds no frame: the clock starts again.
    pub fn progressed(&mut self, now: Instant) {
        self.since = now;
    }

    /// The verdict on a driver holding `held` frames with its link `carrier`.
    pub fn overdue(&self, now: Instant, held: u32, carrier: bool, timeout: Duration) -> Option<String> {
        (held > 0 && carrier && now >= self.since + timeout).then(|| {
            format!("hung: it holds {held} frame(s) to send and completed none within {} ms", timeout.as_millis())
        })
    }

    pub fn deadline(&self, timeout: Duration) -> Instant {
        self.since + timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn watchdog(t0: Instant) -> Watchdog {
        Watchdog::new(Timeouts { ping_interval: 100 * MS, ping: 50 * MS, request: 500 * MS, probe: 5000 * MS, tx: 300 * MS }, t0)
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
    fn held_frames_must_complete_while_the_link_is_up() {
        let t0 = Instant::now();
        let mut tx = TxProgress::new(t0);
        assert_eq!(tx.overdue(t0 + 299 * MS, 3, true, 300 * MS), None);
        assert_eq!(tx.overdue(t0 + 300 * MS, 3, true, 300 * MS).as_deref(),
                   Some("hung: it holds 3 frame(s) to send and completed none within 300 ms"));
        assert_eq!(tx.overdue(t0 + 900 * MS, 0, true, 300 * MS), None, "nothing held");
        assert_eq!(tx.overdue(t0 + 900 * MS, 3, false, 300 * MS), None, "no link: frames may wait");
        tx.progressed(t0 + 500 * MS);
        assert_eq!(tx.overdue(t0 + 799 * MS, 3, true, 300 * MS), None);
        assert_eq!(tx.deadline(300 * MS), t0 + 800 * MS);
    }
}
