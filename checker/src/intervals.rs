// SPDX-License-Identifier: GPL-2.0
//! Disjoint intervals by start, each with a value, asked on every access
//! whether one overlaps it. Most accesses overlap none, and a driver's run
//! of accesses goes to a few places in turn (its adapter, a ring, the skb
//! at hand), so the last answers are remembered as intervals of their own:
//! an interval that holds the access, or a gap between two that holds it.
//! A remembered answer costs two comparisons, a search of the tree some
//! hundred instructions.

use std::collections::BTreeMap;

/// Answers remembered; the oldest makes way.
const RECENT: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Answer<V> {
    /// [start, end): an interval if `value` is Some, else a gap. No
    /// access falls in an empty one (start > end): a forgotten answer.
    start: u64,
    end: u64,
    value: Option<V>,
}

impl<V> Answer<V> {
    const FORGOTTEN: Answer<V> = Answer { start: 1, end: 0, value: None };
}

pub struct Intervals<V: Copy> {
    /// Start -> (end, value).
    by_start: BTreeMap<u64, (u64, V)>,
    recent: [Answer<V>; RECENT],
}

impl<V: Copy> Default for Intervals<V> {
    fn default() -> Self {
        Intervals { by_start: BTreeMap::new(), recent: [Answer::FORGOTTEN; RECENT] }
    }
}

impl<V: Copy + PartialEq> Intervals<V> {
    /// The value of the interval overlapping [start, end), if any. An empty
    /// range overlaps the interval that holds `start` past its first byte
    /// (a mapping of no bytes inside another); it is answered by the tree.
    pub fn overlapping(&mut self, start: u64, end: u64) -> Option<V> {
        if start < end {
            if let Some(a) = self.recent.iter().find(|a| start >= a.start && end <= a.end) {
                return a.value;
            }
        }
        let before = self.by_start.range(..end).next_back();
        let answer = match before {
            Some((&s, &(e, value))) if e > start => Answer { start: s, end: e, value: Some(value) },
            _ => {
                let gap_start = before.map_or(0, |(_, &(e, _))| e);
                let gap_end = self.by_start.range(end..).next().map_or(u64::MAX, |(&s, _)| s);
                Answer { start: gap_start, end: gap_end, value: None }
            }
        };
        self.recent.rotate_right(1);
        self.recent[0] = answer;
        answer.value
    }

    /// Adds [start, end), which must overlap no interval here.
    pub fn insert(&mut self, start: u64, end: u64, value: V) {
        self.by_start.insert(start, (end, value));
        // Gaps it falls in are gaps no more.
        self.forget(|a| a.start < end && a.end > start);
    }

    /// Removes the interval starting at `start`.
    pub fn remove(&mut self, start: u64) {
        if self.by_start.remove(&start).is_some() {
            self.forget(|a| a.value.is_some() && a.start == start);
        }
    }

    fn forget(&mut self, stale: impl Fn(&Answer<V>) -> bool) {
        for a in self.recent.iter_mut().filter(|a| stale(a)) {
            *a = Answer::FORGOTTEN;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_overlaps_and_remembers_gaps_until_they_fill() {
        let mut iv = Intervals::default();
        iv.insert(0x1000, 0x1800, 1u32);
        iv.insert(0x3000, 0x3100, 2);
        assert_eq!(iv.overlapping(0x2000, 0x2008), None);
        // Remembered as the gap [0x1800, 0x3000); a mapping now fills part of it.
        iv.insert(0x2000, 0x2800, 3);
        assert_eq!(iv.overlapping(0x2000, 0x2008), Some(3));
        assert_eq!(iv.overlapping(0x17fc, 0x1804), Some(1));
        assert_eq!(iv.overlapping(0x2ffc, 0x3004), Some(2));
        assert_eq!(iv.overlapping(0x3100, 0x3108), None);
        // Remembered as the interval of 3; removed, it is a gap again.
        iv.remove(0x2000);
        assert_eq!(iv.overlapping(0x2000, 0x2008), None);
        assert_eq!(iv.overlapping(0x0, 0x1000), None);
        // Empty ranges: inside an interval, and at its end (remembered there as the interval).
        assert_eq!(iv.overlapping(0x3000, 0x3100), Some(2));
        assert_eq!(iv.overlapping(0x3080, 0x3080), Some(2));
        assert_eq!(iv.overlapping(0x3100, 0x3100), None);
    }
}
