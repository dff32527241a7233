// SPDX-License-Identifier: GPL-2.0
//! What the rest of the daemon holds of a device's thread: how it is
//! started and stopped, its status, and the requests the CLI sends it.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use understudy_api::{CheckReport, DeviceClass, DeviceStatus, EthtoolQueries, EthtoolReport, GateMode, HandoverRecord,
                    ModuleInfo};
use understudy_shm::Geometry;
use understudy_vfio::PciAddress;

use crate::class::net::interface::tap_statistics;
use crate::class::blk::side::BlockSide;
use crate::class::net::side::NetSide;
use crate::class::Class;
use crate::status::SharedStatus;
use super::Supervisor;
use crate::check::CheckLog;
use crate::handover::Driver;
use crate::class::net::ethtool::Answer;
use crate::os::fd;
use crate::os::placement::Placement;
use crate::os::process::DriverCommand;
use crate::handover::policy::AgentPolicy;
use crate::handover::policy::RestartPolicy;
use crate::supervisor::watchdog::Detection;

/// How long a CLI client waits for an ethtool answer; the watchdog ends a
/// silent driver (and so the query) long before this with sane timeouts.
const ETHTOOL_WAIT: Duration = Duration::from_secs(120);
/// How long `understudy update` and `migrate` wait: a load (a move's with a
/// probe), two probes (the successor and a rollback) each within
/// --probe-timeout-ms, the links and the probation.
const UPDATE_WAIT: Duration = Duration::from_secs(300);

pub struct Setup {
    pub device: PciAddress,
    /// Whose side the device's thread runs: the PCI class code's.
    pub class: DeviceClass,
    pub modules: Vec<ModuleInfo>,
    pub ifname: String,
    pub driver: DriverCommand,
    pub placement: Option<Placement>,
    pub geometry: Geometry,
    pub detection: Detection,
    pub restarts: RestartPolicy,
    pub agent: AgentPolicy,
    /// The devices the interface may move to, with their drivers (`run --standby`).
    pub standby: Vec<Driver>,
    /// `run --check`: every driver process runs under a checker with this gate.
    pub check: Option<GateMode>,
    /// The checker executable (`understudyd --checker`).
    pub checker_binary: PathBuf,
    /// `run --no-iommu`: the UIO back-end, DMA unconfined (docs/design.md §4).
    pub no_iommu: bool,
    /// `run --queues`: the TAP's queues for the driver, and its queue pairs.
    pub queues: u16,
}

/// What the CLI asks of a running device's thread.
pub(super) enum Command {
    Ethtool { queries: EthtoolQueries, answer: Answer },
    /// `understudy recover`: restart the driver as if it had died.
    Recover { answer: mpsc::Sender<Result<(), String>> },
    /// `understudy update`: answered when the update is over.
    Update { modules: Vec<ModuleInfo>, allow_feature_loss: bool, answer: UpdateAnswer },
    /// `understudy migrate`: answered when the move is over.
    Migrate { to: PciAddress, modules: Vec<ModuleInfo>, answer: UpdateAnswer },
}

/// Where an update's or a move's outcome goes: its record, or why it was not started.
pub(super) type UpdateAnswer = mpsc::Sender<Result<HandoverRecord, String>>;

/// What the rest of the daemon holds for a device.
pub struct Handle {
    status: SharedStatus,
    /// The interface, whose kernel statistics are the received counts.
    ifname: String,
    /// What a checked device's checkers found.
    check: Option<Arc<Mutex<CheckLog>>>,
    started: Instant,
    stop: OwnedFd,
    requester: Requester,
    thread: Option<JoinHandle<()>>,
}

/// Asks a device's thread things, without holding the daemon's device table.
#[derive(Clone)]
pub struct Requester {
    commands: mpsc::Sender<Command>,
    wake: Arc<OwnedFd>,
}

impl Requester {
    /// The driver's ethtool answers (the device thread asks the driver).
    pub fn ethtool(&self, queries: EthtoolQueries) -> Result<EthtoolReport, String> {
        let (answer, answered) = mpsc::channel();
        self.commands.send(Command::Ethtool { queries, answer }).map_err(|_| "the device's thread has ended".to_string())?;
        fd::signal(self.wake.as_fd());
        answered.recv_timeout(ETHTOOL_WAIT).map_err(|_| "the device's thread did not answer".to_string())?
    }

    /// Ends the driver process and starts a fresh one through the restart
    /// path; returns once the restart has begun (`status` follows it).
    pub fn recover(&self) -> Result<(), String> {
        let (answer, answered) = mpsc::channel();
        self.commands.send(Command::Recover { answer }).map_err(|_| "the device's thread has ended".to_string())?;
        fd::signal(self.wake.as_fd());
        answered.recv_timeout(ETHTOOL_WAIT).map_err(|_| "the device's thread did not answer".to_string())?
    }

    /// Hands the interface to `modules` (live update); returns the update's
    /// record once it is over: updated, rolled back, or refused.
    pub fn update(&self, modules: Vec<ModuleInfo>, allow_feature_loss: bool) -> Result<HandoverRecord, String> {
        let (answer, answered) = mpsc::channel();
        self.handover(Command::Update { modules, allow_feature_loss, answer }, answered)
    }

    /// Moves the interface to the device `to`, driven by `modules`; returns
    /// the move's record once it is over: moved, rolled back, or refused.
    pub fn migrate(&self, to: PciAddress, modules: Vec<ModuleInfo>) -> Result<HandoverRecord, String> {
        let (answer, answered) = mpsc::channel();
        self.handover(Command::Migrate { to, modules, answer }, answered)
    }

    fn handover(&self, command: Command, answered: mpsc::Receiver<Result<HandoverRecord, String>>)
                -> Result<HandoverRecord, String> {
        self.commands.send(command).map_err(|_| "the device's thread has ended".to_string())?;
        fd::signal(self.wake.as_fd());
        answered.recv_timeout(UPDATE_WAIT).map_err(|_| "the device's thread did not answer".to_string())?
    }
}

impl Handle {
    pub fn status(&self) -> DeviceStatus {
        // Read without the lock the device's thread updates the status under.
        let (rx, tx) = (tap_statistics(&self.ifname, "rx"), tap_statistics(&self.ifname, "tx"));
        let mut st = self.status.update(|shared| {
            // Once the interface is gone its last counts stay.
            if let Ok((packets, bytes, dropped)) = rx {
                (shared.net.counters.rx_packets, shared.net.counters.rx_bytes, shared.net.counters.rx_dropped) = (packets, bytes, dropped);
            }
            if let Ok((packets, bytes, _)) = tx {
                (shared.net.counters.tx_packets, shared.net.counters.tx_bytes) = (packets, bytes);
            }
            shared.clone()
        });
        // Dropped: what the driver says it dropped, and what the TAP dropped
        // because the driver did not read it in time.
        if let Ok((_, _, dropped)) = tx {
            st.net.counters.tx_dropped += dropped;
        }
        st.driver.uptime_s = (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
        st.check = self.check.as_ref().map(|log| log.lock().unwrap_or_else(|p| p.into_inner()).status(st.driver.pid));
        st
    }

    /// `check report`: what the device's checkers found, if it is checked.
    pub fn check_report(&self) -> Result<CheckReport, String> {
        let st = self.status();
        let log = self.check.as_ref()
            .ok_or_else(|| format!("{} ({}) is not checked (`understudy run --check MODE` checks it)", st.ifname, st.device))?;
        Ok(log.lock().unwrap_or_else(|p| p.into_inner()).report(st.device, st.ifname, st.driver.pid))
    }

    pub fn requester(&self) -> Requester {
        self.requester.clone()
    }

    /// Ends the driver, releases the device and removes the interface.
    pub fn stop(mut self) {
        fd::signal(self.stop.as_fd());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the device's thread; returns once the device is taken, the
/// interface exists and the driver process runs, or with why not (and then
/// nothing is left behind: every resource is dropped on the way out).
pub fn start(setup: Setup) -> Result<Handle, String> {
    let (tx, rx) = mpsc::channel();
    let name = format!("dev-{}", setup.device);
    let ifname = setup.ifname.clone();
    let thread = std::thread::Builder::new()
        .name(name)
        .spawn(move || match setup.class {
            DeviceClass::Net => serve::<NetSide>(setup, tx),
            DeviceClass::Block => serve::<BlockSide>(setup, tx),
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    match rx.recv() {
        Ok(Ok((status, check, stop, commands, wake))) => {
            let requester = Requester { commands, wake: Arc::new(wake) };
            Ok(Handle { status, ifname, check, started: Instant::now(), stop, requester, thread: Some(thread) })
        }
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => Err("the device thread ended before reporting".into()),
    }
}


/// What a started device's thread reports to `start`.
type Started = Result<(SharedStatus, Option<Arc<Mutex<CheckLog>>>, OwnedFd, mpsc::Sender<Command>, OwnedFd), String>;

/// The device's thread: its class's supervisor, from start to stop.
fn serve<C: Class>(setup: Setup, started: mpsc::Sender<Started>) {
    match Supervisor::<C>::new(setup) {
        Ok(mut s) => {
            let stop = s.stop.try_clone().expect("dup of an eventfd");
            let wake = s.wake.try_clone().expect("dup of an eventfd");
            let check = s.launch.checking.as_ref().map(|c| c.log.clone());
            let _ = started.send(Ok((s.status.clone(), check, stop, s.command_sender.clone(), wake)));
            s.run();
        }
        Err(e) => {
            let _ = started.send(Err(e));
        }
    }
}
