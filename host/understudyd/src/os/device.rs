// SPDX-License-Identifier: GPL-2.0
//! The PCI device, through VFIO or without an IOMMU through UIO: its DMA
//! arena's IOMMU mapping, its identity, and stopping it when its driver is
//! gone (docs/design.md §4).

use std::io;
use std::path::Path;
use std::time::Instant;

use understudy_api::{DeviceClass, DeviceStop};
use understudy_protocol::PciIds;
use understudy_shm::DriverMemory;
use understudy_vfio::{bus_master_enabled, DeviceAccess, PciAddress, Device, VfioError};

use crate::handover::record::round_ms;

/// Maps the arena for the device's DMA (docs/protocol.md): the runtime's
/// part read-write, the packet pool read-only. The device has no business
/// writing the pool (received frames are copied into it by the driver
/// process), so a driver that points its device's receive descriptors at
/// pool buffers cannot have it overwrite frames the host still holds and
/// would give a restarted driver again.
pub fn map_arena(vfio: &mut Device, shm: &dyn DriverMemory) -> Result<(), VfioError> {
    let g = shm.geometry();
    let (base, pool) = (shm.arena().base(), g.pool_size());
    vfio.map_dma(base, g.arena_iova, pool, DeviceAccess::Read)?;
    // SAFETY: pool < arena_size: the pointer stays inside the arena mapping.
    vfio.map_dma(unsafe { base.add(pool as usize) }, g.arena_iova + pool, g.arena_size - pool, DeviceAccess::ReadWrite)
}

/// Stops the device: bus mastering off, interrupts off, reset. Returns what
/// was done and how long it took, in milliseconds. The arena's IOMMU mapping
/// is kept: the stopped device cannot reach it, and dropping and re-creating
/// 64 MiB of mapping cost ~70 ms of every restart under the lab's emulated IOMMU.
pub fn stop(vfio: &Device) -> (DeviceStop, f64) {
    let began = Instant::now();
    let report = vfio.stop_device();
    let stopped = DeviceStop {
        bus_master_off: report.command_after.is_some_and(|c| !bus_master_enabled(c)),
        irqs_disabled: report.irqs_disabled,
        reset: report.reset.clone().err().unwrap_or_else(|| "done".into()),
        iommu_unmapped: false,
    };
    (stopped, round_ms(began.elapsed()))
}

/// The device's identity as its driver's ID table matches it (sysfs).
pub fn pci_ids(address: &PciAddress) -> io::Result<PciIds> {
    let dir = Path::new("/sys/bus/pci/devices").join(address.to_string());
    let read = |name: &str| -> io::Result<u32> {
        let text = std::fs::read_to_string(dir.join(name))?;
        u32::from_str_radix(text.trim().trim_start_matches("0x"), 16)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", dir.join(name).display())))
    };
    Ok(PciIds {
        vendor: read("vendor")? as u16,
        device: read("device")? as u16,
        subvendor: read("subsystem_vendor")? as u16,
        subdevice: read("subsystem_device")? as u16,
        class: read("class")?,
    })
}

/// The devices an interface holds through VFIO: the one serving it -- none
/// while it is parked, its device removed and no other given yet -- and,
/// while a move is under way, the other one: where it goes, or once the
/// successor runs there, where it came from (docs/migration.md).
pub struct Devices {
    serving: Option<Device>,
    /// The serving device's address, or the last one's while parked.
    address: PciAddress,
    pub other: Option<Device>,
}

impl Devices {
    pub fn new(serving: Device) -> Self {
        Devices { address: serving.address().clone(), serving: Some(serving), other: None }
    }

    /// The serving device, or the last one while parked: log lines and `status` name it.
    pub fn address(&self) -> &PciAddress {
        &self.address
    }

    pub fn serving(&self) -> Option<&Device> {
        self.serving.as_ref()
    }

    pub fn serving_mut(&mut self) -> Option<&mut Device> {
        self.serving.as_mut()
    }

    /// `device` serves from now on: the other device, which takes the
    /// serving one's place (and the serving one, if any, becomes the other).
    /// True if another device serves now (a hot-plugged one may have the
    /// address of the one it replaces).
    pub fn serve_on(&mut self, device: &PciAddress) -> Result<bool, String> {
        if self.serving.is_some() && device == &self.address {
            return Ok(false);
        }
        let other = self.other.take().filter(|o| o.address() == device)
            .ok_or_else(|| format!("{device} is not the device of the move under way"))?;
        self.address = device.clone();
        self.other = self.serving.replace(other);
        Ok(true)
    }

    /// Gives the serving device back to the kernel (it is being removed).
    pub fn release(&mut self) {
        self.serving = None;
    }
}

/// The class whose side serves the device, from its PCI class code; `None`
/// if sysfs cannot say (opening the device then says why it is not there).
pub fn device_class(address: &PciAddress) -> Option<Result<DeviceClass, String>> {
    let class = pci_ids(address).ok()?.class >> 16;
    Some(match class {
        0x01 => Ok(DeviceClass::Block),
        0x02 => Ok(DeviceClass::Net),
        _ => Err(format!("{address} is a device of PCI base class {class:#04x}: understudy serves network (0x02) \
                          and mass-storage (0x01) devices")),
    })
}
