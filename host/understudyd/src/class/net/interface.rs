// SPDX-License-Identifier: GPL-2.0
//! The interface the stack and the administrator see (us0): the TAP, what
//! netlink last said of it, its multicast list and the carrier it holds for
//! a driver that is being replaced. It outlives every driver process.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use log::{error, warn};
use understudy_protocol::RegisteredInfo;

use crate::class::net::multicast::read_multicast_list;
use crate::class::net::netlink::{Events, LinkInfo, LinkMonitor};
use understudy_protocol::format_mac;

use crate::class::net::shadow::{NetShadow, RxMode, TapConfig, Undo};
use crate::class::net::tap::Tap;

/// How often the TAP's multicast list is re-read (multicast.rs: no event announces it).
const MULTICAST_POLL: Duration = Duration::from_millis(200);
/// How long the TAP keeps its carrier for a successor whose link is not up yet.
pub const CARRIER_HOLD: Duration = Duration::from_secs(10);

pub struct Interface {
    pub tap: Tap,
    links: LinkMonitor,
    ifindex: i32,
    /// The TAP as the last netlink message (or our own change) described it.
    link: Option<LinkInfo>,
    multicast: Vec<[u8; 6]>,
    next_multicast_poll: Instant,
    /// During a handover the TAP keeps its predecessor's carrier until the
    /// successor, opened, reports its link up (e1000's comes a second or two
    /// after OPEN), or until this deadline: a link that stays down is shown.
    pub carrier_held_until: Option<Instant>,
    /// The TAP's queues for the driver (`run --queues`).
    queues: u16,
    /// Log lines' prefix: the device.
    pub label: String,
}

impl Interface {
    pub fn create(ifname: &str, queues: u16, label: String) -> Result<Self, String> {
        let tap = Tap::create(ifname, queues).map_err(|e| e.to_string())?;
        let ifindex = tap.ifindex().map_err(|e| e.to_string())?;
        let links = LinkMonitor::open().map_err(|e| format!("cannot watch {ifname} through rtnetlink: {e}"))?;
        links.request_link(ifindex).map_err(|e| format!("netlink RTM_GETLINK {ifname}: {e}"))?;
        Ok(Interface { tap, links, ifindex, link: None, multicast: Vec::new(), next_multicast_poll: Instant::now(),
                       carrier_held_until: None, queues, label })
    }

    pub fn name(&self) -> &str {
        self.tap.name()
    }

    /// The TAP's queues for the driver.
    pub fn queues(&self) -> u16 {
        self.queues
    }

    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Readable when netlink has news of the TAP.
    pub fn netlink_fd(&self) -> BorrowedFd<'_> {
        self.links.as_fd()
    }

    pub fn read_link_changes(&mut self) {
        match self.links.drain() {
            Ok(Events::Links(links)) => {
                if let Some(latest) = links.into_iter().rfind(|l| l.ifindex == self.ifindex) {
                    self.link = Some(latest);
                    self.read_multicast_list();
                }
            }
            Ok(Events::Overrun) => {
                warn!("{}: netlink messages about {} were lost (queue overrun); asking the kernel again",
                      self.label, self.tap.name());
                if let Err(e) = self.links.request_link(self.ifindex) {
                    error!("{}: netlink RTM_GETLINK {}: {e}", self.label, self.tap.name());
                }
            }
            Err(e) => error!("{}: reading netlink: {e}", self.label),
        }
    }

    fn read_multicast_list(&mut self) {
        match read_multicast_list(self.ifindex) {
            Ok(list) => self.multicast = list,
            Err(e) => error!("{}: cannot read {}: {e}", self.label, crate::class::net::multicast::DEV_MCAST),
        }
    }

    pub fn next_multicast_poll(&self) -> Instant {
        self.next_multicast_poll
    }

    /// Re-reads the multicast list if it is time to.
    pub fn poll_multicast(&mut self, now: Instant) {
        if now >= self.next_multicast_poll {
            self.read_multicast_list();
            self.next_multicast_poll = now + MULTICAST_POLL;
        }
    }

    /// The TAP's configuration, once netlink has described it.
    pub fn config(&self, shadow: &NetShadow) -> Option<TapConfig> {
        let link = self.link.as_ref()?;
        Some(TapConfig {
            up: link.up,
            mtu: link.mtu.unwrap_or(shadow.mtu()),
            mac: link.mac.unwrap_or(shadow.mac()),
            rx: RxMode { promisc: link.promisc, allmulti: link.allmulti, multicast: self.multicast.clone() },
            queues: self.queues,
        })
    }

    /// A first driver registered: the TAP takes its address and MTU.
    pub fn take_registration(&mut self, r: &RegisteredInfo) -> std::io::Result<()> {
        self.tap.set_mac(r.dev_addr)?;
        self.tap.set_mtu(r.mtu)?;
        if let Some(link) = self.link.as_mut() {
            link.mac = Some(r.dev_addr);
            link.mtu = Some(r.mtu);
        }
        Ok(())
    }

    /// Puts the TAP back as the driver has it (the netlink message this
    /// causes will agree; the cached state is updated now so the next step
    /// does not undo twice).
    pub fn undo(&mut self, undo: Undo) {
        let (dev, ifname) = (&self.label, self.tap.name().to_string());
        let link = self.link.as_mut().expect("a TapConfig needs a link");
        let result = match &undo {
            Undo::Mtu { restore, why } => {
                warn!("{dev}: {ifname}: {why}; its MTU is back to {restore}");
                link.mtu = Some(*restore);
                self.tap.set_mtu(*restore)
            }
            Undo::Mac { restore, why } => {
                warn!("{dev}: {ifname}: {why}; its address is back to {}", format_mac(restore));
                link.mac = Some(*restore);
                self.tap.set_mac(*restore)
            }
            Undo::Down { why } => {
                warn!("{dev}: {ifname}: {why}; the interface is down again (`ip link set {ifname} up` retries)");
                link.up = false;
                self.tap.set_down()
            }
        };
        if let Err(e) = result {
            error!("{dev}: could not undo the change on {ifname}: {e}; it now differs from the driver's");
        }
    }

    /// The TAP keeps the carrier it shows until a successor's link is up or `CARRIER_HOLD` passes.
    pub fn hold_carrier(&mut self, now: Instant) {
        self.carrier_held_until = Some(now + CARRIER_HOLD);
    }
}

/// The kernel's statistics of the TAP `ifname`: packets, bytes and drops of
/// `direction` ("rx" or "tx"). The driver process reads and writes the
/// TAP's frames itself, so these are the only counts the daemon can trust.
pub fn tap_statistics(ifname: &str, direction: &str) -> std::io::Result<(u64, u64, u64)> {
    let read = |counter: &str| -> std::io::Result<u64> {
        let path = format!("/sys/class/net/{ifname}/statistics/{direction}_{counter}");
        let text = std::fs::read_to_string(&path)?;
        text.trim().parse().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{path}: {e}")))
    };
    Ok((read("packets")?, read("bytes")?, read("dropped")?))
}
