// SPDX-License-Identifier: GPL-2.0
//! The block class (docs/design.md §11): a disk the kernel sees as an NBD
//! device (frontend.rs), whose driver runs in a driver process behind the
//! block rings.
//!
//! Its passive log is the disk as the first driver reported it (log.rs);
//! its requests in flight are the kernel's requests cut into pieces, with
//! the acknowledged changes no flush has covered yet (datapath.rs, kept.rs).
//! side.rs is what the class-neutral supervisor drives.

pub mod datapath;
pub mod frontend;
pub mod kept;
pub mod log;
pub mod side;
#[cfg(test)]
mod model;
