// SPDX-License-Identifier: GPL-2.0
//! What the CLI asks of the device's thread (handle.rs sends it): ethtool
//! queries, queued and asked of the driver one job at a time, and the
//! handovers it may start -- a restart, an update, a move.

use log::warn;

use super::handle::Command;
use super::{Fault, Purpose, Supervisor};
use crate::class::{Class, Log};
use crate::handover::{Driver, Reason};

impl<C: Class> Supervisor<C> {
    pub(super) fn take_commands(&mut self) -> Result<(), Fault> {
        let mut recover = false;
        while let Ok(command) = self.commands.try_recv() {
            match command {
                Command::Ethtool { queries, answer } => self.class.queue_query(queries, answer),
                Command::Recover { answer } => {
                    let accepted = self.may_hand_over();
                    recover |= accepted.is_ok();
                    let _ = answer.send(accepted.map_err(|why| format!("{}: {why}", self.label())));
                }
                Command::Update { modules, allow_feature_loss, answer } => match self.may_hand_over() {
                    Ok(()) if !recover => self.update(modules, allow_feature_loss, answer)?,
                    Ok(()) => {
                        let _ = answer.send(Err(format!("{}: a restart was requested first", self.label())));
                    }
                    Err(why) => {
                        let _ = answer.send(Err(format!("{}: {why}", self.label())));
                    }
                },
                Command::Migrate { to, modules, answer } if self.succession.parked() => match self.destination(&to) {
                    Ok(vfio) => self.attach(Driver { device: to, modules }, vfio, answer)?,
                    Err(why) => {
                        let _ = answer.send(Err(format!("{}: {why}", self.label())));
                    }
                },
                Command::Migrate { to, modules, answer } => {
                    let destination = self.may_hand_over()
                        .and_then(|()| if recover { Err("a restart was requested first".into()) } else { Ok(()) })
                        .and_then(|()| self.destination(&to));
                    match destination {
                        Ok(vfio) => self.migrate(Driver { device: to, modules }, vfio, answer)?,
                        Err(why) => {
                            warn!("{}: move to {to} refused, nothing changed: {why}", self.label());
                            let _ = answer.send(Err(format!("{}: {why}", self.label())));
                        }
                    }
                }
            }
        }
        if recover {
            return Err(Fault::RecoverRequested);
        }
        // While a handover is under way queries wait for the successor's answer.
        if self.class.log().is_none() && (!self.succession.under_way() || self.succession.parked()) {
            let why = match self.link {
                Some(_) => format!("the driver has not registered its {} yet", C::Log::REGISTERS),
                None if self.succession.parked() => format!("the {} has no device (parked: see `understudy status`)", C::FRONTEND),
                None => "the driver is dead (see `understudy status`)".to_string(),
            };
            self.class.refuse_queries(&format!("{}: {why}", self.devices.address()));
            return Ok(());
        }
        let label = self.label().to_string();
        for request in self.class.next_query(&label) {
            self.send(request, Purpose::Query)?;
        }
        Ok(())
    }

    /// Whether the front-end may change hands now (`recover`, `update`, `migrate`).
    fn may_hand_over(&self) -> Result<(), String> {
        match (&self.link, self.class.log(), self.succession.reason()) {
            (None, ..) => Err("the driver is dead (see `understudy status`)".into()),
            (_, _, Some(Reason::Update { .. })) => Err("an update is already under way".into()),
            (_, _, Some(Reason::Migrate { .. })) => Err("a move is already under way".into()),
            (_, _, Some(_)) => Err("a restart is already under way".into()),
            (_, None, None) => Err(format!("the driver has not registered its {} yet: nothing to replay", C::Log::REGISTERS)),
            _ => Ok(()),
        }
    }
}
