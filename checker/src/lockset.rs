// SPDX-License-Identifier: GPL-2.0
//! Locksets, interned: each distinct set of locks gets a small id, and the
//! intersection of two ids is computed once and remembered, so that the
//! race checker's per-access work is a table lookup.
//!
//! Besides the driver's real locks, a set holds virtual locks for what the
//! kernel's interrupt discipline excludes (docs/checking.md, "Races"):
//! running as hard-IRQ handler h holds `InHardirq(h)`; running as softirq
//! or timer handler s holds `InSoftirq(s)`; disabling bottom halves holds
//! `BhOff`, which stands for every `InSoftirq(s)`; disabling interrupts
//! holds `IrqsOff`, which stands for every `InHardirq(h)`, and `BhOff` too
//! (no softirq runs where interrupts are off). So code with interrupts off
//! and a handler share a lock; two different handlers do not.

use rustc_hash::FxHashMap;

pub type LocksetId = u32;

/// The empty set.
pub const EMPTY: LocksetId = 0;

const TAG_SHIFT: u32 = 29;
const VALUE_MASK: u32 = (1 << TAG_SHIFT) - 1;

/// One member of a lockset, packed in a u32 for cheap sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Element(u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// A real lock, by its index in the race checker's lock table.
    Real(u32),
    IrqsOff,
    BhOff,
    /// Running as this hard-IRQ context.
    InHardirq(u32),
    /// Running as this softirq or timer context.
    InSoftirq(u32),
}

impl Element {
    pub fn new(lock: Lock) -> Element {
        let (tag, value) = match lock {
            Lock::Real(i) => (0, i),
            Lock::IrqsOff => (1, 0),
            Lock::BhOff => (2, 0),
            Lock::InHardirq(c) => (3, c),
            Lock::InSoftirq(c) => (4, c),
        };
        assert!(value <= VALUE_MASK, "more than 2^29 locks or contexts");
        Element(tag << TAG_SHIFT | value)
    }

    pub fn lock(self) -> Lock {
        let value = self.0 & VALUE_MASK;
        match self.0 >> TAG_SHIFT {
            0 => Lock::Real(value),
            1 => Lock::IrqsOff,
            2 => Lock::BhOff,
            3 => Lock::InHardirq(value),
            _ => Lock::InSoftirq(value),
        }
    }
}

pub struct Locksets {
    sets: Vec<Box<[Element]>>,
    ids: FxHashMap<Box<[Element]>, LocksetId>,
    meets: FxHashMap<(LocksetId, LocksetId), LocksetId>,
}

impl Default for Locksets {
    fn default() -> Self {
        let mut l = Locksets { sets: Vec::new(), ids: FxHashMap::default(), meets: FxHashMap::default() };
        assert_eq!(l.intern(&mut Vec::new()), EMPTY);
        l
    }
}

impl Locksets {
    /// The id of the set `elements` holds (which this sorts and reduces:
    /// `IrqsOff` subsumes every `InHardirq`, `BhOff` every `InSoftirq`).
    pub fn intern(&mut self, elements: &mut Vec<Element>) -> LocksetId {
        elements.sort_unstable();
        elements.dedup();
        let irqs_off = elements.contains(&Element::new(Lock::IrqsOff));
        let bh_off = elements.contains(&Element::new(Lock::BhOff));
        elements.retain(|e| match e.lock() {
            Lock::InHardirq(_) => !irqs_off,
            Lock::InSoftirq(_) => !bh_off,
            _ => true,
        });
        if let Some(&id) = self.ids.get(elements.as_slice()) {
            return id;
        }
        let id = self.sets.len() as LocksetId;
        let set: Box<[Element]> = elements.as_slice().into();
        self.sets.push(set.clone());
        self.ids.insert(set, id);
        id
    }

    pub fn get(&self, id: LocksetId) -> &[Element] {
        &self.sets[id as usize]
    }

    /// The locks held at both: a lock of one, or a virtual lock one stands
    /// for (`IrqsOff` and `InHardirq(h)` meet in `InHardirq(h)`).
    pub fn meet(&mut self, a: LocksetId, b: LocksetId) -> LocksetId {
        if a == b {
            return a;
        }
        let key = (a.min(b), a.max(b));
        if let Some(&id) = self.meets.get(&key) {
            return id;
        }
        let (sa, sb) = (self.get(a), self.get(b));
        let has = |s: &[Element], l: Lock| s.contains(&Element::new(l));
        let covers = |s: &[Element], e: Element| {
            s.contains(&e) || match e.lock() {
                Lock::InHardirq(_) => has(s, Lock::IrqsOff),
                Lock::InSoftirq(_) => has(s, Lock::BhOff),
                _ => false,
            }
        };
        let mut out: Vec<Element> = sa.iter().copied().filter(|&e| covers(sb, e))
            .chain(sb.iter().copied().filter(|&e| covers(sa, e)))
            .collect();
        let id = self.intern(&mut out);
        self.meets.insert(key, id);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(l: &mut Locksets, locks: &[Lock]) -> LocksetId {
        l.intern(&mut locks.iter().map(|&k| Element::new(k)).collect())
    }

    #[test]
    fn virtual_locks_meet_as_documented() {
        let mut l = Locksets::default();
        let irqs_off = set(&mut l, &[Lock::IrqsOff, Lock::BhOff, Lock::Real(1)]);
        let hardirq = set(&mut l, &[Lock::InHardirq(7)]);
        let other_hardirq = set(&mut l, &[Lock::InHardirq(8)]);
        let softirq = set(&mut l, &[Lock::InSoftirq(9)]);
        let bh_off = set(&mut l, &[Lock::BhOff, Lock::Real(1)]);
        let plain = set(&mut l, &[Lock::Real(1)]);

        let m = l.meet(irqs_off, hardirq);
        assert_eq!(l.get(m), [Element::new(Lock::InHardirq(7))]);
        assert_eq!(l.meet(m, other_hardirq), EMPTY);
        assert_eq!(l.meet(hardirq, softirq), EMPTY);
        assert_eq!(l.meet(bh_off, hardirq), EMPTY);
        let m = l.meet(bh_off, softirq);
        assert_eq!(l.get(m), [Element::new(Lock::InSoftirq(9))]);
        let m = l.meet(irqs_off, bh_off);
        assert_eq!(l.get(m), [Element::new(Lock::Real(1)), Element::new(Lock::BhOff)]);
        assert_eq!(l.meet(plain, irqs_off), plain);
        // Interning reduces: IrqsOff subsumes the handler's own lock.
        assert_eq!(set(&mut l, &[Lock::InHardirq(7), Lock::IrqsOff, Lock::BhOff, Lock::Real(1)]), irqs_off);
    }
}
