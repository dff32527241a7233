// SPDX-License-Identifier: GPL-2.0
//! The recovery agent's policy (Nooks' user-mode recovery agent; docs/design.md §8, docs/recovery.md):
//! what happens when a device's restart limit is exceeded, and the
//! administrator's hook, run after every recovery outcome.
//!
//! `down` (the default) leaves the interface without carrier and says why in
//! `status`; `retry` keeps restarting, waiting longer each time (doubling from
//! 1 s, capped), until a restart succeeds. The hook is started, never waited
//! for by the device's thread: a slow or hanging script cannot delay a
//! recovery. A small thread reaps it and logs its exit status.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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

/// Starts the administrator's hook for `event` and returns at once; a thread
/// waits for it and logs how it ended. Failing to start it is logged too: a
/// broken hook never stops a recovery.
pub fn run_hook(hook: &Path, event: &HookEvent) {
    let (device, outcome) = (event.device.to_string(), event.outcome.to_string());
    let child = Command::new(hook)
        .envs(event.env())
        .stdin(std::process::Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            log::error!("{device}: cannot start the recovery hook {}: {e}", hook.display());
            return;
        }
    };
    let hook = hook.to_path_buf();
    let reaper = std::thread::Builder::new().name("recovery-hook".into()).spawn(move || match child.wait() {
        Ok(status) if status.success() => log::info!("{device}: recovery hook {} ({outcome}) exited 0", hook.display()),
        Ok(status) => log::warn!("{device}: recovery hook {} ({outcome}) {status}", hook.display()),
        Err(e) => log::error!("{device}: recovery hook {} ({outcome}): cannot wait for it: {e}", hook.display()),
    });
    if let Err(e) = reaper {
        log::error!("cannot start a thread to reap the recovery hook: {e}");
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
    fn the_hook_gets_the_outcome_in_its_environment_and_is_not_waited_for() {
        let dir = std::env::temp_dir().join(format!("understudy-hook-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("env");
        let script = dir.join("hook.sh");
        crate::test_script::write(&script, &format!("sleep 0.3\nenv | grep ^UNDERSTUDY_ | sort > {}.tmp && mv {0}.tmp {0}",
                                                    out.display()));
        let event = HookEvent {
            device: "0000:01:00.0",
            ifname: "us0",
            outcome: "down",
            cause: "the driver process 7 killed by signal 9 (Killed)",
            reason: Some("3 restart(s) within 300 s already"),
            recovery_count: 3,
            restart_ms: None,
            retry_in: None,
        };
        let t0 = std::time::Instant::now();
        run_hook(&script, &event);
        assert!(t0.elapsed() < Duration::from_millis(250), "the caller does not wait for the hook");
        let deadline = t0 + Duration::from_secs(10);
        while !out.exists() {
            assert!(std::time::Instant::now() < deadline, "the hook never ran");
            std::thread::sleep(Duration::from_millis(20));
        }
        let env = std::fs::read_to_string(&out).unwrap();
        assert_eq!(env, "UNDERSTUDY_CAUSE=the driver process 7 killed by signal 9 (Killed)\n\
                         UNDERSTUDY_DEVICE=0000:01:00.0\nUNDERSTUDY_IFNAME=us0\nUNDERSTUDY_OUTCOME=down\n\
                         UNDERSTUDY_REASON=3 restart(s) within 300 s already\nUNDERSTUDY_RECOVERY_COUNT=3\n");
        let _ = std::fs::remove_dir_all(&dir);
        // A hook that cannot start is logged, not fatal.
        run_hook(Path::new("/nonexistent/hook"), &event);
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
}
