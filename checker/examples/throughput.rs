// SPDX-License-Identifier: GPL-2.0
//! The checker's per-event cost on what a NIC driver under checking
//! traces: ~40 events a received or sent frame (accesses to a few hot heap
//! blocks, the coherent descriptor ring and per-cpu data; skb allocations,
//! fills and frees; a streaming map and unmap of a 2 KiB buffer; copies;
//! some locks; context switches at each handler's entry and exit; two
//! nested calls' stack frames, their `%rsp` reads and writes and an escaped
//! local), with a few hundred live allocations and ~256 live mappings.
//!
//!     cargo run --release -p understudy-checker --example throughput [-- EVENTS RUNS]
//!
//! Only the gate's checking is timed, not the test's playing of the
//! producer; it prints a table and one JSON line with the median, min and
//! max of the runs (the machine may be shared: compare medians).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::*;
use understudy_checker::trace::*;

/// Frames in flight: a buffer is unmapped and freed this many frames after
/// it was allocated and mapped.
const IN_FLIGHT: u64 = 256;
const ADAPTER: u64 = HEAP;
const RX_RING: u64 = HEAP + 0x1000;
const TX_RING: u64 = HEAP + 0x1400;
const TX_LOCK: u64 = HEAP + 0x1800;
/// skbs and their data: slots of 4 KiB from here.
const SKBS: u64 = HEAP + 0x10_0000;
/// The coherent descriptor rings.
const DESCRIPTORS: u64 = ARENA;
const DESCRIPTORS_IOVA: u64 = IOVA;
/// Sites besides those of `common::sites`, which the mix uses.
const FILLER_SITES: u32 = 3500;
/// The top of the stack of the thread that sends; the one that receives
/// (NAPI's) has its stack 8 MiB above.
const TX_STACK: u64 = STACK - (8 << 20);
const FROM_DEVICE: u16 = 2;
const TO_DEVICE: u16 = 1;

fn mix(events: usize) -> Vec<TraceEvent> {
    let mut ev_ = vec![
        context(CTX_PROCESS, 1, 0),
        alloc(ADAPTER, 0x1000),
        ev(EV_FILL, CALLER, ADAPTER, 0, 0x1000),
        alloc(RX_RING, 0x200),
        ev(EV_FILL, CALLER, RX_RING, 0, 0x200),
        alloc(TX_RING, 0x200),
        ev(EV_FILL, CALLER, TX_RING, 0, 0x200),
        alloc(TX_LOCK, 64),
        ev(EV_FILL, CALLER, TX_LOCK, 0, 64),
        ev(EV_DMA_ALLOC, CALLER, DESCRIPTORS, 0x2000, DESCRIPTORS_IOVA),
    ];
    let skb = |frame: u64| SKBS + (frame % (2 * IN_FLIGHT)) * 0x1000;
    let mut frame = 0u64;
    while ev_.len() < events {
        let rx = frame % 4 != 3;
        let (s, data) = (skb(frame), skb(frame) + 0x400);
        let desc = DESCRIPTORS + (frame % 256) * 16 + if rx { 0 } else { 0x1000 };
        let dir = if rx { FROM_DEVICE } else { TO_DEVICE };
        if frame % 8 == 0 {
            // A batch: the interrupt, then NAPI polls it.
            ev_.extend([
                context(CTX_HARDIRQ, 0, IRQ_HANDLER),
                access(READ4, ADAPTER + 0x40), access(WRITE4, ADAPTER + 0x44),
                context(CTX_SOFTIRQ, 0, NAPI_POLL),
                access(READ8, ADAPTER + 0x80),
            ]);
        }
        if !rx {
            ev_.extend([context(CTX_PROCESS, 7, 0), lock(TX_LOCK, LOCK_SPIN_BH)]);
        }
        ev_.extend([
            alloc(s, 0x100),
            ev(EV_FILL, CALLER, s, 0, 0x100),
            alloc(data, 0x800),
            ev(EV_FILL, CALLER, data, 0, 0x40),
        ]);
        if frame >= IN_FLIGHT {
            // The frame that many before is done: unmapped, copied out
            // (rx copybreak) into this one's data, freed.
            let old = frame - IN_FLIGHT;
            let (os, odata) = (skb(old), skb(old) + 0x400);
            let odir = if old % 4 != 3 { FROM_DEVICE } else { TO_DEVICE };
            ev_.extend([
                with_flags(ev(EV_DMA_UNMAP, OTHER_CALLER, 0x8000_0000 + (old % (2 * IN_FLIGHT)) * 0x1000, 0x800, 0),
                           odir << EVF_DIR_SHIFT),
                access(READ8, os + 0x10),
                ev(EV_COPY, CALLER, data + 0x40, odata, 60 + (old * 97) % 1440),
                access(READ8, data + 0x40),
                free(odata),
                free(os),
            ]);
        }
        ev_.extend([
            with_flags(ev(EV_DMA_MAP, CALLER, data, 0x800, 0x8000_0000 + (frame % (2 * IN_FLIGHT)) * 0x1000),
                       dir << EVF_DIR_SHIFT),
            access(READ8, ADAPTER + 0x100), access(READ4, if rx { RX_RING } else { TX_RING } + 8),
            access(WRITE8, desc), access(WRITE8, desc + 8), access(READ4, desc + 12),
            access(WRITE8, s + 0x10), access(WRITE8, s + 0x18), access(READ8, s + 0x10),
            with_flags(access(PERCPU_WRITE4, 0x40), EVF_PERCPU), with_flags(access(PERCPU_WRITE4, 0x48), EVF_PERCPU),
            access(WRITE4, if rx { RX_RING } else { TX_RING } + 0x10),
        ]);
        ev_.extend(calls(if rx { STACK } else { TX_STACK }, frame % 16));
        if !rx {
            ev_.extend([unlock(TX_LOCK), context(CTX_SOFTIRQ, 0, NAPI_POLL)]);
        }
        frame += 1;
    }
    ev_
}

/// A frame's handling calls a function with a 256-byte frame below `top`,
/// which writes two locals (one of the first 16 quadwords by `slot`), lets
/// a third out to the runtime, calls a function with a 64-byte frame, and
/// reads its locals back.
fn calls(top: u64, slot: u64) -> [TraceEvent; 11] {
    let (outer, inner) = (top - 0x180, top - 0x180 - 0x60);
    [
        frame(FRAME256, outer), access(STACK_WRITE8, outer + 8 * slot), access(STACK_WRITE8, outer + 0x80),
        escape(outer + 0xc0),
        frame(FRAME64, inner), access(STACK_WRITE8, inner + 0x10), access(STACK_READ8, inner + 0x10), return_to(outer),
        access(STACK_READ8, outer + 8 * slot), access(STACK_READ8, outer + 0x80), return_to(top - 0x60),
    ]
}

/// The time the gate takes to check `events`, and the findings' kinds.
fn run(events: &[TraceEvent]) -> (Duration, Vec<String>) {
    // A rewritten e1000 has thousands of sites: as many as the test
    // region's layout has room for, so that finding one costs what it does.
    let mut table = sites();
    table.extend((0..FILLER_SITES).map(|i| TraceSite {
        ret: TEXT as u32 + 0x1_0000 + 8 * i, offset: 0x1_0000 + 8 * i, module: 0, section: 1, size: 4,
        flags: SITE_READ, reserved: 0,
    }));
    time_gate(&region(GATE_PERMISSIVE, "/nonexistent/e1000.ko", &table), events)
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("EVENTS RUNS"));
    let (n, runs) = (args.next().unwrap_or(3_000_000), args.next().unwrap_or(7));
    let events = mix(n);
    bench(events.len(), runs, || run(&events));
}
