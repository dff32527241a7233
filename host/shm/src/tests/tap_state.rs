// SPDX-License-Identifier: GPL-2.0
//! The TAP's state against a driver's records: the frames of a dead driver
//! come back in order, and records that name no frame of its own are refused.

use understudy_protocol::{Held, Wire, TX_CSUM};

use super::*;

/// The driver's record of a frame it read from the TAP, written where the protocol puts it.
fn hold(host: &SharedMemory, slot: usize, held: Held) {
    let offset = understudy_protocol::tap_state_offset(GEOMETRY.ring_size) as usize
        + understudy_protocol::HELD_OFFSET + slot * size_of::<Held>();
    host.rings().region().write(offset, held.as_bytes());
}

fn held_at(seq: u64, offset: u32, len: u32) -> Held {
    Held { seq, offset, len, ..Default::default() }
}

#[test]
fn held_frames_come_back_in_the_order_read_and_the_state_starts_over() {
    let (mut host, driver) = setup();
    let runtime = GEOMETRY.pool_size() as u32;
    driver.arena.write(runtime as usize + 4096, b"second frame, read later..");
    driver.arena.write(runtime as usize, b"first frame, read earlier..");
    hold(&host, 5, held_at(8, runtime + 4096, 26));
    hold(&host, 2, Held { flags: TX_CSUM, csum_start: 14, csum_offset: 6, ..held_at(7, runtime, 27) });
    assert!(host.set_gate(true), "opening a closed gate asks for a kick");
    assert!(!host.set_gate(true), "an open gate is no news");
    let free = host.free_count();
    let reclaimed = host.reclaim_held();
    assert!(reclaimed.refused.is_empty() && reclaimed.no_room == 0, "{reclaimed:?}");
    let bytes: Vec<Vec<u8>> = reclaimed.frames.iter()
        .map(|f| host.host_buffer(f.buf)[..f.len as usize].to_vec()).collect();
    assert_eq!(bytes, [b"first frame, read earlier..".to_vec(), b"second frame, read later..".to_vec()]);
    assert_eq!(reclaimed.frames[0].offload, TxOffload { flags: TX_CSUM, gso_size: 0, csum_start: 14, csum_offset: 6 });
    assert_eq!(host.free_count(), free - 2, "the copies hold pool buffers until resent");
    assert!(host.reclaim_held().frames.is_empty(), "the records were cleared");
    assert!(host.set_gate(true), "the gate was closed for the next driver");
}

#[test]
fn held_records_outside_the_drivers_memory_or_of_no_frame_are_refused() {
    let (mut host, _driver) = setup();
    let runtime = GEOMETRY.pool_size() as u32;
    let arena = GEOMETRY.arena_size as u32;
    hold(&host, 0, held_at(1, 0, 60));                                // the pool, the host's
    hold(&host, 1, held_at(2, arena - 10, 60));                       // past the arena
    hold(&host, 2, held_at(3, runtime, 13));                          // shorter than a header
    hold(&host, 3, held_at(4, runtime, TX_MAX_FRAME + 1));            // longer than a frame
    hold(&host, 4, Held { flags: 0x80, ..held_at(5, runtime, 60) });  // an unknown offload
    hold(&host, 5, held_at(6, u32::MAX, u32::MAX));                   // offset + len overflows 32 bits
    hold(&host, 6, held_at(7, runtime, 60));                          // the one good record
    let reclaimed = host.reclaim_held();
    assert_eq!(reclaimed.frames.len(), 1, "{reclaimed:?}");
    assert_eq!(reclaimed.refused.len(), 6, "{reclaimed:?}");
    assert!(reclaimed.refused[0].contains("not in the driver's memory"), "{reclaimed:?}");
}

#[test]
fn the_drivers_counts_say_how_many_frames_it_holds_but_never_more_than_its_limit() {
    let counts = TapCounts { taken: 10, sent: 6, dropped: 1 };
    assert_eq!(counts.held(512), 3);
    assert_eq!(TapCounts { taken: 1, sent: 2, dropped: 0 }.held(512), 512, "a lie reads as all");
    assert_eq!(TapCounts { taken: 3, sent: u32::MAX, dropped: 0 }.held(512), 4, "counters wrap");
}
