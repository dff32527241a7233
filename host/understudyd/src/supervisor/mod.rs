// SPDX-License-Identifier: GPL-2.0
//! One device and the driver process serving it: the daemon's per-device
//! thread, which carries out what the handover (handover/) decides.
//!
//! Its state is in parts, each in a file of its own or in the rooms beside
//! this one: the device through VFIO (os/device.rs); the class's side
//! (`Class`: the network class's is class/net/side.rs) with the front-end
//! applications use, the requests' path and the shadow; the driver process it talks to (link.rs) and whether it is alive
//! (watchdog.rs). The handover's verbs -- restart, fail over, park, attach,
//! update, migrate -- are side by side in verbs.rs; succession.rs carries
//! out the actions of the handover under way, with the successor that loads
//! while its predecessor serves (successor.rs), the post-probe template
//! restarts fork from (template.rs), the standbys (standby.rs) and what a
//! move between devices adds (moves.rs); the recovery agent (agent.rs)
//! chooses the verb after a death. A checked device's checkers
//! (docs/checking.md) are started and ended with its driver processes
//! (link.rs, check/). This file is the event loop that ties them: it polls,
//! hands the driver's messages to control.rs and the CLI's commands to
//! commands.rs, and turns the admin's changes of the front-end into
//! requests to the driver (the class's shadow).

mod agent;
mod commands;
mod control;
mod handle;
mod link;
mod moves;
mod ratelimit;
pub mod standby;
mod succession;
mod successor;
mod template;
mod verbs;
pub mod watchdog;

pub use handle::{start, Handle, Requester, Setup};

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::mpsc;
use std::time::Instant;

use log::{error, info, warn};
use understudy_api::{DeviceStatus, DmaStatus, DriverState, DriverStatus, HandoverHistory, ModuleInfo, NetStatus};
use understudy_protocol::Request;
use understudy_vfio::uio::Uio;
use understudy_vfio::{Device, PciAddress};

use crate::check::Checking;
use crate::class::{Class, Log, Progress};
use crate::fault::Fault;
use crate::handover::Event;
use crate::os::device;
use crate::os::fd;
use crate::os::interrupts::InterruptRouting;
use crate::status::SharedStatus;

use agent::RecoveryAgent;
use handle::{Command, UpdateAnswer};
use link::{DriverLink, Launch};
use moves::{declare_standbys, open_device};
use ratelimit::TokenBucket;
use standby::Standbys;
use succession::Succession;

/// Driver LOG lines: a burst of 20, then 10 a second (printk_ratelimit allows 10 per 5 s;
/// a probe legitimately prints a dozen lines at once).
const LOG_BURST: u32 = 20;
const LOG_PER_SECOND: u32 = 10;

/// Why a request was sent, so its reply goes to the right place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// LOAD: an update's successor checks its modules (succession.rs).
    Load,
    /// HELLO and PROBE: a refusal ends the driver.
    Startup,
    /// From the class's shadow (`Class::next_config`).
    Config,
    Heartbeat,
    /// The CLI's queries of the driver (`Class::next_query`).
    Query,
    /// The passive log, given to a successor (handover/).
    Replay,
}

struct Supervisor<C: Class> {
    // Declared in teardown order: the driver goes first, the front-end last.
    /// The driver process serving (or becoming the successor), if any.
    link: Option<DriverLink>,
    succession: Succession<C>,
    agent: RecoveryAgent<C::Log>,
    devices: device::Devices,
    /// Where the front-end may move: declared standbys and the device it left.
    standbys: Standbys<Device, <C::Log as Log>::Offer>,
    /// The class's side: its front-end, requests and shadow.
    class: C,
    stop: OwnedFd,
    wake: OwnedFd,
    commands: mpsc::Receiver<Command>,
    command_sender: mpsc::Sender<Command>,
    status: SharedStatus,
    log_limit: TokenBucket,
    launch: Launch,
    /// With a placement, the serving device's interrupts go to the driver's CPU.
    interrupts: Option<InterruptRouting>,
}

impl<C: Class> Supervisor<C> {
    fn new(setup: Setup) -> Result<Self, String> {
        let label = setup.device.to_string();
        let g = setup.geometry;
        let (mut vfio, class) = if setup.no_iommu {
            // Hugepages are checked before the device is bound, so that a refusal leaves it as it was.
            let uio = Uio::open(&setup.device, g.arena_size.div_ceil(understudy_shm::CHUNK)).map_err(|e| e.to_string())?;
            let class = C::create(&setup.ifname, setup.queues, g, true, &label)?;
            warn!("{label}: no IOMMU: bound to uio_pci_generic, the device's DMA is UNCONFINED (it can reach all memory); \
                   what the daemon sends is copied into its arena");
            (Device::Uio(uio), class)
        } else {
            (open_device(&setup.device).map_err(|e| e.to_string())?, C::create(&setup.ifname, setup.queues, g, false, &label)?)
        };
        device::map_arena(&mut vfio, class.memory()).map_err(|e| e.to_string())?;
        let launch = Launch {
            checking: setup.check.map(|mode| Checking::new(&label, mode, setup.checker_binary, setup.placement)),
            driver: setup.driver,
            placement: setup.placement,
            detection: setup.detection,
        };
        let spawn = launch.spawn();
        let standbys = declare_standbys::<C>(&spawn, setup.standby, class.memory())?;
        let (stop, wake) = (fd::eventfd().map_err(|e| e.to_string())?, fd::eventfd().map_err(|e| e.to_string())?);
        if let Some(p) = &setup.placement {
            p.place_daemon_thread().map_err(|e| format!("cannot keep the device's thread off CPU {}: {e}", p.cpu))?;
        }
        let now = Instant::now();
        let spawned = link::spawn(&spawn, &vfio, &class, &setup.modules)?;
        let pid = spawned.process.pid;
        let link = DriverLink::new(spawned, setup.detection, now)?;
        let dma = match vfio.iommu_group() {
            Some(group) => format!("IOMMU group {group}, arena {} MiB at IOVA {:#x} in {}", g.arena_size >> 20, g.arena_iova,
                                   if class.memory().arena().in_hugepages() { "2 MiB hugepages" } else {
                                       "base pages (no free 2 MiB hugepages: docs/design.md §4, \"The arena's pages\")" }),
            None => format!("DMA unconfined, arena {} MiB in hugepages at physical {:#x}..", g.arena_size >> 20,
                            class.memory().bus_chunks().first().copied().unwrap_or(0)),
        };
        info!("{label}: driver process {pid} started ({}), {} {}, {dma}",
              launch.driver.binary.display(), C::FRONTEND, setup.ifname);
        let mut status = DeviceStatus {
            device: label,
            class: C::Log::CLASS,
            ifname: setup.ifname.clone(),
            dma: DmaStatus {
                iommu_group: vfio.iommu_group().unwrap_or(0),
                dma_unconfined: vfio.iommu_group().is_none(),
                arena_in_hugepages: class.memory().arena().in_hugepages(),
            },
            driver: DriverStatus {
                modules: setup.modules.clone(),
                driver_binary: launch.driver.binary.display().to_string(),
                pid: Some(pid as u32),
                cpu: setup.placement.map(|p| p.cpu),
                poll_us: setup.placement.and_then(|p| p.poll_us),
                state: DriverState::Starting,
                death: None,
                device_stop: None,
                uptime_s: 0.0,
                template_pid: None,
                log_lines_suppressed: 0,
                warnings: 0,
            },
            net: NetStatus::default(),
            handovers: HandoverHistory {
                recoveries: Vec::new(),
                recovery_count: 0,
                updates: Vec::new(),
                migrations: Vec::new(),
                standby: standbys.status(),
            },
            disk: None,
            // Handle::status reads it from the checking's log.
            check: None,
        };
        class.initial_status(&mut status);
        let (command_sender, commands) = mpsc::channel();
        let mut s = Supervisor {
            link: Some(link),
            // A template's forks would share its trace region: a checked device has none.
            succession: Succession::new(setup.modules, C::TEMPLATES && setup.restarts.template && launch.checking.is_none()),
            agent: RecoveryAgent::new(setup.restarts, setup.agent),
            devices: device::Devices::new(vfio),
            standbys,
            class,
            stop,
            wake,
            commands,
            command_sender,
            status: SharedStatus::new(status),
            log_limit: TokenBucket::new(LOG_BURST, LOG_PER_SECOND, now),
            interrupts: setup.placement.map(|p| InterruptRouting::to_cpu(p.cpu)),
            launch,
        };
        let modules = s.succession.modules.clone();
        if let Err(e) = s.send_startup(&modules, true) {
            s.end_driver(&format!("could not send its first requests: {}", e.describe()), false);
            return Err("the driver process did not take its first requests".into());
        }
        Ok(s)
    }

    fn label(&self) -> &PciAddress {
        self.devices.address()
    }

    /// LOAD (unless `load` is false: the process did already), HELLO and
    /// PROBE: the driver process loads and checks the modules against the
    /// device's ids without touching the device (a refusal names every
    /// import the runtime lacks), maps the shared memory and probes the device.
    fn send_startup(&mut self, modules: &[ModuleInfo], load: bool) -> Result<(), Fault> {
        let paths: Vec<String> = modules.iter().map(|m| m.path.clone()).collect();
        if load {
            let ids = device::pci_ids(self.devices.address())
                .map_err(|e| Fault::Io(format!("cannot read the device's PCI ids: {e}")))?;
            self.send(Request::Load { modules: paths.clone(), ids }, Purpose::Startup)?;
        }
        self.send(Request::Hello(self.class.memory().hello()), Purpose::Startup)?;
        self.send(Request::Probe { pci_address: self.devices.address().to_string(), modules: paths }, Purpose::Startup)
    }

    fn set_status(&self, f: impl FnOnce(&mut DeviceStatus)) {
        self.status.update(f);
    }

    /// A request to the serving driver.
    fn send(&mut self, request: Request, purpose: Purpose) -> Result<(), Fault> {
        match self.link.as_mut() {
            Some(link) => link.send(request, purpose),
            None => Err(Fault::Closed),
        }
    }

    fn run(&mut self) {
        loop {
            // While a successor starts, replays and waits for its link, the
            // front-end's requests wait: the predecessor's go first.
            let replaying = self.succession.holds_requests();
            self.class.set_gate(self.link.is_some() && !replaying);
            let mut fds = vec![fd::readable(self.stop.as_fd()), fd::readable(self.wake.as_fd())];
            let frontend_at = fds.len();
            fds.extend(self.class.frontend_fds());
            // The kernel's requests for devices back: the serving one's, then the standbys'.
            let removal_at = fds.len();
            let watched: Vec<(PciAddress, BorrowedFd)> = self.devices.serving().map(|v| (v.address(), v)).into_iter()
                .chain(self.standbys.held())
                .filter_map(|(a, v)| v.removal_fd().map(|fd| (a.clone(), fd)))
                .collect();
            fds.extend(watched.iter().map(|(_, fd)| fd::readable(*fd)));
            let succession_at = fds.len();
            fds.extend(self.succession.poll_fds().into_iter().map(fd::readable));
            let driver_at = fds.len();
            if let Some(link) = &self.link {
                fds.push(fd::readable(link.pidfd()));
                fds.push(fd::readable(link.control()));
                fds.push(fd::readable(self.class.notify_fd()));
                // poll(2) skips a negative fd: an unchecked driver has no checker.
                fds.push(link.checker_fd().map_or(libc::pollfd { fd: -1, events: 0, revents: 0 }, fd::readable));
            }
            let timeout = self.poll_timeout(Instant::now());
            // SAFETY: fds is a valid array of pollfd.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                error!("{}: poll failed: {e}", self.label());
                return;
            }
            let ready = |i: usize| fds.get(i).is_some_and(|p| p.revents != 0);
            let removed: Vec<PciAddress> = (removal_at..succession_at).filter(|&i| ready(i))
                .map(|i| watched[i - removal_at].0.clone()).collect();
            drop(watched);
            for device in removed {
                self.removal_requested(&device);
            }
            let succession_ready: Vec<bool> = (succession_at..driver_at).map(ready).collect();
            self.on_succession_fds(&succession_ready);
            if ready(0) {
                self.shut_down();
                return;
            }
            if ready(1) {
                fd::drain(self.wake.as_fd());
            }
            let frontend: Vec<i16> = fds[frontend_at..removal_at].iter().map(|p| p.revents).collect();
            let mut outcome = self.class.on_frontend(&frontend, &self.status);
            if outcome.is_ok() {
                outcome = self.take_commands();
            }
            if self.link.is_none() {
                self.retry_if_due(Instant::now());
                continue;
            }
            let (exited, control, notify, checker) = (driver_at, driver_at + 1, driver_at + 2, driver_at + 3);
            if ready(exited) {
                self.driver_exited();
                continue;
            }
            // The checker first: a driver it no longer approves is ended before it is heard.
            if outcome.is_ok() && ready(checker) {
                outcome = self.link.as_mut().expect("a driver").read_checker();
            }
            if outcome.is_ok() && ready(control) {
                outcome = self.handle_control();
            }
            if outcome.is_ok() && ready(notify) {
                fd::drain(self.class.notify_fd());
                outcome = self.move_requests();
            }
            if outcome.is_ok() {
                outcome = self.on_timers(Instant::now());
            }
            if outcome.is_ok() {
                outcome = self.reconcile();
            }
            if let Err(fault) = outcome {
                if matches!(fault, Fault::Closed) && self.link.as_ref().is_some_and(|l| l.exits_by_itself()) {
                    self.driver_exited();
                    continue;
                }
                if matches!(fault, Fault::RecoverRequested) {
                    self.succession.recover_requested = true;
                }
                let why = fault.describe();
                self.end_driver(&why, true);
            }
            if self.succession.device_removed && self.link.is_none() && !self.succession.under_way() {
                error!("{}: the device is being removed and no standby took {}: it is released and {} removed",
                       self.label(), self.class.name(), self.class.name());
                self.shut_down();
                let death = format!("its device was removed and no standby could take the {}", C::FRONTEND);
                self.set_status(|s| {
                    s.driver.state = DriverState::Stopped;
                    s.driver.death = Some(death);
                });
                return;
            }
        }
    }


    /// The serving driver's process ended by itself (a checked one's cause
    /// may be its checker's verdict: link.rs, `reap`).
    fn driver_exited(&mut self) {
        let link = self.link.take().expect("a driver");
        let cause = link.reap();
        self.after_death(cause, true);
    }

    /// Milliseconds until the next deadline, PING, class timer or log report.
    fn poll_timeout(&self, now: Instant) -> libc::c_int {
        let mut next = self.log_limit.next_report();
        let mut earliest = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        let retry = self.agent.retry.as_ref().map(|r| r.at);
        for t in [self.succession.probation_until(), retry, self.succession.loader_deadline()].into_iter().flatten() {
            earliest(t);
        }
        if let Some(link) = &self.link {
            earliest(link.watchdog.next_event());
            if let Some(t) = self.class.next_deadline() {
                earliest(t);
            }
            if self.class.owed() > 0 {
                earliest(link.tx_progress.deadline(self.launch.detection.tx));
            }
        }
        match next {
            // Rounded up: waking a millisecond early would only loop.
            Some(t) => t.saturating_duration_since(now).as_micros().div_ceil(1000).min(60_000) as libc::c_int,
            None => -1,
        }
    }

    fn on_timers(&mut self, now: Instant) -> Result<(), Fault> {
        let link = self.link.as_mut().expect("timers run for a driver");
        link.observe_checker(now);
        if let Some(hung) = link.watchdog.overdue(now) {
            return Err(link.hung(hung, now));
        }
        let tx_timeout = self.launch.detection.tx;
        if link.tx_progress.overdue(now, self.class.owed(), C::HELD, tx_timeout).is_some() {
            // Completions wake the daemon only when it asked for them: reap before judging.
            self.move_requests()?;
            let link = self.link.as_mut().expect("timers run for a driver");
            if let Some(hung) = link.tx_progress.overdue(now, self.class.owed(), C::HELD, tx_timeout) {
                return Err(link.hung(hung, now));
            }
        }
        if self.link.as_ref().is_some_and(|l| l.watchdog.ping_due(now)) {
            self.send(Request::Ping, Purpose::Heartbeat)?;
        }
        if self.class.on_timers(now, &self.status)? {
            self.feed(Event::ReadyWaitOver)?;
        }
        if self.succession.probation_over(now) {
            self.feed(Event::ProbationOver)?;
        }
        self.report_suppressed_logs(now, false);
        Ok(())
    }

    fn report_suppressed_logs(&mut self, now: Instant, force: bool) {
        if let Some(n) = self.log_limit.take_suppressed(now, force) {
            warn!("{}: {n} driver log line(s) dropped by the rate limit ({LOG_BURST} at once, {LOG_PER_SECOND}/s)",
                  self.label());
            self.set_status(|s| s.driver.log_lines_suppressed += n);
        }
    }

    /// Sends the next request that brings the driver to the TAP's
    /// configuration, or undoes on the TAP what the driver cannot have.
    fn reconcile(&mut self) -> Result<(), Fault> {
        // A handover's replay follows the log, not the TAP; the TAP's own
        // changes meanwhile are reconciled after it. Nor is a driver
        // configured before PROBE is answered: an opened driver cannot
        // become a template.
        let starting = self.link.as_ref().is_none_or(|l| l.starting());
        if starting || self.succession.holds_configuration() {
            return Ok(());
        }
        let Some(request) = self.class.next_config() else { return Ok(()) };
        info!("{}: {}: asking the driver for {}", self.label(), self.class.name(), request.describe());
        self.send(request, Purpose::Config)
    }

    /// The driver's progress with its requests (the class's path), and
    /// what it says: the first request through a successor, the hang clock.
    fn move_requests(&mut self) -> Result<(), Fault> {
        // A handover wants the first request through its successor as soon as it passes.
        let want_progress = self.succession.awaits_first_request();
        let Progress { progressed, passed } = self.class.move_requests(want_progress, &self.status)?;
        if progressed {
            if let Some(link) = self.link.as_mut() {
                link.tx_progress.progressed(Instant::now());
            }
        }
        if let Some(passed) = passed {
            self.request_passed(passed);
        }
        Ok(())
    }

    fn shut_down(&mut self) {
        self.abandon_handover("the device was stopped by request");
        if self.link.is_some() {
            self.end_driver("stopped by request", false);
        }
        self.end_template("stopped by request");
        info!("{}: released; {} {} removed", self.label(), C::FRONTEND, self.class.name());
    }
}

impl<C: Class> Drop for Supervisor<C> {
    fn drop(&mut self) {
        // A driver must never outlive the device it was given.
        if let Some(link) = self.link.take() {
            link.end();
        }
        self.succession.end_processes();
    }
}

/// A kernel log record of the driver (printk level `level`), if the rate limit admits it.
fn driver_log(limit: &mut TokenBucket, dev: &PciAddress, level: u32, text: &str) {
    if !limit.admit(Instant::now()) {
        return;
    }
    match level {
        0..=3 => error!("{dev}: driver: {text}"),
        4 => warn!("{dev}: driver: {text}"),
        _ => info!("{dev}: driver: {text}"),
    }
}
