// SPDX-License-Identifier: GPL-2.0
//! Starting the administrator's recovery hook (`--recovery-hook`) for an
//! outcome of the recovery agent (handover/policy.rs says what it is told).
//! It is never waited for by the device's thread: a slow or hanging script
//! cannot delay a recovery. A small thread reaps it and logs its exit status.

use std::path::Path;
use std::process::Command;

use crate::handover::policy::HookEvent;

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
}
