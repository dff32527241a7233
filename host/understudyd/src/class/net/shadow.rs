// SPDX-License-Identifier: GPL-2.0
//! The net shadow's record of the driver's net_device, and what to ask of the
//! driver so that it matches what the admin set on the TAP.
//!
//! The TAP is the interface the admin configures (`ip link set us0 ...`); the
//! driver's net_device is its understudy. After `REGISTERED` the shadow knows
//! the driver's MTU, MAC and MTU range; it then sends one request at a time
//! until the driver has what the TAP has, in this order: STOP if the TAP went
//! down, MTU, MAC, the queue pairs if the TAP has several queues for the
//! driver, OPEN if the TAP is up, then the receive mode (only while open:
//! the kernel calls ndo_set_rx_mode only on an up device, and always right
//! after ndo_open).
//!
//! The phases of the driver's net_device:
//!
//! ```text
//!   REGISTERED ──OPEN ok──▶ open ──STOP──▶ stopped ──OPEN ok──▶ open ...
//!   (initial: the TAP is created down, so the driver is not opened until
//!    the admin runs `ip link set us0 up`)
//! ```
//!
//! A refused request is undone on the TAP where the kernel would have
//! refused it: the MTU and MAC go back to the driver's, a refused OPEN takes
//! the TAP down again (dev_open fails the same way). A refused receive mode
//! cannot be undone on a TAP; it is not asked again until the TAP's mode
//! changes. Nor can refused queue pairs: the TAP's queues then all feed the
//! queues the driver runs, and they are not asked again of this driver.

use understudy_api::DeviceClass;
use understudy_protocol::{RegisteredInfo, Request, MAX_MC, RX_MODE_ALLMULTI, RX_MODE_PROMISC};

use crate::class::{Log, Place};
use understudy_protocol::format_mac;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Registered, never opened.
    Registered,
    Open,
    /// Opened, then stopped.
    Stopped,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RxMode {
    pub promisc: bool,
    pub allmulti: bool,
    pub multicast: Vec<[u8; 6]>,
}

impl RxMode {
    /// The request for this mode. A list longer than the protocol carries
    /// becomes all-multicast, as a NIC whose filter overflows does.
    fn request(&self) -> Request {
        let overflow = self.multicast.len() > MAX_MC;
        let mut flags = 0;
        if self.promisc {
            flags |= RX_MODE_PROMISC;
        }
        if self.allmulti || overflow {
            flags |= RX_MODE_ALLMULTI;
        }
        Request::SetRxMode { flags, multicast: if overflow { Vec::new() } else { self.multicast.clone() } }
    }
}

/// What the admin has set on the TAP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapConfig {
    pub up: bool,
    pub mtu: u32,
    pub mac: [u8; 6],
    pub rx: RxMode,
    /// The TAP's queues for the driver (`run --queues`): above one, the
    /// driver is asked to run as many queue pairs.
    pub queues: u16,
}

/// The change a request in flight makes if the driver accepts it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    Open,
    Stop,
    Mtu(u32),
    Mac([u8; 6]),
    Channels(u16),
    Rx(RxMode),
}

/// What the supervisor must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Send(Request),
    /// Put the TAP back as the driver has it, and say why.
    Undo(Undo),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    Mtu { restore: u32, why: String },
    Mac { restore: [u8; 6], why: String },
    Down { why: String },
}

/// The passive log (live-update paper §4): what the driver said of its
/// net_device and every setting it accepted -- all a fresh driver process
/// must be given to stand where this one stood. Refused and unanswered
/// requests are not in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassiveLog {
    /// Driver-originated: its REGISTERED message.
    pub registered: RegisteredInfo,
    /// Driver-originated: its last CARRIER.
    pub carrier: bool,
    pub phase: Phase,
    pub mtu: u32,
    pub mac: [u8; 6],
    /// `None` until the driver has been told since it last opened.
    pub rx: Option<RxMode>,
    /// The queue pairs it took (`ethtool -L combined`); `None`, its own choice.
    pub channels: Option<u16>,
}

impl Log for PassiveLog {
    const CLASS: DeviceClass = DeviceClass::Net;
    const REGISTERS: &'static str = "net_device";
    type Offer = RegisteredInfo;

    /// Why a newly registered driver cannot take this log's place, if it cannot.
    /// On the same device: another device, an MTU in use it would refuse, or
    /// fewer features than the stack was using (unless `allow_feature_loss`:
    /// an update told so). On another device (a move): the MAC is the
    /// interface's, set by the replay; the MTU in use and the offloads the
    /// interface advertises are what it must take (docs/migration.md).
    fn incompatibility(&self, fresh: &RegisteredInfo, place: Place) -> Option<String> {
        let old = &self.registered;
        let same_device = matches!(place, Place::SameDevice { .. });
        if same_device && (fresh.perm_addr != old.perm_addr || fresh.dev_addr != old.dev_addr) {
            return Some(format!("it registered address {} (permanent {}), its predecessor {} (permanent {})",
                                format_mac(&fresh.dev_addr), format_mac(&fresh.perm_addr),
                                format_mac(&old.dev_addr), format_mac(&old.perm_addr)));
        }
        let mtu = (self.mtu < fresh.min_mtu || self.mtu > fresh.max_mtu)
            .then(|| format!("the MTU in use, {}, is outside its range {}..{}", self.mtu, fresh.min_mtu, fresh.max_mtu));
        match place {
            Place::SameDevice { allow_feature_loss } => mtu.or_else(|| {
                let missing = old.features & !fresh.features;
                (missing != 0 && !allow_feature_loss)
                    .then(|| format!("it lacks features that were in use: {}", feature_names(missing)))
            }),
            Place::OtherDevice => {
                // rx-checksum is the driver's own: the stack checks what a driver did not.
                let missing = old.offloads & !fresh.offloads & !understudy_protocol::OFFLOAD_RX_CSUM;
                let offloads = (missing != 0)
                    .then(|| format!("it lacks offloads the interface advertises: {}", offload_names(missing).join(", ")));
                mtu.or(offloads).map(|why| format!("{why} (declare the device with `understudy run --standby` so \
                                                    that the interface offers only what every driver it may move to has)"))
            }
        }
    }

    /// The requests that bring a newly registered driver (compatible, see
    /// `incompatibility`) to this log's state, in the order the shadow sends
    /// them: configuration before OPEN, the receive mode right after it.
    /// Not the queue pairs: a successor on another device may have fewer,
    /// and is asked for them once it serves, as the first driver was.
    fn replay(&self, fresh: &RegisteredInfo) -> Vec<Request> {
        let mut requests = Vec::new();
        if self.mtu != fresh.mtu {
            requests.push(Request::SetMtu(self.mtu));
        }
        if self.mac != fresh.dev_addr {
            requests.push(Request::SetMac(self.mac));
        }
        if self.phase == Phase::Open {
            requests.push(Request::Open);
            if let Some(rx) = &self.rx {
                requests.push(rx.request());
            }
        }
        requests
    }

    /// An open interface's successor carries frames once its link is up.
    fn waits_for_ready(&self) -> bool {
        self.phase == Phase::Open
    }
}

/// NETIF_F_* bits by their `ethtool -k` names (include/linux/netdev_features.h,
/// the same in every Debian 6.1 ABI); other bits by number.
pub fn feature_names(features: u64) -> String {
    const NAMES: [(u32, &str); 17] = [
        (0, "scatter-gather"), (1, "tx-checksum-ipv4"), (3, "tx-checksum-ip-generic"), (4, "tx-checksum-ipv6"),
        (5, "highdma"), (7, "tx-vlan-hw-insert"), (8, "rx-vlan-hw-parse"), (9, "rx-vlan-filter"),
        (11, "tx-generic-segmentation"), (14, "rx-gro"), (15, "rx-lro"), (16, "tx-tcp-segmentation"),
        (18, "tx-tcp-ecn-segmentation"), (19, "tx-tcp-mangleid-segmentation"), (20, "tx-tcp6-segmentation"),
        (39, "rx-hashing"), (40, "rx-checksum"),
    ];
    (0..64)
        .filter(|bit| features & (1u64 << bit) != 0)
        .map(|bit| NAMES.iter().find(|(b, _)| *b == bit).map_or_else(|| format!("bit {bit}"), |(_, n)| n.to_string()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `OFFLOAD_*` flags by name, for the log and `status`.
pub fn offload_names(offloads: u32) -> Vec<String> {
    use understudy_protocol::{OFFLOAD_CSUM, OFFLOAD_RX_CSUM, OFFLOAD_TSO4, OFFLOAD_TSO6, OFFLOAD_TSO_ECN};
    [(OFFLOAD_CSUM, "tx-checksum"), (OFFLOAD_TSO4, "tso4"), (OFFLOAD_TSO6, "tso6"), (OFFLOAD_TSO_ECN, "tso-ecn"),
     (OFFLOAD_RX_CSUM, "rx-checksum")]
        .iter()
        .filter(|(flag, _)| offloads & flag != 0)
        .map(|(_, name)| name.to_string())
        .collect()
}

pub struct NetShadow {
    log: PassiveLog,
    refused_rx: Option<RxMode>,
    refused_channels: Option<u16>,
    in_flight: Option<Change>,
}

fn errno_text(status: i32) -> String {
    std::io::Error::from_raw_os_error(-status).to_string()
}

impl NetShadow {
    pub fn registered(info: RegisteredInfo) -> Self {
        let log = PassiveLog { phase: Phase::Registered, mtu: info.mtu, mac: info.dev_addr, rx: None, carrier: false,
                               channels: None, registered: info };
        NetShadow { log, refused_rx: None, refused_channels: None, in_flight: None }
    }

    pub fn log(&self) -> &PassiveLog {
        &self.log
    }

    pub fn set_carrier(&mut self, on: bool) {
        self.log.carrier = on;
    }

    pub fn phase(&self) -> Phase {
        self.log.phase
    }

    pub fn mtu(&self) -> u32 {
        self.log.mtu
    }

    pub fn mac(&self) -> [u8; 6] {
        self.log.mac
    }

    /// The fresh driver accepted `request`, one of `from.replay(..)`: the log takes it in.
    pub fn replayed(&mut self, request: &Request, from: &PassiveLog) {
        match request {
            Request::SetMtu(mtu) => self.log.mtu = *mtu,
            Request::SetMac(mac) => self.log.mac = *mac,
            Request::Open => {
                self.log.phase = Phase::Open;
                self.log.rx = None;
            }
            Request::SetRxMode { .. } => self.log.rx = from.rx.clone(),
            other => unreachable!("replay never sends {}", other.name()),
        }
    }

    /// The next request or undo that brings the driver closer to `tap`, or
    /// `None` if they agree or a request is still being answered.
    pub fn next(&mut self, tap: &TapConfig) -> Option<Action> {
        if self.in_flight.is_some() {
            return None;
        }
        let change = if !tap.up && self.log.phase == Phase::Open {
            Change::Stop
        } else if tap.mtu != self.log.mtu {
            if tap.mtu < self.log.registered.min_mtu || tap.mtu > self.log.registered.max_mtu {
                // What dev_validate_mtu() refuses before asking a driver.
                return Some(Action::Undo(Undo::Mtu {
                    restore: self.log.mtu,
                    why: format!("MTU {} is outside the driver's range {}..{}", tap.mtu, self.log.registered.min_mtu, self.log.registered.max_mtu),
                }));
            }
            Change::Mtu(tap.mtu)
        } else if tap.mac != self.log.mac {
            Change::Mac(tap.mac)
        } else if tap.queues > 1 && self.log.channels != Some(tap.queues) && self.refused_channels != Some(tap.queues) {
            Change::Channels(tap.queues)
        } else if tap.up && self.log.phase != Phase::Open {
            Change::Open
        } else if self.log.phase == Phase::Open && self.log.rx.as_ref() != Some(&tap.rx) && self.refused_rx.as_ref() != Some(&tap.rx) {
            Change::Rx(tap.rx.clone())
        } else {
            return None;
        };
        let request = match &change {
            Change::Open => Request::Open,
            Change::Stop => Request::Stop,
            Change::Mtu(m) => Request::SetMtu(*m),
            Change::Mac(m) => Request::SetMac(*m),
            Change::Channels(n) => Request::SetChannels((*n).into()),
            Change::Rx(rx) => rx.request(),
        };
        self.in_flight = Some(change);
        Some(Action::Send(request))
    }

    /// The driver answered the request `next` sent. Returns what to undo on
    /// the TAP if it refused.
    pub fn answered(&mut self, status: i32) -> Option<Undo> {
        let change = self.in_flight.take()?;
        let refused = status < 0;
        match change {
            Change::Open if refused => {
                return Some(Undo::Down { why: format!("the driver's ndo_open failed: {}", errno_text(status)) })
            }
            Change::Open => {
                self.log.phase = Phase::Open;
                self.log.rx = None;
            }
            // The kernel ignores what ndo_stop returns: the device is down either way.
            Change::Stop => self.log.phase = Phase::Stopped,
            Change::Mtu(mtu) if refused => {
                return Some(Undo::Mtu {
                    restore: self.log.mtu,
                    why: format!("the driver refused MTU {mtu}: {}", errno_text(status)),
                })
            }
            Change::Mtu(mtu) => self.log.mtu = mtu,
            Change::Mac(mac) if refused => {
                return Some(Undo::Mac {
                    restore: self.log.mac,
                    why: format!("the driver refused the address {}: {}", format_mac(&mac), errno_text(status)),
                })
            }
            Change::Mac(mac) => self.log.mac = mac,
            Change::Channels(n) if refused => self.refused_channels = Some(n),
            Change::Channels(n) => self.log.channels = Some(n),
            Change::Rx(rx) if refused => self.refused_rx = Some(rx),
            Change::Rx(rx) => {
                self.log.rx = Some(rx);
                self.refused_rx = None;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

    fn tap(up: bool, mtu: u32) -> TapConfig {
        TapConfig { up, mtu, mac: MAC, rx: RxMode::default(), queues: 1 }
    }

    fn e1000() -> RegisteredInfo {
        RegisteredInfo {
            perm_addr: MAC, dev_addr: MAC, mtu: 1500, min_mtu: 46, max_mtu: 16110, features: 0x4000_0003,
            hw_features: 0x4000_0003, n_tx_queues: 1, n_rx_queues: 1, driver: "e1000".into(), version: "".into(), offloads: 0,
        }
    }

    fn shadow() -> NetShadow {
        NetShadow::registered(e1000())
    }

    #[test]
    fn a_registered_driver_stays_closed_until_the_tap_is_up() {
        let mut s = shadow();
        assert_eq!(s.next(&tap(false, 1500)), None);
        assert_eq!(s.phase(), Phase::Registered);
        assert_eq!(s.next(&tap(true, 1500)), Some(Action::Send(Request::Open)));
        assert_eq!(s.next(&tap(true, 1500)), None, "one request at a time");
        assert_eq!(s.answered(0), None);
        assert_eq!(s.phase(), Phase::Open);
        // Right after ndo_open the receive mode is set, as dev_open does.
        assert_eq!(s.next(&tap(true, 1500)), Some(Action::Send(Request::SetRxMode { flags: 0, multicast: vec![] })));
        s.answered(0);
        assert_eq!(s.next(&tap(true, 1500)), None);
        assert_eq!(s.next(&tap(false, 1500)), Some(Action::Send(Request::Stop)));
        s.answered(0);
        assert_eq!(s.phase(), Phase::Stopped);
        assert_eq!(s.next(&tap(false, 1500)), None);
        assert_eq!(s.next(&tap(true, 1500)), Some(Action::Send(Request::Open)));
    }

    #[test]
    fn a_refused_open_takes_the_tap_down_and_a_refused_stop_still_stops() {
        let mut s = shadow();
        s.next(&tap(true, 1500));
        assert!(matches!(s.answered(-12), Some(Undo::Down { why }) if why.contains("Cannot allocate memory")));
        assert_eq!(s.phase(), Phase::Registered);
        s.next(&tap(true, 1500));
        s.answered(0);
        s.next(&tap(true, 1500));
        s.answered(0);
        assert_eq!(s.next(&tap(false, 1500)), Some(Action::Send(Request::Stop)));
        assert_eq!(s.answered(-5), None);
        assert_eq!(s.phase(), Phase::Stopped);
    }

    #[test]
    fn mtu_outside_the_range_is_undone_without_asking_and_a_refusal_is_undone() {
        let mut s = shadow();
        assert_eq!(s.next(&tap(false, 20000)), Some(Action::Undo(Undo::Mtu {
            restore: 1500, why: "MTU 20000 is outside the driver's range 46..16110".into() })));
        assert_eq!(s.next(&tap(false, 9000)), Some(Action::Send(Request::SetMtu(9000))));
        assert!(matches!(s.answered(-22), Some(Undo::Mtu { restore: 1500, .. })));
        assert_eq!(s.mtu(), 1500);
        assert_eq!(s.next(&tap(false, 1400)), Some(Action::Send(Request::SetMtu(1400))));
        assert_eq!(s.answered(0), None);
        assert_eq!(s.mtu(), 1400);
    }

    #[test]
    fn config_goes_before_open_and_stop_before_config() {
        let mut s = shadow();
        let mut t = TapConfig { up: true, mtu: 1400, mac: [2, 0, 0, 0, 0, 9], rx: RxMode::default(), queues: 1 };
        assert_eq!(s.next(&t), Some(Action::Send(Request::SetMtu(1400))));
        s.answered(0);
        assert_eq!(s.next(&t), Some(Action::Send(Request::SetMac([2, 0, 0, 0, 0, 9]))));
        s.answered(0);
        assert_eq!(s.next(&t), Some(Action::Send(Request::Open)));
        s.answered(0);
        s.next(&t);
        s.answered(0);
        t.up = false;
        t.mtu = 1300;
        assert_eq!(s.next(&t), Some(Action::Send(Request::Stop)));
    }

    #[test]
    fn rx_mode_flags_list_overflow_and_refusal() {
        let mut s = shadow();
        let mut t = tap(true, 1500);
        s.next(&t);
        s.answered(0);
        t.rx = RxMode { promisc: true, allmulti: true, multicast: vec![[1, 0, 0x5e, 0, 0, 1]] };
        assert_eq!(s.next(&t), Some(Action::Send(Request::SetRxMode {
            flags: RX_MODE_PROMISC | RX_MODE_ALLMULTI, multicast: vec![[1, 0, 0x5e, 0, 0, 1]] })));
        assert_eq!(s.answered(-95), None);
        assert_eq!(s.next(&t), None, "a refused mode is not asked again");
        t.rx.promisc = false;
        assert!(matches!(s.next(&t), Some(Action::Send(Request::SetRxMode { flags: RX_MODE_ALLMULTI, .. }))));
        s.answered(0);
        t.rx = RxMode { multicast: (0..=MAX_MC as u8).map(|i| [1, 0, 0x5e, 0, 0, i]).collect(), ..Default::default() };
        assert_eq!(s.next(&t), Some(Action::Send(Request::SetRxMode { flags: RX_MODE_ALLMULTI, multicast: vec![] })));
    }

    #[test]
    fn an_answer_without_a_request_changes_nothing() {
        let mut s = shadow();
        assert_eq!(s.answered(0), None);
        assert_eq!(s.phase(), Phase::Registered);
    }

    /// The log holds what the driver accepted, never what it refused or has
    /// not answered yet.
    #[test]
    fn the_log_records_only_accepted_settings() {
        let mut s = shadow();
        let mut t = TapConfig { up: true, mtu: 1400, mac: MAC, rx: RxMode::default(), queues: 1 };
        s.next(&t);
        assert_eq!(s.log().mtu, 1500, "not answered yet");
        s.answered(0);
        s.next(&t);
        s.answered(0);
        t.rx = RxMode { promisc: true, allmulti: false, multicast: vec![[1, 0, 0x5e, 0, 0, 7]] };
        s.next(&t);
        s.answered(0);
        s.set_carrier(true);
        t.mtu = 9000;
        s.next(&t);
        s.answered(-22);
        let log = s.log();
        assert_eq!((log.phase, log.mtu, log.mac, log.carrier), (Phase::Open, 1400, MAC, true));
        assert_eq!(log.rx.as_ref(), Some(&t.rx));
        assert_eq!(log.registered, e1000());
    }

    #[test]
    fn queue_pairs_are_asked_once_of_a_driver_that_refuses_them_and_never_with_one_queue() {
        let mut s = shadow();
        assert_eq!(s.next(&tap(true, 1500)), Some(Action::Send(Request::Open)), "one queue: the driver's own count");
        s.answered(0);
        let mut t = TapConfig { queues: 4, ..tap(true, 1500) };
        assert_eq!(s.next(&t), Some(Action::Send(Request::SetChannels(4))), "asked of an open driver too");
        assert_eq!(s.answered(-95), None, "nothing on the TAP to undo");
        assert!(matches!(s.next(&t), Some(Action::Send(Request::SetRxMode { .. }))));
        s.answered(0);
        assert_eq!(s.next(&t), None, "not asked again");
        assert_eq!(s.log().channels, None);
        assert!(s.log().replay(&e1000()).iter().all(|r| !matches!(r, Request::SetChannels(_))));
        t.queues = 2;
        assert_eq!(s.next(&t), Some(Action::Send(Request::SetChannels(2))), "another count is another question");
        s.answered(0);
        assert_eq!(s.log().channels, Some(2));
        // Not replayed (a successor on another device may have fewer queues):
        // a successor is asked once it serves, as any driver is.
        let replay = s.log().replay(&e1000());
        assert!(replay.iter().all(|r| !matches!(r, Request::SetChannels(_))), "{replay:?}");
        let mut successor = NetShadow::registered(e1000());
        replay.iter().for_each(|r| successor.replayed(r, s.log()));
        assert_eq!(successor.next(&t), Some(Action::Send(Request::SetChannels(2))));
    }

    #[test]
    fn replay_gives_a_fresh_driver_the_accepted_settings_in_the_shadows_order() {
        let mut s = shadow();
        let t = TapConfig {
            up: true, mtu: 1400, mac: [2, 0, 0, 0, 0, 9],
            rx: RxMode { promisc: true, allmulti: false, multicast: vec![[1, 0, 0x5e, 0, 0, 7]] },
            queues: 1,
        };
        // The live driver's own sequence is what replay must repeat.
        let mut live = Vec::new();
        while let Some(Action::Send(request)) = s.next(&t) {
            live.push(request);
            s.answered(0);
        }
        assert_eq!(s.log().replay(&e1000()), live);
        let mut fresh = NetShadow::registered(e1000());
        for request in &live {
            fresh.replayed(request, s.log());
        }
        assert_eq!(fresh.log(), &PassiveLog { carrier: false, ..s.log().clone() });
        assert_eq!(live, vec![
            Request::SetMtu(1400), Request::SetMac([2, 0, 0, 0, 0, 9]), Request::Open,
            Request::SetRxMode { flags: RX_MODE_PROMISC, multicast: vec![[1, 0, 0x5e, 0, 0, 7]] },
        ]);
        // A stopped device is configured, not opened; what the fresh driver already has is not asked.
        let mut stopped = s.log().clone();
        stopped.phase = Phase::Stopped;
        let fresh = RegisteredInfo { mtu: 1400, ..e1000() };
        assert_eq!(stopped.replay(&fresh), vec![Request::SetMac([2, 0, 0, 0, 0, 9])]);
        // Registered, never opened: nothing to replay.
        assert_eq!(shadow().log().replay(&e1000()), vec![]);
    }

    #[test]
    fn features_read_as_ethtool_names_them() {
        assert_eq!(feature_names((1 << 1) | (1 << 16) | (1 << 40) | (1 << 63)),
                   "tx-checksum-ipv4, tx-tcp-segmentation, rx-checksum, bit 63");
        assert_eq!(feature_names(0), "");
    }

    #[test]
    fn a_replacement_must_be_the_same_device_with_the_mtu_and_features_in_use() {
        let mut log = shadow().log().clone();
        log.mtu = 9000;
        assert_eq!(log.incompatibility(&e1000(), SAME), None);
        let other = RegisteredInfo { perm_addr: [2, 0, 0, 0, 0, 1], ..e1000() };
        assert!(log.incompatibility(&other, LOSSY).unwrap().contains("permanent 02:00:00:00:00:01"));
        let small = RegisteredInfo { max_mtu: 1500, ..e1000() };
        assert_eq!(log.incompatibility(&small, LOSSY).unwrap(), "the MTU in use, 9000, is outside its range 46..1500");
        let fewer = RegisteredInfo { features: 0x3, ..e1000() };
        assert_eq!(log.incompatibility(&fewer, SAME).unwrap(), "it lacks features that were in use: bit 30");
        assert_eq!(log.incompatibility(&fewer, LOSSY), None, "an update may be told to accept the loss");
        let more = RegisteredInfo { features: 0x4000_0007, ..e1000() };
        assert_eq!(log.incompatibility(&more, SAME), None);
    }

    const SAME: Place = Place::SameDevice { allow_feature_loss: false };
    const LOSSY: Place = Place::SameDevice { allow_feature_loss: true };

    #[test]
    fn a_successor_on_another_device_keeps_the_mtu_in_use_and_the_offloads_advertised() {
        use understudy_protocol::{OFFLOAD_CSUM, OFFLOAD_TSO4, OFFLOAD_TSO6};
        let mut log = shadow().log().clone();
        log.registered.offloads = OFFLOAD_CSUM | OFFLOAD_TSO4;
        let rtl = RegisteredInfo { perm_addr: [2, 0, 0, 0, 0, 1], dev_addr: [2, 0, 0, 0, 0, 1], features: 0,
                                   offloads: OFFLOAD_CSUM | OFFLOAD_TSO4 | OFFLOAD_TSO6, ..e1000() };
        assert_eq!(log.incompatibility(&rtl, Place::OtherDevice), None, "its own MAC and NETIF features do not matter");
        assert!(log.incompatibility(&rtl, SAME).unwrap().contains("permanent 02:00:00:00:00:01"));
        let mut checked = log.clone();
        checked.registered.offloads |= understudy_protocol::OFFLOAD_RX_CSUM;
        let no_rx_csum = RegisteredInfo { offloads: OFFLOAD_CSUM | OFFLOAD_TSO4, ..rtl.clone() };
        assert_eq!(checked.incompatibility(&no_rx_csum, Place::OtherDevice), None, "rx-checksum is no stack's concern");
        let pcnet = RegisteredInfo { offloads: 0, ..rtl.clone() };
        let why = log.incompatibility(&pcnet, Place::OtherDevice).unwrap();
        assert!(why.starts_with("it lacks offloads the interface advertises: tx-checksum, tso4 (declare"), "{why}");
        log.mtu = 9000;
        let small = RegisteredInfo { max_mtu: 1500, ..rtl };
        let why = log.incompatibility(&small, Place::OtherDevice).unwrap();
        assert!(why.starts_with("the MTU in use, 9000, is outside its range 46..1500 (declare"), "{why}");
    }
}
