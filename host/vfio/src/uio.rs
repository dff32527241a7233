// SPDX-License-Identifier: GPL-2.0
//! The UIO back-end (docs/design.md §4, "Without an IOMMU"): a device bound
//! to `uio_pci_generic`, for machines whose DMA no IOMMU confines. The host
//! binds it, holds its config space (sysfs `config`), its BARs (sysfs
//! `resourceN`) and its interrupt (`/dev/uioN`), and stops it when its driver
//! is gone, as the VFIO back-end does. Nothing here confines the device's
//! DMA: that is the point of the name.
//!
//! Every check that can fail is made before anything is written, so a
//! refusal leaves the device bound as it was.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::{bus_master_enabled, link_name, quiesced_command, PciAddress, StopReport, PCI_COMMAND, PCI_COMMAND_INTX_DISABLE};

pub const UIO_DRIVER: &str = "uio_pci_generic";
const PCI_STD_BARS: usize = 6;

#[derive(Debug, thiserror::Error)]
pub enum UioError {
    #[error("no PCI device {0} (nothing at {1})")]
    NoSuchDevice(PciAddress, PathBuf),
    #[error("{0} is bound to the kernel driver {1}; understudy binds a device to uio_pci_generic only if no driver holds it (echo {0} > /sys/bus/pci/devices/{0}/driver/unbind first)")]
    BoundElsewhere(PciAddress, String),
    #[error("the kernel has no uio_pci_generic driver, and `modprobe uio_pci_generic` failed: {0}")]
    NoUioModule(String),
    #[error("the DMA arena needs {need} free 2 MiB hugepages and {free} are free (echo {need} > /proc/sys/vm/nr_hugepages, or boot with hugepages={need})")]
    NoHugepages { free: u64, need: u64 },
    #[error("uio_pci_generic did not take {0} (see dmesg: it refuses a function without an INTx line, or whose INTx cannot be masked)")]
    NotTaken(PciAddress),
    #[error("{what}: {source}")]
    Os { what: String, source: io::Error },
}

fn os(what: impl Into<String>) -> impl FnOnce(io::Error) -> UioError {
    let what = what.into();
    move |source| UioError::Os { what, source }
}

/// Where sysfs and procfs are; tests give fake ones.
pub struct Roots {
    pub devices: PathBuf,
    pub drivers: PathBuf,
    pub hugepages: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            devices: PathBuf::from(crate::SYSFS_PCI_DEVICES),
            drivers: PathBuf::from("/sys/bus/pci/drivers"),
            hugepages: PathBuf::from("/sys/kernel/mm/hugepages/hugepages-2048kB"),
        }
    }
}

/// What binding will have to do, decided from sysfs alone.
#[derive(Debug, PartialEq, Eq)]
pub enum Binding {
    /// Already bound to uio_pci_generic (by the admin, or a previous daemon).
    Bound,
    /// No driver holds it: the host binds it.
    Unbound,
}

/// Checks `addr` without writing anything: it exists, no other driver holds
/// it, and `hugepages` 2 MiB pages are free for its arena.
pub fn check(roots: &Roots, addr: &PciAddress, hugepages: u64) -> Result<Binding, UioError> {
    let dir = roots.devices.join(addr.as_str());
    if !dir.exists() {
        return Err(UioError::NoSuchDevice(addr.clone(), dir));
    }
    let binding = match link_name(&dir.join("driver")).as_deref() {
        Some(UIO_DRIVER) => Binding::Bound,
        Some(other) => return Err(UioError::BoundElsewhere(addr.clone(), other.to_string())),
        None => Binding::Unbound,
    };
    // No such file: the kernel has no 2 MiB hugepages at all.
    let free = std::fs::read_to_string(roots.hugepages.join("free_hugepages")).ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    match free.unwrap_or(0) {
        n if n >= hugepages => Ok(binding),
        n => Err(UioError::NoHugepages { free: n, need: hugepages }),
    }
}

/// Makes sure the kernel has uio_pci_generic, loading it if needed.
fn load_module(roots: &Roots) -> Result<(), UioError> {
    if roots.drivers.join(UIO_DRIVER).exists() {
        return Ok(());
    }
    let out = std::process::Command::new("modprobe").arg(UIO_DRIVER).output()
        .map_err(|e| UioError::NoUioModule(e.to_string()))?;
    if !out.status.success() || !roots.drivers.join(UIO_DRIVER).exists() {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(UioError::NoUioModule(if why.is_empty() { out.status.to_string() } else { why }));
    }
    Ok(())
}

/// Binds an unbound device to uio_pci_generic with `driver_override`, which
/// binds this one function and no other of the same ids. If the driver does
/// not take it, the override is cleared again: the device is as it was.
fn bind(roots: &Roots, addr: &PciAddress) -> Result<(), UioError> {
    let dir = roots.devices.join(addr.as_str());
    let write = |path: &Path, text: &str| std::fs::write(path, text).map_err(os(format!("write {text:?} to {}", path.display())));
    write(&dir.join("driver_override"), UIO_DRIVER)?;
    let probed = write(&roots.devices.join("../drivers_probe"), addr.as_str());
    if probed.is_err() || link_name(&dir.join("driver")).as_deref() != Some(UIO_DRIVER) {
        let _ = std::fs::write(dir.join("driver_override"), "\n");
        return Err(probed.err().unwrap_or(UioError::NotTaken(addr.clone())));
    }
    Ok(())
}

/// The `uioN` the device's binding created.
fn uio_name(dir: &Path) -> Result<String, UioError> {
    let uio = dir.join("uio");
    let entries = std::fs::read_dir(&uio).map_err(os(format!("read {}", uio.display())))?;
    entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("uio"))
        .ok_or_else(|| UioError::Os { what: format!("no uioN in {}", uio.display()), source: io::ErrorKind::NotFound.into() })
}

/// A device bound to uio_pci_generic, with the files its driver is handed.
pub struct Uio {
    addr: PciAddress,
    dir: PathBuf,
    /// /dev/uioN: read() waits for the INTx line, a write of 1 re-enables it.
    irq: File,
    config: File,
    /// The memory and I/O BARs' `resourceN` files, where the device has them.
    bars: [Option<File>; PCI_STD_BARS],
}

impl Uio {
    /// Checks, loads uio_pci_generic, binds the device if no driver holds
    /// it, and opens its files; on a refusal the device is as it was.
    pub fn open(addr: &PciAddress, hugepages: u64) -> Result<Self, UioError> {
        Self::open_in(&Roots::default(), addr, hugepages)
    }

    fn open_in(roots: &Roots, addr: &PciAddress, hugepages: u64) -> Result<Self, UioError> {
        let binding = check(roots, addr, hugepages)?;
        load_module(roots)?;
        if binding == Binding::Unbound {
            bind(roots, addr)?;
        }
        let dir = roots.devices.join(addr.as_str());
        let rw = |p: PathBuf| OpenOptions::new().read(true).write(true).open(&p).map_err(os(format!("open {}", p.display())));
        let irq = rw(Path::new("/dev").join(uio_name(&dir)?))?;
        let config = rw(dir.join("config"))?;
        let bars = std::array::from_fn(|i| OpenOptions::new().read(true).write(true).open(dir.join(format!("resource{i}"))).ok());
        Ok(Uio { addr: addr.clone(), dir, irq, config, bars })
    }

    pub fn address(&self) -> &PciAddress {
        &self.addr
    }

    /// The fds the driver process gets, in the order of its `--uio-fds`:
    /// the UIO fd, config space, then BAR 0 – 5 (`None`: no such BAR).
    pub fn driver_fds(&self) -> Vec<Option<BorrowedFd<'_>>> {
        [Some(self.irq.as_fd()), Some(self.config.as_fd())].into_iter()
            .chain(self.bars.iter().map(|b| b.as_ref().map(|f| f.as_fd()))).collect()
    }

    pub fn read_command(&self) -> io::Result<u16> {
        let mut b = [0u8; 2];
        self.config.read_exact_at(&mut b, PCI_COMMAND)?;
        Ok(u16::from_le_bytes(b))
    }

    fn write_command(&self, command: u16) -> io::Result<()> {
        self.config.write_all_at(&command.to_le_bytes(), PCI_COMMAND)
    }

    /// INTx allowed again before a fresh driver probes (see `Vfio::allow_intx`).
    pub fn allow_intx(&self) -> io::Result<()> {
        let cmd = self.read_command()?;
        self.write_command(cmd & !PCI_COMMAND_INTX_DISABLE)
    }

    /// Bus mastering off and INTx disabled in the command register (all a
    /// UIO device's interrupts: uio_pci_generic offers no MSI), then the
    /// function reset sysfs offers, and DMA kept off after it.
    pub fn stop_device(&self) -> StopReport {
        let command_before = self.read_command().ok();
        if let Some(cmd) = command_before {
            let _ = self.write_command(quiesced_command(cmd));
        }
        let irqs_disabled = self.read_command().is_ok_and(|c| c & PCI_COMMAND_INTX_DISABLE != 0);
        let reset_file = self.dir.join("reset");
        let reset = if reset_file.exists() {
            std::fs::write(&reset_file, "1").map_err(|e| e.to_string())
        } else {
            Err("the device offers no reset through sysfs".to_string())
        };
        if let Ok(cmd) = self.read_command() {
            if bus_master_enabled(cmd) || cmd & PCI_COMMAND_INTX_DISABLE == 0 {
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

    fn fake(driver: Option<&str>, free_hugepages: Option<u64>) -> (Roots, PciAddress, PathBuf) {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "understudy-uio-test-{}-{}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)));
        let a: PciAddress = "0000:00:03.0".parse().unwrap();
        let roots = Roots { devices: root.join("devices"), drivers: root.join("drivers"), hugepages: root.join("hugepages") };
        let dev = roots.devices.join(a.as_str());
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(&roots.hugepages).unwrap();
        if let Some(d) = driver {
            symlink(format!("../../drivers/{d}"), dev.join("driver")).unwrap();
        }
        if let Some(n) = free_hugepages {
            std::fs::write(roots.hugepages.join("free_hugepages"), format!("{n}\n")).unwrap();
        }
        (roots, a, root)
    }

    #[test]
    fn what_binding_needs_is_read_from_sysfs() {
        let (roots, a, root) = fake(None, Some(32));
        assert_eq!(check(&roots, &a, 32).unwrap(), Binding::Unbound);
        let (roots2, a2, root2) = fake(Some(UIO_DRIVER), Some(40));
        assert_eq!(check(&roots2, &a2, 32).unwrap(), Binding::Bound);
        let missing: PciAddress = "0000:00:09.0".parse().unwrap();
        assert!(matches!(check(&roots, &missing, 32), Err(UioError::NoSuchDevice(..))));
        for r in [root, root2] {
            std::fs::remove_dir_all(r).unwrap();
        }
    }

    #[test]
    fn a_device_another_driver_holds_is_refused_untouched() {
        let (roots, a, root) = fake(Some("e1000"), Some(32));
        let err = Uio::open_in(&roots, &a, 32).err().unwrap();
        assert!(err.to_string().contains("bound to the kernel driver e1000"), "{err}");
        assert!(!roots.devices.join(a.as_str()).join("driver_override").exists());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn too_few_hugepages_are_refused_before_anything_is_written() {
        for (free, says) in [(Some(3), "needs 32 free 2 MiB hugepages and 3 are free"),
                             (None, "needs 32 free 2 MiB hugepages and 0 are free")] {
            let (roots, a, root) = fake(None, free);
            let err = Uio::open_in(&roots, &a, 32).err().unwrap();
            assert!(err.to_string().contains(says), "{err}");
            assert!(!roots.devices.join(a.as_str()).join("driver_override").exists());
            std::fs::remove_dir_all(root).unwrap();
        }
    }

    #[test]
    fn a_driver_that_does_not_take_the_device_leaves_no_override() {
        let (roots, a, root) = fake(None, Some(32));
        std::fs::create_dir_all(roots.drivers.join(UIO_DRIVER)).unwrap();
        // The fake drivers_probe is a plain file: writing it binds nothing.
        std::fs::write(roots.devices.join("../drivers_probe"), "").unwrap();
        std::fs::write(roots.devices.join(a.as_str()).join("driver_override"), "\n").unwrap();
        let err = Uio::open_in(&roots, &a, 32).err().unwrap();
        assert!(matches!(err, UioError::NotTaken(_)), "{err}");
        let left = std::fs::read_to_string(roots.devices.join(a.as_str()).join("driver_override")).unwrap();
        assert_eq!(left, "\n");
        std::fs::remove_dir_all(root).unwrap();
    }
}
