// SPDX-License-Identifier: GPL-2.0
//! The host's end of the rings against a hostile driver: every invalid index,
//! length, flag and ownership case is a Violation, and nothing panics.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use super::*;
use understudy_protocol::{RING_TX, RING_TX_DONE};

mod tap_state;

const GEOMETRY: Geometry =
    Geometry { arena_size: 1 << 20, arena_iova: 0x1000_0000, pool_buffers: 16, buffer_size: 2048, ring_size: 8 };

/// The driver's view: a second mapping of the same memfds, written directly.
struct Driver {
    rings: Rings,
    arena: SharedRegion,
}

impl Driver {
    fn attach(host: &SharedMemory) -> Driver {
        let map = |r: &SharedRegion| SharedRegion::map(r.as_fd().try_clone_to_owned().unwrap(), r.len()).unwrap();
        Driver { rings: Rings::from_region(map(host.rings().region()), GEOMETRY.ring_size), arena: map(host.arena()) }
    }

    /// Takes the next entry of a host-produced ring, as an honest driver would.
    fn consume(&self, ring: usize) -> Option<RingEntry> {
        crate::block_driver::take_entry(&self.rings, ring)
    }

    /// Publishes an entry on a driver-produced ring, whatever it holds.
    fn produce(&self, ring: usize, buf: u32, len: u32, flags: u16) {
        crate::block_driver::publish_entry(&self.rings, ring, RingEntry { buf, len, flags, ..Default::default() });
    }
}

fn setup() -> (SharedMemory, Driver) {
    let host = SharedMemory::create(GEOMETRY).unwrap();
    let driver = Driver::attach(&host);
    (host, driver)
}

fn send_one(host: &mut SharedMemory, payload: &[u8]) -> u32 {
    let buf = host.take_free(false).unwrap();
    host.host_buffer(buf)[..payload.len()].copy_from_slice(payload);
    assert!(host.send(frame(buf, payload.len() as u32)).unwrap());
    buf
}

fn frame(buf: u32, len: u32) -> TxFrame {
    TxFrame { buf, len, offload: TxOffload::default(), queue: 0 }
}

fn violation<T: std::fmt::Debug>(r: Result<T, ShmError>) -> String {
    match r {
        Err(ShmError::Violation(why)) => why,
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn an_honest_driver_round_trips_tx() {
    let (mut host, driver) = setup();
    let buf = send_one(&mut host, b"frame-to-send");
    assert_eq!(host.lent(), 1);
    assert_eq!(host.free_count(), GEOMETRY.pool_buffers - 1);
    let e = driver.consume(RING_TX).unwrap();
    assert_eq!(({ e.buf }, { e.len }), (buf, 13));
    let mut seen = vec![0; 13];
    driver.arena.read(buf as usize * 2048, &mut seen);
    assert_eq!(seen, b"frame-to-send", "zero copy: the driver sees the host's bytes in place");
    driver.produce(RING_TX_DONE, buf, 13, 0);
    assert_eq!(host.reap_tx_done().unwrap(), Some(TxDone { buf, dropped: false }));
    assert_eq!(host.reap_tx_done().unwrap(), None);
    assert_eq!(host.lent(), 0);
    assert_eq!(host.free_count(), GEOMETRY.pool_buffers, "a completed frame's buffer is free again");
}

#[test]
fn a_dropped_transmit_is_reported() {
    let (mut host, driver) = setup();
    let buf = send_one(&mut host, &[0; 60]);
    driver.consume(RING_TX);
    driver.produce(RING_TX_DONE, buf, 60, TX_DONE_DROPPED);
    assert_eq!(host.reap_tx_done().unwrap(), Some(TxDone { buf, dropped: true }));
}

#[test]
fn head_more_than_a_ring_ahead_is_a_violation() {
    let (mut host, driver) = setup();
    driver.rings.head(RING_TX_DONE).store(9, Ordering::Release);
    assert!(violation(host.reap_tx_done()).contains("tx_done ring: head 9 is 9 entries past tail 0"));

    // A head behind the tail wraps to a huge distance: also refused.
    let (mut host, driver) = setup();
    let buf = send_one(&mut host, &[0; 60]);
    driver.produce(RING_TX_DONE, buf, 60, 0);
    host.reap_tx_done().unwrap();
    driver.rings.head(RING_TX_DONE).store(0, Ordering::Release);
    assert!(violation(host.reap_tx_done()).contains("head 0 is 4294967295 entries past tail 1"));
}

#[test]
fn buffer_index_outside_the_pool_is_a_violation() {
    let (mut host, driver) = setup();
    driver.produce(RING_TX_DONE, 16, 60, 0);
    assert!(violation(host.reap_tx_done()).contains("buffer 16 is outside the pool of 16"));
    let (mut host, driver) = setup();
    send_one(&mut host, &[0; 60]);
    driver.produce(RING_TX_DONE, u32::MAX, 60, 0);
    assert!(violation(host.reap_tx_done()).contains("buffer 4294967295 is outside the pool"));
}

#[test]
fn a_buffer_never_lent_or_returned_twice_is_a_violation() {
    let (mut host, driver) = setup();
    driver.produce(RING_TX_DONE, 3, 60, 0);
    assert!(violation(host.reap_tx_done()).contains("buffer 3 was not lent through tx"));

    let (mut host, driver) = setup();
    let buf = send_one(&mut host, &[0; 60]);
    driver.produce(RING_TX_DONE, buf, 60, 0);
    driver.produce(RING_TX_DONE, buf, 60, 0);
    host.reap_tx_done().unwrap();
    assert!(violation(host.reap_tx_done()).contains("was not lent"));
}

#[test]
fn a_buffer_the_host_holds_again_is_a_violation_to_return() {
    // One the host took to read a frame into and has not sent yet.
    let (mut host, driver) = setup();
    let buf = host.take_free(false).unwrap();
    driver.produce(RING_TX_DONE, buf, 60, 0);
    assert!(violation(host.reap_tx_done()).contains(&format!("buffer {buf} was not lent through tx (it is Host)")));

    // One a dead driver held: the next driver may return it only once it is sent again.
    let (mut host, driver) = setup();
    let buf = send_one(&mut host, &[0; 60]);
    assert_eq!(host.reclaim_all(), vec![frame(buf, 60)]);
    driver.produce(RING_TX_DONE, buf, 60, 0);
    assert!(violation(host.reap_tx_done()).contains("was not lent through tx"));
}

#[test]
fn bad_lengths_are_violations() {
    let (mut host, driver) = setup();
    let buf = send_one(&mut host, &[0; 60]);
    driver.produce(RING_TX_DONE, buf, 2049, 0);
    assert!(violation(host.reap_tx_done()).contains("length 2049 of buffer"));

    let (mut host, driver) = setup();
    let buf = send_one(&mut host, &[0; 60]);
    driver.produce(RING_TX_DONE, buf, u32::MAX, 0);
    assert!(violation(host.reap_tx_done()).contains("length 4294967295"));

    // Up to a whole buffer is a length, not a violation.
    let (mut host, driver) = setup();
    let buf = send_one(&mut host, &[0; 60]);
    driver.produce(RING_TX_DONE, buf, 2048, 0);
    assert_eq!(host.reap_tx_done().unwrap(), Some(TxDone { buf, dropped: false }));
}

#[test]
fn reserved_flags_are_violations() {
    let (mut host, driver) = setup();
    let buf = send_one(&mut host, &[0; 60]);
    driver.produce(RING_TX_DONE, buf, 60, 0x2);
    assert!(violation(host.reap_tx_done()).contains("reserved flags 0x2"));

    // Alongside the one defined flag, or in the top bit: still refused.
    for flags in [TX_DONE_DROPPED | 0x4, 0x8000] {
        let (mut host, driver) = setup();
        let buf = send_one(&mut host, &[0; 60]);
        driver.produce(RING_TX_DONE, buf, 60, flags);
        assert!(violation(host.reap_tx_done()).contains(&format!("reserved flags {flags:#x}")));
        assert_eq!(host.lent(), 1, "a refused completion does not take the buffer back");
    }
}

#[test]
fn a_tail_moved_backwards_or_past_head_is_a_violation() {
    let (mut host, driver) = setup();
    send_one(&mut host, &[0; 60]);
    driver.rings.tail(RING_TX).store(2, Ordering::Release);
    assert!(violation(host.send(frame(0, 60))).contains("tx ring: the driver set tail to 2, outside [0, 1]"));

    let (mut host, driver) = setup();
    for _ in 0..3 {
        send_one(&mut host, &[0; 60]);
    }
    driver.rings.tail(RING_TX).store(2, Ordering::Release);
    send_one(&mut host, &[0; 60]);
    driver.rings.tail(RING_TX).store(1, Ordering::Release);
    assert!(violation(host.send(frame(0, 60))).contains("tx ring: the driver set tail to 1, outside [2, 4]"));
}

#[test]
fn a_full_tx_ring_keeps_the_buffer_with_the_host() {
    let (mut host, _driver) = setup();
    for _ in 0..8 {
        send_one(&mut host, &[0; 60]);
    }
    let buf = host.take_free(false).unwrap();
    assert!(!host.send(frame(buf, 60)).unwrap());
    host.put_free(buf);
    assert_eq!(host.lent(), 8);
}

#[test]
fn the_driver_never_holds_more_buffers_than_its_return_ring_holds() {
    // A driver that consumed tx but has returned nothing yet (frames on the
    // NIC, a slow host): lending more would let its completions overflow
    // tx_done. The pool has buffers to spare.
    let mut host = SharedMemory::create(Geometry { pool_buffers: 32, ..GEOMETRY }).unwrap();
    let driver = Driver::attach(&host);
    for _ in 0..8 {
        send_one(&mut host, &[0; 60]);
    }
    while driver.consume(RING_TX).is_some() {}
    let buf = host.take_free(false).unwrap();
    assert!(!host.send(frame(buf, 60)).unwrap(), "the tx ring is empty, but 8 buffers are out");
    host.put_free(buf);
    assert_eq!(host.lent(), 8);

    // Every one of them fits tx_done at once.
    for buf in 0..8 {
        driver.produce(RING_TX_DONE, buf, 60, 0);
    }
    assert_eq!(driver.rings.head(RING_TX_DONE).load(Ordering::Acquire), 8);
    assert!(host.reap_tx_done().unwrap().is_some());
    let buf = host.take_free(false).unwrap();
    assert!(host.send(frame(buf, 60)).unwrap(), "one returned, one more may go");
    assert_eq!(host.lent(), 8);
}

#[test]
fn wakeups_follow_the_consumer_waiting_flag() {
    let (mut host, driver) = setup();
    send_one(&mut host, &[0; 60]);
    assert!(!host.driver_wants_kick());
    driver.rings.consumer_waiting(RING_TX).store(1, Ordering::Release);
    assert!(!host.driver_wants_kick(), "nothing new: the sleeper's own re-check saw that frame");
    assert_eq!(driver.rings.consumer_waiting(RING_TX).load(Ordering::Acquire), 1);
    send_one(&mut host, &[0; 60]);
    assert!(host.driver_wants_kick());
    assert!(!host.driver_wants_kick(), "the flag is cleared by the signal");
    assert!(host.prepare_to_sleep(true));
    assert_eq!(driver.rings.consumer_waiting(RING_TX_DONE).load(Ordering::Acquire), 1);
    driver.produce(RING_TX_DONE, 0, 60, 0);
    assert!(!host.prepare_to_sleep(true), "a raced producer is seen before sleeping");
}

#[test]
fn completions_wake_the_host_only_once_the_driver_holds_half_its_limit() {
    let (mut host, driver) = setup();
    let buf = send_one(&mut host, &[0; 60]);
    assert!(!host.tx_done_urgent());
    // A request left from an earlier sleep is withdrawn, or the driver would still signal.
    driver.rings.consumer_waiting(RING_TX_DONE).store(1, Ordering::Release);
    assert!(host.prepare_to_sleep(host.tx_done_urgent()));
    assert_eq!(driver.rings.consumer_waiting(RING_TX_DONE).load(Ordering::Acquire), 0);
    driver.produce(RING_TX_DONE, buf, 0, 0);
    assert!(host.prepare_to_sleep(false), "a completion alone does not keep the host awake");
    assert!(!host.prepare_to_sleep(true), "unless it asked for completions");
    assert!(host.reap_tx_done().unwrap().is_some());
    // The test geometry's ring holds 8: from 4 lent on, completions are asked for.
    for _ in 0..4 {
        send_one(&mut host, &[0; 60]);
    }
    assert!(host.tx_done_urgent());
}

#[test]
fn free_count_follows_lending_and_reclaiming() {
    let (mut host, driver) = setup();
    assert_eq!(host.free_count(), GEOMETRY.pool_buffers);
    let sent = send_one(&mut host, &[0; 60]);
    let unsent = host.take_free(false).unwrap();
    assert_eq!(host.free_count(), GEOMETRY.pool_buffers - 2);
    let _ = driver.consume(RING_TX);
    driver.produce(RING_TX_DONE, sent, 0, 0);
    host.reap_tx_done().unwrap();
    host.put_free(unsent);
    assert_eq!(host.free_count(), GEOMETRY.pool_buffers);
    // A second frame the driver dies holding is not free until it is given again or freed.
    let held = send_one(&mut host, &[1; 60]);
    let uncompleted = host.reclaim_all();
    assert_eq!(host.free_count(), GEOMETRY.pool_buffers - 1);
    assert_eq!(uncompleted, vec![frame(held, 60)]);
    host.put_free(held);
    assert_eq!(host.free_count(), GEOMETRY.pool_buffers);
}

#[test]
fn reclaim_all_returns_every_buffer_and_empties_the_rings() {
    let (mut host, driver) = setup();
    let done = send_one(&mut host, &[0; 60]);
    send_one(&mut host, &[1; 60]);
    driver.consume(RING_TX).unwrap();
    driver.produce(RING_TX_DONE, done, 60, 0);
    host.reap_tx_done().unwrap();
    // The dying driver leaves garbage in every counter it writes.
    driver.rings.head(RING_TX_DONE).store(12345, Ordering::Release);
    driver.rings.tail(RING_TX).store(777, Ordering::Release);
    driver.rings.consumer_waiting(RING_TX).store(1, Ordering::Release);
    let uncompleted = host.reclaim_all();
    assert_eq!(uncompleted.len(), 1, "the frame sent and never completed");
    uncompleted.iter().for_each(|t| host.put_free(t.buf));
    assert_eq!(host.lent(), 0);
    assert_eq!(host.free_count(), GEOMETRY.pool_buffers);
    for ring in [RING_TX, RING_TX_DONE] {
        let r = &driver.rings;
        let counters = [r.head(ring), r.tail(ring), r.consumer_waiting(ring)].map(|c| c.load(Ordering::Acquire));
        assert_eq!(counters, [0; 3], "{} ring", RING_NAMES[ring]);
    }
    // The host's own ends start again at 0 too: no stale tail, no stale head.
    assert_eq!(host.reap_tx_done().unwrap(), None);
    for _ in 0..8 {
        send_one(&mut host, &[0; 60]);
    }
    assert_eq!(driver.rings.head(RING_TX).load(Ordering::Acquire), 8);
}

/// A restarted driver is given exactly the frames its predecessor took and
/// never completed, oldest first, with their bytes intact -- not one it completed.
#[test]
fn reclaim_all_keeps_the_uncompleted_frames_in_order_for_the_next_driver() {
    let (mut host, driver) = setup();
    let sent: Vec<u32> = (0..5u8).map(|i| send_one(&mut host, &[i; 60])).collect();
    let taken: Vec<RingEntry> = std::iter::from_fn(|| driver.consume(RING_TX)).collect();
    assert_eq!(taken.len(), 5);
    // Completed out of order: the second, then the first, then the fourth.
    for i in [1, 0, 3] {
        driver.produce(RING_TX_DONE, sent[i], 0, 0);
    }
    while host.reap_tx_done().unwrap().is_some() {}
    let uncompleted = host.reclaim_all();
    assert_eq!(uncompleted, vec![frame(sent[2], 60), frame(sent[4], 60)]);
    let free_after: Vec<u32> = std::iter::from_fn(|| host.take_free(false)).collect();
    assert_eq!(free_after.len(), GEOMETRY.pool_buffers as usize - 2, "the held frames are not free");
    assert!(uncompleted.iter().all(|t| !free_after.contains(&t.buf)));
    free_after.into_iter().for_each(|b| host.put_free(b));

    // The next driver (same memfds, rings reset) sees them again, once each, in order.
    for t in &uncompleted {
        assert!(host.send(*t).unwrap());
    }
    let resent: Vec<RingEntry> = std::iter::from_fn(|| driver.consume(RING_TX)).collect();
    assert_eq!(resent.iter().map(|e| e.buf).collect::<Vec<_>>(), vec![sent[2], sent[4]]);
    let mut bytes = [0u8; 60];
    driver.arena.read(sent[4] as usize * GEOMETRY.buffer_size as usize, &mut bytes);
    assert_eq!(bytes, [4u8; 60]);
    driver.produce(RING_TX_DONE, sent[2], 0, 0);
    assert_eq!(host.reap_tx_done().unwrap().map(|d| d.buf), Some(sent[2]));
    assert_eq!(host.reclaim_all(), vec![frame(sent[4], 60)]);
}

#[test]
fn random_driver_writes_never_panic_the_host() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rng = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..300 {
        let (mut host, driver) = setup();
        for _ in 0..200 {
            let r = rng();
            let ring = (r % RING_COUNT as u64) as usize;
            match (r >> 8) % 5 {
                0 => driver.rings.head(ring).store(rng() as u32 % 24, Ordering::Release),
                1 => driver.rings.tail(ring).store(rng() as u32 % 24, Ordering::Release),
                2 => driver.rings.write_entry(ring, rng() as u32, RingEntry { buf: rng() as u32 % 20, len: rng() as u32 % 2100, flags: rng() as u16 % 3, ..Default::default() }),
                3 => driver.produce(ring, rng() as u32 % 18, rng() as u32 % 2100, 0),
                _ => { driver.consume(ring); }
            }
            let outcome = match rng() % 3 {
                0 => host.reap_tx_done().map(drop),
                1 => {
                    host.driver_wants_kick();
                    host.prepare_to_sleep(rng() & 1 == 0);
                    Ok(())
                }
                _ => match host.take_free(false) {
                    Some(buf) => host.send(frame(buf, 60)).map(|sent| if !sent { host.put_free(buf) }),
                    None => Ok(()),
                },
            };
            if outcome.is_err() {
                break; // the daemon would end this driver here
            }
            // Each buffer is free or lent, once: whatever the driver wrote.
            assert!(host.lent() <= GEOMETRY.ring_size);
            assert_eq!(host.free_count() + host.lent(), GEOMETRY.pool_buffers);
        }
        // And after it is ended, each is free or held for the next driver.
        let held = host.reclaim_all().len() as u32;
        assert_eq!(host.free_count() + held, GEOMETRY.pool_buffers);
    }
}

/// A pool with span slots (half of it, at most MAX_SPAN_SLOTS): 128 buffers
/// of 2 KiB give one slot of 33 at the end, buffers 95..128.
const WITH_SLOTS: Geometry = Geometry { pool_buffers: 128, ..GEOMETRY };

#[test]
fn a_frame_longer_than_a_buffer_goes_out_in_a_slot_and_comes_back_whole() {
    let mut host = SharedMemory::create(WITH_SLOTS).unwrap();
    let driver = Driver::attach(&host);
    assert_eq!(host.capacity(true), 33 * 2048 - 512);
    let slot = host.take_free(true).unwrap();
    assert_eq!(slot, 95);
    assert!(host.take_free(true).is_none(), "one slot only");
    let len = 60_000u32;
    host.host_buffer(slot)[..len as usize].fill(7);
    let offload = TxOffload { flags: understudy_protocol::TX_CSUM | understudy_protocol::TX_GSO_TCPV4,
                              gso_size: 1448, csum_start: 34, csum_offset: 16 };
    assert!(host.send(TxFrame { buf: slot, len, offload, queue: 0 }).unwrap());
    let e = driver.consume(RING_TX).unwrap();
    assert_eq!(({ e.buf }, { e.len }, { e.flags }, { e.gso_size }, { e.csum_start }, { e.csum_offset }),
               (slot, len, offload.flags, 1448, 34, 16));

    // A buffer inside the frame is not the frame.
    driver.produce(RING_TX_DONE, slot + 1, 0, 0);
    assert!(violation(host.reap_tx_done()).contains("inside a frame"));
}

#[test]
fn a_completed_slot_is_free_again_and_an_uncompleted_one_is_resent() {
    let mut host = SharedMemory::create(WITH_SLOTS).unwrap();
    let driver = Driver::attach(&host);
    let free_before = host.free_count();
    let slot = host.take_free(true).unwrap();
    assert!(host.send(frame(slot, 40_000)).unwrap());
    assert_eq!(host.free_count(), free_before - 33);
    driver.consume(RING_TX).unwrap();
    driver.produce(RING_TX_DONE, slot, 0, 0);
    assert_eq!(host.reap_tx_done().unwrap(), Some(TxDone { buf: slot, dropped: false }));
    assert_eq!(host.free_count(), free_before);

    // Uncompleted at the driver's death: the slot stays held, then goes out again whole.
    let slot = host.take_free(true).unwrap();
    assert!(host.send(frame(slot, 40_000)).unwrap());
    let uncompleted = host.reclaim_all();
    assert_eq!(uncompleted, vec![frame(slot, 40_000)]);
    assert_eq!(host.free_count(), free_before - 33);
    assert!(host.take_free(true).is_none());
    assert!(host.send(uncompleted[0]).unwrap());
    driver.produce(RING_TX_DONE, slot, 0, 0);
    host.reap_tx_done().unwrap();
    assert_eq!(host.free_count(), free_before);
}

#[test]
fn a_geometry_the_iommu_or_the_runtime_cannot_map_is_refused() {
    let refused = |g: Geometry| match SharedMemory::create(g) {
        Err(ShmError::Geometry(why)) => why,
        other => panic!("accepted: {:?}", other.map(|_| ())),
    };
    assert!(refused(Geometry { buffer_size: 1500, ..GEOMETRY }).contains("not whole 4 KiB pages"));
    assert!(refused(Geometry { ring_size: 6, ..GEOMETRY }).contains("not a power of two"));
    assert!(refused(Geometry { pool_buffers: 512, ..GEOMETRY }).contains("leaves no runtime memory"));
    assert!(refused(Geometry { arena_iova: 0xffff_0000, ..GEOMETRY }).contains("below 4 GiB"));
}

/// Copy mode as `create_unconfined` sets it up, on ordinary memory: a pool
/// of two 2 MiB chunks, whose physical addresses only the runtime uses.
fn setup_copy_mode() -> (SharedMemory, Driver, Geometry) {
    let g = Geometry { arena_size: 3 * CHUNK, pool_buffers: 2048, ..GEOMETRY };
    let arena = SharedRegion::create(c"test-arena", g.arena_size as usize).unwrap();
    let host = SharedMemory::assemble(g, arena, Rings::create(g.ring_size).unwrap(), Some(vec![0x4000_0000, 0x3000_0000, 0x5000_0000]));
    let driver = Driver::attach(&host);
    (host, driver, g)
}

#[test]
fn in_copy_mode_the_device_sees_a_copy_made_at_every_lending() {
    let (mut host, driver, _) = setup_copy_mode();
    assert_eq!(host.bus_chunks(), [0x4000_0000, 0x3000_0000, 0x5000_0000]);
    let buf = host.take_free(false).unwrap();
    host.host_buffer(buf)[..5].copy_from_slice(b"hello");
    let mut seen = [0u8; 5];
    driver.arena.read(buf as usize * 2048, &mut seen);
    assert_eq!(&seen, &[0; 5], "a frame the host keeps is not where the device can reach");
    assert!(host.send(frame(buf, 5)).unwrap());
    driver.arena.read(buf as usize * 2048, &mut seen);
    assert_eq!(&seen, b"hello");
    // The device writes over the arena's copy; the driver dies; the resend is intact.
    driver.arena.write(buf as usize * 2048, b"XXXXX");
    let uncompleted = host.reclaim_all();
    assert_eq!(uncompleted, [frame(buf, 5)]);
    for f in uncompleted {
        assert!(host.send(f).unwrap());
    }
    driver.arena.read(buf as usize * 2048, &mut seen);
    assert_eq!(&seen, b"hello");
}

#[test]
fn in_copy_mode_no_slot_crosses_a_hugepage() {
    let (mut host, _, g) = setup_copy_mode();
    let slot = SharedMemory::slot_buffers(g) as u64 * g.buffer_size as u64;
    let check = |host: &mut SharedMemory| {
        let mut n = 0;
        while let Some(first) = host.take_free(true) {
            let start = first as u64 * g.buffer_size as u64;
            assert_eq!(start / CHUNK, (start + slot - 1) / CHUNK, "slot at buffer {first}");
            n += 1;
        }
        n
    };
    let usable = check(&mut host);
    // 32 slots of 33 buffers end the pool at buffer 2048: the one across buffer 1024 is left out.
    assert_eq!(usable, 31);
    host.reclaim_all();
    assert_eq!(check(&mut host), usable, "the same after a driver's death");
}

mod block;
