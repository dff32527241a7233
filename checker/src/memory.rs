// SPDX-License-Identifier: GPL-2.0
//! The memory checker (DMCheck's job, docs/checking.md): use after free,
//! out-of-bounds accesses, double and invalid frees, and reads of heap and
//! stack bytes nothing has written yet.
//!
//! Definedness is tracked for heap blocks and live stack frames: an
//! ALLOC's bytes, and a FRAME's, start undefined; a write by the driver, a
//! FILL, the device (DMA from it, at unmap or sync for the CPU) define
//! them; a COPY carries the source's definedness over. Reading an
//! undefined byte is a finding. A stack address that escapes (ESCAPE) may
//! be written by code the checker does not see, so its frame counts as
//! written from it to its end. Stack accesses outside every live frame
//! (the return address, saved registers, the runtime's frames) are not
//! judged, and stack bounds are not checked.

use serde_json::{json, Value};

use crate::heap::{Block, Freed, Heap, Place};
use crate::report::{hex, Access, Detail, Kind, Reporter, Touch};
use crate::shadow::Definedness;
use crate::stack::{Frame, Stack};
use crate::symbols::{SiteRef, Symbols};

/// Allocations larger than this are not tracked for definedness: one the
/// size of the address space would cost its size / 8 in shadow.
const MAX_SHADOWED_BLOCK: u64 = 64 << 20;

#[derive(Default)]
pub struct Memory {
    definedness: Definedness,
}

fn block_json(symbols: &Symbols, b: &Block) -> Value {
    json!({
        "allocation": { "address": hex(b.start), "size": b.size,
                        "site": symbols.describe(b.site), "event": b.event },
    })
}

fn frame_json(symbols: &Symbols, f: &Frame) -> Value {
    json!({ "address": hex(f.start), "size": f.size(), "site": symbols.describe(f.site), "event": f.event })
}

fn freed_json(symbols: &Symbols, f: &Freed) -> Value {
    let mut v = block_json(symbols, &f.block);
    v["free"] = json!({ "site": symbols.describe(f.site), "event": f.event });
    v
}

/// Linux's ZERO_OR_NULL_PTR: kfree() ignores these, kmalloc(0) returns 16.
fn zero_or_null(address: u64) -> bool {
    address <= 16
}

impl Memory {
    pub fn allocate(&mut self, heap: &mut Heap, block: Block) {
        if block.size == 0 {
            return;
        }
        for stale in heap.allocate(block) {
            log::warn!("ALLOC {:#x}+{} (event {}) overlaps the live block {:#x}+{} allocated at event {}: \
                        the runtime did not trace its free; dropping it",
                       block.start, block.size, block.event, stale.start, stale.size, stale.event);
        }
        if block.size <= MAX_SHADOWED_BLOCK {
            self.definedness.allocate(block.start, block.size);
        }
    }

    pub fn free(&mut self, heap: &mut Heap, address: u64, site: SiteRef, event: u64, out: &mut Reporter) {
        if zero_or_null(address) || heap.free(address, site, event).is_some() {
            return;
        }
        if let Some(f) = heap.freed_starting_at(address) {
            out.report(Kind::DoubleFree, site, event, |s| Detail { access: None, other: freed_json(s, &f) });
        } else if let Some(b) = heap.live_at(address) {
            out.report(Kind::InvalidFree, site, event, |s| Detail {
                access: None,
                other: json!({ "address": hex(address), "inside": block_json(s, &b)["allocation"] }),
            });
        } else {
            out.report(Kind::InvalidFree, site, event, |_| Detail {
                access: None,
                other: json!({ "address": hex(address), "inside": null }),
            });
        }
    }

    /// A driver access (or the runtime's memcpy/memset on its behalf) at
    /// `place`. `read` and `write` may both hold (a read-modify-write).
    pub fn access(&mut self, place: Place, t: &Touch, out: &mut Reporter) {
        match place {
            Place::Inside(_) => {
                if t.read && !t.copy {
                    if let Some(byte) = self.definedness.first_undefined(t.address, t.size) {
                        out.report(Kind::UninitialisedRead, t.site, t.event, |_| Detail {
                            access: Some(Access { write: false, ..t.access() }),
                            other: json!({ "first_undefined": hex(byte) }),
                        });
                    }
                }
                if t.write {
                    self.definedness.define(t.address, t.size);
                }
            }
            Place::OutOfBounds(b) => {
                let kind = if t.write { Kind::OutOfBoundsWrite } else { Kind::OutOfBoundsRead };
                out.report(kind, t.site, t.event, |s| Detail { access: Some(t.access()), other: block_json(s, &b) });
            }
            Place::Freed(f) => {
                out.report(Kind::UseAfterFree, t.site, t.event, |s| Detail { access: Some(t.access()), other: freed_json(s, &f) });
            }
            Place::Untracked => {}
        }
    }

    /// A new stack frame (FRAME): its bytes are undefined until written.
    pub fn frame(&mut self, stack: &mut Stack, frame: Frame) {
        stack.push(frame);
        self.definedness.allocate(frame.start, frame.size());
    }

    /// A stack address escaped (ESCAPE): the runtime, which the checker
    /// does not see, may write through it up to the end of its frame, so
    /// all of that counts as written now.
    pub fn escape(&mut self, stack: &Stack, address: u64) {
        if let Some(f) = stack.frame_at(address) {
            self.definedness.define(address, f.end - address);
        }
    }

    /// A driver access (or the runtime's memcpy/memset on its behalf) to
    /// its stack: `frame` is the live frame holding its first byte, if any.
    /// Only the bytes in that frame are judged: past its end lie the return
    /// address and saved registers, which no frame holds.
    pub fn stack_access(&mut self, frame: Option<Frame>, t: &Touch, out: &mut Reporter) {
        let Some(frame) = frame else { return };
        let size = t.size.min(frame.end - t.address);
        if t.read && !t.copy {
            if let Some(byte) = self.definedness.first_undefined(t.address, size) {
                out.report(Kind::UninitialisedRead, t.site, t.event, |s| Detail {
                    access: Some(Access { write: false, ..t.access() }),
                    other: json!({ "frame": frame_json(s, &frame), "first_undefined": hex(byte) }),
                });
            }
        }
        if t.write {
            self.definedness.define(t.address, size);
        }
    }

    /// The device wrote [address, address + size) by DMA.
    pub fn define(&mut self, address: u64, size: u64) {
        self.definedness.define(address, size);
    }

    /// memcpy/memmove by the runtime, after `access` has judged both ends:
    /// the destination gets the source's definedness if the source lies in
    /// a live block or a live frame, and is defined otherwise (the checker
    /// cannot know better).
    pub fn copy(&mut self, heap: &Heap, stack: &Stack, dst: u64, src: u64, size: u64) {
        let src_end = src.saturating_add(size);
        if heap.live_at(src).is_some_and(|b| src_end <= b.end()) || stack.frame_at(src).is_some_and(|f| src_end <= f.end) {
            self.definedness.copy(dst, src, size);
        } else {
            self.definedness.define(dst, size);
        }
    }
}
