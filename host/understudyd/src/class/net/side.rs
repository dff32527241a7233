// SPDX-License-Identifier: GPL-2.0
//! The network class's side of a device (`Class`): the TAP interface
//! applications use, the frames' path to the driver, the net shadow, and
//! the `understudy ethtool` queries.

use std::collections::VecDeque;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use log::{info, warn};
use understudy_api::{Counters, DeviceStatus, DriverState, EthtoolQueries, NetStatus};
use understudy_protocol::{format_mac, DriverMessage, RegisteredInfo, Request};
use understudy_shm::{DriverMemory, Geometry, SharedMemory, TxFrame};

use super::datapath::Datapath;
use super::ethtool::{Answer, EthtoolJob, Progress as QueryProgress};
use super::interface::{Interface, CARRIER_HOLD};
use super::shadow::{offload_names, Action, NetShadow, PassiveLog, Phase};
use crate::class::{Class, InFlight, Offering, Progress, Said, Shared};
use crate::fault::Fault;
use crate::os::fd;
use crate::status::SharedStatus;

pub struct NetSide {
    /// The driver's net_device, from REGISTERED until the driver dies.
    shadow: Option<NetShadow>,
    // Declared in teardown order: the interface goes last.
    datapath: Datapath,
    interface: Interface,
    /// The query the driver is answering, and those that wait for it.
    ethtool: Option<EthtoolJob>,
    ethtool_queue: VecDeque<(EthtoolQueries, Answer)>,
}

impl NetSide {
    fn set_carrier(&mut self, on: bool, status: &SharedStatus) -> Result<(), Fault> {
        self.interface.tap.set_carrier(on).map_err(|e| Fault::Io(e.to_string()))?;
        status.update(|s| s.net.carrier = on);
        Ok(())
    }

    fn open(&self) -> bool {
        self.shadow.as_ref().is_some_and(|s| s.phase() == Phase::Open)
    }

    fn carrier(&self) -> bool {
        self.shadow.as_ref().is_some_and(|s| s.log().carrier)
    }
}

impl Shared for Datapath {
    fn memory(&self) -> &dyn DriverMemory {
        &self.shm
    }

    fn kick_fd(&self) -> BorrowedFd<'_> {
        Datapath::kick_fd(self)
    }

    fn notify_fd(&self) -> BorrowedFd<'_> {
        Datapath::notify_fd(self)
    }

    fn frontend_queues(&self) -> Vec<BorrowedFd<'_>> {
        self.tap_queues()
    }
}

impl Shared for NetSide {
    fn memory(&self) -> &dyn DriverMemory {
        &self.datapath.shm
    }

    fn kick_fd(&self) -> BorrowedFd<'_> {
        self.datapath.kick_fd()
    }

    fn notify_fd(&self) -> BorrowedFd<'_> {
        self.datapath.notify_fd()
    }

    fn frontend_queues(&self) -> Vec<BorrowedFd<'_>> {
        self.datapath.tap_queues()
    }
}

impl Offering for RegisteredInfo {
    /// Every driver must take the offloads the TAP leaves to it, and every
    /// MTU the interface allows.
    fn narrow(&self, common: Option<&Self>) -> Self {
        let Some(common) = common else { return self.clone() };
        RegisteredInfo {
            offloads: common.offloads & self.offloads,
            min_mtu: common.min_mtu.max(self.min_mtu),
            max_mtu: common.max_mtu.min(self.max_mtu),
            ..common.clone()
        }
    }

    fn within(self, common: &Self) -> Self {
        RegisteredInfo { offloads: self.offloads & common.offloads, min_mtu: common.min_mtu, max_mtu: common.max_mtu, ..self }
    }

    fn feature_names(&self) -> Vec<String> {
        offload_names(self.offloads)
    }

    fn describe(&self) -> String {
        format!("{} {} registered its net_device: MAC {}, MTU {} ({}..{}), features {:#x}, offloads {}",
                self.driver, self.version, format_mac(&self.dev_addr), self.mtu, self.min_mtu, self.max_mtu,
                self.features, offload_names(self.offloads).join(", "))
    }
}

impl Class for NetSide {
    type Log = PassiveLog;
    type Held = TxFrame;
    type Scratch = Datapath;
    const HELD: &'static str = "frame";
    const FRONTEND: &'static str = "interface";
    const TEMPLATES: bool = true;

    fn create(name: &str, queues: u16, geometry: Geometry, unconfined: bool, label: &str) -> Result<Self, String> {
        let shm = match unconfined {
            true => SharedMemory::create_unconfined(geometry).map_err(|e| format!("the DMA arena in hugepages: {e}"))?,
            false => SharedMemory::create(geometry).map_err(|e| e.to_string())?,
        };
        let mut interface = Interface::create(name, queues, label.to_string())?;
        let datapath = Datapath::new(shm, interface.tap.take_driver_queues(), label.to_string())?;
        Ok(NetSide { shadow: None, datapath, interface, ethtool: None, ethtool_queue: VecDeque::new() })
    }

    fn scratch(label: &str) -> Result<Datapath, String> {
        let shm = SharedMemory::create(Geometry::default()).map_err(|e| format!("scratch memory: {e}"))?;
        Datapath::new(shm, Vec::new(), label.to_string())
    }

    fn name(&self) -> &str {
        self.interface.name()
    }

    fn relabel(&mut self, label: &str) {
        self.interface.label = label.to_string();
        self.datapath.label = label.to_string();
    }

    fn initial_status(&self, status: &mut DeviceStatus) {
        let g = self.datapath.shm.geometry();
        status.net = NetStatus {
            carrier: false,
            mac: None,
            mtu: None,
            driver_name: None,
            features: None,
            hw_features: None,
            offloads: Vec::new(),
            min_mtu: None,
            max_mtu: None,
            counters: Counters::default(),
            pool_buffers: g.pool_buffers,
            pool_free: self.datapath.shm.free_count(),
            queues: self.interface.queues(),
        };
    }

    fn frontend_fds(&self) -> Vec<libc::pollfd> {
        vec![fd::readable(self.interface.netlink_fd())]
    }

    fn on_frontend(&mut self, revents: &[i16], _status: &SharedStatus) -> Result<(), Fault> {
        if revents.first().is_some_and(|&r| r != 0) {
            self.interface.read_link_changes();
        }
        Ok(())
    }

    fn set_gate(&mut self, serving: bool) {
        let open = self.open();
        self.datapath.set_gate(serving && open);
    }

    fn move_requests(&mut self, want_progress: bool, status: &SharedStatus) -> Result<Progress, Fault> {
        let moved = self.datapath.move_frames(want_progress)?;
        let pool_free = self.datapath.shm.free_count();
        status.update(|s| {
            s.net.pool_free = pool_free;
            s.net.counters.tx_dropped += moved.dropped;
        });
        // A frame went through the driver: one it sent (a dropped one is not:
        // a driver without link drops them). Received frames go straight to
        // the TAP, unseen (docs/protocol.md, "Receiving").
        Ok(Progress { progressed: moved.progressed, passed: moved.last_sent })
    }

    /// A driver without carrier owes no progress: it may hold frames it cannot send.
    fn owed(&self) -> u32 {
        if self.carrier() { self.datapath.tx_held() } else { 0 }
    }

    fn kick(&self) {
        self.datapath.kick();
    }

    fn log(&self) -> Option<&PassiveLog> {
        self.shadow.as_ref().map(NetShadow::log)
    }

    fn take_log(&mut self) -> Option<PassiveLog> {
        self.shadow.take().map(|s| s.log().clone())
    }

    fn state(&self) -> Option<DriverState> {
        self.shadow.as_ref().map(|s| state_of(s.phase()))
    }

    fn on_message(&mut self, message: DriverMessage, status: &SharedStatus) -> Result<Said<RegisteredInfo>, Fault> {
        let dev = self.interface.label.clone();
        match message {
            DriverMessage::Registered(r) => Ok(Said::Registered(r)),
            DriverMessage::Carrier(on) => {
                if let Some(shadow) = self.shadow.as_mut() {
                    shadow.set_carrier(on);
                }
                if self.interface.carrier_held_until.is_some() {
                    info!("{dev}: handover: the successor's carrier is {}", if on { "on" } else { "off" });
                    if !(on && self.open()) {
                        return Ok(Said::Ready(on));
                    }
                    // The hold is over. The TAP held the predecessor's carrier,
                    // which was off if the interface was down when it died.
                    self.interface.carrier_held_until = None;
                } else {
                    info!("{dev}: carrier {}", if on { "on" } else { "off" });
                }
                self.set_carrier(on, status)?;
                Ok(Said::Ready(on))
            }
            // A network device's driver that registers a disk is not the driver it claimed to be.
            DriverMessage::Disk(d) => {
                Err(Fault::Violation(format!("a network device's driver registered a disk ({} {})", d.driver, d.disk_name)))
            }
            other => Err(Fault::Violation(format!("unexpected {other:?}"))),
        }
    }

    fn probed(message: DriverMessage) -> Result<Option<RegisteredInfo>, DriverMessage> {
        match message {
            DriverMessage::Registered(r) => Ok(Some(r)),
            // A prober may say its carrier: nobody serves on scratch memory.
            DriverMessage::Carrier(_) => Ok(None),
            other => Err(other),
        }
    }

    fn take_registration(&mut self, r: &RegisteredInfo) -> Result<(), Fault> {
        self.interface.take_registration(r).map_err(|e| Fault::Io(e.to_string()))
    }

    /// The TAP keeps the settings in force (a successor is given them by the replay).
    fn adopt(&mut self, r: RegisteredInfo, status: &SharedStatus) {
        let offloads = self.datapath.set_offloads(&self.interface.tap, r.offloads);
        status.update(|s| {
            s.net.mac.get_or_insert_with(|| format_mac(&r.dev_addr));
            s.net.mtu.get_or_insert(r.mtu);
            s.net.min_mtu = Some(r.min_mtu);
            s.net.max_mtu = Some(r.max_mtu);
            s.net.features = Some(r.features);
            s.net.hw_features = Some(r.hw_features);
            s.net.driver_name = Some(r.driver.clone());
            s.net.offloads = offloads;
        });
        self.shadow = Some(NetShadow::registered(r));
    }

    fn replayed(&mut self, request: &Request, log: &PassiveLog) {
        self.shadow.as_mut().expect("replay follows REGISTERED").replayed(request, log);
    }

    /// Sends the next request that brings the driver to the TAP's
    /// configuration, after undoing on the TAP what the driver cannot have.
    fn next_config(&mut self) -> Option<Request> {
        loop {
            let shadow = self.shadow.as_mut()?;
            let tap = self.interface.config(shadow)?;
            match shadow.next(&tap)? {
                Action::Send(request) => return Some(request),
                Action::Undo(undo) => self.interface.undo(undo),
            }
        }
    }

    fn config_answered(&mut self, status: i32, shared: &SharedStatus) {
        if let Some(undo) = self.shadow.as_mut().and_then(|s| s.answered(status)) {
            self.interface.undo(undo);
        }
        self.show(shared);
    }

    /// The shadow's state, MTU and MAC.
    fn show(&self, status: &SharedStatus) {
        let Some(shadow) = self.shadow.as_ref() else { return };
        let (state, mtu, mac) = (state_of(shadow.phase()), shadow.mtu(), format_mac(&shadow.mac()));
        status.update(|s| {
            s.driver.state = state;
            s.net.mtu = Some(mtu);
            s.net.mac = Some(mac);
        });
    }

    fn next_deadline(&self) -> Option<Instant> {
        let multicast = self.shadow.is_some().then(|| self.interface.next_multicast_poll());
        [multicast, self.interface.carrier_held_until].into_iter().flatten().min()
    }

    /// The successor's link has not come up within the carrier hold: the
    /// TAP stops pretending and shows the driver's carrier.
    fn on_timers(&mut self, now: Instant, status: &SharedStatus) -> Result<bool, Fault> {
        let hold_over = self.interface.carrier_held_until.is_some_and(|t| now >= t);
        if hold_over {
            self.interface.carrier_held_until = None;
            let on = self.carrier();
            warn!("{}: handover: the successor's link is not up after {} s; {} shows its carrier ({})",
                  self.interface.label, CARRIER_HOLD.as_secs(), self.name(), if on { "on" } else { "off" });
            self.set_carrier(on, status)?;
        }
        if self.shadow.is_some() {
            self.interface.poll_multicast(now);
        }
        Ok(hold_over)
    }

    fn hold(&mut self, now: Instant) {
        self.interface.hold_carrier(now);
    }

    fn drop_hold(&mut self) {
        self.interface.carrier_held_until = None;
    }

    fn wait_for_ready(&mut self) {
        info!("{}: handover: the successor has its predecessor's settings; its frames wait for its link",
              self.interface.label);
        if self.interface.carrier_held_until.is_none() {
            self.interface.hold_carrier(Instant::now());
        }
    }

    fn quiesce(&mut self, label: &str) -> (Vec<TxFrame>, Option<Instant>) {
        self.interface.carrier_held_until = None;
        let last = self.datapath.last_frame_of_the_dead();
        let uncompleted = self.datapath.reclaim();
        if let Some(job) = self.ethtool.take() {
            job.fail(format!("{label}: the driver died before it answered"));
        }
        (uncompleted, last)
    }

    fn resubmit(&mut self, frames: Vec<TxFrame>, status: &SharedStatus) -> Result<u32, Fault> {
        let resubmitted = self.datapath.resubmit(frames)?;
        self.show(status);
        // A successor whose carrier came while it was being opened (8139cp's
        // does) was never seen to take the hold over: it serves, so the TAP
        // shows its carrier from now on.
        if self.interface.carrier_held_until.take().is_some() {
            let on = self.carrier();
            self.set_carrier(on, status)?;
        }
        Ok(resubmitted)
    }

    fn give_up(&mut self, frames: Vec<TxFrame>, status: &SharedStatus) {
        self.datapath.give_up(frames);
        let _ = self.interface.tap.set_carrier(false);
        let pool_free = self.datapath.shm.free_count();
        status.update(|s| {
            s.net.pool_free = pool_free;
            s.net.carrier = false;
        });
    }

    fn announce(&mut self, label: &str) -> Option<u32> {
        let mac = self.shadow.as_ref()?.mac();
        match super::announce::announce(self.name(), self.interface.ifindex(), mac) {
            Ok(frames) => {
                info!("{label}: {} announced at its new place: {frames} gratuitous ARP / neighbour advertisement(s)",
                      self.name());
                Some(frames)
            }
            Err(e) => {
                warn!("{label}: announcing {} failed: {e}; peers learn its new place from its next frames", self.name());
                None
            }
        }
    }

    fn queue_query(&mut self, queries: EthtoolQueries, answer: Answer) {
        self.ethtool_queue.push_back((queries, answer));
    }

    fn refuse_queries(&mut self, why: &str) {
        for (_, answer) in self.ethtool_queue.drain(..) {
            let _ = answer.send(Err(why.to_string()));
        }
    }

    fn next_query(&mut self, label: &str) -> Vec<Request> {
        if self.ethtool.is_some() || self.shadow.is_none() {
            return Vec::new();
        }
        let Some((queries, answer)) = self.ethtool_queue.pop_front() else { return Vec::new() };
        let (job, requests) = EthtoolJob::start(label.to_string(), self.name().to_string(), queries, answer);
        if requests.is_empty() {
            job.finish();
        } else {
            self.ethtool = Some(job);
        }
        requests
    }

    fn query_answered(&mut self, request: &Request, status: i32, data: &[u8], label: &str) -> Result<Vec<Request>, Fault> {
        let Some(job) = self.ethtool.as_mut() else { return Ok(Vec::new()) };
        match job.answered(request, status, data).map_err(|e| Fault::Violation(e.to_string()))? {
            Ok(QueryProgress::Next(next)) => return Ok(vec![next]),
            Ok(QueryProgress::Waiting) => {}
            Ok(QueryProgress::Done) => self.ethtool.take().expect("a job").finish(),
            // Replies to the job's other requests are dropped when they come.
            Err(why) => self.ethtool.take().expect("a job").fail(format!("{label}: {why}")),
        }
        Ok(Vec::new())
    }
}

fn state_of(phase: Phase) -> DriverState {
    match phase {
        Phase::Registered => DriverState::Registered,
        Phase::Open => DriverState::Open,
        Phase::Stopped => DriverState::Stopped,
    }
}
