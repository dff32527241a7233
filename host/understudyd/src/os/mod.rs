// SPDX-License-Identifier: GPL-2.0
//! The daemon's adapters to the host OS, class-neutral: file descriptors
//! (fd.rs), the PCI device through VFIO or UIO (device.rs), starting a
//! driver process with its fds (process.rs) or forking one from a
//! post-probe template (template_fork.rs), CPU placement (placement.rs) and
//! interrupt routing (interrupts.rs), the module tree modprobe would read
//! (modtree.rs), and the administrator's hook (hook.rs). Nothing here
//! decides anything about a handover.

pub mod device;
pub mod fd;
pub mod hook;
pub mod interrupts;
pub mod modtree;
pub mod placement;
pub mod process;
pub mod template_fork;
