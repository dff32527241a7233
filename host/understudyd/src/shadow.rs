// SPDX-License-Identifier: GPL-2.0
//! The net shadow's record of the driver's net_device, and what to ask of the
//! driver so that it matches what the admin set on the TAP.
//!
//! The TAP is the interface the admin configures (`ip link set us0 ...`); the
//! driver's net_device is its understudy. After `REGISTERED` the shadow knows
//! the driver's MTU, MAC and MTU range; it then sends one request at a time
//! until the driver has what the TAP has, in this order: STOP if the TAP went
//! down, MTU, MAC, OPEN if the TAP is up, then the receive mode (only while
//! open: the kernel calls ndo_set_rx_mode only on an up device, and always
//! right after ndo_open).
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
//! cannot be undone on a TAP; it is not asked again until the TAP's mode changes.

use understudy_protocol::{Request, MAX_MC, RX_MODE_ALLMULTI, RX_MODE_PROMISC};

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
}

/// The change a request in flight makes if the driver accepts it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    Open,
    Stop,
    Mtu(u32),
    Mac([u8; 6]),
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

pub struct NetShadow {
    phase: Phase,
    mtu: u32,
    min_mtu: u32,
    max_mtu: u32,
    mac: [u8; 6],
    /// `None` until the driver has been told since it last opened.
    rx: Option<RxMode>,
    refused_rx: Option<RxMode>,
    in_flight: Option<Change>,
}

fn errno_text(status: i32) -> String {
    std::io::Error::from_raw_os_error(-status).to_string()
}

impl NetShadow {
    pub fn registered(mtu: u32, min_mtu: u32, max_mtu: u32, mac: [u8; 6]) -> Self {
        NetShadow { phase: Phase::Registered, mtu, min_mtu, max_mtu, mac, rx: None, refused_rx: None, in_flight: None }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The next request or undo that brings the driver closer to `tap`, or
    /// `None` if they agree or a request is still being answered.
    pub fn next(&mut self, tap: &TapConfig) -> Option<Action> {
        if self.in_flight.is_some() {
            return None;
        }
        let change = if !tap.up && self.phase == Phase::Open {
            Change::Stop
        } else if tap.mtu != self.mtu {
            if tap.mtu < self.min_mtu || tap.mtu > self.max_mtu {
                // What dev_validate_mtu() refuses before asking a driver.
                return Some(Action::Undo(Undo::Mtu {
                    restore: self.mtu,
                    why: format!("MTU {} is outside the driver's range {}..{}", tap.mtu, self.min_mtu, self.max_mtu),
                }));
            }
            Change::Mtu(tap.mtu)
        } else if tap.mac != self.mac {
            Change::Mac(tap.mac)
        } else if tap.up && self.phase != Phase::Open {
            Change::Open
        } else if self.phase == Phase::Open && self.rx.as_ref() != Some(&tap.rx) && self.refused_rx.as_ref() != Some(&tap.rx) {
            Change::Rx(tap.rx.clone())
        } else {
            return None;
        };
        let request = match &change {
            Change::Open => Request::Open,
            Change::Stop => Request::Stop,
            Change::Mtu(m) => Request::SetMtu(*m),
            Change::Mac(m) => Request::SetMac(*m),
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
                self.phase = Phase::Open;
                self.rx = None;
            }
            // The kernel ignores what ndo_stop returns: the device is down either way.
            Change::Stop => self.phase = Phase::Stopped,
            Change::Mtu(mtu) if refused => {
                return Some(Undo::Mtu {
                    restore: self.mtu,
                    why: format!("the driver refused MTU {mtu}: {}", errno_text(status)),
                })
            }
            Change::Mtu(mtu) => self.mtu = mtu,
            Change::Mac(mac) if refused => {
                return Some(Undo::Mac {
                    restore: self.mac,
                    why: format!("the driver refused the address {}: {}", crate::supervisor::format_mac(&mac), errno_text(status)),
                })
            }
            Change::Mac(mac) => self.mac = mac,
            Change::Rx(rx) if refused => self.refused_rx = Some(rx),
            Change::Rx(rx) => {
                self.rx = Some(rx);
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
        TapConfig { up, mtu, mac: MAC, rx: RxMode::default() }
    }

    fn shadow() -> NetShadow {
        NetShadow::registered(1500, 46, 16110, MAC)
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
        let mut t = TapConfig { up: true, mtu: 1400, mac: [2, 0, 0, 0, 0, 9], rx: RxMode::default() };
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
}
