// SPDX-License-Identifier: GPL-2.0
//! The post-probe template restarts fork from (docs/design.md §8; the
//! process side is os/template_fork.rs): whether restarts use one, the one taken,
//! and its first fork's takeover of the device.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use log::{info, warn};
use super::{driver_log, Fault, Supervisor};
use crate::os::process::{self, DriverProcess};
use crate::class::{Class, Log, Place};
use crate::os::template_fork::{self, SpawnError, Template};

pub struct Templates {
    /// Whether restarts fork from a post-probe template (`--cold-restarts` says no).
    enabled: bool,
    /// The template, once taken.
    template: Option<Template>,
    /// The first driver forked from the template has not announced itself yet.
    takeover: bool,
    spawn_seq: u32,
}

impl Templates {
    pub fn new(enabled: bool) -> Self {
        Templates { enabled, template: None, takeover: false, spawn_seq: 0 }
    }

    /// Readable when the template has exited.
    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.template.as_ref().map(|t| t.process.pidfd.as_fd())
    }

    /// The template's first fork registered: true if this REGISTERED was
    /// its (checked against what the template registered), so nothing else is to be done.
    pub fn takeover_registered<L: Log>(&mut self, offer: &L::Offer, log: Option<&L>) -> Result<bool, Fault> {
        if !self.takeover {
            return Ok(false);
        }
        self.takeover = false;
        let log = log.expect("the template registered");
        if let Some(why) = log.incompatibility(offer, Place::SameDevice { allow_feature_loss: false }) {
            return Err(Fault::Violation(format!("the driver forked from the template is not the one it probed: {why}")));
        }
        Ok(true)
    }

    /// Kills the template (the daemon is going).
    pub fn end(&mut self) {
        if let Some(t) = self.template.take() {
            process::kill(t.process.pid);
            process::wait(t.process.pid);
        }
    }
}

impl<C: Class> Supervisor<C> {
    /// After the first PROBE: makes the process that probed the template
    /// restarts fork from, and gives the device to its first fork. A process
    /// that cannot be a template goes on as the driver (restarts then probe).
    pub(super) fn take_template(&mut self) -> Result<(), Fault> {
        if !self.succession.templates.enabled {
            return Ok(());
        }
        let dev = self.label().clone();
        self.succession.templates.spawn_seq += 1;
        let prober = self.link.as_ref().expect("PROBE was answered");
        let limit = &mut self.log_limit;
        let spawned = template_fork::spawn(prober.control(), prober.pidfd(), self.succession.templates.spawn_seq,
                                      |level, text| driver_log(limit, &dev, level, text));
        match spawned {
            Ok((control, child)) => {
                let pid = child.pid;
                let link = self.link.as_mut().expect("PROBE was answered");
                let (process, template_control) = link.hand_to_fork(child, control).map_err(Fault::Io)?;
                info!("{dev}: process {} is the post-probe template restarts fork from; its fork {pid} drives the device",
                      process.pid);
                self.set_status(|s| {
                    s.driver.pid = Some(pid as u32);
                    s.driver.template_pid = Some(process.pid as u32);
                });
                self.succession.templates.template = Some(Template { process, control: template_control });
                self.succession.templates.takeover = true;
                Ok(())
            }
            Err(SpawnError::Refused(e, state_said)) => {
                warn!("{dev}: the driver process cannot be a post-probe template ({e}); it drives the device itself, \
                       and a restart will load and probe the driver again");
                state_said.into_iter().try_for_each(|m| self.handle_message(m))
            }
            Err(SpawnError::Broken(why)) => Err(Fault::Violation(format!("asked to become the template: {why}"))),
        }
    }

    /// A fresh driver forked from the template, or None (then a cold start
    /// follows) if there is none or it failed -- a failed template is ended.
    pub(super) fn fork_from_template(&mut self) -> Option<(OwnedFd, DriverProcess)> {
        let dev = self.label().clone();
        self.succession.templates.spawn_seq += 1;
        let limit = &mut self.log_limit;
        let spawned = self.succession.templates.template.as_ref()?
            .spawn(self.succession.templates.spawn_seq, |level, text| driver_log(limit, &dev, level, text));
        match spawned {
            Ok(forked) => Some(forked),
            Err(e) => {
                self.end_template(&format!("it did not fork a driver: {e}"));
                None
            }
        }
    }

    pub(super) fn end_template(&mut self, why: &str) {
        let Some(t) = self.succession.templates.template.take() else { return };
        process::kill(t.process.pid);
        let how = process::wait(t.process.pid);
        warn!("{}: post-probe template {} ended ({why}; the process {how}); a restart will load and probe the driver again",
              self.label(), t.process.pid);
        self.set_status(|s| s.driver.template_pid = None);
    }

    /// The template exited by itself.
    pub(super) fn template_ended(&mut self) {
        let Some(t) = self.succession.templates.template.take() else { return };
        let how = process::wait(t.process.pid);
        warn!("{}: post-probe template {} {how}; a restart will load and probe the driver again",
              self.label(), t.process.pid);
        self.set_status(|s| s.driver.template_pid = None);
    }
}
