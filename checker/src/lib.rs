// SPDX-License-Identifier: GPL-2.0
//! The checker process of understudy (docs/checking.md, checker/README.md).
//!
//! A driver process running a rewritten module appends an event to the
//! trace region for every memory access, string op and port access of the
//! module, and for every allocation, DMA operation, lock, interrupt switch
//! and context switch of the runtime underneath. The checker reads them in
//! order on another core, runs three checkers over them — memory, DMA,
//! races — and approves them, so that the driver's gate lets its device
//! writes through, until a finding is fatal.

pub mod dma;
pub mod engine;
pub mod gate;
pub mod heap;
pub mod intervals;
pub mod lockset;
pub mod memory;
pub mod profile;
pub mod race;
pub mod record;
pub mod region;
pub mod report;
pub mod shadow;
pub mod stack;
pub mod symbols;

/// The trace region's layout, as the driver process writes it
/// (include/understudy/trace.h, mirrored by understudy-trace).
pub use understudy_trace as trace;
