// SPDX-License-Identifier: GPL-2.0
//! The succession of driver processes behind one interface: the handover
//! under way (handover/ decides, this file carries out its actions), an update's or
//! a move's successor while it loads (successor.rs), the post-probe template
//! restarts fork from (template.rs) (docs/recovery.md, docs/live-update.md,
//! docs/migration.md).

use std::os::fd::BorrowedFd;
use std::time::Instant;

use log::{error, info, warn};
use understudy_api::{DeviceStatus, DeviceStop, DriverState, HandoverOutcome, HandoverReason, HandoverRecord, ModuleInfo, StartKind};

use super::link::{self, DriverLink, Spawned};
use super::successor::Loader;
use super::template::Templates;
use super::{device, Fault, Purpose, Supervisor, UpdateAnswer};
use crate::class::{Class, Log};
use crate::handover::{self, Driver, Event, Handover, Outcome, Reason};
use crate::handover::record::{keep_record, ms_or_dash, FirstFrameWatch};

/// A handover of class `C`'s device.
type ClassHandover<C> = Handover<<C as Class>::Log, <C as Class>::Held>;

pub struct Succession<C: Class> {
    /// The modules the driver runs (and the template was made from).
    pub modules: Vec<ModuleInfo>,
    pub templates: Templates,
    /// The handover under way: a restart until its successor serves, an
    /// update until its probation is over.
    handover: Option<ClassHandover<C>>,
    /// An update's or a move's successor while it loads, and the CLI waiting for it.
    pub loader: Option<Loader<C>>,
    update_answer: Option<UpdateAnswer>,
    probation_until: Option<Instant>,
    /// `understudy recover` asked for the death being handled.
    pub recover_requested: bool,
    /// The kernel asked for the serving device back (hot-unplug, unbind):
    /// it is released as soon as nothing needs it (docs/migration.md, "Failover").
    pub device_removed: bool,
    /// The last handover, from its predecessor's end until the first
    /// request through its successor (which may come before the handover is
    /// over: a frame received while the successor waits for its link).
    first_request: Option<(FirstFrameWatch, HandoverReason)>,
    /// When a request last went through the driver (for the downtime of a handover).
    last_request: Option<Instant>,
}

/// A driver that is gone: its device stopped, its buffers back.
pub(super) struct Quiesced<H> {
    /// The requests it took and never completed, oldest first.
    pub uncompleted: Vec<H>,
    pub device_stop: DeviceStop,
    pub device_stop_ms: f64,
}

impl<C: Class> Succession<C> {
    pub fn new(modules: Vec<ModuleInfo>, template: bool) -> Self {
        Succession {
            modules,
            templates: Templates::new(template),
            handover: None,
            loader: None,
            update_answer: None,
            probation_until: None,
            recover_requested: false,
            device_removed: false,
            first_request: None,
            last_request: None,
        }
    }

    pub fn under_way(&self) -> bool {
        self.handover.is_some()
    }

    pub fn reason(&self) -> Option<&Reason> {
        self.handover.as_ref().map(|h| h.reason())
    }

    /// Whether the interface waits for a device (handover/, `Reason::Park`).
    pub fn parked(&self) -> bool {
        self.handover.as_ref().is_some_and(|h| h.parked())
    }

    /// The log the handover under way gives its successor.
    pub fn log(&self) -> Option<&C::Log> {
        self.handover.as_ref().map(|h| h.log())
    }

    /// While a successor starts, replays and waits to be ready, the
    /// front-end's requests wait: the predecessor's go first.
    pub fn holds_requests(&self) -> bool {
        self.handover.as_ref().is_some_and(|h| !h.serving())
    }

    pub fn holds_configuration(&self) -> bool {
        self.handover.as_ref().is_some_and(|h| h.holds_configuration())
    }

    /// Completions are asked for while a handover waits for its successor's first request.
    pub fn awaits_first_request(&self) -> bool {
        self.handover.is_some() || self.first_request.is_some()
    }

    /// When the probation under way ends.
    pub fn probation_until(&self) -> Option<Instant> {
        self.probation_until
    }

    /// Whether the probation under way has just passed (once).
    pub fn probation_over(&mut self, now: Instant) -> bool {
        let over = self.probation_until.is_some_and(|t| now >= t);
        if over {
            self.probation_until = None;
        }
        over
    }

    /// What the device's thread polls for the succession: the template's
    /// end, the loader's messages and end, in this order (`on_succession_fds`).
    pub fn poll_fds(&self) -> Vec<BorrowedFd<'_>> {
        let mut fds = Vec::new();
        fds.extend(self.templates.pidfd());
        if let Some(l) = &self.loader {
            fds.extend(l.poll_fds());
        }
        fds
    }

    /// Kills the template and an update's loading successor (the daemon is going).
    pub fn end_processes(&mut self) {
        self.templates.end();
        if let Some(loader) = self.loader.take() {
            loader.end();
        }
    }

    /// The CLI waits for the handover under way to end.
    pub fn answer_to(&mut self, answer: UpdateAnswer) {
        self.update_answer = Some(answer);
    }

    /// The handover under way announced the front-end's new place with this many frames.
    pub fn announced(&mut self, frames: u32) {
        if let Some(h) = self.handover.as_mut() {
            h.announced(frames);
        }
    }

    /// When the loading successor's request falls due.
    pub fn loader_deadline(&self) -> Option<Instant> {
        self.loader.as_ref().map(Loader::deadline)
    }
}

impl<C: Class> Supervisor<C> {
    pub(super) fn on_succession_fds(&mut self, ready: &[bool]) {
        let mut at = 0;
        if self.succession.templates.pidfd().is_some() {
            if ready.first() == Some(&true) {
                self.template_ended();
            }
            at = 1;
        }
        if self.succession.loader.is_some() && ready[at..].iter().any(|&r| r) {
            self.read_loader();
        }
    }

    /// Ends a misbehaving or unusable driver process; the device is then
    /// stopped, and the driver restarted if `restart` and the policy allow.
    pub(super) fn end_driver(&mut self, why: &str, restart: bool) {
        let Some(link) = self.link.take() else { return };
        error!("{}: ending driver process {}: {why}", self.label(), link.pid());
        let how = link.end();
        self.after_death(format!("{why} (the process was ended by the daemon: {how})"), restart);
    }

    /// docs/design.md §4: stops the device and takes every buffer back from
    /// the driver that is gone; the arena stays mapped (os/device.rs, `stop`).
    fn quiesce(&mut self, seen: Instant) -> Quiesced<C::Held> {
        self.succession.probation_until = None;
        // A handover whose first request never came keeps its record without one.
        self.succession.first_request = None;
        let (device_stop, device_stop_ms) = match self.devices.serving() {
            Some(vfio) => device::stop(vfio),
            None => (DeviceStop { bus_master_off: true, irqs_disabled: true, reset: "released".into(), iommu_unmapped: true }, 0.0),
        };
        let label = self.label().to_string();
        let (uncompleted, last) = self.class.quiesce(&label);
        if last.is_some() {
            self.succession.last_request = last;
        }
        self.report_suppressed_logs(seen, true);
        Quiesced { uncompleted, device_stop, device_stop_ms }
    }

    /// A driver process is gone: its device is stopped and its buffers taken
    /// back. A successor in a handover reports it to the handover; a serving
    /// driver's death starts one (a restart), if `restart` and the policy allow.
    pub(super) fn after_death(&mut self, cause: String, restart: bool) {
        let seen_dead = Instant::now();
        let q = self.quiesce(seen_dead);
        let log = self.class.take_log();
        let requested = std::mem::take(&mut self.succession.recover_requested);
        if self.succession.handover.as_ref().is_some_and(|h| h.predecessor_serves()) {
            // The serving driver died while its update loaded: the update is off.
            self.feed_quietly(Event::Loaded(Err(format!("the running driver died meanwhile: {cause}"))));
        }
        if self.succession.handover.is_some() {
            if !restart {
                self.abandon_handover("the device was stopped by request");
            } else {
                // The front-end holds the predecessor's carrier through a rollback's fresh leg too.
                self.class.hold(Instant::now());
                self.set_status(|s| s.driver.device_stop = Some(q.device_stop.clone()));
                self.feed_quietly(Event::SuccessorFailed { cause, uncompleted: q.uncompleted });
                return;
            }
        }
        let reason = if requested { Reason::Requested } else { Reason::Death { cause: cause.clone() } };
        self.restart_or_give_up(reason, cause, log, q, seen_dead, restart);
    }

    /// Shows a handover that begins in `status`: a restart among the
    /// recoveries, an update among the updates.
    pub(super) fn begin_handover(&mut self, handover: ClassHandover<C>, device_stop: Option<DeviceStop>) {
        let record = handover.record().clone();
        // A restart's or a failover's predecessor is gone already: the outage starts at its last request.
        let gone = !matches!(record.reason, HandoverReason::Update | HandoverReason::Migrate);
        if gone {
            self.watch_first_request(handover.began(), record.reason);
        }
        let death = gone.then(|| record.cause.clone());
        self.succession.handover = Some(handover);
        self.set_status(|s| {
            if gone {
                s.driver.state = DriverState::Recovering;
                s.driver.death = death;
                s.driver.device_stop = device_stop;
            }
            if matches!(record.reason, HandoverReason::Death | HandoverReason::Requested) {
                s.handovers.recovery_count += 1;
            }
            keep_record(records_of(s, record.reason), record);
        });
    }

    /// What serves now: the modules on the device.
    pub(super) fn serving_driver(&self) -> Driver {
        Driver { device: self.devices.address().clone(), modules: self.succession.modules.clone() }
    }

    /// An event for the handover under way; its actions are taken.
    pub(super) fn feed(&mut self, event: Event<C::Log, C::Held>) -> Result<(), Fault> {
        let Some(handover) = self.succession.handover.as_mut() else { return Ok(()) };
        let actions = handover.on(event, Instant::now());
        self.publish_handover();
        self.act(actions)
    }

    /// `feed` where no driver can be ended for a fault (the driver is gone already).
    pub(super) fn feed_quietly(&mut self, event: Event<C::Log, C::Held>) {
        if let Err(e) = self.feed(event) {
            self.fault_in_handover(e);
        }
    }

    pub(super) fn act_quietly(&mut self, actions: Vec<handover::Action<C::Log, C::Held>>) {
        if let Err(e) = self.act(actions) {
            self.fault_in_handover(e);
        }
    }

    /// A fault while the handover acts for a driver that is gone or was just
    /// started: the successor is ended, which the handover hears of.
    fn fault_in_handover(&mut self, fault: Fault) {
        if matches!(fault, Fault::RecoverRequested) {
            return;
        }
        let why = fault.describe();
        self.end_driver(&why, true);
    }

    pub(super) fn act(&mut self, actions: Vec<handover::Action<C::Log, C::Held>>) -> Result<(), Fault> {
        use handover::Action;
        for action in actions {
            match action {
                Action::Load(driver) => self.start_loader(&driver)?,
                Action::StopPredecessor => {
                    let now = Instant::now();
                    if let Some(link) = self.link.take() {
                        info!("{}: the successor is loaded; ending driver process {}", self.label(), link.pid());
                        link.end();
                    }
                    self.class.take_log();
                    let q = self.quiesce(now);
                    let handover = self.succession.handover.as_ref().expect("a handover that loaded");
                    let (began, reason) = (handover.began(), handover.record().reason);
                    self.watch_first_request(began, reason);
                    self.class.hold(Instant::now());
                    self.set_status(|s| {
                        s.driver.state = DriverState::Recovering;
                        s.driver.device_stop = Some(q.device_stop.clone());
                    });
                    self.feed(Event::Quiesced { uncompleted: q.uncompleted, device_stop_ms: q.device_stop_ms })?;
                }
                Action::Start(driver) => match self.start_successor(&driver) {
                    // Nothing to roll back to: a failed failover restarts what it started.
                    Ok(kind) if matches!(self.succession.reason(), Some(Reason::Failover { .. })) => {
                        self.succession.modules = driver.modules.clone();
                        self.feed(Event::Started(kind))?
                    }
                    Ok(kind) => self.feed(Event::Started(kind))?,
                    Err(why) => {
                        error!("{}: handover: the successor did not start: {why}", self.label());
                        self.feed(Event::SuccessorFailed { cause: why, uncompleted: Vec::new() })?;
                    }
                },
                Action::EndSuccessor(why) => return Err(Fault::Io(why)),
                Action::Adopt(info) => self.adopt(info),
                Action::Send(request) => {
                    info!("{}: handover: giving the successor {}", self.label(), request.describe());
                    self.send(request, Purpose::Replay)?;
                }
                Action::WaitForReady => {
                    self.class.wait_for_ready();
                    // Receive buffers are lent now: the link may come up with frames waiting.
                    self.move_requests()?;
                }
                Action::Resubmit(held) => self.resubmit(held)?,
                Action::Announce => self.announce(),
                Action::Park => self.give_device_back(),
                Action::StartProbation(window) => {
                    info!("{}: the successor serves; it is on probation for {} s", self.label(), window.as_secs());
                    self.succession.probation_until = Some(Instant::now() + window);
                }
                Action::Done(outcome) => self.finish_handover(outcome),
            }
        }
        Ok(())
    }

    /// A successor for `driver`: the update's loaded process (sent HELLO and
    /// PROBE), a fork of the template if it was made from that driver, else a
    /// new process that probes. The device's interrupt is allowed again first.
    fn start_successor(&mut self, driver: &Driver) -> Result<StartKind, String> {
        // The template probed the serving device: its forks drive that one only.
        let template_fits = *driver == self.serving_driver() && self.devices.serving().is_some();
        self.serve_on(&driver.device)?.allow_intx()
            .map_err(|e| format!("cannot allow the device's interrupt again: {e}"))?;
        let modules = driver.modules.as_slice();
        let now = Instant::now();
        // An update's process has LOADed already (successor.rs); any other is sent LOAD first.
        let (link, kind, loaded) = match self.succession.loader.take() {
            Some(loader) => (loader.link, StartKind::Probe, true),
            None => {
                let forked = if template_fits { self.fork_from_template() } else { None };
                let (spawned, kind) = match forked {
                    // A checked device has no template (its forks would share its trace region).
                    Some((control, process)) => (Spawned { control, process, checker: None }, StartKind::Template),
                    None => {
                        let vfio = self.devices.serving().expect("serve_on above");
                        (link::spawn(&self.launch.spawn(), vfio, &self.class, modules)?, StartKind::Probe)
                    }
                };
                (DriverLink::new(spawned, self.launch.detection, now)?, kind, false)
            }
        };
        let pid = link.pid();
        self.link = Some(link);
        self.set_status(|s| s.driver.pid = Some(pid as u32));
        if kind == StartKind::Probe {
            // A broken control socket shows as the process's end in the run loop.
            if let Err(fault) = self.send_startup(modules, !loaded) {
                error!("{}: the successor {pid} did not take its first requests: {}", self.label(), fault.describe());
            }
        }
        info!("{}: handover: successor process {pid} started ({})", self.label(), kind.phase_name());
        Ok(kind)
    }

    /// The driver registered its device: the shadow starts from what it
    /// says, as far as every standby offers it too.
    pub(super) fn adopt(&mut self, offer: <C::Log as Log>::Offer) {
        let offer = self.standbys.mask(self.devices.address(), offer);
        self.class.adopt(offer, &self.status);
    }

    /// The successor can serve: gives it the requests its predecessor never
    /// completed, in order, and goes back to passive mode (the front-end's follow).
    fn resubmit(&mut self, held: Vec<C::Held>) -> Result<(), Fault> {
        let resubmitted = self.class.resubmit(held, &self.status)?;
        info!("{}: handover: the successor serves; {resubmitted} {}(s) given again", self.label(), C::HELD);
        // The fresh rings are empty and nobody waits on them yet: lend receive
        // buffers, say the host waits for completions, and kick the driver for
        // the requests just given again -- else a receiving-only stack would wait forever.
        self.move_requests()?;
        self.class.kick();
        Ok(())
    }

    /// Times the first request through the successor of the handover that
    /// began at `began`, and the outage from the predecessor's last request.
    fn watch_first_request(&mut self, began: Instant, reason: HandoverReason) {
        self.succession.first_request = Some((FirstFrameWatch::new(began, self.succession.last_request), reason));
    }

    /// A request went through the driver: the downtime of the next handover
    /// counts from here, and the last one's first request is timed.
    pub(super) fn request_passed(&mut self, now: Instant) {
        self.succession.last_request = Some(now);
        let Some((watch, reason)) = self.succession.first_request.take() else { return };
        let mut first = None;
        self.set_status(|s| {
            if let Some(last) = records_of(s, reason).last_mut() {
                watch.frame_passed(last, now);
                first = Some((last.first_packet_ms, last.downtime_ms));
            }
        });
        if let Some((first_packet, downtime)) = first {
            info!("{}: the first {} through the successor at {} ms after the handover began; downtime {} ms \
                   (from the predecessor's last)",
                  self.label(), C::HELD, ms_or_dash(first_packet), ms_or_dash(downtime));
        }
    }

    /// The handover is over (handover/'s `Outcome`).
    fn finish_handover(&mut self, outcome: Outcome<C::Log, C::Held>) {
        let handover = self.succession.handover.take().expect("a handover under way");
        let record = handover.record().clone();
        let dev = self.label().clone();
        let phases = format!("stop {:.1} ms, {} {} ms, replay {} ms, link {} ms: serving {} ms after it began; \
                              {} {}(s) given again",
                             record.stop_ms, record.start.phase_name(), ms_or_dash(record.start_ms),
                             ms_or_dash(record.replay_ms), ms_or_dash(record.link_ms), ms_or_dash(record.serving_ms),
                             record.tx_resubmitted, C::HELD);
        self.publish(&record);
        let update = record.reason == HandoverReason::Update;
        // A move is over: the device it left, unless the kernel took it
        // back, is a standby from now on; a destination given up goes back
        // to being one, or is released.
        let address = |a: &Option<String>| a.as_deref().and_then(|d| d.parse::<understudy_vfio::PciAddress>().ok());
        if let (Some(from), Some(to)) = (address(&record.from_device), address(&record.to_device)) {
            let origin = Driver { device: from, modules: record.from_modules.clone().unwrap_or_default() };
            let left = self.devices.other.take();
            self.standbys.move_over(matches!(outcome, Outcome::Committed), origin, &to, left);
            let standby = self.standbys.status();
            self.set_status(|s| s.handovers.standby = standby);
        }
        match outcome {
            Outcome::Committed if update => {
                let modules = record.to_modules.clone().unwrap_or_default();
                info!("{dev}: updated to {} ({}); {phases}", module_names(&modules),
                      record.kernel_half.as_deref().unwrap_or("-"));
                // The template is the old version's: restarts probe the new one from now on.
                self.end_template("the driver was updated");
                self.succession.modules = modules.clone();
                self.set_status(|s| s.driver.modules = modules);
                self.hook("updated", &record.cause, None, record.serving_ms, None);
            }
            Outcome::Committed if matches!(record.reason, HandoverReason::Migrate | HandoverReason::Failover) => {
                let modules = record.to_modules.clone().unwrap_or_default();
                info!("{dev}: {} moved here from {}, driven by {}; {phases}", self.class.name(),
                      record.from_device.as_deref().unwrap_or("-"), module_names(&modules));
                self.end_template("the front-end moved to another device");
                self.succession.modules = modules.clone();
                self.set_status(|s| s.driver.modules = modules);
                self.hook("moved", &record.cause, None, record.serving_ms, None);
            }
            Outcome::Committed => {
                info!("{dev}: recovered from {}: {phases}", record.cause);
                self.agent.backoff.reset();
                self.hook("recovered", &record.cause, None, record.serving_ms, None);
            }
            Outcome::RolledBack { why } => {
                warn!("{dev}: {} rolled back to {}: {why}; {phases}", record.reason.name(), module_names(&self.succession.modules));
                self.hook("rolled-back", &record.cause, Some(&why), record.serving_ms, None);
            }
            Outcome::Refused { why } => {
                warn!("{dev}: {} refused, nothing changed: {why}", record.reason.name());
                self.end_loader();
                self.hook("refused", &record.cause, Some(&why), None, None);
            }
            Outcome::Failed { why, log, uncompleted, replaceable } => {
                error!("{dev}: handover failed: {why}");
                self.hook("failed", &record.cause, Some(&why), None, None);
                self.answer_update(record);
                // Nobody serves: what follows is a death's, with the handover's log and requests.
                let device_stop = self.last_device_stop();
                let q = Quiesced { uncompleted, device_stop, device_stop_ms: 0.0 };
                self.restart_or_give_up(Reason::Death { cause: why.clone() }, why, Some(log), q, Instant::now(), replaceable);
                return;
            }
        }
        self.answer_update(record);
    }

    /// The CLI waiting for this handover (an update, a move, a parked
    /// interface given a device) hears how it ended.
    fn answer_update(&mut self, record: HandoverRecord) {
        if let Some(answer) = self.succession.update_answer.take() {
            let _ = answer.send(Ok(record));
        }
    }

    /// A handover ends without an outcome (the device is being released).
    pub(super) fn abandon_handover(&mut self, why: &str) {
        self.end_loader();
        self.devices.other = None;
        if let Some(h) = self.succession.handover.take() {
            let mut record = h.record().clone();
            record.outcome = HandoverOutcome::Abandoned(why.to_string());
            self.publish(&record);
            self.answer_update(record);
        }
    }

    /// What the last stop did to the device, as `status` shows it.
    fn last_device_stop(&self) -> DeviceStop {
        self.status.update(|s| s.driver.device_stop.clone()).unwrap_or(DeviceStop {
            bus_master_off: true, irqs_disabled: true, reset: "done".into(), iommu_unmapped: false,
        })
    }

    /// The handover's record replaces its earlier version in `status`; a
    /// first request already timed there is kept.
    fn publish(&self, record: &HandoverRecord) {
        self.set_status(|s| {
            if let Some(last) = records_of(s, record.reason).last_mut() {
                let timed = (last.first_packet_ms, last.downtime_ms);
                *last = record.clone();
                if last.first_packet_ms.is_none() {
                    (last.first_packet_ms, last.downtime_ms) = timed;
                }
            }
        });
    }

    fn publish_handover(&self) {
        if let Some(h) = &self.succession.handover {
            self.publish(h.record());
        }
    }
}

/// Where `status` keeps the records of handovers for this reason.
fn records_of(s: &mut DeviceStatus, reason: HandoverReason) -> &mut Vec<HandoverRecord> {
    match reason {
        HandoverReason::Death | HandoverReason::Requested => &mut s.handovers.recoveries,
        HandoverReason::Update => &mut s.handovers.updates,
        HandoverReason::Migrate | HandoverReason::Failover => &mut s.handovers.migrations,
    }
}

pub(super) fn module_names(modules: &[ModuleInfo]) -> String {
    modules.iter().map(|m| m.path.as_str()).collect::<Vec<_>>().join(", ")
}
