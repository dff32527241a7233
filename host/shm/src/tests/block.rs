// SPDX-License-Identifier: GPL-2.0
//! The host's end of the block rings against a hostile driver: a
//! completion of a request it never had, a second completion, a changed
//! field, a bad status or a dead incarnation's leftover is a Violation, and
//! the request stays the host's to give a successor.

use std::sync::atomic::Ordering;

use understudy_protocol::{BlkEntry, BLK_RING_DONE};

use crate::block_driver::BlockDriver;
use crate::{BlockMemory, BlockOp, BlockRequest, Geometry, ShmError};

const SLOT: u32 = 16384;
const GEOMETRY: Geometry =
    Geometry { arena_size: 1 << 20, arena_iova: 0x1000_0000, pool_buffers: 16, buffer_size: 4096, ring_size: 4 };

fn setup() -> (BlockMemory, BlockDriver) {
    let host = BlockMemory::create(GEOMETRY, SLOT).unwrap();
    let driver = BlockDriver::attach(&host);
    (host, driver)
}

fn submit(host: &mut BlockMemory, op: BlockOp, sector: u64, len: u32) -> BlockRequest {
    let slot = host.take_slot().unwrap();
    let r = BlockRequest { op, sector, len, queue: 0, slot };
    host.submit(r).unwrap();
    r
}

fn violation(r: Result<Vec<crate::BlockCompletion>, ShmError>) -> String {
    match r {
        Err(ShmError::Violation(why)) => why,
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn a_read_goes_out_with_its_slot_and_comes_back_with_the_drivers_data() {
    let (mut host, driver) = setup();
    let r = submit(&mut host, BlockOp::Read, 8, 8192);
    let e = driver.take().unwrap();
    let (sector, len, op) = (e.sector, e.len, e.op);
    assert_eq!((sector, len, op), (8, 8192, 0));
    // The driver copies the device's data into the request's buffers.
    driver.fill(&e, &[0xab; 8192]);
    driver.complete(e);
    let done = host.completions().unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].request, done[0].status), (r, 0));
    let mut data = [0u8; 8192];
    host.read_data(r.slot, 0, &mut data);
    assert!(data.iter().all(|&b| b == 0xab));
    host.release_slot(r.slot);
    assert_eq!(host.in_flight(), 0);
}

#[test]
fn a_completion_of_a_request_never_submitted_is_refused() {
    let (mut host, driver) = setup();
    submit(&mut host, BlockOp::Write { fua: false }, 0, 4096);
    let e = driver.take().unwrap();
    // Slot 3 holds no request.
    driver.complete(BlkEntry { tag: e.tag + 3, ..e });
    assert!(violation(host.completions()).contains("does not hold"));
}

#[test]
fn good_completions_before_a_bad_one_are_returned_first_and_the_violation_next() {
    let (mut host, driver) = setup();
    let a = submit(&mut host, BlockOp::Read, 0, 4096);
    submit(&mut host, BlockOp::Read, 8, 4096);
    let (ea, eb) = (driver.take().unwrap(), driver.take().unwrap());
    driver.complete(ea);
    driver.complete(BlkEntry { sector: 99, ..eb });
    let done = host.completions().unwrap();
    assert_eq!(done.iter().map(|c| c.request).collect::<Vec<_>>(), vec![a]);
    assert!(violation(host.completions()).contains("is not its request's"));
    // The bad one's request is still the driver's, for its successor.
    assert_eq!(host.reclaim().len(), 1);
    assert!(host.completions().unwrap().is_empty());
}

#[test]
fn a_second_completion_of_one_request_is_refused() {
    let (mut host, driver) = setup();
    submit(&mut host, BlockOp::Write { fua: true }, 0, 4096);
    let e = driver.take().unwrap();
    let flags = e.flags;
    assert_eq!(flags, understudy_protocol::BLK_FUA);
    driver.complete(e);
    driver.complete(e);
    assert_eq!(host.completions().unwrap().len(), 1);
    assert!(violation(host.completions()).contains("completed twice"));
}

#[test]
fn a_completion_that_changes_its_request_is_refused() {
    for change in [|e: BlkEntry| BlkEntry { len: 512, ..e }, |e: BlkEntry| BlkEntry { sector: 1, ..e },
                   |e: BlkEntry| BlkEntry { buf: 4, ..e }, |e: BlkEntry| BlkEntry { op: 1, ..e },
                   |e: BlkEntry| BlkEntry { queue: 1, ..e }, |e: BlkEntry| BlkEntry { flags: 1, ..e }] {
        let (mut host, driver) = setup();
        submit(&mut host, BlockOp::Read, 0, 4096);
        driver.complete(change(driver.take().unwrap()));
        assert!(violation(host.completions()).contains("not its request's"));
        // The request is still the driver's: it goes to the successor.
        assert_eq!(host.reclaim().len(), 1);
    }
}

#[test]
fn a_status_that_is_not_an_errno_is_refused() {
    for status in [1i16, -4096, i16::MIN] {
        let (mut host, driver) = setup();
        submit(&mut host, BlockOp::Flush, 0, 0);
        let e = driver.take().unwrap();
        driver.complete(BlkEntry { status, ..e });
        assert!(violation(host.completions()).contains("not 0 or -errno"), "{status}");
    }
    let (mut host, driver) = setup();
    submit(&mut host, BlockOp::Flush, 0, 0);
    let e = driver.take().unwrap();
    driver.complete(BlkEntry { status: -5, ..e });
    assert_eq!(host.completions().unwrap()[0].status, -5);
}

#[test]
fn what_a_dead_driver_held_goes_to_its_successor_in_order_and_its_leftovers_are_refused() {
    let (mut host, driver) = setup();
    let a = submit(&mut host, BlockOp::Write { fua: false }, 0, 4096);
    let b = submit(&mut host, BlockOp::Read, 8, 4096);
    let c = submit(&mut host, BlockOp::Discard, 16, 8192);
    let (ea, eb) = (driver.take().unwrap(), driver.take().unwrap());
    driver.complete(eb);
    assert_eq!(host.completions().unwrap()[0].request, b);
    host.release_slot(b.slot);
    // a and c were the driver's when it died: both come back, oldest first.
    assert_eq!(host.reclaim(), vec![a, c]);
    assert_eq!(host.in_flight(), 0);
    // The successor gets them again with its own tags...
    host.submit(a).unwrap();
    let successor = BlockDriver::attach(&host);
    let again = successor.take().unwrap();
    let (tag, old_tag) = (again.tag, ea.tag);
    assert_ne!(tag, old_tag);
    let fields = |e: BlkEntry| (e.sector, e.len, e.buf);
    assert_eq!(fields(again), fields(ea));
    // ... and a completion with the dead driver's tag is not taken for its.
    successor.complete(ea);
    assert!(violation(host.completions()).contains("names no request of this driver"));
}

#[test]
fn a_ring_whose_head_runs_past_its_tail_is_refused() {
    let (mut host, driver) = setup();
    driver.rings().head(BLK_RING_DONE).store(GEOMETRY.ring_size + 1, Ordering::Release);
    assert!(violation(host.completions()).contains("entries past tail"));
}

#[test]
fn the_default_block_geometry_makes_a_block_memory() {
    let host = BlockMemory::create(Geometry::block_default(), crate::block::DEFAULT_SLOT_BYTES).unwrap();
    assert_eq!(host.geometry().pool_size(), 16 << 20);
}

#[test]
fn the_pool_is_one_slot_per_ring_entry() {
    let wrong = Geometry { pool_buffers: 8, ..GEOMETRY };
    assert!(matches!(BlockMemory::create(wrong, SLOT), Err(ShmError::Geometry(_))));
    assert!(matches!(BlockMemory::create(GEOMETRY, 1000), Err(ShmError::Geometry(_))));
    let (mut host, _driver) = setup();
    let slots: Vec<u32> = std::iter::from_fn(|| host.take_slot()).collect();
    assert_eq!(slots, vec![0, 1, 2, 3]);
}
