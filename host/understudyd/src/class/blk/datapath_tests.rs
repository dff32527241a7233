// SPDX-License-Identifier: GPL-2.0
//! The block front-end's requests against the disk model (model.rs),
//! driven through the real block rings: what the kernel is answered, what
//! reaches the driver, and what is on the disk after the driver died with
//! its device's cache.

use std::collections::BTreeMap;

use understudy_nbd::Command;
use understudy_protocol::{BlkEntry, DiskInfo, BLK_OP_DISCARD, BLK_OP_FLUSH, BLK_OP_READ, BLK_OP_WRITE, DISK_FUA,
                          DISK_WRITE_CACHE};
use understudy_shm::block_driver::BlockDriver;
use understudy_shm::ShmError;

use super::{Datapath, Reply};
use crate::class::blk::model::{datapath, disk, pattern, read, request, write, Model, SECTORS};
use crate::class::InFlight;

fn replies_by_handle(dp: &mut Datapath) -> BTreeMap<u8, Reply> {
    dp.take_replies().into_iter().map(|r| (r.handle[0], r)).collect()
}

#[test]
fn a_read_larger_than_a_slot_is_answered_once_with_every_piece_in_place() {
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
    let mut model = Model::default();
    let data = pattern(3, 40 << 10);
    for (i, b) in data.iter().enumerate() {
        model.stable.insert(4096 + i as u64, *b);
    }
    dp.accept(1, read(7, 4096, 40 << 10)).unwrap();
    assert!(dp.take_replies().is_empty(), "answered before the device read it");
    model.serve_all(&driver, &mut dp);
    // 40 KiB in 16 KiB pieces, on the queue of connection 1.
    assert_eq!(model.seen, vec![(BLK_OP_READ, 8, 16384, 1), (BLK_OP_READ, 40, 16384, 1), (BLK_OP_READ, 72, 8192, 1)]);
    assert_eq!(dp.take_replies(), vec![Reply { conn: 1, handle: [7; 8], errno: 0, data }]);
    assert_eq!(dp.counts().reads, 1);
}

#[test]
fn more_pieces_than_slots_wait_for_slots_and_all_are_answered() {
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
    let mut model = Model::default();
    for h in 0..6u8 {
        dp.accept(0, write(h, h as u64 * 32768, pattern(h, 32768))).unwrap();
    }
    // Twelve pieces, four slots: four are out.
    assert_eq!(dp.in_flight(), 4);
    model.serve_all(&driver, &mut dp);
    let replies = replies_by_handle(&mut dp);
    assert_eq!(replies.len(), 6);
    assert!(replies.values().all(|r| r.errno == 0 && r.data.is_empty()));
    for h in 0..6u8 {
        assert_eq!(model.bytes(h as u64 * 32768, 32768), pattern(h, 32768));
    }
}

#[test]
fn a_request_off_the_disk_never_reaches_the_driver() {
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
    dp.accept(0, read(1, 100, 512)).unwrap();
    dp.accept(0, write(2, (SECTORS - 1) * 512, vec![0; 1024])).unwrap();
    dp.accept(0, read(3, (SECTORS - 1) * 512, 1024)).unwrap();
    assert!(driver.take().is_none());
    let errnos: Vec<(u8, u32)> = dp.take_replies().iter().map(|r| (r.handle[0], r.errno)).collect();
    assert_eq!(errnos, vec![(1, libc::EINVAL as u32), (2, libc::ENOSPC as u32), (3, libc::EINVAL as u32)]);
    assert_eq!(dp.counts().errors, 3);
}

#[test]
fn a_pieces_error_is_the_requests_and_its_data_is_not_sent() {
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
    dp.accept(0, read(9, 0, 32768)).unwrap();
    let (a, b) = (driver.take().unwrap(), driver.take().unwrap());
    driver.complete(a);
    driver.complete(BlkEntry { status: -(libc::EIO as i16), ..b });
    dp.complete().unwrap();
    assert_eq!(dp.take_replies(), vec![Reply { conn: 0, handle: [9; 8], errno: libc::EIO as u32, data: vec![] }]);
}

#[test]
fn a_flush_covers_what_was_acknowledged_before_it_and_then_nothing_is_kept() {
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
    let mut model = Model::default();
    dp.accept(0, write(1, 0, pattern(1, 8192))).unwrap();
    model.serve_all(&driver, &mut dp);
    assert_eq!(dp.kept(), (1, 8192));
    dp.accept(0, request(Command::Flush, 2, 0, 0, vec![])).unwrap();
    model.serve_all(&driver, &mut dp);
    assert_eq!(dp.kept(), (0, 0));
    assert_eq!(replies_by_handle(&mut dp).len(), 2);
    assert_eq!(model.stable.len(), 8192);
}

#[test]
fn a_fua_write_to_a_device_without_fua_is_answered_after_a_flush() {
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
    let mut model = Model::default();
    dp.accept(0, request(Command::Write { fua: true }, 5, 0, 4096, pattern(5, 4096))).unwrap();
    let w = driver.take().unwrap();
    driver.complete(model.serve(&driver, w));
    dp.complete().unwrap();
    assert!(dp.take_replies().is_empty(), "a FUA write answered before it was flushed");
    model.serve_all(&driver, &mut dp);
    assert_eq!(model.seen.iter().map(|s| s.0).collect::<Vec<_>>(), vec![BLK_OP_WRITE, BLK_OP_FLUSH]);
    assert_eq!(dp.take_replies().len(), 1);
    // With FUA the device makes the write durable itself: one request, nothing kept.
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE | DISK_FUA);
    let mut model = Model::default();
    dp.accept(0, request(Command::Write { fua: true }, 5, 0, 4096, pattern(5, 4096))).unwrap();
    model.serve_all(&driver, &mut dp);
    assert_eq!(model.seen.len(), 1);
    assert_eq!((dp.take_replies().len(), dp.kept()), (1, (0, 0)));
    assert_eq!(model.stable.len(), 4096);
}

#[test]
fn a_device_without_a_cache_keeps_nothing_and_flushes_are_answered_at_once() {
    let (mut dp, driver) = datapath(0);
    let mut model = Model::default();
    dp.accept(0, write(1, 0, pattern(1, 4096))).unwrap();
    model.serve_all(&driver, &mut dp);
    dp.accept(0, request(Command::Flush, 2, 0, 0, vec![])).unwrap();
    assert!(driver.take().is_none());
    assert_eq!(dp.kept(), (0, 0));
    assert_eq!(replies_by_handle(&mut dp).len(), 2);
}

/// The driver dies holding requests, and its device's reset drops the
/// cache: the successor is given the acknowledged changes again, alone
/// and in order, then the held requests; the kernel hears exactly once of
/// each request and the disk holds what it was told.
#[test]
fn after_a_death_that_drops_the_cache_the_disk_holds_every_acknowledged_write() {
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
    let mut model = Model::default();
    // Acknowledged, then overwritten in part, then partly discarded: the
    // order matters when they are done again.
    dp.accept(0, write(1, 0, pattern(1, 16384))).unwrap();
    model.serve_all(&driver, &mut dp);
    dp.accept(1, write(2, 4096, pattern(2, 4096))).unwrap();
    model.serve_all(&driver, &mut dp);
    dp.accept(0, request(Command::Trim, 3, 12288, 4096, vec![])).unwrap();
    model.serve_all(&driver, &mut dp);
    assert_eq!(replies_by_handle(&mut dp).len(), 3);
    let told = model.bytes(0, 16384);
    // Sent and never completed: a write and a read.
    dp.accept(1, write(4, 65536, pattern(4, 8192))).unwrap();
    dp.accept(0, read(5, 0, 16384)).unwrap();
    assert!(driver.take().is_some() && driver.take().is_some());
    model.seen.clear();

    // The driver dies; its device is reset and the cache is gone.
    let held = dp.reclaim();
    assert_eq!(held.len(), 2);
    model.reset();
    assert_ne!(model.bytes(0, 16384), told);
    // The kernel sends more meanwhile: it waits.
    dp.accept(0, read(6, 65536, 8192)).unwrap();
    let successor = BlockDriver::attach(dp.block_memory());
    assert_eq!(dp.resubmit(held).unwrap(), 2);

    // The replay first, one at a time where they overlap (all three do).
    let first = successor.take().unwrap();
    let second = successor.take();
    assert!(second.is_none(), "an overlapping change sent while one is outstanding: {first:?} {second:?}");
    successor.complete(model.serve(&successor, first));
    dp.complete().unwrap();
    model.serve_all(&successor, &mut dp);
    let ops: Vec<(u16, u64)> = model.seen.iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(ops[..3], [(BLK_OP_WRITE, 0), (BLK_OP_WRITE, 8), (BLK_OP_DISCARD, 24)]);
    assert_eq!(ops[3..], [(BLK_OP_WRITE, 128), (BLK_OP_READ, 0), (BLK_OP_READ, 128)]);
    let replies = replies_by_handle(&mut dp);
    assert_eq!(replies.keys().copied().collect::<Vec<_>>(), vec![4, 5, 6]);
    assert_eq!(replies[&5].data, told, "the read after the handover saw other data than the kernel was told");
    assert_eq!(replies[&6].data, pattern(4, 8192));
    assert_eq!(model.bytes(0, 16384), told);
    assert_eq!(dp.counts().replayed, 3);
    // Done again, they are still only in the cache: still kept until a flush.
    assert_eq!(dp.kept().0, 4);
}

#[test]
fn a_completion_the_driver_made_up_leaves_the_request_to_its_successor() {
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
    let mut model = Model::default();
    dp.accept(0, read(1, 0, 4096)).unwrap();
    let e = driver.take().unwrap();
    driver.complete(BlkEntry { sector: 999, ..e });
    assert!(matches!(dp.complete(), Err(ShmError::Violation(_))));
    assert!(dp.take_replies().is_empty());
    let held = dp.reclaim();
    let successor = BlockDriver::attach(dp.block_memory());
    dp.resubmit(held).unwrap();
    model.serve_all(&successor, &mut dp);
    assert_eq!(dp.take_replies(), vec![Reply { conn: 0, handle: [1; 8], errno: 0, data: vec![0; 4096] }]);
}

#[test]
fn a_good_completion_before_a_made_up_one_is_answered_and_the_other_waits_for_the_successor() {
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
    let mut model = Model::default();
    dp.accept(0, read(1, 0, 4096)).unwrap();
    dp.accept(0, read(2, 8192, 4096)).unwrap();
    let (a, b) = (driver.take().unwrap(), driver.take().unwrap());
    driver.complete(model.serve(&driver, a));
    driver.complete(BlkEntry { len: 512, ..b });
    assert!(matches!(dp.complete(), Err(ShmError::Violation(_))));
    assert_eq!(replies_by_handle(&mut dp).keys().copied().collect::<Vec<_>>(), vec![1]);
    let held = dp.reclaim();
    assert_eq!(held.len(), 1);
    let successor = BlockDriver::attach(dp.block_memory());
    dp.resubmit(held).unwrap();
    model.serve_all(&successor, &mut dp);
    assert_eq!(replies_by_handle(&mut dp).keys().copied().collect::<Vec<_>>(), vec![2]);
}

#[test]
fn a_disk_nobody_serves_answers_everything_with_eio() {
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
    dp.accept(0, read(1, 0, 4096)).unwrap();
    dp.accept(0, write(2, 0, vec![1; 4096])).unwrap();
    let _ = driver.take();
    let held = dp.reclaim();
    dp.give_up(held);
    dp.accept(0, read(3, 0, 512)).unwrap();
    let errnos: Vec<(u8, u32)> = dp.take_replies().iter().map(|r| (r.handle[0], r.errno)).collect();
    assert_eq!(errnos, vec![(1, libc::EIO as u32), (2, libc::EIO as u32), (3, libc::EIO as u32)]);
    assert_eq!(dp.unanswered(), 0);
}

#[test]
fn a_successor_with_fewer_queues_gets_every_piece_on_a_queue_it_has() {
    let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
    let mut model = Model::default();
    dp.served_by(&DiskInfo { n_queues: 1, ..disk(DISK_WRITE_CACHE) });
    for conn in 0..3 {
        dp.accept(conn, read(conn as u8, 0, 512)).unwrap();
    }
    model.serve_all(&driver, &mut dp);
    assert!(model.seen.iter().all(|s| s.3 == 0), "{:?}", model.seen);
}
