// SPDX-License-Identifier: GPL-2.0
//! The gate protocol, the refusal of bad regions and traces, and a long
//! stream checked event for event.

mod common;

use std::mem::{offset_of, size_of};
use std::sync::atomic::Ordering;

use common::*;
use understudy_checker::engine::EventError;
use understudy_checker::gate::GateError;
use understudy_checker::region::{GateMode, Region, RegionError};
use understudy_checker::trace::*;

#[test]
fn a_fatal_event_stops_approval_before_it_for_good() {
    let mut events = vec![alloc(HEAP, 64), access(WRITE4, HEAP), free(HEAP)];
    events.extend((0..100).map(|_| ev(EV_PORT, OUTB, 0x3f8, 0, 0)));
    let fatal_at = events.len() as u64;
    events.push(access(WRITE4, HEAP));
    // More than a ring's worth after it: the producer can publish only
    // what fits before the frozen `approved`.
    events.extend((0..RING * 2).map(|_| ev(EV_PORT, OUTB, 0x3f8, 0, 0)));
    let r = region(GATE_STRINGENT, "/nonexistent/e1000.ko", &sites());
    let o = check_in(&r, &events);
    assert_eq!(o.kinds(), ["use-after-free"]);
    assert_eq!((o.approved, o.verdict_at), (fatal_at, fatal_at + 1));
    assert_eq!(r.head().load(Ordering::Acquire), fatal_at + RING as u64);
    assert!(o.error.is_none());
}

#[test]
fn in_triage_mode_findings_are_reported_and_nothing_is_stopped() {
    let events = [alloc(HEAP, 64), free(HEAP), access(WRITE4, HEAP), access(READ4, HEAP)];
    let o = check_in(&region(GATE_TRIAGE, "/nonexistent/e1000.ko", &sites()), &events);
    assert_eq!(o.kinds(), ["use-after-free", "use-after-free"]);
    assert_eq!(o.findings[0]["fatal"], true, "the kind is fatal; triage does not act on it");
    assert_eq!((o.approved, o.verdict_at), (4, 0));
}

#[test]
fn an_event_outside_the_contract_is_refused_and_never_approved() {
    let cases: [(TraceEvent, GateError); 6] = [
        (ev(99, 0, 0, 0, 0), EventError::UnknownKind { index: 2, kind: 99 }.into()),
        (access(0x1234, HEAP), EventError::UnknownSite { index: 2, site: 0x1234 }.into()),
        (access(OUTB, 0), EventError::WrongSite { index: 2, site: OUTB, flags: SITE_WRITE | SITE_PORT, kind: EV_ACCESS }.into()),
        (ev(EV_FILL, CALLER, HEAP, 0, 1 << 40), EventError::Range { index: 2, address: HEAP, size: 1 << 40 }.into()),
        (alloc(u64::MAX - 8, 64), EventError::Range { index: 2, address: u64::MAX - 8, size: 64 }.into()),
        (context(7, 0, 0), EventError::ContextKind { index: 2, kind: 7 }.into()),
    ];
    for (bad, error) in cases {
        let o = check(&[alloc(HEAP, 64), access(WRITE4, HEAP), bad, access(READ4, HEAP)]);
        assert_eq!(o.error, Some(error));
        assert_eq!((o.approved, o.verdict_at), (2, 3));
    }
    let mut deep: Vec<_> = (0..48).map(|i| lock(HEAP + 8 * i, LOCK_SPIN)).collect();
    deep.push(lock(HEAP - 8, LOCK_SPIN));
    assert_eq!(check(&deep).error, Some(EventError::LockDepth { index: 48 }.into()));
}

#[test]
fn a_producer_that_overruns_the_ring_is_refused() {
    let r = region(GATE_PERMISSIVE, "/nonexistent/e1000.ko", &sites());
    r.head().store(RING as u64 + 1, Ordering::Release);
    let o = check_in(&r, &[]);
    assert_eq!(o.error, Some(GateError::Overrun { head: RING as u64 + 1, approved: 0, entries: RING }));
    assert_eq!((o.approved, o.verdict_at), (0, 1));
}

fn refused(edit: impl FnOnce(&Region)) -> RegionError {
    let r = region(GATE_PERMISSIVE, "/nonexistent/e1000.ko", &sites());
    edit(&r);
    r.config().expect_err("a bad region is refused")
}

#[test]
fn garbage_headers_are_refused() {
    let at = |field: usize| field;
    assert!(region(GATE_STRINGENT, "/x.ko", &sites()).config().is_ok_and(|c| c.gate_mode == GateMode::Stringent));
    assert_eq!(refused(|r| r.write(at(offset_of!(TraceHeader, magic)), 0x1234u32)), RegionError::Magic(0x1234));
    assert_eq!(refused(|r| r.write(at(offset_of!(TraceHeader, version)), 3u32)), RegionError::Version(3));
    assert_eq!(refused(|r| r.write(at(offset_of!(TraceHeader, gate_mode)), 3u32)), RegionError::GateMode(3));
    assert_eq!(refused(|r| r.write(at(offset_of!(TraceHeader, ring_entries)), 1000u32)), RegionError::RingEntries(1000));
    assert_eq!(refused(|r| r.write(at(offset_of!(TraceHeader, ring_entries)), 1u32 << 31)),
               RegionError::RingPlace { offset: RING_AT, entries: 1 << 31, size: REGION });
    assert_eq!(refused(|r| r.write(at(offset_of!(TraceHeader, ring_offset)), 8u64)),
               RegionError::RingPlace { offset: 8, entries: RING, size: REGION });
    assert_eq!(refused(|r| r.write(at(offset_of!(TraceHeader, nsites)), TRACE_MAX_SITES + 1)),
               RegionError::TooManySites(TRACE_MAX_SITES + 1));
    assert_eq!(refused(|r| r.write(at(offset_of!(TraceHeader, nsites)), 1u32 << 16)),
               RegionError::SitesPlace { offset: SITES_AT, nsites: 1 << 16 });
    assert_eq!(refused(|r| r.write(at(offset_of!(TraceHeader, sites_offset)), RING_AT)), RegionError::Overlap);
    assert_eq!(refused(|r| r.write(at(offset_of!(TraceHeader, nmodules)), 9u32)), RegionError::TooManyModules(9));
    assert_eq!(refused(|r| r.write(offset_of!(TraceHeader, modules), [b'a'; MODULE_PATH_MAX])),
               RegionError::PathUnterminated(0));
    assert_eq!(refused(|r| r.write(offset_of!(TraceHeader, modules), [0u8; MODULE_PATH_MAX])), RegionError::PathInvalid(0));
    let mut unsorted = sites();
    unsorted.swap(2, 3);
    let r = region(GATE_PERMISSIVE, "/x.ko", &unsorted);
    assert_eq!(r.config().unwrap_err(), RegionError::SitesUnsorted { index: 3, ret: READ8, prev: WRITE8 });
    let mut foreign = sites();
    foreign[4].module = 1;
    let r = region(GATE_PERMISSIVE, "/x.ko", &foreign);
    assert_eq!(r.config().unwrap_err(), RegionError::SiteModule { index: 4, module: 1, nmodules: 1 });
    assert_eq!(Region::anonymous(100).config().unwrap_err(), RegionError::TooSmall(100));
}

#[test]
fn a_region_another_checker_used_is_refused() {
    let r = region(GATE_PERMISSIVE, "/x.ko", &sites());
    r.claim().unwrap();
    assert_eq!(r.checker_pid().load(Ordering::Acquire), std::process::id());
    assert!(matches!(r.claim(), Err(RegionError::CheckerLine { pid, .. }) if pid == std::process::id()));
}

/// A long trace of correct driver work — allocations, locked accesses from
/// process and interrupt context, map/sync/unmap cycles, frees — with one
/// use after free near its end: exactly that one is found, at its index,
/// and everything before it is approved. It wraps the ring many times.
#[test]
fn a_long_stream_is_checked_event_for_event() {
    const LOCK: u64 = HEAP - 0x1000;
    let mut events = vec![context(CTX_PROCESS, 1, 0), context(CTX_HARDIRQ, 9, IRQ_HANDLER), context(CTX_PROCESS, 1, 0)];
    let mut freed = None;
    for round in 0..45_000u64 {
        let block = HEAP + (round % 64) * 0x1000;
        let buffer = ARENA + (round % 64) * 0x1000;
        events.extend([
            alloc(block, 256),
            ev(EV_FILL, CALLER, block, 0, 128),
            lock(LOCK, LOCK_SPIN_IRQ), ev(EV_IRQ_OFF, CALLER, 0, 0, 0),
            access(WRITE8, block + 8 * (round % 16)), access(READ4, block + 4),
            unlock(LOCK), ev(EV_IRQ_ON, CALLER, 0, 0, 0),
            alloc(buffer, 2048),
            dma_map(buffer, 2048, 2),
            context(CTX_HARDIRQ, 9, IRQ_HANDLER), lock(LOCK, LOCK_SPIN), access(RMW4, block + 16), unlock(LOCK),
            ev(EV_DMA_SYNC_CPU, CALLER, dma_of(buffer), 64, 0), access(READ8, buffer + 8),
            ev(EV_DMA_SYNC_DEVICE, CALLER, dma_of(buffer), 64, 0),
            context(CTX_PROCESS, 1, 0),
            dma_unmap(buffer, 2048, 2),
            ev(EV_COPY, CALLER, block + 128, buffer, 128), access(READ8, block + 200),
            free(buffer),
            free(block),
        ]);
        if round == 44_990 {
            freed = Some(block);
        }
    }
    let uaf_at = events.len() as u64 + 5;
    events.extend((0..5).map(|_| ev(EV_PORT, OUTB, 0x3f8, 0, 0)));
    events.push(access(READ4, freed.unwrap() + 4));
    events.extend((0..1000).map(|_| ev(EV_PORT, OUTB, 0x3f8, 0, 0)));
    assert!(events.len() > 1_000_000);

    let o = check(&events);
    assert_eq!(o.kinds(), ["use-after-free"], "{:#?}", o.findings);
    assert_eq!(o.findings[0]["event"], uaf_at);
    assert_eq!((o.approved, o.verdict_at), (uaf_at, uaf_at + 1));
    assert_eq!(size_of::<TraceEvent>() as u64 * RING as u64, 512 << 10);
}
