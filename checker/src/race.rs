// SPDX-License-Identifier: GPL-2.0
//! The race checker (DRCheck's job, docs/checking.md): Eraser's lockset
//! algorithm over the driver's execution contexts.
//!
//! Each 8-byte granule of tracked memory (live heap blocks and the modules'
//! images) moves through Eraser's states: virgin; exclusive to the context
//! that first touched it; shared once another context reads it;
//! shared-modified once another context writes it. From shared on, the
//! granule's lockset is the intersection of the locks held at each access
//! (`lockset.rs`, virtual locks for interrupts included); a shared-modified
//! granule whose lockset runs empty is a race, reported once per granule.
//! As in Eraser, the intersection starts at the first access by a second
//! context, without the owner's locks: a block is commonly initialised
//! without locks before it is published, and a race with the owner is
//! found at the owner's next access.
//!
//! A context is what the CPU runs (US_EV_CONTEXT): a process thread, by
//! thread id; a hard-IRQ, softirq, timer or work handler, by handler (the
//! kernel never runs one handler twice at once). Two accesses of one context
//! are ordered; any two contexts may run concurrently.
//!
//! State-based synchronisation: the kernel calls a driver's handlers only in
//! states that allow them (no interrupt before request_irq, no poll before
//! napi_enable, no timer before it is armed), so an access cannot race with
//! a handler that could not yet run. The trace shows no registrations, only
//! each context's first run: a context first seen after a granule's last
//! access takes the granule over as exclusive owner, whatever it was, instead
//! of meeting its history. STOP ends every context's life: after it each is
//! new again when next seen, and all granules are forgotten.

use rustc_hash::FxHashMap;
use serde_json::{json, Value};

use crate::lockset::{Element, Lock, LocksetId, Locksets, EMPTY};
use crate::report::{hex, Detail, Kind, Reporter, Touch};
use crate::symbols::{SiteRef, Symbols};
use crate::trace::*;

const GRANULE: u64 = 8;
const PAGE: u64 = 4096;
const GRANULES_PER_PAGE: usize = (PAGE / GRANULE) as usize;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Virgin,
    Exclusive,
    Shared,
    SharedModified,
    /// A race was reported here; not again.
    Reported,
}

/// One access, packed: the site's address, its kind, the context, write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Party(u64);

const PARTY_RUNTIME: u64 = 1 << 62;
const PARTY_WRITE: u64 = 1 << 63;

impl Party {
    fn new(site: SiteRef, context: u32, write: bool) -> Party {
        let runtime = if matches!(site, SiteRef::Runtime(_)) { PARTY_RUNTIME } else { 0 };
        Party(site.address() as u64 | (context as u64) << 32 | runtime | if write { PARTY_WRITE } else { 0 })
    }

    fn context(self) -> u32 {
        (self.0 >> 32) as u32 & ((1 << 30) - 1)
    }

    fn write(self) -> bool {
        self.0 & PARTY_WRITE != 0
    }

    fn site(self) -> SiteRef {
        let address = self.0 as u32;
        if self.0 & PARTY_RUNTIME != 0 { SiteRef::Runtime(address) } else { SiteRef::Stub(address) }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Granule {
    /// The event of the last access: what state-based synchronisation
    /// compares a context's first run with.
    last_event: u64,
    /// Exclusive: the owner's locks at its last access (for reports).
    /// Shared: the locks held at every access since it became shared.
    lockset: LocksetId,
    state: State,
    /// The last access, and the last one by another context than its.
    last: Party,
    prior: Party,
}

struct Context {
    kind: u64,
    thread: u64,
    handler: u64,
    /// The event at which it was first seen running (since the last STOP).
    first_seen: Option<u64>,
    /// (lock, US_LOCK_*), in acquisition order.
    held: Vec<(u64, u64)>,
    irqs_off: u32,
    lockset: LocksetId,
}

pub struct Race {
    contexts: Vec<Context>,
    by_key: FxHashMap<(u64, u64, u64), u32>,
    current: u32,
    locks: Vec<u64>,
    lock_ids: FxHashMap<u64, u32>,
    locksets: Locksets,
    pages: FxHashMap<u64, u32>,
    /// The page the last access fell in and its index: most accesses fall
    /// in the same page as the one before.
    last_page: Option<(u64, u32)>,
    granules: Vec<Box<[Granule; GRANULES_PER_PAGE]>>,
    scratch: Vec<Element>,
}

/// What a race report says of the access it was found at.
struct Found {
    other: Party,
    /// The granule's lockset before the access.
    before: Option<LocksetId>,
    granule: u64,
}

fn context_name(kind: u64) -> &'static str {
    ["process", "hardirq", "softirq", "timer", "work"].get(kind as usize).copied().unwrap_or("?")
}

impl Default for Race {
    fn default() -> Self {
        let mut race = Race {
            contexts: Vec::new(), by_key: FxHashMap::default(), current: 0, locks: Vec::new(),
            lock_ids: FxHashMap::default(), locksets: Locksets::default(), pages: FxHashMap::default(),
            last_page: None, granules: Vec::new(), scratch: Vec::new(),
        };
        // Until the first CONTEXT event the CPU runs an anonymous process
        // thread, there from the start.
        race.switch(CTX_PROCESS, 0, 0, 0);
        race
    }
}

impl Race {
    /// US_EV_CONTEXT: the CPU now runs this context.
    pub fn switch(&mut self, kind: u64, thread: u64, handler: u64, event: u64) {
        let key = if kind == CTX_PROCESS || handler == 0 { (kind, 0, thread) } else { (kind, handler, 0) };
        let id = *self.by_key.entry(key).or_insert_with(|| {
            self.contexts.push(Context { kind, thread, handler, first_seen: None, held: Vec::new(), irqs_off: 0,
                                         lockset: EMPTY });
            (self.contexts.len() - 1) as u32
        });
        self.current = id;
        if self.contexts[id as usize].first_seen.is_none() {
            self.contexts[id as usize].first_seen = Some(event);
            self.recompute();
        }
    }

    /// How many locks the current context holds.
    pub fn held_locks(&self) -> usize {
        self.contexts[self.current as usize].held.len()
    }

    pub fn lock(&mut self, lock: u64, kind: u64) {
        self.contexts[self.current as usize].held.push((lock, kind));
        self.recompute();
    }

    /// An unlock of a lock this context does not hold (released by another
    /// context, or taken before the trace began) changes nothing.
    pub fn unlock(&mut self, lock: u64) {
        let held = &mut self.contexts[self.current as usize].held;
        if let Some(i) = held.iter().rposition(|&(l, _)| l == lock) {
            held.remove(i);
            self.recompute();
        }
    }

    pub fn irqs_off(&mut self) {
        self.contexts[self.current as usize].irqs_off += 1;
        self.recompute();
    }

    pub fn irqs_on(&mut self) {
        let c = &mut self.contexts[self.current as usize];
        c.irqs_off = c.irqs_off.saturating_sub(1);
        self.recompute();
    }

    /// The current context's lockset, after its locks or interrupt state changed.
    fn recompute(&mut self) {
        let id = self.current;
        let c = &self.contexts[id as usize];
        self.scratch.clear();
        for &(lock, _) in &c.held {
            let next = self.locks.len() as u32;
            let index = *self.lock_ids.entry(lock).or_insert(next);
            if index == next {
                self.locks.push(lock);
            }
            self.scratch.push(Element::new(Lock::Real(index)));
        }
        let irqs_off = c.irqs_off > 0 || c.held.iter().any(|&(_, k)| k == LOCK_SPIN_IRQ);
        let bh_off = irqs_off || c.held.iter().any(|&(_, k)| k == LOCK_SPIN_BH);
        if irqs_off {
            self.scratch.push(Element::new(Lock::IrqsOff));
        }
        if bh_off {
            self.scratch.push(Element::new(Lock::BhOff));
        }
        match c.kind {
            CTX_HARDIRQ => self.scratch.push(Element::new(Lock::InHardirq(id))),
            CTX_SOFTIRQ | CTX_TIMER => self.scratch.push(Element::new(Lock::InSoftirq(id))),
            _ => {}
        }
        let lockset = self.locksets.intern(&mut self.scratch);
        self.contexts[id as usize].lockset = lockset;
    }

    /// The driver stopped: handlers are unregistered, memory is forgotten.
    pub fn stop(&mut self, event: u64) {
        for c in &mut self.contexts {
            c.first_seen = None;
        }
        self.contexts[self.current as usize].first_seen = Some(event);
        self.pages.clear();
        self.last_page = None;
        self.granules.clear();
    }

    /// New memory: whatever its granules saw belonged to a freed block.
    /// Forgetting a block's granules is most of the cost of an ALLOC, so
    /// only the ones at its ends, which it may share with a neighbour, are
    /// forgotten now, unless `now` says all must be; the others are
    /// forgotten at the first access through the block (`access`'s `born`),
    /// which is the only way to reach them.
    pub fn forget(&mut self, start: u64, size: u64, now: bool) {
        let (first, end) = (start / GRANULE, start.saturating_add(size).div_ceil(GRANULE));
        if !now {
            for g in [first, end.saturating_sub(1)] {
                if g >= first && g < end {
                    self.forget_granules(g, g + 1);
                }
            }
            return;
        }
        self.forget_granules(first, end);
    }

    fn forget_granules(&mut self, mut g: u64, end: u64) {
        while g < end {
            let page = g * GRANULE / PAGE;
            let first = (g % GRANULES_PER_PAGE as u64) as usize;
            let n = (GRANULES_PER_PAGE - first).min((end - g) as usize);
            if let Some(&i) = self.pages.get(&page) {
                self.granules[i as usize][first..first + n].fill(Granule::default());
            }
            g += n as u64;
        }
    }

    /// Where the granules of `page` are in `granules`, created virgin if it
    /// has none yet.
    fn page(&mut self, page: u64) -> usize {
        if let Some((_, i)) = self.last_page.filter(|&(p, _)| p == page) {
            return i as usize;
        }
        let next = self.granules.len() as u32;
        let i = *self.pages.entry(page).or_insert(next);
        if i == next {
            self.granules.push(Box::new([Granule::default(); GRANULES_PER_PAGE]));
        }
        self.last_page = Some((page, i));
        i as usize
    }

    /// An access to tracked memory (the caller leaves out the stack, per-cpu
    /// data, atomics and DMA-coherent memory). `born` is the ALLOC event of
    /// the live block that holds it (0 outside the heap): a granule last
    /// touched before it belonged to a freed block and is forgotten (see
    /// `forget`).
    pub fn access(&mut self, t: &Touch, born: u64, out: &mut Reporter) {
        let (c, lockset) = (self.current, self.contexts[self.current as usize].lockset);
        let first_seen = self.contexts[c as usize].first_seen.unwrap_or(0);
        let me = Party::new(t.site, c, t.write);
        let mut found = None;
        let (mut index, end) = (t.address / GRANULE, t.end().div_ceil(GRANULE));
        // Page by page: one page lookup for all the granules of a copy or a
        // fill that lie in it, not one per granule.
        while index < end {
            let first = (index % GRANULES_PER_PAGE as u64) as usize;
            let n = (GRANULES_PER_PAGE - first).min((end - index) as usize);
            let i = self.page(index * GRANULE / PAGE);
            for (k, g) in self.granules[i][first..first + n].iter_mut().enumerate() {
                if g.last_event < born {
                    *g = Granule::default();
                }
                let report = Self::step(&mut self.locksets, g, me, lockset, first_seen, t.event);
                if found.is_none() {
                    found = report.map(|(other, before)| Found { other, before, granule: (index + k as u64) * GRANULE });
                }
            }
            index += n as u64;
        }
        if let Some(f) = found {
            self.report(t, lockset, f, out);
        }
    }

    /// Eraser's transition of one granule; returns the other party and the
    /// lockset before this access if it races.
    fn step(locksets: &mut Locksets, g: &mut Granule, me: Party, lockset: LocksetId, first_seen: u64,
            event: u64) -> Option<(Party, Option<LocksetId>)> {
        let c = me.context();
        let other_context = g.last.context() != c;
        let before = (g.state != State::Virgin).then_some(g.lockset);
        match g.state {
            State::Reported => {}
            State::Virgin => {
                g.state = State::Exclusive;
                g.lockset = lockset;
            }
            _ if other_context && first_seen > g.last_event => {
                // State-based: all of it happened before this context could run.
                g.state = State::Exclusive;
                g.lockset = lockset;
            }
            State::Exclusive if !other_context => g.lockset = lockset,
            State::Exclusive => {
                g.state = if me.write() { State::SharedModified } else { State::Shared };
                g.lockset = lockset;
            }
            State::Shared | State::SharedModified => {
                g.lockset = locksets.meet(g.lockset, lockset);
                if me.write() {
                    g.state = State::SharedModified;
                }
            }
        }
        let other = if other_context { g.last } else { g.prior };
        if other_context {
            g.prior = g.last;
        }
        g.last = me;
        g.last_event = event;
        if g.state == State::SharedModified && g.lockset == EMPTY {
            g.state = State::Reported;
            return Some((other, before));
        }
        None
    }

    fn context_json(&self, symbols: &Symbols, id: u32) -> Value {
        let c = &self.contexts[id as usize];
        json!({
            "kind": context_name(c.kind),
            "thread": c.thread,
            "handler": (c.handler != 0).then(|| symbols.describe_code(c.handler)),
        })
    }

    fn locks_json(&self, symbols: &Symbols, id: LocksetId) -> Value {
        self.locksets.get(id).iter().map(|e| match e.lock() {
            Lock::Real(i) => json!(hex(self.locks[i as usize])),
            Lock::IrqsOff => json!("irqs-off"),
            Lock::BhOff => json!("bh-off"),
            Lock::InHardirq(c) | Lock::InSoftirq(c) => json!({ "running": self.context_json(symbols, c) }),
        }).collect()
    }

    fn report(&self, t: &Touch, lockset: LocksetId, f: Found, out: &mut Reporter) {
        out.report(Kind::DataRace, t.site, t.event, |s| Detail {
            access: Some(t.access()),
            other: json!({
                "granule": hex(f.granule),
                "context": self.context_json(s, self.current),
                "locks": self.locks_json(s, lockset),
                "other_access": {
                    "site": s.describe(f.other.site()),
                    "write": f.other.write(),
                    "context": self.context_json(s, f.other.context()),
                },
                "locks_before": f.before.map(|before| self.locks_json(s, before)),
            }),
        });
    }
}
