// SPDX-License-Identifier: GPL-2.0
//! The recovery agent (Nooks' user-mode recovery agent; docs/recovery.md,
//! "When the limit is exceeded"): whether a driver that died is restarted
//! (the restart limit), what happens when it may not be (left down, or
//! retried with back-off), and the administrator's hook after every outcome.

use std::time::{Duration, Instant};

use log::{error, info, warn};
use understudy_api::{DeviceStop, DriverState};

use super::succession::Quiesced;
use super::{device, Supervisor};
use crate::class::{Class, Log};
use crate::handover::Reason;
use crate::handover::policy::{AgentPolicy, Backoff, HookEvent, OnExhausted, RestartBudget, RestartPolicy};
use crate::os::hook::run_hook;

pub struct RecoveryAgent<L> {
    pub restarts: RestartBudget,
    /// --on-exhausted, the back-off of `retry` and the hook.
    pub policy: AgentPolicy,
    pub backoff: Backoff,
    /// With `retry`, the restart waiting for its back-off to pass.
    pub retry: Option<PendingRetry<L>>,
}

/// A restart put off by `--on-exhausted retry` until `at`.
pub struct PendingRetry<L> {
    pub at: Instant,
    cause: String,
    log: L,
    device_stop: DeviceStop,
}

impl<L> RecoveryAgent<L> {
    pub fn new(restarts: RestartPolicy, policy: AgentPolicy) -> Self {
        RecoveryAgent { restarts: RestartBudget::new(restarts), backoff: Backoff::new(policy.retry_max), policy, retry: None }
    }
}

impl<C: Class> Supervisor<C> {
    /// Starts a restart (a handover to a fresh copy of the modules) with
    /// `log`, if `restart` and the policy allow; otherwise the device stays
    /// stopped, its IOMMU mapping is dropped and the front-end stays, without carrier.
    pub(super) fn restart_or_give_up(&mut self, reason: Reason, cause: String, log: Option<C::Log>, q: Quiesced<C::Held>,
                                     seen_dead: Instant, restart: bool) {
        let dev = self.label().clone();
        let not_restarted = match (restart, log) {
            (false, _) => None,
            (true, None) => Some(format!("it died before registering its {}, so there is nothing to replay", C::Log::REGISTERS)),
            (true, Some(log)) => match self.restart_allowed(seen_dead) {
                Ok(()) => {
                    warn!("{dev}: driver died: {cause}. Device stopped (reset: {}); handing {} to a fresh driver, \
                           {} {}(s) to give it again; {} keeps its carrier",
                          q.device_stop.reset, self.class.name(), q.uncompleted.len(), C::HELD, self.class.name());
                    return self.restart(reason, log, q, seen_dead, true);
                }
                Err(why) if self.standbys.available() => {
                    return self.fail_over(format!("{cause}; not restarted: {why}"), log, q, seen_dead);
                }
                Err(why) if self.succession.device_removed => return self.park(why, log, q, seen_dead),
                Err(why) if self.agent.policy.on_exhausted == OnExhausted::Retry => {
                    let wait = self.agent.backoff.next_delay();
                    self.agent.retry =
                        Some(PendingRetry { at: seen_dead + wait, cause: cause.clone(), log, device_stop: q.device_stop.clone() });
                    Some(format!("{why}; retrying in {:.1} s (--on-exhausted retry)", wait.as_secs_f64()))
                }
                Err(why) => Some(why),
            },
        };
        let Quiesced { uncompleted, mut device_stop, .. } = q;
        // Nobody will do what the dead driver never completed.
        self.class.give_up(uncompleted, &self.status);
        // The device stays stopped: nothing of the arena stays reachable from it.
        let unmapped = self.devices.serving_mut().map_or(Ok(()), |v| v.unmap_all());
        let confined = self.devices.serving().is_none_or(|v| v.iommu_group().is_some());
        device_stop.iommu_unmapped = unmapped.is_ok();
        let death = match &not_restarted {
            Some(why) => format!("{cause}; not restarted: {why}"),
            None => cause.clone(),
        };
        if let Some(why) = &not_restarted {
            let (outcome, retry_in) = match &self.agent.retry {
                Some(r) => ("retrying", Some(r.at.saturating_duration_since(seen_dead))),
                None => ("down", None),
            };
            self.hook(outcome, &cause, Some(why), None, retry_in);
        }
        error!("{dev}: driver died: {death}. Device stopped (bus mastering {}, interrupts {}, reset: {}), \
                IOMMU mappings {}; {} kept without carrier. `understudy stop {dev}` releases it.",
               if device_stop.bus_master_off { "off" } else { "STILL ON" },
               if device_stop.irqs_disabled { "disabled" } else { "not all disabled" },
               device_stop.reset,
               if !confined { "none (no IOMMU)" } else if unmapped.is_ok() { "cleared" } else { "NOT cleared" },
               self.class.name());
        self.set_status(|s| {
            s.driver.state = DriverState::Dead;
            s.driver.pid = None;
            s.driver.death = Some(death);
            s.driver.device_stop = Some(device_stop);
        });
    }

    /// Whether the driver that died may be restarted on its device: not if
    /// the device is being removed, nor beyond the restart limit.
    fn restart_allowed(&mut self, seen_dead: Instant) -> Result<(), String> {
        if self.succession.device_removed {
            return Err("its device is being removed (the kernel asked for it back)".into());
        }
        self.agent.restarts.take(seen_dead)
    }

    /// Starts the administrator's hook (--recovery-hook) for an outcome; not waited for.
    pub(super) fn hook(&self, outcome: &str, cause: &str, reason: Option<&str>, restart_ms: Option<f64>, retry_in: Option<Duration>) {
        let Some(path) = &self.agent.policy.hook else { return };
        let recovery_count = self.status.update(|s| s.handovers.recovery_count);
        run_hook(path, &HookEvent {
            device: &self.label().to_string(),
            ifname: self.class.name(),
            outcome,
            cause,
            reason,
            recovery_count,
            restart_ms,
            retry_in,
        });
    }

    /// `--on-exhausted retry`: once the back-off has passed, a fresh driver is
    /// started (the handover's failure schedules the next attempt); the
    /// interface has been down meanwhile, so its carrier follows the fresh driver's.
    pub(super) fn retry_if_due(&mut self, now: Instant) {
        if self.agent.retry.as_ref().is_none_or(|r| now < r.at) {
            return;
        }
        let retry = self.agent.retry.take().expect("checked");
        info!("{}: --on-exhausted retry: restarting the driver after its back-off", self.label());
        // Given up, the device lost its arena's IOMMU mapping; a restart reuses the arena.
        let shm = self.class.memory();
        let mapped = match self.devices.serving_mut() {
            Some(vfio) if vfio.mapped_bytes() == 0 => device::map_arena(vfio, shm).map_err(|e| e.to_string()),
            Some(_) => Ok(()),
            None => Err("its device was released".to_string()),
        };
        if let Err(e) = mapped {
            let wait = self.agent.backoff.next_delay();
            let why = format!("cannot map the arena again: {e}");
            error!("{}: the retry failed: {why}; next attempt in {:.1} s", self.label(), wait.as_secs_f64());
            self.hook("retrying", &retry.cause, Some(&why), None, Some(wait));
            self.agent.retry = Some(PendingRetry { at: now + wait, ..retry });
            return;
        }
        let reason = Reason::Death { cause: retry.cause.clone() };
        let q = Quiesced { uncompleted: Vec::new(), device_stop: retry.device_stop, device_stop_ms: 0.0 };
        self.restart(reason, retry.log, q, now, false);
    }
}
