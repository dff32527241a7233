// SPDX-License-Identifier: GPL-2.0
//! The devices an interface may move to (`understudy run --standby`, and the
//! device it last moved from), each kept open for it, and the least common
//! denominator the interface advertises so that a move never takes away
//! what the stack relies on (docs/migration.md, "Standby devices").
//!
//! `D` is what holds a device for the interface (the daemon's `Vfio`).

use understudy_api::Standby;
use understudy_protocol::RegisteredInfo;
use understudy_vfio::PciAddress;

use crate::handover::Driver;
use crate::class::net::shadow::offload_names;

struct Entry<D> {
    driver: Driver,
    /// The offloads its driver registered when it was probed or last served.
    offloads: u32,
    /// The open device; `None` while a move under way has it.
    held: Option<D>,
}

/// What every declared device's driver offers: the interface advertises no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mask {
    offloads: u32,
    min_mtu: u32,
    max_mtu: u32,
}

pub struct Standbys<D> {
    entries: Vec<Entry<D>>,
    /// `None` without standbys: the interface advertises what its driver offers.
    mask: Option<Mask>,
    /// The offloads each device's driver registered, unmasked, when it last served.
    served: Vec<(PciAddress, u32)>,
}

impl<D> Standbys<D> {
    pub fn new() -> Self {
        Standbys { entries: Vec::new(), mask: None, served: Vec::new() }
    }

    /// `driver` may take the interface; `probed` is what it registered when probed.
    pub fn declare(&mut self, driver: Driver, probed: &RegisteredInfo, held: D) {
        self.narrow(probed);
        self.entries.push(Entry { driver, offloads: probed.offloads, held: Some(held) });
    }

    fn narrow(&mut self, r: &RegisteredInfo) {
        let m = self.mask.get_or_insert(Mask { offloads: u32::MAX, min_mtu: 0, max_mtu: u32::MAX });
        m.offloads &= r.offloads;
        m.min_mtu = m.min_mtu.max(r.min_mtu);
        m.max_mtu = m.max_mtu.min(r.max_mtu);
    }

    /// What the interface shows of a driver that registered `r` on `device`:
    /// with standbys, only what they all offer (and `r` narrows it further).
    pub fn mask(&mut self, device: &PciAddress, mut r: RegisteredInfo) -> RegisteredInfo {
        self.served.retain(|(d, _)| d != device);
        self.served.push((device.clone(), r.offloads));
        if self.mask.is_some() {
            self.narrow(&r);
            let m = self.mask.expect("narrowed");
            r.offloads &= m.offloads;
            (r.min_mtu, r.max_mtu) = (m.min_mtu, m.max_mtu);
        }
        r
    }

    /// Lends a move the standby `device`, if it is one and not lent already.
    pub fn lend(&mut self, device: &PciAddress) -> Option<D> {
        self.entries.iter_mut().find(|e| e.driver.device == *device)?.held.take()
    }

    /// Whether a failover has a standby to take.
    pub fn available(&self) -> bool {
        self.entries.iter().any(|e| e.held.is_some())
    }

    /// The devices held, with their addresses.
    pub fn held(&self) -> impl Iterator<Item = (&PciAddress, &D)> {
        self.entries.iter().filter_map(|e| e.held.as_ref().map(|d| (&e.driver.device, d)))
    }

    /// Lends a failover the first standby not lent already.
    pub fn lend_any(&mut self) -> Option<(Driver, D)> {
        let e = self.entries.iter_mut().find(|e| e.held.is_some())?;
        Some((e.driver.clone(), e.held.take().expect("found held")))
    }

    /// The kernel asked for the standby `device` back: it is released.
    pub fn release(&mut self, device: &PciAddress) -> Option<D> {
        let at = self.entries.iter().position(|e| e.driver.device == *device)?;
        self.entries.remove(at).held
    }

    /// A move is over. If it held, the destination is no standby any more
    /// and `origin` (the driver it left) is one, if its device is still held
    /// (`left`: the kernel may have taken it back); otherwise the
    /// destination, `left`, goes back where it was lent from -- or is
    /// dropped if it was no standby.
    pub fn move_over(&mut self, held: bool, origin: Driver, destination: &PciAddress, left: Option<D>) {
        if held {
            self.entries.retain(|e| e.driver.device != *destination);
            if let Some(left) = left {
                let offloads = self.served.iter().find(|(d, _)| *d == origin.device).map_or(0, |&(_, o)| o);
                self.entries.push(Entry { driver: origin, offloads, held: Some(left) });
            }
        } else if let Some(e) = self.entries.iter_mut().find(|e| e.driver.device == *destination) {
            e.held = left;
        }
    }

    /// For `status`.
    pub fn status(&self) -> Vec<Standby> {
        self.entries.iter().map(|e| Standby {
            device: e.driver.device.to_string(),
            modules: e.driver.modules.clone(),
            offloads: offload_names(e.offloads),
        }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use understudy_api::ModuleInfo;
    use understudy_protocol::{OFFLOAD_CSUM, OFFLOAD_TSO4, OFFLOAD_TSO6};

    fn driver(address: &str, module: &str) -> Driver {
        Driver { device: address.parse().unwrap(), modules: vec![ModuleInfo { path: module.into(), sha256: "0".into() }] }
    }

    fn registered(offloads: u32, max_mtu: u32) -> RegisteredInfo {
        RegisteredInfo { perm_addr: [2, 0, 0, 0, 0, 1], dev_addr: [2, 0, 0, 0, 0, 1], mtu: 1500, min_mtu: 60, max_mtu,
                         features: 0, hw_features: 0, n_tx_queues: 1, n_rx_queues: 1, driver: "x".into(),
                         version: "".into(), offloads }
    }

    #[test]
    fn without_standbys_the_interface_shows_what_its_driver_offers() {
        let mut s = Standbys::<()>::new();
        let a: PciAddress = "0000:00:03.0".parse().unwrap();
        assert_eq!(s.mask(&a, registered(OFFLOAD_CSUM | OFFLOAD_TSO6, 16110)), registered(OFFLOAD_CSUM | OFFLOAD_TSO6, 16110));
    }

    #[test]
    fn with_standbys_it_shows_what_they_all_offer_and_a_move_swaps_the_roles() {
        let mut s = Standbys::new();
        let (e1000, rtl) = (driver("0000:00:03.0", "e1000.ko"), driver("0000:00:04.0", "8139cp.ko"));
        s.declare(rtl.clone(), &registered(OFFLOAD_CSUM | OFFLOAD_TSO4, 4096), "rtl held");
        let shown = s.mask(&e1000.device, registered(OFFLOAD_CSUM | OFFLOAD_TSO4 | OFFLOAD_TSO6, 16110));
        assert_eq!((shown.offloads, shown.min_mtu, shown.max_mtu), (OFFLOAD_CSUM | OFFLOAD_TSO4, 60, 4096));
        assert_eq!(s.status()[0].modules, rtl.modules);

        // A move to the standby lends it; a refusal gives it back.
        assert_eq!(s.lend(&rtl.device), Some("rtl held"));
        assert_eq!(s.lend(&rtl.device), None, "lent once");
        s.move_over(false, e1000.clone(), &rtl.device, Some("rtl held"));
        assert!(s.available());

        // A failover takes the first one not lent.
        assert_eq!(s.lend_any().map(|(d, held)| (d.device, held)), Some((rtl.device.clone(), "rtl held")));
        assert!(!s.available() && s.lend_any().is_none());

        // A move that holds: the origin is the standby, the mask unchanged.
        s.move_over(true, e1000.clone(), &rtl.device, Some("e1000 held"));
        let shown = s.mask(&rtl.device, registered(OFFLOAD_CSUM | OFFLOAD_TSO4, 4096));
        assert_eq!(shown.offloads, OFFLOAD_CSUM | OFFLOAD_TSO4);
        let standby = s.status();
        assert_eq!(standby.iter().map(|s| s.device.as_str()).collect::<Vec<_>>(), vec!["0000:00:03.0"]);
        assert_eq!(standby[0].offloads, vec!["tx-checksum", "tso4", "tso6"], "what e1000 itself registered");

        // A failover from a device the kernel took back: the destination is
        // no standby, and the device left is none either.
        let (to, _) = s.lend_any().expect("e1000 is a standby");
        s.move_over(true, rtl.clone(), &to.device, None);
        assert!(s.status().is_empty() && !s.available());
    }
}
