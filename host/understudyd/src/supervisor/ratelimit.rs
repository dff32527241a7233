// SPDX-License-Identifier: GPL-2.0
//! A token bucket for the driver's LOG messages (docs/protocol.md: the host
//! rate-limits them), so a driver printing in a loop cannot flood the
//! daemon's log. Dropped lines are counted and the count is logged once the
//! flood is over.

use std::time::{Duration, Instant};

pub struct TokenBucket {
    burst: f64,
    per_second: f64,
    tokens: f64,
    last: Instant,
    suppressed: u64,
}

impl TokenBucket {
    /// Up to `burst` lines at once, `per_second` on average.
    pub fn new(burst: u32, per_second: u32, now: Instant) -> Self {
        TokenBucket { burst: burst.into(), per_second: per_second.into(), tokens: burst.into(), last: now, suppressed: 0 }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.last = now;
    }

    /// May this line be logged? A refused one is counted.
    pub fn admit(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }

    /// The number of lines dropped, once a line could be logged again (the
    /// report takes that line's token), or at once if `force` (the driver is gone).
    pub fn take_suppressed(&mut self, now: Instant, force: bool) -> Option<u64> {
        if self.suppressed == 0 {
            return None;
        }
        self.refill(now);
        if !force && self.tokens < 1.0 {
            return None;
        }
        self.tokens = (self.tokens - 1.0).max(0.0);
        Some(std::mem::take(&mut self.suppressed))
    }

    /// When `take_suppressed` can next report, if anything waits to be reported.
    pub fn next_report(&self) -> Option<Instant> {
        (self.suppressed > 0)
            .then(|| self.last + Duration::from_secs_f64(((1.0 - self.tokens) / self.per_second).max(0.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_cut_to_the_burst_and_counted() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(5, 10, t0);
        let passed = (0..1000).filter(|_| b.admit(t0)).count();
        assert_eq!(passed, 5);
        assert_eq!(b.take_suppressed(t0, false), None, "still flooded: no report yet");
        assert_eq!(b.next_report(), Some(t0 + Duration::from_millis(100)));
        assert_eq!(b.take_suppressed(t0 + Duration::from_millis(100), false), Some(995));
        assert_eq!(b.take_suppressed(t0 + Duration::from_secs(9), false), None);
        assert_eq!(b.next_report(), None);
    }

    #[test]
    fn the_bucket_refills_at_its_rate_up_to_the_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(5, 10, t0);
        (0..5).for_each(|_| assert!(b.admit(t0)));
        assert!(!b.admit(t0));
        let t1 = t0 + Duration::from_millis(300);
        assert_eq!((0..10).filter(|_| b.admit(t1)).count(), 3);
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| b.admit(t2)).count(), 5);
        assert_eq!(b.take_suppressed(t2, true), Some(1 + 7 + 5));
    }
}
