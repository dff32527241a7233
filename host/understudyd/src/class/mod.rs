// SPDX-License-Identifier: GPL-2.0
//! The class interface: what a device class plugs into the class-neutral
//! daemon (docs/design.md §0, "The class interface"). The network class
//! (net/) is the first; a block and a sound class are to follow.
//!
//! The handover (handover/) decides a restart, an update, a move and a
//! failover the same way for every class, and the supervisor (supervisor/)
//! carries them out the same way. What differs from class to class is the
//! shadow's record of what the driver was told -- its passive log, which a
//! successor is checked against and replayed into -- and the requests in
//! flight it holds for the driver: the net class's frames, a block class's
//! I/O requests. A class gives the handover its log (`Log`) and the
//! supervisor its side of a device (`Class`): the front-end applications
//! use, the requests' path to the driver and the shadow that watches it.

pub mod blk;
pub mod net;

use std::os::fd::BorrowedFd;
use std::time::Instant;

use understudy_api::{DeviceClass, DeviceStatus, DriverState, EthtoolQueries};
use understudy_protocol::{DriverMessage, Request};
use understudy_shm::{DriverMemory, Geometry};

use crate::fault::Fault;
use crate::status::SharedStatus;

/// Where a successor takes a log's place (`Log::incompatibility`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A restart or an update: the same device, so the same card.
    SameDevice { allow_feature_loss: bool },
    /// A move: another device, with its own identity and features.
    OtherDevice,
}

/// A shadow's passive log (the live-update paper's §4): what the driver
/// said of the device it registered and every setting it accepted -- all a
/// fresh driver process must be given to stand where this one stood.
pub trait Log: Clone {
    /// The class, as `status` names it.
    const CLASS: DeviceClass;
    /// What a driver of the class registers when it probes, as messages
    /// name it (the net class: a net_device).
    const REGISTERS: &'static str;
    /// What a driver says of the device it registered when it probed (the
    /// net class: REGISTERED's net_device): what it offers.
    type Offer: Offering;
    /// Why a driver that registered `offer` cannot take this log's place at
    /// `place`, if it cannot: what it offers must cover what the log's
    /// driver exposed to applications, which read it once and rely on it.
    fn incompatibility(&self, offer: &Self::Offer, place: Place) -> Option<String>;
    /// The requests that bring a fresh, compatible driver to this log's
    /// state, in the order they are to be sent.
    fn replay(&self, offer: &Self::Offer) -> Vec<Request>;
    /// Whether a successor that has been replayed must say it is ready
    /// before it is given the held requests (the net class: an open
    /// interface waits for its carrier, since a driver without link drops
    /// frames).
    fn waits_for_ready(&self) -> bool;
}

/// The requests in flight a class holds for its driver: taken back when
/// the driver is gone and given to its successor, oldest first, so none is
/// lost and none is done twice.
pub trait InFlight {
    /// One request held for the driver (the net class: a frame to send).
    type Held;
    /// A driver's garbage in what it shares with the daemon.
    type Error;
    /// Takes back what the gone driver held and never completed, oldest
    /// first; its device is stopped, so nothing of it is touched any more.
    fn reclaim(&mut self) -> Vec<Self::Held>;
    /// Gives a successor the held requests, in order; says how many it took.
    fn resubmit(&mut self, held: Vec<Self::Held>) -> Result<u32, Self::Error>;
    /// Nobody will serve these: they are given up.
    fn give_up(&mut self, held: Vec<Self::Held>);
}

/// What a driver offers, as the devices a front-end may move to are
/// compared: a move never takes away what applications rely on, so the
/// front-end shows only what every declared device's driver offers
/// (docs/migration.md, "Standby devices").
pub trait Offering: Clone {
    /// `common` -- what every device declared so far offers -- narrowed by this offer.
    fn narrow(&self, common: Option<&Self>) -> Self;
    /// This offer as the front-end shows it when every device offers `common`.
    fn within(self, common: &Self) -> Self;
    /// Its optional features by name, for `status`.
    fn feature_names(&self) -> Vec<String>;
    /// One line for the log: what the driver registered.
    fn describe(&self) -> String;
}

/// What the daemon shares with a driver process of a class: the memory its
/// device reaches and the eventfds beside it (docs/protocol.md, "Start").
pub trait Shared {
    fn memory(&self) -> &dyn DriverMemory;
    /// Host → driver: "a ring you consume has entries".
    fn kick_fd(&self) -> BorrowedFd<'_>;
    /// Driver → host.
    fn notify_fd(&self) -> BorrowedFd<'_>;
    /// The front-end's queues the driver reads and writes itself (the
    /// net class's TAP queues); none for a prober.
    fn frontend_queues(&self) -> Vec<BorrowedFd<'_>>;
}

/// What one look at the requests' path saw (`Class::move_requests`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Progress {
    /// The driver finished a request, or owes none: its hang clock restarts.
    pub progressed: bool,
    /// When the last request went through the driver, if one did: a
    /// handover's outage ends at its successor's first.
    pub passed: Option<Instant>,
}

/// What the driver said that the supervisor acts on (`Class::on_message`).
pub enum Said<O> {
    /// It registered its device (the net class: REGISTERED's net_device).
    Registered(O),
    /// Its device is ready, or not (the net class: the carrier), as a
    /// successor that waits for it must hear.
    Ready(bool),
}

/// A class's side of one device, as the class-neutral supervisor
/// (supervisor/) drives it: the front-end applications use, which outlives
/// every driver process; the requests' path between it and the driver; the
/// shadow of what the driver registered and was told (docs/design.md §0,
/// "The class interface"). Every call comes from the device's thread.
pub trait Class: Shared + Sized {
    type Log: Log;
    /// One request in flight the class holds for its driver.
    type Held;
    /// What a prober is given: memory of its own, for another device.
    type Scratch: Shared;
    /// What `Held` is called in log lines.
    const HELD: &'static str;
    /// What the front-end is called in log lines ("interface").
    const FRONTEND: &'static str;
    /// Whether the runtime can make a post-probe template of the class's
    /// drivers, which restarts fork from (docs/design.md §8).
    const TEMPLATES: bool;

    /// The front-end `name` and the memory for its drivers; `unconfined`:
    /// without an IOMMU (docs/design.md §4, "Without an IOMMU").
    fn create(name: &str, queues: u16, geometry: Geometry, unconfined: bool, label: &str) -> Result<Self, String>;
    fn scratch(label: &str) -> Result<Self::Scratch, String>;
    /// The front-end's name (an interface, a disk), for log lines.
    fn name(&self) -> &str;
    /// Log lines name the device that serves now.
    fn relabel(&mut self, label: &str);
    /// The class's part of `status` before any driver has registered.
    fn initial_status(&self, status: &mut DeviceStatus);

    // The front-end, polled whether or not a driver serves.
    fn frontend_fds(&self) -> Vec<libc::pollfd>;
    /// `revents` of `frontend_fds`, in order.
    fn on_frontend(&mut self, revents: &[i16], status: &SharedStatus) -> Result<(), Fault>;

    // The requests' path.
    /// Whether the driver may be given the front-end's requests now (the
    /// class adds its own condition: the net class's open interface).
    fn set_gate(&mut self, serving: bool);
    /// The driver's progress with its requests; if `want_progress`, the
    /// driver is asked to signal its next finished one.
    fn move_requests(&mut self, want_progress: bool, status: &SharedStatus) -> Result<Progress, Fault>;
    /// Requests the driver holds and owes progress on: the hang clock runs while there are.
    fn owed(&self) -> u32;
    fn kick(&self);

    // The shadow.
    fn log(&self) -> Option<&Self::Log>;
    /// The driver is gone: its log, if it registered, goes to the handover.
    fn take_log(&mut self) -> Option<Self::Log>;
    /// The driver's state as the shadow knows it, once it registered.
    fn state(&self) -> Option<DriverState>;
    /// A class message of the serving driver (anything but replies and log lines).
    fn on_message(&mut self, message: DriverMessage, status: &SharedStatus)
                  -> Result<Said<<Self::Log as Log>::Offer>, Fault>;
    /// A class message of a prober: `Ok(Some)` its registration, `Ok(None)`
    /// one nobody on scratch memory needs, `Err` one a prober must not send.
    fn probed(message: DriverMessage) -> Result<Option<<Self::Log as Log>::Offer>, DriverMessage>;
    /// The first driver registered: the front-end takes what it said.
    fn take_registration(&mut self, offer: &<Self::Log as Log>::Offer) -> Result<(), Fault>;
    /// The shadow starts from what a driver registered.
    fn adopt(&mut self, offer: <Self::Log as Log>::Offer, status: &SharedStatus);
    /// A successor took `request` of the replay.
    fn replayed(&mut self, request: &Request, log: &Self::Log);
    /// The next request that brings the driver to the front-end's
    /// configuration, if one is due.
    fn next_config(&mut self) -> Option<Request>;
    /// The driver answered the last of `next_config` (`status`: 0 or an errno).
    fn config_answered(&mut self, status: i32, shared: &SharedStatus);
    /// `status` shows what the shadow knows.
    fn show(&self, status: &SharedStatus);

    // Timers.
    fn next_deadline(&self) -> Option<Instant>;
    /// Says whether the wait for a successor's readiness is over (`Event::ReadyWaitOver`).
    fn on_timers(&mut self, now: Instant, status: &SharedStatus) -> Result<bool, Fault>;

    // The handover.
    /// The front-end keeps what applications see (the carrier) while a successor starts.
    fn hold(&mut self, now: Instant);
    fn drop_hold(&mut self);
    /// A replayed successor is given a while to say it is ready.
    fn wait_for_ready(&mut self);
    /// The driver is gone and its device stopped: the requests it held,
    /// oldest first, and when its last request went through.
    fn quiesce(&mut self, label: &str) -> (Vec<Self::Held>, Option<Instant>);
    /// A successor serves: it is given `held`, in order; says how many it took.
    fn resubmit(&mut self, held: Vec<Self::Held>, status: &SharedStatus) -> Result<u32, Fault>;
    /// Nobody serves: `held` is given up and the front-end shows it.
    fn give_up(&mut self, held: Vec<Self::Held>, status: &SharedStatus);
    /// After a move: the front-end's peers learn its new place; says how many announcements went.
    fn announce(&mut self, label: &str) -> Option<u32>;

    // The CLI's queries of the driver (`understudy ethtool`).
    fn queue_query(&mut self, queries: EthtoolQueries, answer: net::ethtool::Answer);
    /// Nobody can answer the queries waiting.
    fn refuse_queries(&mut self, why: &str);
    /// The next query's requests, if none is being answered.
    fn next_query(&mut self, label: &str) -> Vec<Request>;
    /// A reply to a query's request; returns the requests it asks next.
    fn query_answered(&mut self, request: &Request, status: i32, data: &[u8], label: &str) -> Result<Vec<Request>, Fault>;
}
