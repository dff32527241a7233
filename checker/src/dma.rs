// SPDX-License-Identifier: GPL-2.0
//! The DMA checker (DMACheck's job, docs/checking.md): who owns a streaming
//! buffer, how mappings are managed, and whether buffers share cache lines.
//!
//! A streaming mapping belongs to the device from dma_map until dma_unmap,
//! except for the part a dma_sync_*_for_cpu gave back to the CPU, until a
//! dma_sync_*_for_device takes it again. A CPU write to a device-owned byte
//! is a finding; so is a read, unless the device only reads the buffer
//! (DMA_TO_DEVICE). Coherent allocations are shared by design and only
//! checked for leaks.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{json, Value};

use crate::heap::Heap;
use crate::intervals::Intervals;
use crate::report::{hex, Detail, Kind, Reporter, Touch};
use crate::symbols::{SiteRef, Symbols};

/// The cache line a buffer must not share: x86_64's, and Linux's
/// ARCH_DMA_MINALIGN on the non-coherent machines where sharing corrupts data.
pub const CACHE_LINE: u64 = 64;

/// Unmapped buffers remembered to tell a repeated unmap from a bogus one.
const UNMAPPED_HISTORY: usize = 1 << 16;

/// Linux's enum dma_data_direction.
pub const DMA_BIDIRECTIONAL: u8 = 0;
pub const DMA_TO_DEVICE: u8 = 1;
pub const DMA_FROM_DEVICE: u8 = 2;
pub const DMA_NONE: u8 = 3;

fn direction_name(dir: u8) -> &'static str {
    ["bidirectional", "to-device", "from-device", "none"].get(dir as usize).copied().unwrap_or("invalid")
}

/// Whether the device may write the buffer: then the CPU must not read it
/// while the device owns it, and what the device wrote is defined data.
pub fn device_writes(dir: u8) -> bool {
    dir != DMA_TO_DEVICE
}

#[derive(Clone, Copy, Debug)]
struct Mapping {
    cpu: u64,
    size: u64,
    dma: u64,
    dir: u8,
    site: SiteRef,
    event: u64,
    /// The CPU addresses a sync for the CPU gave back, [start, end); empty
    /// when start >= end. One window: a sync for the device that cuts a hole
    /// in its middle leaves it whole (a missed finding, never a false one).
    cpu_owned: (u64, u64),
    /// In `by_cpu`; false for one that overlaps a mapping already there.
    indexed: bool,
}

impl Mapping {
    fn end(&self) -> u64 {
        self.cpu.saturating_add(self.size)
    }

    fn cpu_of(&self, dma: u64) -> u64 {
        self.cpu.wrapping_add(dma.wrapping_sub(self.dma))
    }

    fn json(&self, symbols: &Symbols) -> Value {
        json!({ "mapping": {
            "cpu": hex(self.cpu), "dma": hex(self.dma), "size": self.size,
            "direction": direction_name(self.dir),
            "site": symbols.describe(self.site), "event": self.event,
        }})
    }
}

#[derive(Clone, Copy, Debug)]
struct Coherent {
    size: u64,
    dma: u64,
    site: SiteRef,
    event: u64,
}

#[derive(Clone, Copy, Debug)]
struct Unmapped {
    mapping: Mapping,
    site: SiteRef,
    event: u64,
}

pub struct Dma {
    mappings: Vec<Option<Mapping>>,
    free_slots: Vec<u32>,
    /// (dma address, slot): a buffer mapped twice has two entries.
    by_dma: BTreeSet<(u64, u32)>,
    /// CPU start -> slot, for the mappings that do not overlap each other.
    by_cpu: Intervals<u32>,
    /// Slots of mappings that overlap an indexed one: a driver bug, rare.
    overlapping: Vec<u32>,
    coherent: BTreeMap<u64, Coherent>,
    /// [lowest start, highest end) of every coherent allocation since the
    /// last detach: most accesses (the heap's) fall outside, with no tree to
    /// search.
    coherent_hull: (u64, u64),
    unmapped: BTreeMap<u64, Unmapped>,
    unmapped_order: VecDeque<(u64, u64)>,
    /// The DMA arena: cpu address, dma address, size.
    arena: (u64, u64, u64),
}

impl Dma {
    pub fn new(arena: u64, arena_iova: u64, arena_size: u64) -> Dma {
        Dma {
            mappings: Vec::new(), free_slots: Vec::new(), by_dma: BTreeSet::new(), by_cpu: Intervals::default(),
            overlapping: Vec::new(), coherent: BTreeMap::new(), coherent_hull: (u64::MAX, 0), unmapped: BTreeMap::new(),
            unmapped_order: VecDeque::new(), arena: (arena, arena_iova, arena_size),
        }
    }

    /// The CPU address of `dma` if it is in the arena.
    fn arena_cpu(&self, dma: u64) -> Option<u64> {
        let (cpu, iova, size) = self.arena;
        (dma >= iova && dma - iova < size).then(|| cpu + (dma - iova))
    }

    fn get(&self, slot: u32) -> &Mapping {
        self.mappings[slot as usize].as_ref().expect("indexed slots hold mappings")
    }

    /// The indexed mapping overlapping [start, end), if any.
    fn indexed_overlapping(&mut self, start: u64, end: u64) -> Option<u32> {
        self.by_cpu.overlapping(start, end)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn map(&mut self, heap: &Heap, cpu: u64, size: u64, dma: u64, dir: u8, site: SiteRef, event: u64,
               out: &mut Reporter) {
        let mut m = Mapping { cpu, size, dma, dir, site, event, cpu_owned: (0, 0), indexed: true };
        if dir == DMA_NONE {
            out.report(Kind::InvalidDirection, site, event, |s| Detail { access: None, other: m.json(s) });
        }
        let end = m.end();
        let existing = self.indexed_overlapping(cpu, end)
            .or_else(|| self.overlapping.iter().copied().find(|&o| self.get(o).cpu < end && self.get(o).end() > cpu));
        if let Some(slot) = existing {
            let old = *self.get(slot);
            out.report(Kind::RepeatedMap, site, event, |s| Detail { access: None, other: old.json(s) });
            m.indexed = false;
        }
        self.check_alignment(heap, &m, out);
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.mappings[slot as usize] = Some(m);
                slot
            }
            None => {
                self.mappings.push(Some(m));
                (self.mappings.len() - 1) as u32
            }
        };
        self.by_dma.insert((dma, slot));
        if m.indexed {
            self.by_cpu.insert(cpu, end, slot);
        } else {
            self.overlapping.push(slot);
        }
    }

    /// A buffer whose first or last cache line also holds bytes outside it
    /// that are live heap, another mapping or a coherent allocation: the
    /// CPU's and the device's views of that line can overwrite each other.
    /// Lines whose other bytes the checker knows nothing of are not reported.
    fn check_alignment(&mut self, heap: &Heap, m: &Mapping, out: &mut Reporter) {
        let end = m.end();
        let line_start = m.cpu & !(CACHE_LINE - 1);
        let line_end = end.div_ceil(CACHE_LINE).saturating_mul(CACHE_LINE);
        let mut known = |start: u64, stop: u64| {
            start < stop && (heap.any_live(start, stop) || self.indexed_overlapping(start, stop).is_some()
                             || self.coherent.range(..stop).next_back().is_some_and(|(&c, k)| c.saturating_add(k.size) > start))
        };
        let (before, after) = (known(line_start, m.cpu), known(end, line_end));
        if before || after {
            out.report(Kind::MisalignedBuffer, m.site, m.event, |s| {
                let mut other = m.json(s);
                other["cache_line"] = CACHE_LINE.into();
                other["shares_line_before"] = before.then_some(m.cpu - line_start).into();
                other["shares_line_after"] = after.then_some(line_end - end).into();
                Detail { access: None, other }
            });
        }
    }

    fn remove(&mut self, slot: u32) -> Mapping {
        let m = self.mappings[slot as usize].take().expect("a mapped slot");
        self.by_dma.remove(&(m.dma, slot));
        if m.indexed {
            self.by_cpu.remove(m.cpu);
        } else {
            self.overlapping.retain(|&o| o != slot);
        }
        self.free_slots.push(slot);
        m
    }

    /// Returns the CPU range the device may have written, now defined.
    pub fn unmap(&mut self, dma: u64, size: u64, dir: u8, site: SiteRef, event: u64,
                 out: &mut Reporter) -> Option<(u64, u64)> {
        let Some(&(_, slot)) = self.by_dma.range((dma, 0)..=(dma, u32::MAX)).next_back() else {
            self.bad_unmap(dma, site, event, out);
            return None;
        };
        let m = self.remove(slot);
        if m.size != size {
            out.report(Kind::UnmapSizeMismatch, site, event, |s| {
                let mut other = m.json(s);
                other["unmap_size"] = size.into();
                Detail { access: None, other }
            });
        }
        if m.dir != dir {
            out.report(Kind::UnmapDirectionMismatch, site, event, |s| {
                let mut other = m.json(s);
                other["unmap_direction"] = direction_name(dir).into();
                Detail { access: None, other }
            });
        }
        self.unmapped.insert(dma, Unmapped { mapping: m, site, event });
        self.unmapped_order.push_back((dma, event));
        while self.unmapped.len() > UNMAPPED_HISTORY {
            let Some((oldest, at)) = self.unmapped_order.pop_front() else { break };
            if self.unmapped.get(&oldest).is_some_and(|u| u.event == at) {
                self.unmapped.remove(&oldest);
            }
        }
        device_writes(m.dir).then_some((m.cpu, m.size))
    }

    fn bad_unmap(&self, dma: u64, site: SiteRef, event: u64, out: &mut Reporter) {
        if let Some(u) = self.unmapped.get(&dma).copied() {
            return out.report(Kind::RepeatedUnmap, site, event, |s| {
                let mut other = u.mapping.json(s);
                other["unmap"] = json!({ "site": s.describe(u.site), "event": u.event });
                Detail { access: None, other }
            });
        }
        let inside = self.containing(dma).map(|slot| *self.get(slot));
        let cpu = self.arena_cpu(dma);
        out.report(Kind::UnmapNeverMapped, site, event, |s| Detail {
            access: None,
            other: json!({ "dma": hex(dma), "cpu": cpu.map(hex), "inside": inside.map(|m| m.json(s)["mapping"].clone()) }),
        });
    }

    /// The mapping whose dma range holds `dma`.
    fn containing(&self, dma: u64) -> Option<u32> {
        let &(start, slot) = self.by_dma.range(..=(dma, u32::MAX)).next_back()?;
        (dma - start < self.get(slot).size).then_some(slot)
    }

    /// dma_sync_*_for_cpu: the range is the CPU's until synced for the device.
    /// Returns the CPU range the device may have written.
    pub fn sync_for_cpu(&mut self, dma: u64, size: u64, site: SiteRef, event: u64,
                        out: &mut Reporter) -> Option<(u64, u64)> {
        let Some(slot) = self.containing(dma) else {
            self.sync_not_mapped(dma, size, site, event, out);
            return None;
        };
        let m = self.mappings[slot as usize].as_mut().unwrap();
        let start = m.cpu_of(dma);
        let end = start.saturating_add(size).min(m.end());
        let (lo, hi) = m.cpu_owned;
        m.cpu_owned = if lo < hi { (lo.min(start), hi.max(end)) } else { (start, end) };
        device_writes(m.dir).then_some((start, end - start))
    }

    /// dma_sync_*_for_device: the range is the device's again.
    pub fn sync_for_device(&mut self, dma: u64, size: u64, site: SiteRef, event: u64, out: &mut Reporter) {
        let Some(slot) = self.containing(dma) else {
            return self.sync_not_mapped(dma, size, site, event, out);
        };
        let m = self.mappings[slot as usize].as_mut().unwrap();
        let start = m.cpu_of(dma);
        let end = start.saturating_add(size);
        let (lo, hi) = m.cpu_owned;
        m.cpu_owned = if start <= lo && end >= hi {
            (0, 0)
        } else if start <= lo && end > lo {
            (end, hi)
        } else if end >= hi && start < hi {
            (lo, start)
        } else {
            (lo, hi)
        };
    }

    fn sync_not_mapped(&self, dma: u64, size: u64, site: SiteRef, event: u64, out: &mut Reporter) {
        let cpu = self.arena_cpu(dma);
        out.report(Kind::SyncNotMapped, site, event, |_| Detail {
            access: None,
            other: json!({ "dma": hex(dma), "size": size, "cpu": cpu.map(hex) }),
        });
    }

    pub fn alloc_coherent(&mut self, cpu: u64, size: u64, dma: u64, site: SiteRef, event: u64) {
        self.coherent.insert(cpu, Coherent { size, dma, site, event });
        self.coherent_hull = (self.coherent_hull.0.min(cpu), self.coherent_hull.1.max(cpu.saturating_add(size)));
    }

    pub fn free_coherent(&mut self, cpu: u64, size: u64, site: SiteRef, event: u64, out: &mut Reporter) {
        match self.coherent.remove(&cpu) {
            Some(c) if c.size == size => {}
            found => out.report(Kind::InvalidCoherentFree, site, event, |s| Detail {
                access: None,
                other: json!({
                    "cpu": hex(cpu), "size": size,
                    "allocation": found.map(|c| json!({ "size": c.size, "dma": hex(c.dma),
                                                        "site": s.describe(c.site), "event": c.event })),
                }),
            }),
        }
    }

    pub fn is_coherent(&self, address: u64) -> bool {
        if address < self.coherent_hull.0 || address >= self.coherent_hull.1 {
            return false;
        }
        self.coherent.range(..=address).next_back().is_some_and(|(&start, c)| address - start < c.size)
    }

    /// A CPU access: is any byte of it the device's?
    pub fn access(&mut self, t: &Touch, out: &mut Reporter) {
        if let Some(slot) = self.indexed_overlapping(t.address, t.end()) {
            self.check_owner(self.get(slot), t, out);
        }
        for &slot in &self.overlapping {
            let m = self.get(slot);
            if m.cpu < t.end() && m.end() > t.address {
                self.check_owner(m, t, out);
            }
        }
    }

    fn check_owner(&self, m: &Mapping, t: &Touch, out: &mut Reporter) {
        let (start, end) = (t.address.max(m.cpu), t.end().min(m.end()));
        let (lo, hi) = m.cpu_owned;
        if start >= lo && end <= hi {
            return;
        }
        let kind = if t.write {
            Kind::DeviceOwnedWrite
        } else if device_writes(m.dir) {
            Kind::DeviceOwnedRead
        } else {
            return;
        };
        let m = *m;
        out.report(kind, t.site, t.event, |s| Detail { access: Some(t.access()), other: m.json(s) });
    }

    /// The driver stopped: whatever is still mapped leaked, and once it has
    /// detached, whatever coherent memory it still holds too.
    pub fn stop(&mut self, detach: bool, event: u64, out: &mut Reporter) {
        for m in self.mappings.drain(..).flatten() {
            out.report(Kind::MappingLeak, m.site, event, |s| Detail { access: None, other: m.json(s) });
        }
        if !detach {
            // Closed, not detached: coherent rings may live from probe to remove.
            let (coherent, hull) = (std::mem::take(&mut self.coherent), self.coherent_hull);
            *self = Dma::new(self.arena.0, self.arena.1, self.arena.2);
            (self.coherent, self.coherent_hull) = (coherent, hull);
            return;
        }
        for (cpu, c) in std::mem::take(&mut self.coherent) {
            out.report(Kind::CoherentLeak, c.site, event, |_| Detail {
                access: None,
                other: json!({ "coherent": { "cpu": hex(cpu), "dma": hex(c.dma), "size": c.size, "event": c.event } }),
            });
        }
        *self = Dma::new(self.arena.0, self.arena.1, self.arena.2);
    }
}
