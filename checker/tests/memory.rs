// SPDX-License-Identifier: GPL-2.0
//! The memory checker on synthetic traces: each finding kind, and clean
//! traces that must give none.

mod common;

use common::*;
use understudy_checker::trace::*;

const A: u64 = HEAP;

#[test]
fn use_after_free_is_fatal_at_the_access() {
    let o = check(&[alloc(A, 64), access(WRITE4, A), free(A), access(READ4, A + 8), access(WRITE4, A)]);
    let f = &o.findings[0];
    // The second is found after the verdict: reported, never approved.
    assert_eq!(o.kinds(), ["use-after-free", "use-after-free"]);
    assert_eq!((f["event"].as_u64(), f["fatal"].as_bool()), (Some(3), Some(true)));
    assert_eq!(f["other"]["allocation"]["size"], 64);
    assert_eq!(f["other"]["free"]["event"], 2);
    assert_eq!(o.findings[1]["event"], 4);
    assert_eq!((o.approved, o.verdict_at), (3, 4));
}

#[test]
fn out_of_bounds_past_the_end_and_before_the_start() {
    let o = check(&[alloc(A, 60), access(READ4, A + 60), access(READ4, A - 4), access(READ4, A + 100),
                    access(READ8, A + 56)]);
    assert_eq!(o.kinds(), ["out-of-bounds-read", "out-of-bounds-read"]);
    assert_eq!(o.summary[0]["count"], 3, "three reads at one site, the last one in the redzone");
    assert_eq!(o.findings[1]["access"]["size"], 8, "straddling the end");
    assert_eq!(o.verdict_at, 0, "reads out of bounds are not fatal by default");

    let o = check(&[alloc(A, 60), access(WRITE4, A + 56), access(WRITE4, A + 60)]);
    assert_eq!(o.only("out-of-bounds-write")["event"], 2);
    assert_eq!(o.verdict_at, 3);
}

#[test]
fn the_next_block_is_not_out_of_bounds_of_the_one_before() {
    let o = check(&[alloc(A, 64), alloc(A + 64, 64), ev(EV_FILL, CALLER, A, 0, 64), ev(EV_FILL, CALLER, A + 64, 0, 64),
                    access(READ4, A + 64), access(WRITE8, A + 120), access(READ4, A + 0x1000)]);
    assert_eq!(o.kinds(), Vec::<&str>::new());
    // One memset across both is an overflow of the first.
    let o = check(&[alloc(A, 64), alloc(A + 64, 64), ev(EV_FILL, CALLER, A, 0, 128)]);
    assert_eq!(o.only("out-of-bounds-write")["site"]["address"], format!("{CALLER:#x}"));
}

#[test]
fn double_free_and_invalid_frees() {
    let o = check(&[alloc(A, 64), free(A), free(A)]);
    assert_eq!(o.only("double-free")["other"]["free"]["event"], 1);

    let o = check(&[alloc(A, 64), free(A + 8)]);
    assert_eq!(o.only("invalid-free")["other"]["inside"]["address"], format!("{A:#x}"));

    let o = check(&[free(A)]);
    assert_eq!(o.only("invalid-free")["other"]["inside"], serde_json::Value::Null);

    // kfree(NULL) and kfree(ZERO_SIZE_PTR) are fine.
    assert_eq!(check(&[free(0), free(16), alloc(A, 0)]).kinds(), Vec::<&str>::new());
}

#[test]
fn uninitialised_reads_once_per_site() {
    let o = check(&[alloc(A, 64), access(READ4, A), access(READ4, A + 4), access(WRITE4, A + 8),
                    access(READ4, A + 8), access(RMW4, A + 12)]);
    assert_eq!(o.kinds(), ["uninitialised-read", "uninitialised-read"]);
    assert_eq!(o.summary[0]["count"], 2);
    assert_eq!(o.findings[0]["other"]["first_undefined"], format!("{A:#x}"));
    assert_eq!(o.findings[1]["site"]["address"], format!("{RMW4:#x}"));
    assert_eq!(o.verdict_at, 0);
}

#[test]
fn fills_copies_device_writes_and_string_ops_define_bytes() {
    let (b, c, d) = (A + 0x1000, A + 0x2000, ARENA);
    let o = check(&[
        alloc(A, 64), alloc(b, 64), alloc(c, 64), alloc(d, 2048),
        ev(EV_FILL, CALLER, A, 0, 64), access(READ8, A + 56),
        // memcpy from a defined block defines; from an undefined one carries it.
        ev(EV_COPY, CALLER, b, A, 32), access(READ8, b + 24),
        ev(EV_COPY, CALLER, c, b, 64), access(READ8, c + 8),
        // The device wrote the buffer it owned.
        dma_map(d, 2048, 2), dma_unmap(d, 2048, 2), access(READ8, d + 1024),
        // rep stosq of 4 quadwords, then rep movsb downwards (DF) of 8 bytes.
        ev(EV_STRING, REP_STOSQ, c + 32, 0, 4), access(READ8, c + 56),
        with_flags(ev(EV_STRING, REP_MOVSB, b + 63, A + 7, 8), EVF_DF), access(READ8, b + 56),
    ]);
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);

    // The same copy from an undefined source leaves the destination undefined.
    let o = check(&[alloc(A, 64), alloc(b, 64), ev(EV_COPY, CALLER, b, A, 64), access(READ4, b)]);
    assert_eq!(o.only("uninitialised-read")["event"], 3);
}

#[test]
fn stack_sites_outside_live_frames_and_untracked_memory_are_not_judged() {
    let o = check(&[access(STACK_WRITE8, A), alloc(A, 64), free(A), access(STACK_WRITE8, A),
                    access(WRITE4, 0x7fff_0000), with_flags(access(PERCPU_WRITE4, 0x10), EVF_PERCPU)]);
    assert_eq!(o.kinds(), Vec::<&str>::new());
}

#[test]
fn per_cpu_offsets_are_relative_to_the_block() {
    let o = check(&[alloc(PERCPU + 0x100, 16), free(PERCPU + 0x100), with_flags(access(PERCPU_WRITE4, 0x104), EVF_PERCPU)]);
    assert_eq!(o.only("use-after-free")["access"]["address"], format!("{:#x}", PERCPU + 0x104));
}
