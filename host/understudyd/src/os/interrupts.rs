// SPDX-License-Identifier: GPL-2.0
//! The device's interrupts follow its driver process (`understudy run --cpu N`).
//!
//! Why: the host kernel's handler for a VFIO interrupt only signals the
//! eventfd the driver's thread that serves it waits on (an IRQ thread, or
//! for an INTx line the TX thread: docs/design.md §6). On the driver's CPU that wake-up
//! is local; on another CPU it is a cross-CPU wake-up for every interrupt,
//! and the driver process's CPU is the one that then runs the handler's
//! work anyway. In the lab, with the interrupt on the other vCPU, e1000 sent
//! and received a sixth less (docs/performance.md §5), and where the guest
//! kernel puts a new interrupt varies from boot to boot.
//!
//! The routing is best effort (an interrupt controller may refuse a CPU, a
//! daemon without root cannot write `/proc/irq`): a refusal is logged once,
//! not a failure. What was found is put back when the daemon lets the device
//! go, so that the next user of the device (its in-kernel driver, say) gets
//! the interrupt where it was.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use log::{info, warn};
use understudy_vfio::PciAddress;

pub struct InterruptRouting {
    cpu: u32,
    /// Each interrupt routed so far, with the CPU list it had before.
    found: BTreeMap<u32, String>,
    refusal_logged: bool,
}

impl InterruptRouting {
    pub fn to_cpu(cpu: u32) -> Self {
        InterruptRouting { cpu, found: BTreeMap::new(), refusal_logged: false }
    }

    /// Routes every interrupt `device` has now (its INTx line, its MSI and
    /// MSI-X vectors) to the CPU: called whenever a driver has probed or
    /// opened the device, since a driver requests its interrupts in one or
    /// the other. Logs only what it moved.
    pub fn route(&mut self, device: &PciAddress) {
        let sysfs = Path::new("/sys/bus/pci/devices").join(device.to_string());
        let mut routed = Vec::new();
        for irq in device_interrupts(&sysfs) {
            let path = affinity_path(irq);
            let before = match fs::read_to_string(&path) {
                Ok(list) => list.trim().to_string(),
                Err(_) => continue, // no such interrupt (any more)
            };
            if before == self.cpu.to_string() {
                // Already there (a restart's OPEN after the first): nothing to write or log.
                self.found.entry(irq).or_insert(before);
                continue;
            }
            match fs::write(&path, self.cpu.to_string()) {
                Ok(()) => {
                    self.found.entry(irq).or_insert(before);
                    routed.push(irq.to_string());
                }
                Err(e) if !self.refusal_logged => {
                    self.refusal_logged = true;
                    warn!("{device}: cannot route interrupt {irq} to CPU {} ({}: {e}); it stays on CPUs {before}, \
                           which costs the driver a cross-CPU wake-up per interrupt", self.cpu, path);
                }
                Err(_) => {}
            }
        }
        if !routed.is_empty() {
            info!("{device}: interrupts {} routed to the driver's CPU {}", routed.join(", "), self.cpu);
        }
    }
}

impl Drop for InterruptRouting {
    fn drop(&mut self) {
        for (irq, before) in &self.found {
            // An MSI vector is gone with the driver that enabled it: nothing to put back.
            let _ = fs::write(affinity_path(*irq), before);
        }
    }
}

fn affinity_path(irq: u32) -> String {
    format!("/proc/irq/{irq}/smp_affinity_list")
}

/// The device's interrupts as sysfs lists them: `irq` (the INTx line, or
/// the first MSI vector while MSI is on; 0 for none) and `msi_irqs/`.
fn device_interrupts(sysfs: &Path) -> Vec<u32> {
    let line = fs::read_to_string(sysfs.join("irq")).ok().and_then(|s| s.trim().parse().ok());
    let vectors = fs::read_dir(sysfs.join("msi_irqs")).into_iter().flatten().flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok());
    let mut irqs: Vec<u32> = line.into_iter().filter(|&irq| irq != 0).chain(vectors).collect();
    irqs.sort_unstable();
    irqs.dedup();
    irqs
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A fresh directory standing in for a device's sysfs directory.
    fn fake_sysfs(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("understudy-interrupts-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_devices_interrupts_are_its_line_and_its_vectors_once_each() {
        let dir = fake_sysfs("msix");
        fs::write(dir.join("irq"), "33\n").unwrap();
        fs::create_dir(dir.join("msi_irqs")).unwrap();
        for v in ["40", "33", "34"] {
            fs::write(dir.join("msi_irqs").join(v), "msix").unwrap();
        }
        assert_eq!(device_interrupts(&dir), vec![33, 34, 40]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_device_without_interrupts_has_none() {
        let dir = fake_sysfs("none");
        fs::write(dir.join("irq"), "0\n").unwrap();
        assert!(device_interrupts(&dir).is_empty());
        assert!(device_interrupts(&dir.join("absent")).is_empty());
        fs::remove_dir_all(dir).unwrap();
    }
}
