// SPDX-License-Identifier: GPL-2.0
//! The block class's side of a device (`Class`): the disk the kernel sees
//! as `/dev/nbdN` (frontend.rs), the requests' path to the driver
//! (datapath.rs) and the block shadow, which is the disk as its first
//! driver registered it (log.rs).
//!
//! Until the first driver registers its disk there is no datapath, only
//! the memory and eventfds a driver process is given (`Channel`); the
//! first DISK connects `/dev/nbdN` and makes the datapath, which then
//! outlives every driver. A successor's DISK, checked by the handover
//! against the log, changes only what the datapath may ask of it.

use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;

use log::{debug, warn};
use understudy_api::{DeviceStatus, DiskStatus, DriverState, EthtoolQueries};
use understudy_nbd::Export;
use understudy_protocol::{DiskInfo, DriverMessage, Request, DISK_READ_ONLY, DISK_WRITE_CACHE};
use understudy_shm::{BlockMemory, DriverMemory, Geometry, DEFAULT_SLOT_BYTES};

use super::datapath::{Channel, Datapath, Piece};
use super::frontend::{Frontend, Stopped};
use super::log::DiskLog;
use crate::class::net::ethtool::Answer;
use crate::class::{Class, InFlight, Offering, Progress, Said, Shared};
use crate::fault::Fault;
use crate::os::fd;
use crate::status::SharedStatus;

pub struct BlockSide {
    /// Until the first DISK: what a driver is given. Exactly one of
    /// `channel` and `datapath` is there.
    channel: Option<Channel>,
    datapath: Option<Datapath>,
    // Declared after the datapath: the disk is disconnected last.
    frontend: Frontend,
    /// The kernel's ends of the NBD connections, until `/dev/nbdN` is connected.
    kernel_ends: Vec<UnixStream>,
    /// The serving driver's disk (the shadow): from its DISK until it dies.
    registered: Option<DiskLog>,
    /// `nbdN` once connected.
    name: String,
    /// The driver held no request when last looked at (`move_requests`).
    was_idle: bool,
    label: String,
}

impl BlockSide {
    fn shared(&self) -> &dyn Shared {
        match (&self.datapath, &self.channel) {
            (Some(datapath), _) => datapath,
            (None, Some(channel)) => channel,
            (None, None) => unreachable!("the channel becomes the datapath"),
        }
    }

    /// The kernel is told the disk as `log` has it: `/dev/nbdN` is connected.
    fn connect(&mut self, log: &DiskLog) -> Result<(), Fault> {
        let export = Export {
            size_bytes: log.size_bytes(),
            block_size: log.disk.logical_block_size,
            read_only: log.disk.has(DISK_READ_ONLY),
            write_cache: log.disk.has(DISK_WRITE_CACHE),
            trim: log.discards(),
            backend: self.label.clone(),
        };
        let path = self.frontend.connect(&export, std::mem::take(&mut self.kernel_ends))
            .map_err(|e| Fault::Io(format!("cannot give the disk to the kernel's NBD client: {e}")))?;
        self.name = path.trim_start_matches("/dev/").to_string();
        Ok(())
    }

    /// The datapath's answers go to the kernel.
    fn answer(&mut self) {
        if let Some(dp) = self.datapath.as_mut() {
            self.frontend.answer(dp.take_replies());
        }
    }
}

impl Shared for BlockSide {
    fn memory(&self) -> &dyn DriverMemory {
        self.shared().memory()
    }

    fn kick_fd(&self) -> BorrowedFd<'_> {
        self.shared().kick_fd()
    }

    fn notify_fd(&self) -> BorrowedFd<'_> {
        self.shared().notify_fd()
    }

    fn frontend_queues(&self) -> Vec<BorrowedFd<'_>> {
        Vec::new()
    }
}

impl Class for BlockSide {
    type Log = DiskLog;
    type Held = Piece;
    type Scratch = Channel;
    const HELD: &'static str = "request";
    const FRONTEND: &'static str = "disk";
    /// The runtime's template resumes a net_device only: a disk's restarts probe.
    const TEMPLATES: bool = false;

    /// `queues` NBD connections, each feeding hardware queue `conn % n`.
    fn create(_name: &str, queues: u16, geometry: Geometry, unconfined: bool, label: &str) -> Result<Self, String> {
        if unconfined {
            return Err("a disk's driver runs behind an IOMMU only (--no-iommu is for network devices)".into());
        }
        let mem = BlockMemory::create(geometry, DEFAULT_SLOT_BYTES).map_err(|e| e.to_string())?;
        let (frontend, kernel_ends) = Frontend::new(queues, label.to_string())
            .map_err(|e| format!("the NBD connections: {e}"))?;
        Ok(BlockSide { channel: Some(Channel::new(mem)?), datapath: None, frontend, kernel_ends, registered: None,
                       name: "the disk".into(), was_idle: true, label: label.to_string() })
    }

    fn scratch(_label: &str) -> Result<Channel, String> {
        let mem = BlockMemory::create(Geometry::block_default(), DEFAULT_SLOT_BYTES).map_err(|e| format!("scratch memory: {e}"))?;
        Channel::new(mem)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn relabel(&mut self, label: &str) {
        self.label = label.to_string();
        if let Some(dp) = self.datapath.as_mut() {
            dp.relabel(label);
        }
    }

    fn initial_status(&self, status: &mut DeviceStatus) {
        status.disk = Some(DiskStatus::default());
    }

    fn frontend_fds(&self) -> Vec<libc::pollfd> {
        if self.datapath.is_none() {
            return Vec::new();
        }
        self.frontend.poll_fds().into_iter().map(|(_, fd, write)| {
            let mut p = fd::readable(fd);
            if write {
                p.events |= libc::POLLOUT;
            }
            p
        }).collect()
    }

    fn on_frontend(&mut self, revents: &[i16], status: &SharedStatus) -> Result<(), Fault> {
        let Some(dp) = self.datapath.as_mut() else { return Ok(()) };
        let conns: Vec<usize> = self.frontend.poll_fds().into_iter().map(|(conn, _, _)| conn).collect();
        let open = self.frontend.open();
        let mut outcome = Ok(());
        for (&conn, &ready) in conns.iter().zip(revents) {
            if ready & libc::POLLOUT != 0 {
                self.frontend.write(conn);
            }
            if ready & !libc::POLLOUT != 0 && outcome.is_ok() {
                match self.frontend.receive(conn, dp) {
                    Ok(()) => {}
                    // The front-end logged and dropped the connection: the others serve on.
                    Err(Stopped::Connection(e)) => debug!("{}: connection {conn}: {e}", self.label),
                    Err(Stopped::Driver(e)) => outcome = Err(Fault::from(e)),
                }
            }
        }
        if open > 0 && self.frontend.open() == 0 {
            warn!("{}: the kernel closed every NBD connection: /dev/{} is gone (`understudy stop {}` releases the device)",
                  self.label, self.name, self.label);
        }
        self.answer();
        self.show(status);
        outcome
    }

    fn set_gate(&mut self, _serving: bool) {
        // The datapath holds its requests itself from a death until `resubmit`.
    }

    fn move_requests(&mut self, _want_progress: bool, status: &SharedStatus) -> Result<Progress, Fault> {
        let Some(dp) = self.datapath.as_mut() else { return Ok(Progress { progressed: true, passed: None }) };
        // The driver is always asked to signal its next completion.
        let completed = dp.complete();
        let idle = dp.in_flight() == 0;
        self.answer();
        self.show(status);
        let completed = completed?;
        let progressed = completed > 0 || idle || self.was_idle;
        self.was_idle = idle;
        Ok(Progress { progressed, passed: (completed > 0).then(Instant::now) })
    }

    fn owed(&self) -> u32 {
        self.datapath.as_ref().map_or(0, Datapath::in_flight)
    }

    fn kick(&self) {
        fd::signal(self.kick_fd());
    }

    fn log(&self) -> Option<&DiskLog> {
        self.registered.as_ref()
    }

    fn take_log(&mut self) -> Option<DiskLog> {
        self.registered.take()
    }

    /// A registered disk serves I/O: it has no phase an admin opens.
    fn state(&self) -> Option<DriverState> {
        self.registered.as_ref().map(|_| DriverState::Open)
    }

    fn on_message(&mut self, message: DriverMessage, _status: &SharedStatus) -> Result<Said<DiskInfo>, Fault> {
        match message {
            DriverMessage::Disk(d) => Ok(Said::Registered(d)),
            // A block device's driver that registers a net_device is not the driver it claimed to be.
            DriverMessage::Registered(r) => {
                Err(Fault::Violation(format!("a block device's driver registered a net_device ({})", r.driver)))
            }
            other => Err(Fault::Violation(format!("a block device's driver sent {other:?}"))),
        }
    }

    fn probed(message: DriverMessage) -> Result<Option<DiskInfo>, DriverMessage> {
        match message {
            DriverMessage::Disk(d) => Ok(Some(d)),
            other => Err(other),
        }
    }

    fn take_registration(&mut self, disk: &DiskInfo) -> Result<(), Fault> {
        let slot_bytes = self.channel.as_ref().expect("the channel until the first DISK").slot_bytes();
        self.connect(&DiskLog::new(disk.clone(), slot_bytes))
    }

    fn adopt(&mut self, disk: DiskInfo, status: &SharedStatus) {
        match self.datapath.as_mut() {
            Some(dp) => dp.served_by(&disk),
            None => {
                let channel = self.channel.take().expect("the channel until the first DISK");
                let log = DiskLog::new(disk, channel.slot_bytes());
                self.datapath = Some(Datapath::new(channel, log, self.label.clone()));
            }
        }
        // The shadow is the disk as the kernel was told it, whoever serves it now.
        self.registered = self.datapath.as_ref().map(|dp| dp.log().clone());
        let name = self.name.clone();
        status.update(|s| s.ifname = name);
        self.show(status);
    }

    fn replayed(&mut self, _request: &Request, _log: &DiskLog) {}

    /// A disk has no settings of the admin's to bring the driver to.
    fn next_config(&mut self) -> Option<Request> {
        None
    }

    fn config_answered(&mut self, _status: i32, _shared: &SharedStatus) {}

    fn show(&self, status: &SharedStatus) {
        let Some(dp) = self.datapath.as_ref() else { return };
        let log = dp.log();
        let (kept_changes, kept_bytes) = dp.kept();
        let disk = DiskStatus {
            path: Some(format!("/dev/{}", self.name)),
            driver_name: Some(log.disk.driver.clone()),
            disk_name: Some(log.disk.disk_name.clone()),
            size_bytes: log.size_bytes(),
            logical_block_size: log.disk.logical_block_size,
            features: log.disk.feature_names(),
            queues: dp.queues(),
            counts: dp.counts(),
            kept_changes: kept_changes as u64,
            kept_bytes,
            unanswered: dp.unanswered() as u64,
        };
        status.update(|s| s.disk = Some(disk));
    }

    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    fn on_timers(&mut self, _now: Instant, _status: &SharedStatus) -> Result<bool, Fault> {
        Ok(false)
    }

    // The kernel waits for its answers by itself: there is nothing to hold.
    fn hold(&mut self, _now: Instant) {}

    fn drop_hold(&mut self) {}

    fn wait_for_ready(&mut self) {}

    fn quiesce(&mut self, _label: &str) -> (Vec<Piece>, Option<Instant>) {
        let held = self.datapath.as_mut().map(Datapath::reclaim).unwrap_or_default();
        self.was_idle = true;
        (held, None)
    }

    fn resubmit(&mut self, held: Vec<Piece>, status: &SharedStatus) -> Result<u32, Fault> {
        let Some(dp) = self.datapath.as_mut() else { return Ok(0) };
        let resubmitted = dp.resubmit(held);
        self.answer();
        self.show(status);
        Ok(resubmitted?)
    }

    fn give_up(&mut self, held: Vec<Piece>, status: &SharedStatus) {
        if let Some(dp) = self.datapath.as_mut() {
            dp.give_up(held);
        }
        self.answer();
        self.show(status);
    }

    fn announce(&mut self, _label: &str) -> Option<u32> {
        None
    }

    fn queue_query(&mut self, _queries: EthtoolQueries, answer: Answer) {
        let _ = answer.send(Err(format!("{}: a disk has no ethtool settings (`understudy ethtool` asks network drivers)",
                                        self.label)));
    }

    fn refuse_queries(&mut self, _why: &str) {}

    fn next_query(&mut self, _label: &str) -> Vec<Request> {
        Vec::new()
    }

    fn query_answered(&mut self, request: &Request, _status: i32, _data: &[u8], _label: &str) -> Result<Vec<Request>, Fault> {
        Err(Fault::Violation(format!("a reply to {}, which a disk's driver is never asked", request.name())))
    }
}
