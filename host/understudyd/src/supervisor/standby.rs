// SPDX-License-Identifier: GPL-2.0
//! The devices a front-end may move to (`understudy run --standby`, and the
//! device it last moved from), each kept open for it, and the least common
//! denominator the front-end advertises so that a move never takes away
//! what applications rely on (docs/migration.md, "Standby devices").
//!
//! `D` is what holds a device for the front-end (the daemon's `Vfio`), `O`
//! what its class's drivers offer (`Offering`).

use understudy_api::Standby;
use understudy_vfio::PciAddress;

use crate::class::Offering;
use crate::handover::Driver;

struct Entry<D, O> {
    driver: Driver,
    /// What its driver registered when it was probed or last served.
    offer: O,
    /// The open device; `None` while a move under way has it.
    held: Option<D>,
}

pub struct Standbys<D, O> {
    entries: Vec<Entry<D, O>>,
    /// What every declared device's driver offers: the front-end advertises
    /// no more. `None` without standbys: it advertises what its driver offers.
    common: Option<O>,
    /// What each device's driver registered, unmasked, when it last served.
    served: Vec<(PciAddress, O)>,
}

impl<D, O: Offering> Standbys<D, O> {
    pub fn new() -> Self {
        Standbys { entries: Vec::new(), common: None, served: Vec::new() }
    }

    /// `driver` may take the front-end; `probed` is what it registered when probed.
    pub fn declare(&mut self, driver: Driver, probed: &O, held: D) {
        self.common = Some(probed.narrow(self.common.as_ref()));
        self.entries.push(Entry { driver, offer: probed.clone(), held: Some(held) });
    }

    /// What the front-end shows of a driver that registered `offer` on
    /// `device`: with standbys, only what they all offer (and `offer`
    /// narrows it further).
    pub fn mask(&mut self, device: &PciAddress, offer: O) -> O {
        self.served.retain(|(d, _)| d != device);
        self.served.push((device.clone(), offer.clone()));
        match self.common.take() {
            Some(common) => {
                let common = offer.narrow(Some(&common));
                let shown = offer.within(&common);
                self.common = Some(common);
                shown
            }
            None => offer,
        }
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
                // The origin served, so it registered: what it offered then.
                if let Some((_, offer)) = self.served.iter().find(|(d, _)| *d == origin.device) {
                    self.entries.push(Entry { driver: origin, offer: offer.clone(), held: Some(left) });
                }
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
            offloads: e.offer.feature_names(),
        }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use understudy_api::ModuleInfo;
    use understudy_protocol::{RegisteredInfo, OFFLOAD_CSUM, OFFLOAD_TSO4, OFFLOAD_TSO6};

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
        let mut s = Standbys::<(), RegisteredInfo>::new();
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
