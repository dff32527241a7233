// SPDX-License-Identifier: GPL-2.0
//! The recovery agent's policy (Nooks' user-mode recovery agent; docs/design.md §8, docs/recovery.md):
//! how often a dead driver may be restarted, what happens when a device's
//! restart limit is exceeded, and the administrator's hook, run after every
//! recovery outcome.
//!
//! `down` (the default) leaves the interface without carrier and says why in
//! `status`; `retry` keeps restarting, waiting longer each time (doubling from
//! 1 s, capped), until a restart succeeds. The hook is started, never waited
//! for by the device's thread (os/hook.rs).

use std::path::PathBuf;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Deserialize;

/// What to do when a device's driver died more often than --max-restarts allows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OnExhausted {
    /// Leave the interface down (no carrier), with the reason in `status`.
    #[default]
    Down,
    /// Keep restarting with exponential back-off (1 s doubling, capped).
    Retry,
}

/// The first wait of `retry`, doubled after each failed attempt.
pub const RETRY_FIRST: Duration = Duration::from_secs(1);

/// How long to wait before each restart once the limit is exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(max: Duration) -> Self {
        Backoff { max, next: RETRY_FIRST.min(max) }
    }

    /// The wait before the next attempt; each call doubles the following one, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }

    /// A restart succeeded: the next exhaustion starts from the first wait again.
    pub fn reset(&mut self) {
        self.next = RETRY_FIRST.min(self.max);
    }
}

/// One recovery outcome, as the hook's environment describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct HookEvent<'a> {
    pub device: &'a str,
    pub ifname: &'a str,
    /// "recovered", "failed" (the restart itself failed), "down" (given up)
    /// or "retrying" (limit exceeded, next attempt after a back-off).
    pub outcome: &'a str,
    pub cause: &'a str,
    /// Why it was not recovered, if it was not.
    pub reason: Option<&'a str>,
    pub recovery_count: u32,
    /// For "recovered": from the death to the fresh driver serving.
    pub restart_ms: Option<f64>,
    pub retry_in: Option<Duration>,
}

impl HookEvent<'_> {
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("UNDERSTUDY_DEVICE", self.device.to_string()),
            ("UNDERSTUDY_IFNAME", self.ifname.to_string()),
            ("UNDERSTUDY_OUTCOME", self.outcome.to_string()),
            ("UNDERSTUDY_CAUSE", self.cause.to_string()),
            ("UNDERSTUDY_RECOVERY_COUNT", self.recovery_count.to_string()),
        ];
        if let Some(reason) = self.reason {
            env.push(("UNDERSTUDY_REASON", reason.to_string()));
        }
        if let Some(ms) = self.restart_ms {
            env.push(("UNDERSTUDY_RESTART_MS", format!("{ms:.1}")));
        }
        if let Some(wait) = self.retry_in {
            env.push(("UNDERSTUDY_RETRY_IN_MS", wait.as_millis().to_string()));
        }
        env
    }
}

/// The recovery agent's settings for every device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentPolicy {
    pub on_exhausted: OnExhausted,
    /// The longest wait between `retry` attempts.
    pub retry_max: Duration,
    pub hook: Option<PathBuf>,
}

/// At most `max` restarts of a device's driver within `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    pub max: u32,
    pub window: Duration,
    /// Fork restarts from a post-probe template (supervisor/template.rs) when the driver allows it.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_starts_again_after_a_success() {
        let mut b = Backoff::new(Duration::from_secs(5));
        let waits: Vec<u64> = (0..5).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 5, 5]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_secs(1));
        // A cap below the first wait is the wait.
        assert_eq!(Backoff::new(Duration::from_millis(300)).next_delay(), Duration::from_millis(300));
    }

    #[test]
    fn on_exhausted_parses_from_toml_words() {
        #[derive(Deserialize)]
        struct T {
            on_exhausted: OnExhausted,
        }
        let t: T = toml::from_str("on_exhausted = \"retry\"").unwrap();
        assert_eq!(t.on_exhausted, OnExhausted::Retry);
        assert!(toml::from_str::<T>("on_exhausted = \"sometimes\"").is_err());
    }

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
    fn no_restart_when_the_policy_allows_none() {
        let mut budget = RestartBudget::new(RestartPolicy { max: 0, window: Duration::from_secs(60), template: true });
        assert_eq!(budget.take(Instant::now()).unwrap_err(), "restarts are off (understudyd --max-restarts)");
    }
}
