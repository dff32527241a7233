// SPDX-License-Identifier: GPL-2.0
//! Definedness of heap and stack bytes: one bit per byte, kept per 4 KiB
//! page and created when a block or a stack frame is allocated there. A page the checker never saw
//! allocated is absent, and its bytes count as defined: the checker only
//! judges memory whose whole history it saw.

use std::cell::Cell;

use rustc_hash::FxHashMap;

const PAGE: u64 = 4096;
const WORDS: usize = (PAGE / 64) as usize;

type Bits = [u64; WORDS];

#[derive(Default)]
pub struct Definedness {
    pages: Vec<Bits>,
    index: FxHashMap<u64, u32>,
    /// The page last looked up and its index: a range's words, and
    /// consecutive accesses, mostly fall in one page. Pages are never
    /// dropped, so it never goes stale.
    last: Cell<Option<(u64, u32)>>,
}

/// Calls `f(page, word, mask)` for the bits of every byte of [start, start + len),
/// word by word, in address order; stops when it returns false.
fn words(start: u64, len: u64, mut f: impl FnMut(u64, usize, u64) -> bool) {
    let mut at = start;
    let end = start.saturating_add(len);
    while at < end {
        let (page, byte) = (at / PAGE, at % PAGE);
        let (word, bit) = ((byte / 64) as usize, byte % 64);
        let n = (64 - bit).min(end - at);
        let mask = if n == 64 { !0 } else { ((1u64 << n) - 1) << bit };
        if !f(page, word, mask) {
            return;
        }
        at += n;
    }
}

/// The page, word and mask of [start, start + len) if it is not empty and
/// lies within one word.
fn one_word(start: u64, len: u64) -> Option<(u64, usize, u64)> {
    let bit = start % 64;
    (len > 0 && len <= 64 - bit).then(|| (start / PAGE, (start % PAGE / 64) as usize, (!0u64 >> (64 - len)) << bit))
}

/// Calls `f(page, first, last, first_mask, last_mask)` for every page
/// [start, start + len) touches, in address order: its bits are those of
/// words `first..=last`, of which `first_mask` and `last_mask` select the
/// bytes of the first and the last (both, if they are one word).
fn pages(start: u64, len: u64, mut f: impl FnMut(u64, usize, usize, u64, u64)) {
    let end = start.saturating_add(len);
    let mut at = start;
    while at < end {
        let last = (end - 1).min(at | (PAGE - 1));
        let (from, to) = (at % PAGE, last % PAGE);
        f(at / PAGE, (from / 64) as usize, (to / 64) as usize, !0 << (from % 64), !0 >> (63 - to % 64));
        at = last + 1;
    }
}

impl Definedness {
    fn lookup(&self, page: u64) -> Option<u32> {
        if let Some((_, i)) = self.last.get().filter(|&(p, _)| p == page) {
            return Some(i);
        }
        let i = *self.index.get(&page)?;
        self.last.set(Some((page, i)));
        Some(i)
    }

    fn page(&self, page: u64) -> Option<&Bits> {
        self.lookup(page).map(|i| &self.pages[i as usize])
    }

    fn page_mut(&mut self, page: u64, create: bool) -> Option<&mut Bits> {
        let i = match self.lookup(page) {
            Some(i) => i,
            None if create => {
                self.pages.push([!0; WORDS]);
                let i = (self.pages.len() - 1) as u32;
                self.index.insert(page, i);
                i
            }
            None => return None,
        };
        Some(&mut self.pages[i as usize])
    }

    /// Sets the bits of [start, start + len) to `defined`, creating the
    /// pages it touches if `create`. A page at a time, not a word at a
    /// time: a stack frame is allocated at nearly every call, and a block
    /// is filled at once.
    fn mark(&mut self, start: u64, len: u64, defined: bool, create: bool) {
        pages(start, len, |page, first, last, first_mask, last_mask| {
            let Some(bits) = self.page_mut(page, create) else { return };
            let apply = |word: &mut u64, mask: u64| *word = if defined { *word | mask } else { *word & !mask };
            if first == last {
                apply(&mut bits[first], first_mask & last_mask);
            } else {
                apply(&mut bits[first], first_mask);
                bits[first + 1..last].fill(if defined { !0 } else { 0 });
                apply(&mut bits[last], last_mask);
            }
        });
    }

    /// A new block or stack frame: its bytes are undefined.
    pub fn allocate(&mut self, start: u64, len: u64) {
        self.mark(start, len, false, true);
    }

    /// The bytes were written: defined from now on.
    pub fn define(&mut self, start: u64, len: u64) {
        if let Some((page, word, mask)) = one_word(start, len) {
            if let Some(bits) = self.page_mut(page, false) {
                bits[word] |= mask;
            }
            return;
        }
        self.mark(start, len, true, false);
    }

    /// The first undefined byte of [start, start + len).
    pub fn first_undefined(&self, start: u64, len: u64) -> Option<u64> {
        if let Some((page, word, mask)) = one_word(start, len) {
            // Most accesses: 1 to 8 bytes in one word.
            let undefined = self.page(page).map_or(0, |bits| !bits[word] & mask);
            return (undefined != 0).then(|| page * PAGE + word as u64 * 64 + undefined.trailing_zeros() as u64);
        }
        let mut found = None;
        words(start, len, |page, word, mask| {
            let undefined = self.page(page).map_or(0, |bits| !bits[word] & mask);
            if undefined != 0 {
                found = Some(page * PAGE + word as u64 * 64 + undefined.trailing_zeros() as u64);
            }
            undefined == 0
        });
        found
    }

    /// The definedness of up to 64 bytes from `start`, bit i for byte i.
    fn get(&self, start: u64, len: u64) -> u64 {
        let mut out = 0;
        let mut shift = 0;
        words(start, len, |page, word, mask| {
            let bits = self.page(page).map_or(!0, |b| b[word]) & mask;
            out |= (bits >> mask.trailing_zeros()) << shift;
            shift += mask.count_ones();
            true
        });
        out
    }

    fn set(&mut self, start: u64, len: u64, value: u64) {
        let mut shift = 0;
        words(start, len, |page, word, mask| {
            let chunk = (value >> shift) << mask.trailing_zeros() & mask;
            shift += mask.count_ones();
            if let Some(bits) = self.page_mut(page, false) {
                bits[word] = bits[word] & !mask | chunk;
            }
            true
        });
    }

    /// memmove's effect: `dst` gets `src`'s definedness, 64 bytes at a time,
    /// in the direction that reads every source byte before it is written.
    pub fn copy(&mut self, dst: u64, src: u64, len: u64) {
        let chunks = len.div_ceil(64);
        for i in 0..chunks {
            let i = if dst > src { chunks - 1 - i } else { i };
            let n = (len - i * 64).min(64);
            let bits = self.get(src + i * 64, n);
            self.set(dst + i * 64, n, bits);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_write_and_copy() {
        let mut d = Definedness::default();
        d.allocate(0x1ff0, 0x40); // across a page boundary
        assert_eq!(d.first_undefined(0x1ff0, 4), Some(0x1ff0));
        d.define(0x1ff0, 0x14);
        assert_eq!(d.first_undefined(0x1ff0, 0x14), None);
        assert_eq!(d.first_undefined(0x1ff0, 0x18), Some(0x2004));
        // Never allocated: defined.
        assert_eq!(d.first_undefined(0x9000, 8), None);

        d.allocate(0x5000, 200);
        d.define(0x5000 + 3, 1);
        d.define(0x5000 + 100, 50);
        d.copy(0x1ff0 + 8, 0x5000, 0x38);
        // Bytes 8.. of the first block now mirror 0x5000..0x5038.
        assert_eq!(d.first_undefined(0x1ff0 + 8 + 3, 1), None);
        assert_eq!(d.first_undefined(0x1ff0 + 8, 4), Some(0x1ff0 + 8));
        assert_eq!(d.first_undefined(0x1ff0 + 8 + 4, 0x30), Some(0x1ff0 + 8 + 4));
        // A long overlapping move upwards keeps the pattern.
        d.copy(0x5000 + 10, 0x5000, 150);
        assert_eq!(d.first_undefined(0x5000 + 13, 1), None);
        assert_eq!(d.first_undefined(0x5000 + 110, 50), None);
        assert_eq!(d.first_undefined(0x5000 + 109, 1), Some(0x5000 + 109));
    }

    #[test]
    fn ranges_of_many_words_are_marked_to_the_byte() {
        let mut d = Definedness::default();
        d.allocate(0x6000 - 5, 0x300);
        d.define(0x6000 + 3, 200); // a partial word, two whole ones, a partial one
        assert_eq!(d.first_undefined(0x6000 - 5, 8), Some(0x6000 - 5));
        assert_eq!(d.first_undefined(0x6000 + 2, 202), Some(0x6000 + 2));
        assert_eq!(d.first_undefined(0x6000 + 3, 200), None);
        assert_eq!(d.first_undefined(0x6000 + 3, 201), Some(0x6000 + 203));
        d.allocate(0x6000 + 64, 64); // exactly one word
        assert_eq!(d.first_undefined(0x6000 + 64, 64), Some(0x6000 + 64));
        d.define(0x6000 + 120, 8); // the word's last 8 bytes
        assert_eq!(d.first_undefined(0x6000 + 119, 9), Some(0x6000 + 119));
        assert_eq!(d.first_undefined(0x6000 + 120, 8), None);
        d.allocate(0x6000 + 120, 8);
        assert_eq!(d.first_undefined(0x6000 + 3, 61), None);
        assert_eq!(d.first_undefined(0x6000 + 3, 200), Some(0x6000 + 64));
        assert_eq!(d.first_undefined(0x6000 + 128, 75), None);
    }
}
