// SPDX-License-Identifier: GPL-2.0
//! From raw events to the checkers: each event is checked for what the
//! contract allows (a known kind, a site of the right sort, sane sizes)
//! and handed to the memory, DMA and race checkers; accesses to the stack
//! go to the memory and DMA checkers only. An event outside the
//! contract is an error: the trace can no longer be trusted, so nothing
//! from it on is approved.

use std::rc::Rc;

use thiserror::Error;

use crate::dma::Dma;
use crate::heap::{Block, Heap, Place};
use crate::memory::Memory;
use crate::profile::Profile;
use crate::race::Race;
use crate::region::Config;
use crate::report::{Reporter, Touch};
use crate::stack::{Frame, Stack};
use crate::symbols::{SiteRef, Symbols};
use crate::trace::*;

/// The largest range one event may cover (a copy, a fill, a string op, an
/// allocation, a mapping); a larger one is garbage, and would cost the
/// checker its size in work.
pub const MAX_RANGE: u64 = 1 << 30;

/// The most locks one context may hold: Linux's MAX_LOCK_DEPTH.
pub const MAX_HELD_LOCKS: usize = 48;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum EventError {
    #[error("event {index}: unknown kind {kind}")]
    UnknownKind { index: u64, kind: u16 },
    #[error("event {index}: site {site:#x} is not in the site table")]
    UnknownSite { index: u64, site: u32 },
    #[error("event {index}: site {site:#x} has flags {flags:#x}, not those of a kind {kind} event")]
    WrongSite { index: u64, site: u32, flags: u8, kind: u16 },
    #[error("event {index}: a range of {size} bytes at {address:#x}: more than the {MAX_RANGE} an event may cover, or past the end of the address space")]
    Range { index: u64, address: u64, size: u128 },
    #[error("event {index}: a FRAME of 0 bytes at site {site:#x}")]
    EmptyFrame { index: u64, site: u32 },
    #[error("event {index}: context kind {kind} is not a US_CTX_*")]
    ContextKind { index: u64, kind: u64 },
    #[error("event {index}: stop kind {kind} is not a US_STOP_*")]
    StopKind { index: u64, kind: u64 },
    #[error("event {index}: lock kind {kind} is not a US_LOCK_*")]
    LockKind { index: u64, kind: u64 },
    #[error("event {index}: a context holds more than {MAX_HELD_LOCKS} locks")]
    LockDepth { index: u64 },
}

pub struct Engine {
    symbols: Rc<Symbols>,
    percpu_base: u64,
    heap: Heap,
    stack: Stack,
    memory: Memory,
    dma: Dma,
    race: Race,
    reporter: Reporter,
    checkers: Checkers,
    profile: Profile,
}

/// `size` bytes at `address`, if the range is one an event may cover.
fn range(index: u64, address: u64, size: u128) -> Result<u64, EventError> {
    if size > MAX_RANGE as u128 || address.checked_add(size as u64).is_none() {
        return Err(EventError::Range { index, address, size });
    }
    Ok(size as u64)
}

/// Which checkers run (`understudy-checker --checkers`): all of them
/// unless asked otherwise, to measure what each one costs alone. The heap's
/// blocks and the stack's frames are kept whichever run: every checker
/// places accesses with them. Without the DMA checker, a buffer mapped for
/// the device counts as written when it is mapped (the memory checker
/// cannot learn when the device wrote it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkers {
    pub memory: bool,
    pub race: bool,
    pub dma: bool,
}

impl Checkers {
    pub const ALL: Checkers = Checkers { memory: true, race: true, dma: true };
    pub const NAMES: [&'static str; 3] = ["memory", "race", "dma"];

    /// From names such as `memory,dma`; an unknown name is an error.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Checkers, String> {
        let mut on = Checkers { memory: false, race: false, dma: false };
        for name in names.iter().map(AsRef::as_ref).filter(|n| !n.is_empty()) {
            match name {
                "memory" => on.memory = true,
                "race" => on.race = true,
                "dma" => on.dma = true,
                _ => return Err(format!("unknown checker {name:?}; the checkers are {}", Checkers::NAMES.join(", "))),
            }
        }
        Ok(on)
    }

    pub fn names(self) -> Vec<&'static str> {
        let on = [self.memory, self.race, self.dma];
        Checkers::NAMES.iter().zip(on).filter(|(_, on)| *on).map(|(n, _)| *n).collect()
    }
}

impl Engine {
    pub fn new(config: &Config, symbols: Rc<Symbols>, reporter: Reporter) -> Engine {
        Engine {
            symbols,
            percpu_base: config.percpu_base,
            heap: Heap::default(),
            stack: Stack::default(),
            memory: Memory::default(),
            dma: Dma::new(config.arena, config.arena_iova, config.arena_size),
            race: Race::default(),
            reporter,
            checkers: Checkers::ALL,
            profile: Profile::default(),
        }
    }

    /// The engine with only `checkers` running.
    pub fn only(self, checkers: Checkers) -> Engine {
        Engine { checkers, ..self }
    }

    pub fn reporter(&mut self) -> &mut Reporter {
        &mut self.reporter
    }

    /// A progress line, with where the events came from.
    pub fn progress(&mut self, events: u64) {
        let profile = self.profile.json(&self.symbols);
        self.reporter.progress(events, profile);
    }

    /// The last line, with where the events came from.
    pub fn summary(&mut self, events: u64, verdict_at: Option<u64>, error: Option<&str>) {
        let profile = self.profile.json(&self.symbols);
        self.reporter.summary(events, verdict_at, error, Some(profile));
    }

    /// The site of a stub event, which must have all of `required` and
    /// none of `forbidden` of the US_SITE_* flags.
    fn stub_site(&self, index: u64, ev: &TraceEvent, required: u8, forbidden: u8) -> Result<TraceSite, EventError> {
        let site = *self.symbols.site(ev.site).ok_or(EventError::UnknownSite { index, site: ev.site })?;
        if site.flags & required != required || site.flags & forbidden != 0 {
            return Err(EventError::WrongSite { index, site: ev.site, flags: site.flags, kind: ev.kind() });
        }
        Ok(site)
    }

    pub fn process(&mut self, index: u64, ev: &TraceEvent) -> Result<(), EventError> {
        self.profile.count(index, ev);
        let runtime = SiteRef::Runtime(ev.site);
        let out = &mut self.reporter;
        match ev.kind() {
            EV_ACCESS => {
                let site = self.stub_site(index, ev, 0, SITE_STRING | SITE_PORT | SITE_FRAME)?;
                let percpu = ev.flags() & EVF_PERCPU != 0;
                let address = if percpu { self.percpu_base.wrapping_add(ev.addr) } else { ev.addr };
                let flags = site.flags | if percpu { SITE_PERCPU } else { 0 };
                self.touch(Touch {
                    address, size: site.size.max(1) as u64,
                    read: site.flags & SITE_READ != 0, write: site.flags & SITE_WRITE != 0,
                    site: SiteRef::Stub(ev.site), event: index, copy: false,
                }, flags);
            }
            EV_STRING => self.string(index, ev)?,
            EV_PORT => {
                self.stub_site(index, ev, SITE_PORT, SITE_STRING | SITE_FRAME)?;
            }
            EV_FRAME => {
                let site = self.stub_site(index, ev, SITE_FRAME, 0)?;
                if site.size == 0 {
                    return Err(EventError::EmptyFrame { index, site: ev.site });
                }
                let size = range(index, ev.addr, site.size as u128)?;
                let frame = Frame { start: ev.addr, end: ev.addr + size, site: SiteRef::Stub(ev.site), event: index };
                if self.checkers.memory {
                    self.memory.frame(&mut self.stack, frame);
                } else {
                    self.stack.push(frame);
                }
            }
            EV_RETURN => {
                self.stub_site(index, ev, SITE_FRAME, 0)?;
                self.stack.unwind(ev.addr);
            }
            EV_ESCAPE => {
                self.stub_site(index, ev, SITE_FRAME, 0)?;
                if self.checkers.memory {
                    self.memory.escape(&self.stack, ev.addr);
                }
            }
            EV_ALLOC => {
                let size = range(index, ev.addr, ev.arg0 as u128)?;
                let block = Block { start: ev.addr, size, site: runtime, event: index };
                if self.checkers.memory {
                    self.memory.allocate(&mut self.heap, block);
                    // The runtime allocating for itself (an skb, a net_device)
                    // fills the block in code the trace does not show.
                    if !self.symbols.in_module_image(ev.site as u64) {
                        self.memory.define(ev.addr, size);
                    }
                } else if size > 0 {
                    self.heap.allocate(block);
                }
                // Module data is reached without the heap's `born` (see
                // `touch`): a block over it is forgotten at once.
                if self.checkers.race {
                    self.race.forget(ev.addr, size, self.symbols.overlaps_module_image(ev.addr, size));
                }
            }
            EV_FREE if self.checkers.memory => self.memory.free(&mut self.heap, ev.addr, runtime, index, out),
            EV_FREE => {
                self.heap.free(ev.addr, runtime, index);
            }
            EV_DMA_MAP => {
                let size = range(index, ev.addr, ev.arg0 as u128)?;
                let dir = ((ev.flags() & EVF_DIR_MASK) >> EVF_DIR_SHIFT) as u8;
                if self.checkers.dma {
                    self.dma.map(&self.heap, ev.addr, size, ev.arg1, dir, runtime, index, out);
                } else if self.checkers.memory {
                    self.memory.define(ev.addr, size);
                }
            }
            EV_DMA_UNMAP | EV_DMA_SYNC_CPU | EV_DMA_SYNC_DEVICE | EV_DMA_ALLOC | EV_DMA_FREE
                if !self.checkers.dma => {}
            EV_DMA_UNMAP => {
                let dir = ((ev.flags() & EVF_DIR_MASK) >> EVF_DIR_SHIFT) as u8;
                if let Some((cpu, size)) = self.dma.unmap(ev.addr, ev.arg0, dir, runtime, index, out) {
                    self.memory.define(cpu, size);
                }
            }
            EV_DMA_SYNC_CPU => {
                let size = range(index, ev.addr, ev.arg0 as u128)?;
                if let Some((cpu, size)) = self.dma.sync_for_cpu(ev.addr, size, runtime, index, out) {
                    self.memory.define(cpu, size);
                }
            }
            EV_DMA_SYNC_DEVICE => self.dma.sync_for_device(ev.addr, ev.arg0, runtime, index, out),
            EV_DMA_ALLOC => {
                let size = range(index, ev.addr, ev.arg0 as u128)?;
                self.dma.alloc_coherent(ev.addr, size, ev.arg1, runtime, index);
            }
            EV_DMA_FREE => self.dma.free_coherent(ev.addr, ev.arg0, runtime, index, out),
            EV_LOCK | EV_UNLOCK | EV_IRQ_OFF | EV_IRQ_ON | EV_CONTEXT if !self.checkers.race => {}
            EV_LOCK => {
                if ev.arg0 > LOCK_MUTEX {
                    return Err(EventError::LockKind { index, kind: ev.arg0 });
                }
                if self.race.held_locks() >= MAX_HELD_LOCKS {
                    return Err(EventError::LockDepth { index });
                }
                self.race.lock(ev.addr, ev.arg0);
            }
            EV_UNLOCK => self.race.unlock(ev.addr),
            EV_IRQ_OFF => self.race.irqs_off(),
            EV_IRQ_ON => self.race.irqs_on(),
            EV_CONTEXT => {
                if ev.addr > CTX_WORK {
                    return Err(EventError::ContextKind { index, kind: ev.addr });
                }
                self.race.switch(ev.addr, ev.arg0, ev.arg1, index);
            }
            EV_COPY => {
                let size = range(index, ev.arg0, ev.arg1 as u128)?;
                range(index, ev.addr, size as u128)?;
                self.copy(ev.addr, ev.arg0, size, runtime, index, 0);
            }
            EV_FILL => {
                let size = range(index, ev.addr, ev.arg1 as u128)?;
                if size > 0 {
                    self.touch(Touch { address: ev.addr, size, read: false, write: true, site: runtime, event: index,
                                       copy: false }, 0);
                }
            }
            EV_STOP => {
                if ev.arg0 > STOP_DETACH {
                    return Err(EventError::StopKind { index, kind: ev.arg0 });
                }
                if self.checkers.dma {
                    self.dma.stop(ev.arg0 == STOP_DETACH, index, out);
                }
                if self.checkers.race {
                    self.race.stop(index);
                }
            }
            kind => return Err(EventError::UnknownKind { index, kind }),
        }
        Ok(())
    }

    /// A rep string op, before it ran: %rdi, %rsi and %rcx elements of the
    /// site's size, walking down if DF was set. rep movs (read and write)
    /// and rep stos (write only) run %rcx times; rep cmps, scas and lods
    /// (read only) stop when their data says so, and the site does not say
    /// which of %rsi or %rdi they read: they are not checked.
    fn string(&mut self, index: u64, ev: &TraceEvent) -> Result<(), EventError> {
        let site = self.stub_site(index, ev, SITE_STRING, SITE_PORT | SITE_FRAME)?;
        let element = site.size.max(1) as u64;
        // Only the length is bounded: the addresses may wrap walking down,
        // and a wrapped range is nobody's memory.
        let len = range(index, 0, ev.arg1 as u128 * element as u128)?;
        if len == 0 || site.flags & SITE_WRITE == 0 {
            return Ok(());
        }
        let down = ev.flags() & EVF_DF != 0;
        // Walking down, the last element is the lowest.
        let lowest = |start: u64| if down { start.wrapping_add(element).wrapping_sub(len) } else { start };
        let (dst, src) = (lowest(ev.addr), lowest(ev.arg0));
        let stub = SiteRef::Stub(ev.site);
        if site.flags & SITE_READ != 0 {
            self.copy(dst, src, len, stub, index, site.flags);
        } else {
            self.touch(Touch { address: dst, size: len, read: false, write: true, site: stub, event: index, copy: false },
                       site.flags);
        }
        Ok(())
    }

    /// memmove(dst, src, size): both ends are accesses; the destination
    /// gets the source's definedness.
    fn copy(&mut self, dst: u64, src: u64, size: u64, site: SiteRef, event: u64, flags: u8) {
        if size == 0 {
            return;
        }
        self.touch(Touch { address: src, size, read: true, write: false, site, event, copy: true }, flags);
        self.touch(Touch { address: dst, size, read: false, write: true, site, event, copy: true }, flags);
        if self.checkers.memory {
            self.memory.copy(&self.heap, &self.stack, dst, src, size);
        }
    }

    /// One access, to every checker that tracks its memory. `flags` are the
    /// site's US_SITE_* (none for the runtime's copies and fills).
    fn touch(&mut self, t: Touch, flags: u8) {
        let out = &mut self.reporter;
        if self.checkers.dma {
            self.dma.access(&t, out);
        }
        // A %rsp-based access, or one through a stack address another
        // register holds, is to the thread's own stack: not heap, and not
        // shared, so no race.
        let frame = self.stack.frame_at(t.address);
        if flags & SITE_STACK != 0 || frame.is_some() {
            if self.checkers.memory {
                self.memory.stack_access(frame, &t, out);
            }
            return;
        }
        // DMA-coherent memory is no heap block, and is shared with the
        // device by design: its CPU-side users synchronise through the
        // device's protocol (descriptor ownership bits), which locksets
        // cannot see. Nothing more to check.
        if !(self.checkers.memory || self.checkers.race) || self.dma.is_coherent(t.address) {
            return;
        }
        let place = self.heap.place(t.address, t.size);
        if self.checkers.memory {
            self.memory.access(place, &t, out);
        }
        // Races: heap and module data. Per-cpu data is the CPU's own; an
        // atomic instruction is synchronisation, not a racing access.
        let heap_or_module = matches!(place, Place::Inside(_)) || self.symbols.in_module_image(t.address);
        if self.checkers.race && flags & (SITE_PERCPU | SITE_ATOMIC) == 0 && heap_or_module {
            let born = if let Place::Inside(b) = place { b.event } else { 0 };
            self.race.access(&t, born, out);
        }
    }
}
