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
//! supervisor its requests in flight (`InFlight`).

pub mod blk;
pub mod net;

use understudy_api::DeviceClass;
use understudy_protocol::Request;

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
    type Offer: Clone;
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
