// SPDX-License-Identifier: GPL-2.0
//! VFIO as understudyd uses it (docs/design.md §4): the host opens the
//! container, group and device and keeps them; the driver process gets only a
//! duplicate of the device fd. When a driver dies the host still holds
//! everything, so it can stop the device before anything else happens, and
//! drop the IOMMU mappings when it gives the device up.

mod backend;
mod sys;
pub mod uio;

pub use backend::{Device, Handoff};

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use sys::*;

pub const SYSFS_PCI_DEVICES: &str = "/sys/bus/pci/devices";
pub(crate) const PCI_COMMAND: u64 = 0x04;
const PCI_COMMAND_MASTER: u16 = 1 << 2;
pub(crate) const PCI_COMMAND_INTX_DISABLE: u16 = 1 << 10;

#[derive(Debug, thiserror::Error)]
pub enum VfioError {
    #[error("{0:?} is not a PCI address (expected DDDD:BB:DD.F, e.g. 0000:00:02.0)")]
    BadAddress(String),
    #[error("no PCI device {0} (nothing at {1})")]
    NoSuchDevice(PciAddress, PathBuf),
    #[error("{0} has no IOMMU group: the IOMMU is off or missing (boot with intel_iommu=on or amd_iommu=on; check `dmesg | grep -i -e DMAR -e IOMMU`)")]
    NoIommuGroup(PciAddress),
    #[error("{0} is bound to the kernel driver {1}: unbind it and bind vfio-pci first (echo vfio-pci > /sys/bus/pci/devices/{0}/driver_override; echo {0} > /sys/bus/pci/devices/{0}/driver/unbind; echo {0} > /sys/bus/pci/drivers_probe)")]
    BoundToKernelDriver(PciAddress, String),
    #[error("{0} is not bound to vfio-pci (modprobe vfio-pci; echo vfio-pci > /sys/bus/pci/devices/{0}/driver_override; echo {0} > /sys/bus/pci/drivers_probe)")]
    NotBoundToVfio(PciAddress),
    #[error("IOMMU group {group} of {addr} is not viable: another device in it is bound to a host driver")]
    GroupNotViable { addr: PciAddress, group: u32 },
    #[error("IOMMU group {0} is already open (another understudyd, or a VMM, owns it)")]
    GroupBusy(u32),
    #[error("the kernel's VFIO does not offer the type1v2 IOMMU")]
    NoType1v2,
    #[error("{what}: {source}")]
    Os { what: String, source: io::Error },
}

fn os(what: impl Into<String>) -> impl FnOnce(io::Error) -> VfioError {
    let what = what.into();
    move |source| VfioError::Os { what, source }
}

/// A PCI address in sysfs' form, domain included.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress(String);

impl FromStr for PciAddress {
    type Err = VfioError;
    fn from_str(s: &str) -> Result<Self, VfioError> {
        let bad = || VfioError::BadAddress(s.to_string());
        // Accept the short form BB:DD.F too; sysfs always names the domain.
        let full = if s.matches(':').count() == 1 { format!("0000:{s}") } else { s.to_string() };
        let (domain, rest) = full.split_once(':').ok_or_else(bad)?;
        let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
        let (dev, func) = rest.split_once('.').ok_or_else(bad)?;
        let hex = |f: &str, width: usize, max: u32| {
            f.len() == width && u32::from_str_radix(f, 16).is_ok_and(|v| v <= max)
        };
        if !(hex(domain, 4, 0xffff) && hex(bus, 2, 0xff) && hex(dev, 2, 0x1f) && hex(func, 1, 7)) {
            return Err(bad());
        }
        Ok(PciAddress(full.to_ascii_lowercase()))
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PciAddress {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The address as one number: domain << 16 | bus << 8 | device << 3 | function.
    pub fn number(&self) -> u32 {
        let field = |f: &str| u32::from_str_radix(f, 16).expect("checked when parsed");
        let (domain, rest) = self.0.split_once(':').expect("checked when parsed");
        let (bus, rest) = rest.split_once(':').expect("checked when parsed");
        let (dev, func) = rest.split_once('.').expect("checked when parsed");
        field(domain) << 16 | field(bus) << 8 | field(dev) << 3 | field(func)
    }
}

pub(crate) fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path).ok()?.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// What sysfs says about a device before anything is opened: it exists, it
/// has an IOMMU group, and it is bound to vfio-pci. Returns the group.
pub fn check_device(sysfs_devices: &Path, addr: &PciAddress) -> Result<u32, VfioError> {
    let dir = sysfs_devices.join(addr.as_str());
    if !dir.exists() {
        return Err(VfioError::NoSuchDevice(addr.clone(), dir));
    }
    let group = link_name(&dir.join("iommu_group")).ok_or_else(|| VfioError::NoIommuGroup(addr.clone()))?;
    match link_name(&dir.join("driver")).as_deref() {
        Some("vfio-pci") => {}
        Some(other) => return Err(VfioError::BoundToKernelDriver(addr.clone(), other.to_string())),
        None => return Err(VfioError::NotBoundToVfio(addr.clone())),
    }
    group.parse().map_err(|_| VfioError::NoIommuGroup(addr.clone()))
}

/// PCI_COMMAND with DMA off and legacy interrupts disabled.
pub fn quiesced_command(command: u16) -> u16 {
    (command & !PCI_COMMAND_MASTER) | PCI_COMMAND_INTX_DISABLE
}

pub fn bus_master_enabled(command: u16) -> bool {
    command & PCI_COMMAND_MASTER != 0
}

/// What stopping a device did; each step is attempted whatever the others did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReport {
    pub command_before: Option<u16>,
    pub command_after: Option<u16>,
    pub irqs_disabled: bool,
    pub reset: Result<(), String>,
}

/// Whether tearing an interrupt index down (DATA_NONE | ACTION_TRIGGER,
/// count 0) left it off. vfio-pci answers EINVAL for an index that is not
/// the one in use: nothing was on there to turn off.
fn torn_down(result: &io::Result<i32>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => e.raw_os_error() == Some(libc::EINVAL),
    }
}

fn ioctl<T>(fd: BorrowedFd, request: libc::c_ulong, arg: *mut T) -> io::Result<i32> {
    // SAFETY: `arg` points to the struct this request expects, sized by argsz.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request, arg) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

fn ioctl_val(fd: BorrowedFd, request: libc::c_ulong, arg: libc::c_ulong) -> io::Result<i32> {
    // SAFETY: requests that take an integer argument.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request, arg) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// What a device may do with memory mapped for its DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceAccess {
    Read,
    ReadWrite,
}

/// An opened device with its container and group, and the DMA mappings made.
pub struct Vfio {
    addr: PciAddress,
    group_id: u32,
    container: File,
    _group: File,
    device: OwnedFd,
    flags: u32,
    num_irqs: u32,
    config_offset: u64,
    mappings: Vec<(u64, u64)>,
    /// Signalled when the kernel asks for the device back (`watch_removal`).
    removal: Option<OwnedFd>,
}

impl Vfio {
    /// Opens `addr` after checking it in sysfs; nothing stays open on error.
    pub fn open(addr: &PciAddress) -> Result<Self, VfioError> {
        let group_id = check_device(Path::new(SYSFS_PCI_DEVICES), addr)?;
        let rw = |p: &str| OpenOptions::new().read(true).write(true).open(p);
        let container = rw("/dev/vfio/vfio").map_err(os("open /dev/vfio/vfio (modprobe vfio-pci)"))?;
        if ioctl_val(container.as_fd(), VFIO_GET_API_VERSION, 0).map_err(os("VFIO_GET_API_VERSION"))? != VFIO_API_VERSION {
            return Err(VfioError::Os { what: "VFIO API version".into(), source: io::Error::from(io::ErrorKind::Unsupported) });
        }
        if ioctl_val(container.as_fd(), VFIO_CHECK_EXTENSION, VFIO_TYPE1V2_IOMMU).map_err(os("VFIO_CHECK_EXTENSION"))? != 1 {
            return Err(VfioError::NoType1v2);
        }
        let group = match rw(&format!("/dev/vfio/{group_id}")) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Err(VfioError::GroupBusy(group_id)),
            r => r.map_err(os(format!("open /dev/vfio/{group_id}")))?,
        };
        let mut status: GroupStatus = sized(|_| {});
        ioctl(group.as_fd(), VFIO_GROUP_GET_STATUS, &mut status).map_err(os("VFIO_GROUP_GET_STATUS"))?;
        if status.flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(VfioError::GroupNotViable { addr: addr.clone(), group: group_id });
        }
        let mut container_fd = container.as_raw_fd();
        ioctl(group.as_fd(), VFIO_GROUP_SET_CONTAINER, &mut container_fd).map_err(os("VFIO_GROUP_SET_CONTAINER"))?;
        ioctl_val(container.as_fd(), VFIO_SET_IOMMU, VFIO_TYPE1V2_IOMMU).map_err(os("VFIO_SET_IOMMU type1v2"))?;
        let name = std::ffi::CString::new(addr.as_str()).expect("no NUL in a checked address");
        let raw = ioctl(group.as_fd(), VFIO_GROUP_GET_DEVICE_FD, name.as_ptr() as *mut libc::c_char)
            .map_err(os(format!("VFIO_GROUP_GET_DEVICE_FD {addr}")))?;
        // SAFETY: the ioctl returned a new fd that we own.
        let device = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut info: DeviceInfo = sized(|_| {});
        ioctl(device.as_fd(), VFIO_DEVICE_GET_INFO, &mut info).map_err(os("VFIO_DEVICE_GET_INFO"))?;
        let mut config: RegionInfo = sized(|r: &mut RegionInfo| r.index = VFIO_PCI_CONFIG_REGION_INDEX);
        ioctl(device.as_fd(), VFIO_DEVICE_GET_REGION_INFO, &mut config).map_err(os("VFIO_DEVICE_GET_REGION_INFO config"))?;
        Ok(Vfio {
            addr: addr.clone(),
            group_id,
            container,
            _group: group,
            device,
            flags: info.flags,
            num_irqs: info.num_irqs,
            config_offset: config.offset,
            mappings: Vec::new(),
            removal: None,
        })
    }

    pub fn address(&self) -> &PciAddress {
        &self.addr
    }

    pub fn group_id(&self) -> u32 {
        self.group_id
    }

    /// The device fd, to duplicate into the driver process.
    pub fn device_fd(&self) -> BorrowedFd<'_> {
        self.device.as_fd()
    }

    /// Maps `size` bytes at `vaddr` (host memory) for device DMA at `iova`;
    /// with `DeviceAccess::Read` the IOMMU refuses the device's writes there.
    pub fn map_dma(&mut self, vaddr: *mut u8, iova: u64, size: u64, access: DeviceAccess) -> Result<(), VfioError> {
        let mut map: DmaMap = sized(|m: &mut DmaMap| {
            m.flags = match access {
                DeviceAccess::Read => VFIO_DMA_MAP_FLAG_READ,
                DeviceAccess::ReadWrite => VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
            };
            m.vaddr = vaddr as u64;
            m.iova = iova;
            m.size = size;
        });
        ioctl(self.container.as_fd(), VFIO_IOMMU_MAP_DMA, &mut map)
            .map_err(os(format!("VFIO_IOMMU_MAP_DMA {size} bytes at IOVA {iova:#x}")))?;
        self.mappings.push((iova, size));
        Ok(())
    }

    /// Drops every IOMMU mapping made through `map_dma`.
    pub fn unmap_all(&mut self) -> Result<(), VfioError> {
        while let Some((iova, size)) = self.mappings.pop() {
            let mut unmap: DmaUnmap = sized(|u: &mut DmaUnmap| {
                u.iova = iova;
                u.size = size;
            });
            ioctl(self.container.as_fd(), VFIO_IOMMU_UNMAP_DMA, &mut unmap)
                .map_err(os(format!("VFIO_IOMMU_UNMAP_DMA at IOVA {iova:#x}")))?;
        }
        Ok(())
    }

    pub fn mapped_bytes(&self) -> u64 {
        self.mappings.iter().map(|&(_, size)| size).sum()
    }

    fn device_file(&self) -> File {
        File::from(self.device.try_clone().expect("dup of the device fd"))
    }

    pub fn read_command(&self) -> io::Result<u16> {
        let mut b = [0u8; 2];
        self.device_file().read_exact_at(&mut b, self.config_offset + PCI_COMMAND)?;
        Ok(u16::from_le_bytes(b))
    }

    fn write_command(&self, command: u16) -> io::Result<()> {
        self.device_file().write_all_at(&command.to_le_bytes(), self.config_offset + PCI_COMMAND)
    }

    /// Turns off every interrupt the device can raise through VFIO: the INTx
    /// line (masked first), MSI and MSI-X. A function has one of them on at a
    /// time; a successor driver enables its own again (docs/design.md §4).
    fn disable_irqs(&self) -> bool {
        let mut ok = true;
        for index in [VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX] {
            if index >= self.num_irqs {
                continue;
            }
            let mut irq: IrqInfo = sized(|i: &mut IrqInfo| i.index = index);
            if ioctl(self.device.as_fd(), VFIO_DEVICE_GET_IRQ_INFO, &mut irq).is_err() || irq.count == 0 {
                continue;
            }
            if index == VFIO_PCI_INTX_IRQ_INDEX {
                // Mask first: an INTx line asserted by a dying driver's device stays quiet.
                let mut mask: IrqSet = sized(|s: &mut IrqSet| {
                    s.flags = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_MASK;
                    s.index = index;
                    s.count = 1;
                });
                let _ = ioctl(self.device.as_fd(), VFIO_DEVICE_SET_IRQS, &mut mask);
            }
            // DATA_NONE | ACTION_TRIGGER with count 0 tears the eventfds down.
            let mut off: IrqSet = sized(|s: &mut IrqSet| {
                s.flags = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
                s.index = index;
            });
            ok &= torn_down(&ioctl(self.device.as_fd(), VFIO_DEVICE_SET_IRQS, &mut off));
        }
        ok
    }

    /// Stops whatever a driver left running: bus mastering off (no more DMA),
    /// interrupts disabled, then a function reset if the device has one.
    /// Before a fresh driver process probes a device `stop_device` quiesced:
    /// its legacy interrupt is allowed again (as after vfio-pci's own reset;
    /// no probe clears PCI_COMMAND's INTx disable). Bus mastering stays off
    /// until the driver enables it.
    pub fn allow_intx(&self) -> io::Result<()> {
        let cmd = self.read_command()?;
        self.write_command(cmd & !PCI_COMMAND_INTX_DISABLE)
    }

    /// Asks to be told, through an eventfd (`removal_fd`), when the kernel
    /// wants the device back: it is being hot-unplugged or unbound, and the
    /// kernel waits for the user to close it. Without this the removal
    /// waits, and the kernel repeats its request in its log.
    pub fn watch_removal(&mut self) -> Result<(), VfioError> {
        let mut info: IrqInfo = sized(|i: &mut IrqInfo| i.index = VFIO_PCI_REQ_IRQ_INDEX);
        let offered = VFIO_PCI_REQ_IRQ_INDEX < self.num_irqs
            && ioctl(self.device.as_fd(), VFIO_DEVICE_GET_IRQ_INFO, &mut info).is_ok() && info.count > 0;
        if !offered {
            return Err(VfioError::Os { what: "the device request interrupt".into(), source: io::Error::from(io::ErrorKind::Unsupported) });
        }
        // SAFETY: plain eventfd(2); the fd is owned at once.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(VfioError::Os { what: "eventfd".into(), source: io::Error::last_os_error() });
        }
        // SAFETY: a new fd nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut set: IrqSetEventfd = sized(|s: &mut IrqSetEventfd| {
            s.flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
            s.index = VFIO_PCI_REQ_IRQ_INDEX;
            s.count = 1;
            s.fd = raw;
        });
        ioctl(self.device.as_fd(), VFIO_DEVICE_SET_IRQS, &mut set).map_err(os("VFIO_DEVICE_SET_IRQS request"))?;
        self.removal = Some(fd);
        Ok(())
    }

    /// Readable once the kernel has asked for the device back (`watch_removal`).
    pub fn removal_fd(&self) -> Option<BorrowedFd<'_>> {
        self.removal.as_ref().map(|f| f.as_fd())
    }

    pub fn stop_device(&self) -> StopReport {
        let command_before = self.read_command().ok();
        if let Some(cmd) = command_before {
            let _ = self.write_command(quiesced_command(cmd));
        }
        let irqs_disabled = self.disable_irqs();
        let reset = if self.flags & VFIO_DEVICE_FLAGS_RESET == 0 {
            Err("the device offers no reset through VFIO".to_string())
        } else {
            ioctl_val(self.device.as_fd(), VFIO_DEVICE_RESET, 0).map(drop).map_err(|e| e.to_string())
        };
        // A reset restores PCI_COMMAND's defaults; make sure DMA stays off after it.
        if let Ok(cmd) = self.read_command() {
            if bus_master_enabled(cmd) {
                let _ = self.write_command(quiesced_command(cmd));
            }
        }
        StopReport { command_before, command_after: self.read_command().ok(), irqs_disabled, reset }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn addr(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_are_checked_and_normalised() {
        assert_eq!(addr("0000:00:02.0").as_str(), "0000:00:02.0");
        assert_eq!(addr("01:00.0").as_str(), "0000:01:00.0");
        assert_eq!(addr("0000:0A:1f.7").as_str(), "0000:0a:1f.7");
        assert_eq!(addr("0001:0a:1f.7").number(), 0x1_0aff);
        for bad in ["", "0000:00:02", "0000:00:20.0", "0000:00:02.8", "x000:00:02.0", "0000:00:02.0/../..", "0:0:2.0"] {
            assert!(bad.parse::<PciAddress>().is_err(), "{bad:?} accepted");
        }
    }

    /// A fake /sys/bus/pci/devices with one device in a chosen state.
    fn fake_sysfs(group: Option<&str>, driver: Option<&str>) -> (PathBuf, PciAddress) {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "understudy-vfio-test-{}-{}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)));
        let a = addr("0000:00:02.0");
        let dev = root.join(a.as_str());
        std::fs::create_dir_all(&dev).unwrap();
        if let Some(g) = group {
            symlink(format!("../../../kernel/iommu_groups/{g}"), dev.join("iommu_group")).unwrap();
        }
        if let Some(d) = driver {
            symlink(format!("../../../bus/pci/drivers/{d}"), dev.join("driver")).unwrap();
        }
        (root, a)
    }

    #[test]
    fn sysfs_states_give_clear_refusals() {
        let (root, a) = fake_sysfs(Some("7"), Some("vfio-pci"));
        assert_eq!(check_device(&root, &a).unwrap(), 7);
        assert!(matches!(check_device(&root, &addr("0000:00:03.0")), Err(VfioError::NoSuchDevice(..))));

        let (root, a) = fake_sysfs(None, Some("e1000"));
        let err = check_device(&root, &a).unwrap_err();
        assert!(err.to_string().contains("no IOMMU group"), "{err}");

        let (root, a) = fake_sysfs(Some("3"), Some("e1000"));
        let err = check_device(&root, &a).unwrap_err();
        assert!(err.to_string().contains("bound to the kernel driver e1000"), "{err}");

        let (root, a) = fake_sysfs(Some("3"), None);
        assert!(matches!(check_device(&root, &a), Err(VfioError::NotBoundToVfio(_))));
        for dir in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
            if dir.file_name().to_string_lossy().starts_with(&format!("understudy-vfio-test-{}-", std::process::id())) {
                let _ = std::fs::remove_dir_all(dir.path());
            }
        }
    }

    #[test]
    fn an_interrupt_index_not_in_use_counts_as_off() {
        assert!(torn_down(&Ok(0)));
        // INTx, MSI and MSI-X: the two not in use answer EINVAL.
        assert!(torn_down(&Err(io::Error::from_raw_os_error(libc::EINVAL))));
        assert!(!torn_down(&Err(io::Error::from_raw_os_error(libc::EBADF))));
        assert!(!torn_down(&Err(io::Error::from_raw_os_error(libc::EIO))));
    }

    #[test]
    fn quiescing_turns_dma_off_and_keeps_the_rest() {
        assert_eq!(quiesced_command(0x0107), 0x0503);
        assert!(!bus_master_enabled(quiesced_command(0xffff)));
        assert_eq!(quiesced_command(0), PCI_COMMAND_INTX_DISABLE);
    }

    #[test]
    fn ioctl_numbers_match_linux_vfio_h() {
        assert_eq!(VFIO_GET_API_VERSION, 0x3b64);
        assert_eq!(VFIO_IOMMU_MAP_DMA, 0x3b71);
        assert_eq!(VFIO_DEVICE_RESET, 0x3b6f);
        assert_eq!(std::mem::size_of::<RegionInfo>(), 32);
        assert_eq!(std::mem::size_of::<DmaMap>(), 32);
        assert_eq!(std::mem::size_of::<IrqSet>(), 20);
    }
}
