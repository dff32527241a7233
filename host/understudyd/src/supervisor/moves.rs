// SPDX-License-Identifier: GPL-2.0
//! What a move between devices adds to the handover (docs/migration.md): the
//! devices a front-end may go to (standbys, probed at `run`), a move's
//! destination, which device serves, the announcement after a move, a device
//! the kernel takes back, and the device a parked front-end gives back. The
//! moves themselves are verbs (verbs.rs).

use log::{info, warn};
use understudy_api::DriverState;
use understudy_shm::DriverMemory;
use understudy_vfio::{Device, PciAddress, Vfio};

use super::link::Spawn;
use super::successor::Loader;
use super::{Fault, Supervisor};
use crate::class::{Class, Log, Offering};
use crate::handover::Driver;
use crate::supervisor::standby::Standbys;

impl<C: Class> Supervisor<C> {
    /// The serving device becomes `device`: the other device of the move
    /// under way (its destination, or on a rollback its origin).
    pub(super) fn serve_on(&mut self, device: &PciAddress) -> Result<&Device, String> {
        let before = self.devices.address().clone();
        if self.devices.serve_on(device)? {
            self.now_serving();
            if std::mem::take(&mut self.succession.device_removed) {
                // The kernel waits for the device it asked back, until every
                // process that has it open is gone: no rollback will need it.
                self.end_template("its device is being removed");
                self.devices.other = None;
                info!("{before}: released to the kernel, which is removing it");
            }
        }
        Ok(self.devices.serving().expect("serve_on made it serve"))
    }

    /// Log lines and `status` name the device that serves now.
    fn now_serving(&mut self) {
        let address = self.devices.address().to_string();
        let group = self.devices.serving().and_then(Device::iommu_group).unwrap_or(0);
        info!("{}: {} is served by this device from now on", address, self.class.name());
        self.class.relabel(&address);
        self.set_status(|s| {
            s.device = address;
            s.dma.iommu_group = group;
        });
    }

    /// After a move (and its rollback): the front-end's peers learn where it is.
    pub(super) fn announce(&mut self) {
        let label = self.label().to_string();
        if let Some(frames) = self.class.announce(&label) {
            self.succession.announced(frames);
        }
    }

    /// The serving device is given back to the kernel, which is removing it;
    /// the front-end keeps its settings and its carrier (the stack queues and
    /// TCP retransmits, as across any outage) until it is given a device.
    pub(super) fn give_device_back(&mut self) {
        self.end_template("its device is being removed");
        self.devices.release();
        self.succession.device_removed = false;
        self.class.drop_hold();
        warn!("{}: released to the kernel, which is removing it; no standby is left, so {} waits without a \
               device: `understudy migrate {} --to ADDR` gives it one", self.label(), self.class.name(),
              self.class.name());
        self.set_status(|s| {
            s.driver.state = DriverState::Parked;
            s.driver.pid = None;
        });
    }

    /// The device a move to `to` takes: a standby's, or opened now -- which
    /// checks it is present, bound to vfio-pci and free.
    pub(super) fn destination(&mut self, to: &PciAddress) -> Result<Device, String> {
        if self.class.memory().bus_chunks_fd().is_some() {
            // Its arena is hugepages the destination would reach unconfined too.
            return Err(format!("{} runs without an IOMMU (--no-iommu): it cannot move to another device", self.class.name()));
        }
        if to == self.devices.address() && self.devices.serving().is_some() {
            return Err(format!("{} already serves {}", to, self.class.name()));
        }
        if let Some(vfio) = self.standbys.lend(to) {
            return Ok(vfio);
        }
        open_device(to).map_err(|e| format!("the destination cannot be taken: {e}"))
    }

    /// The kernel asked for `device` back. A standby is released at once;
    /// the serving device's driver is ended, and the front-end fails over to
    /// a standby (agent.rs) or, without one, goes with the device.
    pub(super) fn removal_requested(&mut self, device: &PciAddress) {
        if device != self.devices.address() {
            warn!("{}: {device}, a standby, is being removed: released", self.label());
            drop(self.standbys.release(device));
            let standby = self.standbys.status();
            self.set_status(|s| s.handovers.standby = standby);
            return;
        }
        warn!("{device}: the kernel asks for the device back (hot-unplug or unbind)");
        self.succession.device_removed = true;
        if self.link.is_some() {
            self.end_driver(&Fault::DeviceRemoved.describe(), true);
        }
    }
}

/// `run --standby`: each device is opened, its driver loaded and probed on
/// scratch memory (successor.rs), then stopped and kept for the front-end;
/// what its driver registered narrows what the front-end advertises.
pub(super) fn declare_standbys<C: Class>(spawn: &Spawn, standby: Vec<Driver>, real: &dyn DriverMemory)
                                         -> Result<Standbys<Device, <C::Log as Log>::Offer>, String> {
    let mut standbys = Standbys::new();
    for driver in standby {
        let address = driver.device.clone();
        let refused = |why: String| format!("standby {address}: {why}");
        let mut vfio = open_device(&address).map_err(|e| refused(e.to_string()))?;
        let mut loader = Loader::<C>::probe(spawn, &mut vfio, &driver.modules, real).map_err(refused)?;
        let limit = spawn.detection.probe * 2;
        let loaded = loader.wait(limit, |level, text| info!("{address}: standby's driver ({level}): {text}"));
        loader.finish_probe(&mut vfio, real).map_err(refused)?;
        let registration = loaded.map_err(refused)?.registration
            .ok_or_else(|| refused(format!("its driver registered no {} when it probed", C::Log::REGISTERS)))?;
        info!("{address}: standby: {}", registration.describe());
        standbys.declare(driver, &registration, vfio);
    }
    Ok(standbys)
}

/// Opens a device through VFIO and asks to be told when the kernel wants it
/// back (`removal_requested`); a device that cannot tell is used all the same.
pub(super) fn open_device(address: &PciAddress) -> Result<Device, understudy_vfio::VfioError> {
    let mut vfio = Device::Vfio(Vfio::open(address)?);
    if let Err(e) = vfio.watch_removal() {
        warn!("{address}: {e}: its hot-unplug will wait until understudyd releases it");
    }
    Ok(vfio)
}
