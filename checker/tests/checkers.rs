// SPDX-License-Identifier: GPL-2.0
//! `--checkers`: each checker runs alone (to measure what it costs) and
//! finds what it finds together with the others, and nothing of theirs.

mod common;

use common::*;
use understudy_checker::engine::Checkers;
use understudy_checker::trace::*;

const ADAPTER: u64 = HEAP;
const BUFFER: u64 = ARENA + 0x1000;
const TO_DEVICE: u16 = 1;
const FROM_DEVICE: u16 = 2;

/// One bug for each checker: a race on the adapter between process context
/// and the interrupt handler, a read after free, an unmap repeated; and a
/// receive buffer the device filled, read after its unmap (clean).
fn one_bug_each() -> Vec<TraceEvent> {
    vec![
        context(CTX_PROCESS, 1, 0), alloc(ADAPTER, 4096), ev(EV_FILL, CALLER, ADAPTER, 0, 4096),
        context(CTX_HARDIRQ, 99, IRQ_HANDLER), access(READ4, ADAPTER + 0x100), context(CTX_PROCESS, 1, 0),
        access(WRITE4, ADAPTER + 0x10),
        context(CTX_HARDIRQ, 99, IRQ_HANDLER), access(READ4, ADAPTER + 0x10), context(CTX_PROCESS, 1, 0),
        access(WRITE4, ADAPTER + 0x10),
        alloc(HEAP + 0x2000, 64), free(HEAP + 0x2000), access(READ4, HEAP + 0x2008),
        dma_map(BUFFER, 2048, TO_DEVICE), dma_unmap(BUFFER, 2048, TO_DEVICE), dma_unmap(BUFFER, 2048, TO_DEVICE),
        alloc(BUFFER + 0x1000, 2048), dma_map(BUFFER + 0x1000, 2048, FROM_DEVICE),
        dma_unmap(BUFFER + 0x1000, 2048, FROM_DEVICE), access(READ4, BUFFER + 0x1000),
    ]
}

fn kinds_with(names: &[&str]) -> Vec<String> {
    let checkers = Checkers::from_names(names).expect("known checkers");
    let r = region(GATE_TRIAGE, "/nonexistent/e1000.ko", &sites());
    let mut kinds: Vec<String> = check_with(&r, &one_bug_each(), checkers).kinds().iter().map(|k| k.to_string()).collect();
    kinds.sort();
    kinds
}

#[test]
fn each_checker_alone_finds_its_own_bug_and_no_other() {
    assert_eq!(kinds_with(&["memory", "race", "dma"]), ["data-race", "repeated-unmap", "use-after-free"]);
    assert_eq!(kinds_with(&["memory"]), ["use-after-free"], "a buffer mapped for the device counts as written");
    assert_eq!(kinds_with(&["race"]), ["data-race"]);
    assert_eq!(kinds_with(&["dma"]), ["repeated-unmap"]);
    assert_eq!(kinds_with(&["memory", "dma"]), ["repeated-unmap", "use-after-free"]);
}

#[test]
fn checker_names_are_checked() {
    assert_eq!(Checkers::from_names(&["dma", "race"]).map(Checkers::names), Ok(vec!["race", "dma"]));
    assert!(Checkers::from_names(&["memroy"]).unwrap_err().contains("memory, race, dma"));
}
