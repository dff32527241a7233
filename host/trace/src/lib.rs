// SPDX-License-Identifier: GPL-2.0
//! The trace region's layout (docs/checking.md, "The trace"): the Rust
//! mirror of `include/understudy/trace.h` and of `trace-events.h`, which it
//! includes. The checker reads the region through it; understudyd creates
//! the region at its size and reads its header's counters.
//!
//! [`CONSTANTS`] and [`layouts`] list every constant and struct, generated
//! with the items themselves; `tests/layout.rs` fails unless the headers
//! declare exactly these with the same values, sizes and offsets.
//!
//! The structs are `#[repr(C)]` with natural alignment, as in C: the region
//! is a page-aligned mapping, and a reader checks every offset the driver
//! gives for alignment before it reads a struct from it (the checker's
//! `region.rs`).

use std::mem::{offset_of, size_of};

macro_rules! trace_constants {
    ($($(#[$meta:meta])* $name:ident: $ty:ty = $value:expr;)*) => {
        $($(#[$meta])* pub const $name: $ty = $value;)*

        /// Every constant as (its C name, its value); the C name is `US_`
        /// and the Rust name.
        pub const CONSTANTS: &[(&str, u64)] = &[$((concat!("US_", stringify!($name)), $name as u64),)*];
    };
}

trace_constants! {
    TRACE_MAGIC: u32 = 0x5553_5452;
    TRACE_VERSION: u32 = 2;
    TRACE_REGION_SIZE: u64 = 64 << 20;
    TRACE_RING_ENTRIES: u32 = 1 << 20;
    TRACE_MAX_MODULES: usize = 8;
    TRACE_MAX_SITES: u32 = 1 << 19;

    GATE_TRIAGE: u32 = 0;
    GATE_PERMISSIVE: u32 = 1;
    GATE_STRINGENT: u32 = 2;

    // What an event says: trace-events.h.
    EV_ACCESS: u16 = 1;
    EV_STRING: u16 = 2;
    EV_PORT: u16 = 3;
    EV_FRAME: u16 = 4;
    EV_RETURN: u16 = 5;
    EV_ESCAPE: u16 = 6;
    EV_ALLOC: u16 = 16;
    EV_FREE: u16 = 17;
    EV_DMA_MAP: u16 = 18;
    EV_DMA_UNMAP: u16 = 19;
    EV_DMA_SYNC_CPU: u16 = 20;
    EV_DMA_SYNC_DEVICE: u16 = 21;
    EV_DMA_ALLOC: u16 = 22;
    EV_DMA_FREE: u16 = 23;
    EV_LOCK: u16 = 24;
    EV_UNLOCK: u16 = 25;
    EV_IRQ_OFF: u16 = 26;
    EV_IRQ_ON: u16 = 27;
    EV_CONTEXT: u16 = 28;
    EV_COPY: u16 = 29;
    EV_FILL: u16 = 30;
    EV_STOP: u16 = 31;

    EVF_PERCPU: u16 = 0x0001;
    EVF_DF: u16 = 0x0002;
    EVF_DIR_SHIFT: u16 = 8;
    EVF_DIR_MASK: u16 = 0x0300;

    LOCK_SPIN: u64 = 0;
    LOCK_SPIN_IRQ: u64 = 1;
    LOCK_SPIN_BH: u64 = 2;
    LOCK_MUTEX: u64 = 3;

    STOP_CLOSE: u64 = 0;
    STOP_DETACH: u64 = 1;

    CTX_PROCESS: u64 = 0;
    CTX_HARDIRQ: u64 = 1;
    CTX_SOFTIRQ: u64 = 2;
    CTX_TIMER: u64 = 3;
    CTX_WORK: u64 = 4;

    // trace.h: the sites' flags, where the tables lie.
    SITE_READ: u8 = 0x01;
    SITE_WRITE: u8 = 0x02;
    SITE_PERCPU: u8 = 0x04;
    SITE_STACK: u8 = 0x08;
    SITE_ATOMIC: u8 = 0x10;
    SITE_STRING: u8 = 0x20;
    SITE_PORT: u8 = 0x40;
    SITE_FRAME: u8 = 0x80;

    TRACE_SITES_OFFSET: u64 = 4096;
    TRACE_RING_OFFSET: u64 = TRACE_SITES_OFFSET + TRACE_MAX_SITES as u64 * 16;
}

/// The length of a module's path, NUL included.
pub const MODULE_PATH_MAX: usize = 240;

/// A struct's size and its members' offsets and sizes, under their C names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub c_name: &'static str,
    pub size: usize,
    /// (member, offset, size)
    pub members: Vec<(&'static str, usize, usize)>,
}

/// Declares the region's structs and [`layouts`] from one place:
/// `pub struct Rust as c_tag { fields }` mirrors `struct c_tag`.
macro_rules! trace_structs {
    ($($(#[$meta:meta])* pub struct $name:ident as $c_name:ident {
        $(pub $field:ident : $ty:ty,)*
    })*) => {
        $(
            $(#[$meta])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug)]
            pub struct $name { $(pub $field: $ty,)* }
        )*

        /// The layout of every struct of the header.
        pub fn layouts() -> Vec<Layout> {
            vec![$(Layout {
                c_name: stringify!($c_name),
                size: size_of::<$name>(),
                members: vec![$((stringify!($field), offset_of!($name, $field), size_of::<$ty>()),)*],
            },)*]
        }
    };
}

trace_structs! {
    /// One event; `kind_flags` is kind | flags << 16.
    pub struct TraceEvent as us_trace_event {
        pub kind_flags: u32, pub site: u32, pub addr: u64, pub arg0: u64, pub arg1: u64,
    }

    /// One stub call of the rewritten module; the table is sorted by `ret`.
    pub struct TraceSite as us_trace_site {
        pub ret: u32, pub offset: u32, pub module: u16, pub section: u16,
        pub size: u16, pub flags: u8, pub reserved: u8,
    }

    pub struct TraceModule as us_trace_module {
        pub path: [u8; MODULE_PATH_MAX], pub text: u64, pub text_size: u64,
    }

    /// The region's header. Each 64-byte line is written by one side only:
    /// the driver's configuration and `ready`, the producer's `head`, the
    /// checker's `approved` and `verdict_at`.
    pub struct TraceHeader as us_trace_header {
        pub magic: u32, pub version: u32, pub ring_entries: u32, pub gate_mode: u32,
        pub ring_offset: u64, pub sites_offset: u64, pub nsites: u32, pub nmodules: u32,
        pub percpu_base: u64, pub arena: u64, pub arena_iova: u64, pub arena_size: u64,
        pub ready: u32, pub pad0: [u32; 13],
        pub head: u64, pub producer_waiting: u32, pub pad1: [u32; 13],
        pub approved: u64, pub verdict_at: u64, pub checker_waiting: u32, pub checker_pid: u32,
        pub pad2: [u32; 10],
        pub modules: [TraceModule; TRACE_MAX_MODULES],
    }
}

impl TraceEvent {
    pub fn kind(&self) -> u16 {
        self.kind_flags as u16
    }

    pub fn flags(&self) -> u16 {
        (self.kind_flags >> 16) as u16
    }
}
