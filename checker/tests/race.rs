// SPDX-License-Identifier: GPL-2.0
//! The race checker on synthetic traces.

mod common;

use common::*;
use understudy_checker::trace::*;

const ADAPTER: u64 = HEAP;
const LOCK: u64 = HEAP + 0x800;

fn process(thread: u64) -> TraceEvent {
    context(CTX_PROCESS, thread, 0)
}

fn hardirq(handler: u64) -> TraceEvent {
    context(CTX_HARDIRQ, 99, handler)
}

/// The adapter is allocated and initialised by probe, in thread 1, and the
/// interrupt handler has run once before the accesses under test.
fn probed() -> Vec<TraceEvent> {
    vec![process(1), alloc(ADAPTER, 4096), ev(EV_FILL, CALLER, ADAPTER, 0, 4096),
         hardirq(IRQ_HANDLER), access(READ4, ADAPTER + 0x100), process(1)]
}

fn after_probe(events: &[TraceEvent]) -> Vec<TraceEvent> {
    probed().into_iter().chain(events.iter().copied()).collect()
}

#[test]
fn properly_locked_process_and_hardirq_accesses_are_clean() {
    let o = check(&after_probe(&[
        // spin_lock_irqsave(&lock) ... spin_unlock_irqrestore
        ev(EV_IRQ_OFF, CALLER, 0, 0, 0), lock(LOCK, LOCK_SPIN_IRQ), access(WRITE4, ADAPTER + 0x10),
        unlock(LOCK), ev(EV_IRQ_ON, CALLER, 0, 0, 0),
        // the handler: spin_lock(&lock)
        hardirq(IRQ_HANDLER), lock(LOCK, LOCK_SPIN), access(WRITE4, ADAPTER + 0x10), access(READ4, ADAPTER + 0x10),
        unlock(LOCK),
        process(1), ev(EV_IRQ_OFF, CALLER, 0, 0, 0), lock(LOCK, LOCK_SPIN_IRQ), access(RMW4, ADAPTER + 0x10),
        unlock(LOCK), ev(EV_IRQ_ON, CALLER, 0, 0, 0),
    ]));
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);
}

#[test]
fn an_unlocked_write_shared_with_the_interrupt_handler_races() {
    let o = check(&after_probe(&[
        access(WRITE4, ADAPTER + 0x10),
        hardirq(IRQ_HANDLER), access(READ4, ADAPTER + 0x10),
        process(1), access(WRITE4, ADAPTER + 0x10),
    ]));
    let f = o.only("data-race");
    assert_eq!(f["fatal"], false);
    assert_eq!(f["other"]["context"]["kind"], "process");
    assert_eq!(f["other"]["other_access"]["context"]["kind"], "hardirq");
    assert_eq!(f["other"]["other_access"]["write"], false);
    assert_eq!(f["event"], probed().len() as u64 + 4);
    assert_eq!(o.verdict_at, 0);
}

#[test]
fn disabling_interrupts_excludes_the_handler_but_not_another_one() {
    let excluded = check(&after_probe(&[
        ev(EV_IRQ_OFF, CALLER, 0, 0, 0), access(WRITE4, ADAPTER + 0x10), ev(EV_IRQ_ON, CALLER, 0, 0, 0),
        hardirq(IRQ_HANDLER), access(WRITE4, ADAPTER + 0x10),
        process(1), ev(EV_IRQ_OFF, CALLER, 0, 0, 0), access(WRITE4, ADAPTER + 0x10),
    ]));
    assert_eq!(excluded.kinds(), Vec::<&str>::new(), "{:#?}", excluded.findings);

    let o = check(&after_probe(&[
        hardirq(OTHER_IRQ_HANDLER), access(WRITE4, ADAPTER + 0x100),
        hardirq(IRQ_HANDLER), access(WRITE4, ADAPTER + 0x100),
        hardirq(OTHER_IRQ_HANDLER), access(WRITE4, ADAPTER + 0x100),
    ]));
    let f = o.only("data-race");
    assert_eq!(f["other"]["other_access"]["context"]["kind"], "hardirq");
    assert_eq!(f["other"]["other_access"]["context"]["handler"]["address"], format!("{IRQ_HANDLER:#x}"));
}

#[test]
fn bh_locks_exclude_softirqs_and_two_softirq_handlers_race() {
    let napi = context(CTX_SOFTIRQ, 98, NAPI_POLL);
    let timer = context(CTX_TIMER, 98, TIMER_FN);
    let o = check(&after_probe(&[
        napi, access(WRITE4, ADAPTER + 0x20),
        process(2), lock(LOCK, LOCK_SPIN_BH), access(WRITE4, ADAPTER + 0x20), unlock(LOCK),
        napi, access(WRITE4, ADAPTER + 0x20),
    ]));
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);

    let o = check(&after_probe(&[napi, timer, napi, access(WRITE4, ADAPTER + 0x20), timer, access(WRITE4, ADAPTER + 0x20),
                                 napi, access(WRITE4, ADAPTER + 0x20)]));
    assert_eq!(o.only("data-race")["other"]["other_access"]["context"]["kind"], "timer");
}

#[test]
fn state_based_accesses_before_a_handler_first_ran_cannot_race_with_it() {
    // Probe (thread 1) writes a field and open (thread 2) reads it, both
    // without locks; then the interrupt handler, first seen after both,
    // writes it. Plain lockset reports the handler's write (the granule was
    // shared with no lock); it cannot race with accesses from before the
    // handler could run. Likewise a thread first seen after probe's writes
    // takes them over.
    let o = check(&[
        process(1), alloc(ADAPTER, 4096), ev(EV_FILL, CALLER, ADAPTER, 0, 4096), access(WRITE4, ADAPTER + 0x10),
        process(2), access(READ4, ADAPTER + 0x10),
        hardirq(IRQ_HANDLER), access(WRITE4, ADAPTER + 0x10),
        process(3), access(WRITE4, ADAPTER + 0x20),
    ]);
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);

    // Once the handler runs, an unlocked write in process context races.
    let o = check(&[
        process(1), alloc(ADAPTER, 4096), access(WRITE4, ADAPTER + 0x10),
        hardirq(IRQ_HANDLER), access(READ4, ADAPTER + 0x10),
        process(1), access(WRITE4, ADAPTER + 0x10),
    ]);
    assert_eq!(o.only("data-race")["event"], 6);

    // After STOP every handler is new again: the next probe's writes do not
    // race with the handler's accesses of the previous life.
    let o = check(&[
        process(1), alloc(ADAPTER, 4096), hardirq(IRQ_HANDLER), access(WRITE4, MODULE_DATA),
        process(1), ev(EV_STOP, 0, 0, 0, 0), access(WRITE4, MODULE_DATA),
        hardirq(IRQ_HANDLER), access(READ4, MODULE_DATA),
    ]);
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);
}

#[test]
fn two_threads_without_a_common_lock_race_on_module_data() {
    let o = check(&[process(1), access(WRITE4, MODULE_DATA), process(2), access(READ4, MODULE_DATA),
                    process(1), access(WRITE4, MODULE_DATA)]);
    assert_eq!(o.only("data-race")["other"]["granule"], format!("{MODULE_DATA:#x}"));

    let o = check(&[process(1), access(WRITE4, MODULE_DATA), process(2), lock(LOCK, LOCK_MUTEX),
                    access(WRITE4, MODULE_DATA), unlock(LOCK), process(1), lock(LOCK, LOCK_MUTEX),
                    access(WRITE4, MODULE_DATA), unlock(LOCK)]);
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);
}

#[test]
fn stack_atomic_per_cpu_and_coherent_memory_are_not_checked_for_races() {
    let coherent = ARENA + 0x10000;
    let o = check(&after_probe(&[
        ev(EV_DMA_ALLOC, CALLER, coherent, 4096, IOVA + 0x10000),
        access(STACK_WRITE8, ADAPTER + 0x40), access(ATOMIC_RMW4, ADAPTER + 0x48),
        with_flags(access(PERCPU_WRITE4, 0x10), EVF_PERCPU), access(WRITE4, coherent),
        hardirq(IRQ_HANDLER),
        access(STACK_WRITE8, ADAPTER + 0x40), access(ATOMIC_RMW4, ADAPTER + 0x48),
        with_flags(access(PERCPU_WRITE4, 0x10), EVF_PERCPU), access(WRITE4, coherent),
        process(1),
        access(STACK_WRITE8, ADAPTER + 0x40), access(ATOMIC_RMW4, ADAPTER + 0x48), access(WRITE4, coherent),
    ]));
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);
}

#[test]
fn reallocated_memory_starts_virgin() {
    let o = check(&[process(1), alloc(ADAPTER, 64), access(WRITE4, ADAPTER), hardirq(IRQ_HANDLER), access(READ4, ADAPTER),
                    free(ADAPTER), alloc(ADAPTER, 64), access(WRITE4, ADAPTER), process(1), access(WRITE4, ADAPTER)]);
    // The handler's write after reallocation is the first; the process's
    // unlocked write is then a race with it, not with the old block's.
    assert_eq!(o.only("data-race")["other"]["other_access"]["write"], true);
}

/// The same inside a block, where the granules are forgotten only when the
/// new block is first accessed, and in a smaller block taking part of a
/// freed one: a race found in the old block does not hide one in the new.
#[test]
fn reallocated_memory_starts_virgin_inside_too() {
    let race = |at: u64| [hardirq(IRQ_HANDLER), access(WRITE4, at), process(1), access(WRITE4, at)];
    let mut events = vec![process(1), alloc(ADAPTER, 256)];
    events.extend(race(ADAPTER + 0x80));
    events.extend([free(ADAPTER), alloc(ADAPTER + 0x40, 128)]);
    events.extend(race(ADAPTER + 0x80));
    let o = check(&events);
    assert_eq!(o.kinds(), ["data-race"], "{:#?}", o.findings);
    assert_eq!(o.summary[0]["count"], 2, "{:#?}", o.summary);
}
