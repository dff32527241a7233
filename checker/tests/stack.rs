// SPDX-License-Identifier: GPL-2.0
//! Stack definedness on synthetic traces: frames made by FRAME, ended by
//! RETURN, let out by ESCAPE, and the reads of their bytes the memory
//! checker reports.

mod common;

use common::*;
use serde_json::json;
use understudy_checker::engine::EventError;
use understudy_checker::gate::GateError;
use understudy_checker::stack::STACK_WINDOW;
use understudy_checker::trace::*;

/// The caller's frame, 256 bytes just below the top of thread A's stack.
const C: u64 = STACK - 0x200;
/// The callee's, 64 bytes below the caller's, under its return address and
/// two saved registers; once it has returned, `%rsp` is back at `C`.
const F: u64 = C - 0x60;

fn hex(value: impl Into<u64>) -> String {
    format!("{:#x}", value.into())
}

#[test]
fn a_slot_read_before_it_is_written_is_reported_with_its_frame() {
    let o = check(&[frame(FRAME64, F), access(STACK_WRITE8, F), access(STACK_READ8, F + 8),
                    access(STACK_READ8, F + 16)]);
    let f = o.only("uninitialised-read");
    assert_eq!(f["site"]["address"], hex(STACK_READ8));
    assert_eq!(f["access"], json!({ "address": hex(F + 8), "size": 8, "write": false }));
    assert_eq!(f["other"]["first_undefined"], hex(F + 8));
    let frame = &f["other"]["frame"];
    assert_eq!((&frame["address"], &frame["size"], &frame["event"]), (&json!(hex(F)), &json!(64), &json!(0)));
    assert_eq!(frame["site"]["address"], hex(FRAME64));
    assert_eq!((&f["event"], &o.summary[0]["count"]), (&json!(2), &json!(2)));
    assert_eq!(o.verdict_at, 0, "not fatal by default");
}

#[test]
fn written_bytes_read_clean_and_the_first_unwritten_one_is_named() {
    let o = check(&[frame(FRAME64, F), access(STACK_WRITE8, F + 8), access(STACK_READ8, F + 8)]);
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);

    let o = check(&[frame(FRAME64, F), access(STACK_WRITE8, F + 8), access(STACK_READ8, F + 12)]);
    assert_eq!(o.only("uninitialised-read")["other"]["first_undefined"], hex(F + 12 + 4));

    // A read running past the frame's end, into its saved registers, which
    // pushes wrote: only the frame's bytes are judged, not what a dead
    // frame left above it.
    let o = check(&[frame(FRAME256, F), return_to(F + 0x200), frame(FRAME64, F), access(STACK_WRITE8, F + 56),
                    access(STACK_READ8, F + 60)]);
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);
}

#[test]
fn accesses_through_other_registers_into_a_live_frame_are_stack_accesses() {
    // A pointer to a local, passed to another of the module's functions.
    let o = check(&[frame(FRAME64, F), access(WRITE4, F + 8), access(WRITE4, F + 12), access(STACK_READ8, F + 8),
                    access(READ4, F + 20)]);
    let f = o.only("uninitialised-read");
    assert_eq!((&f["site"]["address"], &f["other"]["frame"]["address"]), (&json!(hex(READ4)), &json!(hex(F))));
}

#[test]
fn an_escaped_address_counts_as_written_to_its_frames_end() {
    let o = check(&[frame(FRAME64, F), escape(F + 16), access(STACK_READ8, F + 16), access(STACK_READ8, F + 56)]);
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);

    // Below the escaped object nothing was written; and an escape before
    // the frame was made defines nothing in it.
    let o = check(&[frame(FRAME64, F), escape(F + 16), access(STACK_READ8, F + 8)]);
    assert_eq!(o.only("uninitialised-read")["other"]["first_undefined"], hex(F + 8));
    let o = check(&[escape(F + 16), frame(FRAME64, F), access(STACK_READ8, F + 16)]);
    assert_eq!(o.only("uninitialised-read")["other"]["first_undefined"], hex(F + 16));
}

#[test]
fn a_return_ends_the_frames_below_it_and_their_state_with_them() {
    // The callee returns without writing its frame: reads there are no
    // longer judged; the caller's frame is still live.
    let o = check(&[frame(FRAME256, C), frame(FRAME64, F), return_to(C), access(STACK_READ8, F + 8),
                    access(STACK_READ8, C + 8)]);
    let f = o.only("uninitialised-read");
    assert_eq!((&f["event"], &f["other"]["frame"]["address"]), (&json!(4), &json!(hex(C))));

    // A callee wrote its whole frame and returned; the next callee's frame
    // over the same bytes starts undefined, and is the one named.
    let next = F - 0x20;
    let o = check(&[frame(FRAME64, F), ev(EV_FILL, CALLER, F, 0, 64), return_to(C), frame(FRAME64, next),
                    access(STACK_READ8, F + 8)]);
    let f = o.only("uninitialised-read");
    assert_eq!((&f["other"]["frame"]["address"], &f["other"]["frame"]["event"]), (&json!(hex(next)), &json!(3)));
}

#[test]
fn a_frame_on_another_threads_stack_outlives_this_threads_calls_and_returns() {
    let other = F - (8 << 20);
    let o = check(&[frame(FRAME64, other), frame(FRAME256, C), frame(FRAME64, F), return_to(C), return_to(STACK),
                    access(STACK_READ8, other + 8)]);
    assert_eq!(o.only("uninitialised-read")["other"]["frame"]["address"], hex(other));

    // Within the window below a new frame lie this thread's dead frames
    // (their returns went unseen); beyond it, another thread's.
    let dead = F - 0x1000;
    let o = check(&[frame(FRAME64, dead), frame(FRAME64, F), access(STACK_READ8, dead + 8)]);
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);
    let beyond = F - STACK_WINDOW - 64;
    let o = check(&[frame(FRAME64, beyond), frame(FRAME64, F), access(STACK_READ8, beyond + 8)]);
    assert_eq!(o.only("uninitialised-read")["other"]["frame"]["address"], hex(beyond));
}

#[test]
fn copies_fills_and_string_ops_into_a_frame_define_it_and_copies_out_carry_it() {
    let o = check(&[alloc(HEAP, 64), ev(EV_FILL, CALLER, HEAP, 0, 64), frame(FRAME256, C),
                    ev(EV_COPY, CALLER, C, HEAP, 16), access(STACK_READ8, C + 8),
                    ev(EV_FILL, CALLER, C + 16, 0, 16), access(STACK_READ8, C + 24),
                    ev(EV_STRING, REP_STOSQ, C + 32, 0, 4), access(STACK_READ8, C + 56)]);
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);

    // Half of what is copied out was written; the heap read names no frame.
    let o = check(&[alloc(HEAP, 64), frame(FRAME64, F), access(STACK_WRITE8, F), ev(EV_COPY, CALLER, HEAP, F, 16),
                    access(READ8, HEAP), access(READ8, HEAP + 8)]);
    let f = o.only("uninitialised-read");
    assert_eq!(f["other"], json!({ "first_undefined": hex(HEAP + 8) }));

    // An undefined block copied in leaves the frame undefined.
    let o = check(&[alloc(HEAP, 64), frame(FRAME64, F), ev(EV_COPY, CALLER, F, HEAP, 16), access(STACK_READ8, F)]);
    assert_eq!(o.only("uninitialised-read")["other"]["frame"]["address"], hex(F));
}

/// A thread's stack is its own: neither its `%rsp` accesses nor accesses to
/// a live frame through another register are races. The frame lies in a
/// heap block here, memory the race checker tracks, so that only the stack
/// rule keeps them out; the same accesses outside the frame race.
#[test]
fn stack_accesses_are_never_races() {
    let at = |a: u64| [access(STACK_WRITE8, a), access(WRITE4, a + 8)];
    let (in_frame, outside) = (HEAP + 0x100, HEAP + 0x200);
    let mut events = vec![
        context(CTX_PROCESS, 1, 0), alloc(HEAP, 4096), ev(EV_FILL, CALLER, HEAP, 0, 4096), frame(FRAME64, in_frame),
        // The handler's first run, before the accesses under test.
        context(CTX_HARDIRQ, 9, IRQ_HANDLER), context(CTX_PROCESS, 1, 0),
    ];
    for ctx in [context(CTX_PROCESS, 1, 0), context(CTX_HARDIRQ, 9, IRQ_HANDLER), context(CTX_PROCESS, 1, 0)] {
        events.push(ctx);
        events.extend(at(in_frame));
        events.extend(at(outside));
    }
    let o = check(&events);
    assert_eq!(o.only("data-race")["other"]["granule"], hex(outside + 8));
    assert_eq!(o.summary[0]["count"], 1);
}

#[test]
fn stack_events_outside_the_contract_are_refused() {
    let wrong = |site: u32, flags: u8, kind: u16| EventError::WrongSite { index: 1, site, flags, kind };
    let cases = [
        (frame(READ8, F), wrong(READ8, SITE_READ, EV_FRAME)),
        (ev(EV_RETURN, WRITE8, C, 0, 0), wrong(WRITE8, SITE_WRITE, EV_RETURN)),
        (ev(EV_ESCAPE, STACK_WRITE8, F, 0, 0), wrong(STACK_WRITE8, SITE_WRITE | SITE_STACK, EV_ESCAPE)),
        (access(FRAME64, F), wrong(FRAME64, SITE_FRAME, EV_ACCESS)),
        (frame(FRAME0, F), EventError::EmptyFrame { index: 1, site: FRAME0 }),
        (frame(FRAME256, u64::MAX - 100), EventError::Range { index: 1, address: u64::MAX - 100, size: 256 }),
    ];
    for (bad, error) in cases {
        let o = check(&[frame(FRAME64, F), bad, access(STACK_READ8, F)]);
        assert_eq!(o.error, Some(GateError::from(error)));
        assert_eq!((o.approved, o.verdict_at), (1, 2));
    }
}
