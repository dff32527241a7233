// SPDX-License-Identifier: GPL-2.0
//! The handover's verbs, side by side: every way a device's driver is
//! handed to a successor starts here (docs/recovery.md, docs/live-update.md,
//! docs/migration.md). Each makes the handover (handover/ decides), shows
//! it in `status` and takes its first actions (succession.rs carries them
//! out); who calls which is the recovery agent (agent.rs: after a death)
//! and the CLI's commands (commands.rs).
//!
//! | verb        | the predecessor      | the successor                                   |
//! |-------------|----------------------|-------------------------------------------------|
//! | `restart`   | gone (died, hung, `recover`) | a fresh copy: a template's fork, else a probe |
//! | `fail_over` | gone, no restart left, or its device removed | a standby's driver on its device |
//! | `park`      | gone with its device, no standby | none until `attach`                 |
//! | `attach`    | none (parked)        | the driver given, on the device given            |
//! | `update`    | serves while the successor loads | other modules on the same device     |
//! | `migrate`   | serves while the successor loads and probes | a driver on another device |

use std::time::Instant;

use log::{info, warn};
use understudy_api::ModuleInfo;
use understudy_vfio::Device;

use super::succession::{module_names, Quiesced};
use super::{Fault, Supervisor, UpdateAnswer};
use crate::class::Class;
use crate::handover::{Driver, Event, Handover, Reason};
use crate::os::device;

impl<C: Class> Supervisor<C> {
    /// A fresh copy of the serving driver takes over from one that is gone,
    /// with its `log` and the requests `q` took back from it. The front-end
    /// keeps its carrier meanwhile unless it was down already (`hold`).
    pub(super) fn restart(&mut self, reason: Reason, log: C::Log, q: Quiesced<C::Held>, seen_dead: Instant, hold: bool) {
        let (handover, actions) = Handover::restart(reason, log, self.serving_driver(), q.uncompleted, seen_dead,
                                                    q.device_stop_ms, Instant::now());
        self.begin_handover(handover, Some(q.device_stop));
        if hold {
            self.class.hold(Instant::now());
        }
        self.act_quietly(actions);
    }

    /// The front-end moves to a standby by itself, with the dead driver's
    /// log and requests: its device is being removed or its driver may not
    /// be restarted again (docs/migration.md, "Failover").
    pub(super) fn fail_over(&mut self, why: String, log: C::Log, q: Quiesced<C::Held>, seen_dead: Instant) {
        let (to, device): (Driver, _) = self.standbys.lend_any().expect("available() checked");
        warn!("{}: driver died: {why}; failing over to the standby {}; {} keeps its carrier",
              self.label(), to.device, self.class.name());
        self.devices.other = Some(device);
        let (handover, actions) = Handover::failover(to, why, log, self.serving_driver(), q.uncompleted, seen_dead,
                                                     q.device_stop_ms, Instant::now());
        self.begin_handover(handover, Some(q.device_stop));
        self.class.hold(Instant::now());
        self.act_quietly(actions);
    }

    /// The serving device is being removed and no standby is left: the
    /// front-end waits, with its log and requests, for `attach`.
    pub(super) fn park(&mut self, why: String, log: C::Log, q: Quiesced<C::Held>, seen_dead: Instant) {
        let (handover, actions) = Handover::park(why, log, self.serving_driver(), q.uncompleted, seen_dead,
                                                 q.device_stop_ms, Instant::now());
        self.begin_handover(handover, Some(q.device_stop));
        self.act_quietly(actions);
    }

    /// A parked front-end is given `to` (`understudy migrate` while parked).
    pub(super) fn attach(&mut self, to: Driver, mut destination: Device, answer: UpdateAnswer) -> Result<(), Fault> {
        info!("{}: {} is given {} ({})", self.label(), self.class.name(), to.device, module_names(&to.modules));
        // A standby's arena is mapped since its probe; a device opened just now has none.
        if destination.mapped_bytes() == 0 {
            if let Err(e) = device::map_arena(&mut destination, self.class.memory()) {
                let _ = answer.send(Err(format!("{}: mapping the arena for {}: {e}", self.label(), to.device)));
                return Ok(());
            }
        }
        self.devices.other = Some(destination);
        self.succession.answer_to(answer);
        self.class.hold(Instant::now());
        self.feed(Event::Attach(to))
    }

    /// `understudy update`: a successor for `modules` loads while the driver serves.
    pub(super) fn update(&mut self, modules: Vec<ModuleInfo>, allow_feature_loss: bool, answer: UpdateAnswer)
                         -> Result<(), Fault> {
        let log = self.class.log().expect("may_hand_over checked").clone();
        info!("{}: update to {} requested; it loads while the driver serves", self.label(), module_names(&modules));
        let (handover, actions) = Handover::update(modules, allow_feature_loss, log, self.serving_driver(), Instant::now());
        self.begin_handover(handover, None);
        self.succession.answer_to(answer);
        self.act(actions)
    }

    /// `understudy migrate`: a successor for `to` loads and probes its device
    /// on scratch memory while the driver serves; the move holds the
    /// `destination` from now on.
    pub(super) fn migrate(&mut self, to: Driver, destination: Device, answer: UpdateAnswer) -> Result<(), Fault> {
        let log = self.class.log().expect("may_hand_over checked").clone();
        info!("{}: move of {} to {} ({}) requested; its driver loads and probes it while this one serves",
              self.label(), self.class.name(), to.device, module_names(&to.modules));
        let (handover, actions) = Handover::migrate(to, log, self.serving_driver(), Instant::now());
        self.begin_handover(handover, None);
        self.devices.other = Some(destination);
        self.succession.answer_to(answer);
        self.act(actions)
    }
}
