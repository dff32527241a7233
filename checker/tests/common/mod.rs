// SPDX-License-Identifier: GPL-2.0
//! Playing the driver process: a region with a header, a module, a site
//! table and events, and a run of the checker's own gate and engine over it.

#![allow(dead_code)] // each test file uses part of this

use std::cell::RefCell;
use std::io::Write;
use std::mem::{offset_of, size_of};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;
use understudy_checker::engine::{Checkers, Engine};
use understudy_checker::gate::{Gate, GateError};
use understudy_checker::region::Region;
use understudy_checker::report::{Kind, Reporter};
use understudy_checker::symbols::Symbols;
use understudy_checker::trace::*;

pub const REGION: usize = 1 << 20;
pub const SITES_AT: u64 = 4096;
pub const RING_AT: u64 = 64 << 10;
pub const RING: u32 = 16 << 10;

/// The module's image; its sites are at the addresses below.
pub const TEXT: u64 = 0x0100_0000;
pub const TEXT_SIZE: u64 = 0x0010_0000;
/// Module data, inside the image.
pub const MODULE_DATA: u64 = TEXT + 0x8_0000;
/// Where the tests' heap lives.
pub const HEAP: u64 = 0x10_0000_0000;
pub const PERCPU: u64 = 0x20_0000_0000;
pub const ARENA: u64 = 0x30_0000_0000;
/// The top of a thread's stack; another thread's is 8 MiB below.
pub const STACK: u64 = 0x7fff_f000_0000;
pub const IOVA: u64 = 0x1000_0000;

pub const READ4: u32 = TEXT as u32 + 0x100;
pub const WRITE4: u32 = TEXT as u32 + 0x110;
pub const READ8: u32 = TEXT as u32 + 0x120;
pub const WRITE8: u32 = TEXT as u32 + 0x130;
pub const RMW4: u32 = TEXT as u32 + 0x140;
pub const STACK_WRITE8: u32 = TEXT as u32 + 0x150;
pub const ATOMIC_RMW4: u32 = TEXT as u32 + 0x160;
pub const REP_STOSQ: u32 = TEXT as u32 + 0x170;
pub const REP_MOVSB: u32 = TEXT as u32 + 0x180;
pub const OUTB: u32 = TEXT as u32 + 0x190;
pub const PERCPU_WRITE4: u32 = TEXT as u32 + 0x1a0;
pub const STACK_READ8: u32 = TEXT as u32 + 0x1b0;
/// FRAME probes of a 64-byte and a 256-byte frame, and one that breaks the
/// contract with a frame of no size.
pub const FRAME64: u32 = TEXT as u32 + 0x1c0;
pub const FRAME256: u32 = TEXT as u32 + 0x1d0;
pub const FRAME0: u32 = TEXT as u32 + 0x1e0;
pub const RETURN: u32 = TEXT as u32 + 0x1f0;
pub const ESCAPE: u32 = TEXT as u32 + 0x200;
/// A runtime call site (kmalloc's caller and the like).
pub const CALLER: u32 = TEXT as u32 + 0x400;
pub const OTHER_CALLER: u32 = TEXT as u32 + 0x500;
pub const IRQ_HANDLER: u64 = TEXT + 0x2000;
pub const OTHER_IRQ_HANDLER: u64 = TEXT + 0x2400;
pub const NAPI_POLL: u64 = TEXT + 0x3000;
pub const TIMER_FN: u64 = TEXT + 0x3400;

pub fn sites() -> Vec<TraceSite> {
    let site = |ret: u32, size: u16, flags: u8| TraceSite {
        ret, offset: ret - TEXT as u32, module: 0, section: 1, size, flags, reserved: 0,
    };
    vec![
        site(READ4, 4, SITE_READ),
        site(WRITE4, 4, SITE_WRITE),
        site(READ8, 8, SITE_READ),
        site(WRITE8, 8, SITE_WRITE),
        site(RMW4, 4, SITE_READ | SITE_WRITE),
        site(STACK_WRITE8, 8, SITE_WRITE | SITE_STACK),
        site(ATOMIC_RMW4, 4, SITE_READ | SITE_WRITE | SITE_ATOMIC),
        site(REP_STOSQ, 8, SITE_WRITE | SITE_STRING),
        site(REP_MOVSB, 1, SITE_READ | SITE_WRITE | SITE_STRING),
        site(OUTB, 1, SITE_WRITE | SITE_PORT),
        site(PERCPU_WRITE4, 4, SITE_WRITE | SITE_PERCPU),
        site(STACK_READ8, 8, SITE_READ | SITE_STACK),
        site(FRAME64, 64, SITE_FRAME),
        site(FRAME256, 256, SITE_FRAME),
        site(FRAME0, 0, SITE_FRAME),
        site(RETURN, 0, SITE_FRAME),
        site(ESCAPE, 0, SITE_FRAME),
    ]
}

/// A region as a well-behaved driver process fills it in.
pub fn region(mode: u32, path: &str, sites: &[TraceSite]) -> Region {
    let r = Region::anonymous(REGION);
    fill(&r, mode, path, sites);
    r
}

pub fn fill(r: &Region, mode: u32, path: &str, sites: &[TraceSite]) {
    r.write(offset_of!(TraceHeader, magic), TRACE_MAGIC);
    r.write(offset_of!(TraceHeader, version), TRACE_VERSION);
    r.write(offset_of!(TraceHeader, ring_entries), RING);
    r.write(offset_of!(TraceHeader, gate_mode), mode);
    r.write(offset_of!(TraceHeader, ring_offset), RING_AT);
    r.write(offset_of!(TraceHeader, sites_offset), SITES_AT);
    r.write(offset_of!(TraceHeader, nsites), sites.len() as u32);
    r.write(offset_of!(TraceHeader, nmodules), 1u32);
    r.write(offset_of!(TraceHeader, percpu_base), PERCPU);
    r.write(offset_of!(TraceHeader, arena), ARENA);
    r.write(offset_of!(TraceHeader, arena_iova), IOVA);
    r.write(offset_of!(TraceHeader, arena_size), 64u64 << 20);
    let mut module = TraceModule { path: [0; MODULE_PATH_MAX], text: TEXT, text_size: TEXT_SIZE };
    module.path[..path.len()].copy_from_slice(path.as_bytes());
    r.write(offset_of!(TraceHeader, modules), module);
    for (i, s) in sites.iter().enumerate() {
        r.write(SITES_AT as usize + i * size_of::<TraceSite>(), *s);
    }
    r.ready().store(1, Ordering::Release);
}

pub fn ev(kind: u16, site: u32, addr: u64, arg0: u64, arg1: u64) -> TraceEvent {
    TraceEvent { kind_flags: kind as u32, site, addr, arg0, arg1 }
}

pub fn with_flags(mut e: TraceEvent, flags: u16) -> TraceEvent {
    e.kind_flags |= (flags as u32) << 16;
    e
}

pub fn access(site: u32, addr: u64) -> TraceEvent {
    ev(EV_ACCESS, site, addr, 0, 0)
}

pub fn alloc(addr: u64, size: u64) -> TraceEvent {
    ev(EV_ALLOC, CALLER, addr, size, 0)
}

pub fn free(addr: u64) -> TraceEvent {
    ev(EV_FREE, OTHER_CALLER, addr, 0, 0)
}

pub fn dma_map(cpu: u64, size: u64, dir: u16) -> TraceEvent {
    with_flags(ev(EV_DMA_MAP, CALLER, cpu, size, dma_of(cpu)), dir << EVF_DIR_SHIFT)
}

pub fn dma_unmap(cpu: u64, size: u64, dir: u16) -> TraceEvent {
    with_flags(ev(EV_DMA_UNMAP, OTHER_CALLER, dma_of(cpu), size, 0), dir << EVF_DIR_SHIFT)
}

pub fn dma_of(cpu: u64) -> u64 {
    IOVA + (cpu - ARENA)
}

/// `sub $size,%rsp` left `%rsp` at `start`.
pub fn frame(site: u32, start: u64) -> TraceEvent {
    ev(EV_FRAME, site, start, 0, 0)
}

/// A function returned with `%rsp` at `sp`.
pub fn return_to(sp: u64) -> TraceEvent {
    ev(EV_RETURN, RETURN, sp, 0, 0)
}

/// `lea` of the stack address `addr` into a register.
pub fn escape(addr: u64) -> TraceEvent {
    ev(EV_ESCAPE, ESCAPE, addr, 0, 0)
}

pub fn context(kind: u64, thread: u64, handler: u64) -> TraceEvent {
    ev(EV_CONTEXT, 0, kind, thread, handler)
}

pub fn lock(addr: u64, kind: u64) -> TraceEvent {
    ev(EV_LOCK, CALLER, addr, kind, 0)
}

pub fn unlock(addr: u64) -> TraceEvent {
    ev(EV_UNLOCK, CALLER, addr, 0, 0)
}

/// Stdout of the checker, in memory.
#[derive(Clone, Default)]
pub struct Lines(Rc<RefCell<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    pub fn json(&self) -> Vec<Value> {
        String::from_utf8(self.0.borrow().clone()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

pub struct Outcome {
    /// The `finding` objects printed, in order.
    pub findings: Vec<Value>,
    /// The summary's findings, with final counts.
    pub summary: Vec<Value>,
    pub approved: u64,
    pub verdict_at: u64,
    pub error: Option<GateError>,
}

impl Outcome {
    pub fn kinds(&self) -> Vec<&str> {
        self.findings.iter().map(|f| f["kind"].as_str().unwrap()).collect()
    }

    pub fn only(&self, kind: &str) -> &Value {
        assert_eq!(self.kinds(), [kind], "{:#?}", self.findings);
        &self.findings[0]
    }
}

fn default_fatal() -> Vec<Kind> {
    Kind::ALL.iter().copied().filter(|k| k.fatal_by_default()).collect()
}

/// Runs the checker over `events` in a permissive-mode region.
pub fn check(events: &[TraceEvent]) -> Outcome {
    check_in(&region(GATE_PERMISSIVE, "/nonexistent/e1000.ko", &sites()), events)
}

/// Plays producer and checker in turn: publishes as many events as the ring
/// has room for, lets the gate check them, and so on.
pub fn check_in(region: &Region, events: &[TraceEvent]) -> Outcome {
    check_with(region, events, Checkers::ALL)
}

/// `check_in` with only `checkers` running.
pub fn check_with(region: &Region, events: &[TraceEvent], checkers: Checkers) -> Outcome {
    let config = region.config().expect("a valid region");
    let lines = Lines::default();
    let symbols = Rc::new(Symbols::load(&config.modules, config.sites.clone()));
    let reporter = Reporter::new(Box::new(lines.clone()), symbols.clone(), default_fatal());
    let mut engine = Engine::new(&config, symbols, reporter).only(checkers);
    let mut gate = Gate::new(region, &config);
    let mut error = None;
    let mut head = region.head().load(Ordering::Acquire);
    let mut pending = events;
    while error.is_none() {
        let room = (RING as u64).saturating_sub(head - region.approved().load(Ordering::Acquire)) as usize;
        let (now, later) = pending.split_at(room.min(pending.len()));
        for e in now {
            region.write(RING_AT as usize + (head % RING as u64) as usize * size_of::<TraceEvent>(), *e);
            head += 1;
        }
        region.head().store(head, Ordering::Release);
        pending = later;
        match gate.poll(&mut engine, u64::MAX) {
            Err(e) => error = Some(e),
            // A verdict stops approval: the producer can publish no more.
            Ok(_) if pending.is_empty() || room == 0 => break,
            Ok(_) => {}
        }
    }
    engine.summary(gate.checked(), gate.verdict_at(), None);
    let json = lines.json();
    let findings = json.iter().filter_map(|l| l.get("finding").cloned()).collect();
    let summary = json.last().unwrap()["summary"]["findings"].as_array().unwrap().clone();
    Outcome {
        findings,
        summary,
        approved: region.approved().load(Ordering::Acquire),
        verdict_at: region.verdict_at().load(Ordering::Acquire),
        error,
    }
}

/// The time the gate takes to check `events` played into `region` a ring at
/// a time (only the checking is timed), and the findings' kinds. Nothing is
/// fatal: the run must reach the end.
pub fn time_gate(region: &Region, events: &[TraceEvent]) -> (Duration, Vec<String>) {
    time_checkers(region, events, Checkers::ALL)
}

/// `time_gate` with only `checkers` running.
pub fn time_checkers(region: &Region, events: &[TraceEvent], checkers: Checkers) -> (Duration, Vec<String>) {
    let config = region.config().expect("a valid region");
    let (ring_at, ring) = (config.ring_offset as usize, config.ring_entries as usize);
    let lines = Lines::default();
    let symbols = Rc::new(Symbols::load(&config.modules, config.sites.clone()));
    let reporter = Reporter::new(Box::new(lines.clone()), symbols.clone(), Vec::<Kind>::new());
    let mut engine = Engine::new(&config, symbols, reporter).only(checkers);
    let mut gate = Gate::new(region, &config);
    let mut spent = Duration::ZERO;
    let mut head = 0u64;
    for chunk in events.chunks(ring - 1) {
        for e in chunk {
            region.write(ring_at + (head % ring as u64) as usize * size_of::<TraceEvent>(), *e);
            head += 1;
        }
        region.head().store(head, Ordering::Release);
        let start = Instant::now();
        gate.poll(&mut engine, u64::MAX).expect("the events keep the contract");
        spent += start.elapsed();
    }
    assert_eq!(region.approved().load(Ordering::Acquire), head);
    let kinds = lines.json().iter().filter_map(|l| l["finding"]["kind"].as_str().map(String::from)).collect();
    (spent, kinds)
}

/// Times `runs` runs of checking `events` events and prints a table and one
/// JSON line with the median, min and max (the machine may be shared:
/// compare medians).
pub fn bench(events: usize, runs: usize, mut run: impl FnMut() -> (Duration, Vec<String>)) {
    let mut ns: Vec<f64> = Vec::new();
    let mut findings = Vec::new();
    println!("{:>4} {:>10} {:>12} {:>10}", "run", "events", "events/s", "ns/event");
    for i in 0..runs {
        let (spent, kinds) = run();
        let per = spent.as_nanos() as f64 / events as f64;
        println!("{i:>4} {events:>10} {:>12.0} {per:>10.1}", 1e9 / per);
        ns.push(per);
        findings = kinds;
    }
    ns.sort_by(f64::total_cmp);
    let median = ns[ns.len() / 2];
    println!("median {median:.1} ns/event ({:.0} events/s), min {:.1}, max {:.1}; findings {findings:?}",
             1e9 / median, ns[0], ns[ns.len() - 1]);
    println!("{}", serde_json::json!({
        "events": events, "runs": runs,
        "ns_per_event": { "median": median, "min": ns[0], "max": ns[ns.len() - 1] },
        "events_per_s_median": 1e9 / median,
        "findings": findings,
    }));
}
