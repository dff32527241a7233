// SPDX-License-Identifier: GPL-2.0
//! The device as the daemon holds it (docs/design.md §4): through VFIO, its
//! DMA confined by the IOMMU, or bound to uio_pci_generic on a machine
//! without one, its DMA unconfined. Everything above this -- the shadow,
//! recovery, replay -- sees one device, and the driver process gets the
//! back-end's files on its command line (`Handoff`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::uio::Uio;
use crate::{DeviceAccess, PciAddress, StopReport, Vfio, VfioError};

pub enum Device {
    Vfio(Vfio),
    Uio(Uio),
}

/// What the driver process is given for its device: options and the fds
/// they name, which it inherits.
pub struct Handoff<'a> {
    pub args: Vec<(&'static str, String)>,
    pub fds: Vec<BorrowedFd<'a>>,
}

impl Device {
    pub fn address(&self) -> &PciAddress {
        match self {
            Device::Vfio(v) => v.address(),
            Device::Uio(u) => u.address(),
        }
    }

    /// The IOMMU group; `None`: nothing confines the device's DMA.
    pub fn iommu_group(&self) -> Option<u32> {
        match self {
            Device::Vfio(v) => Some(v.group_id()),
            Device::Uio(_) => None,
        }
    }

    pub fn handoff(&self) -> Handoff<'_> {
        match self {
            Device::Vfio(v) => Handoff { args: vec![("--device-fd", v.device_fd().as_raw_fd().to_string())], fds: vec![v.device_fd()] },
            Device::Uio(u) => {
                let fds = u.driver_fds();
                let list: Vec<String> = fds.iter().map(|f| f.map_or(-1, |f| f.as_raw_fd()).to_string()).collect();
                Handoff { args: vec![("--uio-fds", list.join(","))], fds: fds.into_iter().flatten().collect() }
            }
        }
    }

    /// Maps memory for the device's DMA through the IOMMU. Without one there
    /// is nothing to map: the device reaches all memory by physical address.
    pub fn map_dma(&mut self, vaddr: *mut u8, iova: u64, size: u64, access: DeviceAccess) -> Result<(), VfioError> {
        match self {
            Device::Vfio(v) => v.map_dma(vaddr, iova, size, access),
            Device::Uio(_) => Ok(()),
        }
    }

    pub fn unmap_all(&mut self) -> Result<(), VfioError> {
        match self {
            Device::Vfio(v) => v.unmap_all(),
            Device::Uio(_) => Ok(()),
        }
    }

    pub fn mapped_bytes(&self) -> u64 {
        match self {
            Device::Vfio(v) => v.mapped_bytes(),
            Device::Uio(_) => 0,
        }
    }

    pub fn stop_device(&self) -> StopReport {
        match self {
            Device::Vfio(v) => v.stop_device(),
            Device::Uio(u) => u.stop_device(),
        }
    }

    pub fn allow_intx(&self) -> io::Result<()> {
        match self {
            Device::Vfio(v) => v.allow_intx(),
            Device::Uio(u) => u.allow_intx(),
        }
    }

    /// VFIO's request interrupt; a UIO device's removal is not announced.
    pub fn watch_removal(&mut self) -> Result<(), VfioError> {
        match self {
            Device::Vfio(v) => v.watch_removal(),
            Device::Uio(_) => Err(VfioError::Os { what: "a uio_pci_generic device's removal request".into(),
                                                  source: io::ErrorKind::Unsupported.into() }),
        }
    }

    pub fn removal_fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Device::Vfio(v) => v.removal_fd(),
            Device::Uio(_) => None,
        }
    }
}
