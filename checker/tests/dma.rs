// SPDX-License-Identifier: GPL-2.0
//! The DMA checker on synthetic traces.

mod common;

use common::*;
use understudy_checker::trace::*;

const B: u64 = ARENA + 0x1000;
const TO_DEVICE: u16 = 1;
const FROM_DEVICE: u16 = 2;
const BIDIRECTIONAL: u16 = 0;

fn sync_cpu(cpu: u64, size: u64) -> TraceEvent {
    ev(EV_DMA_SYNC_CPU, CALLER, dma_of(cpu), size, 0)
}

fn sync_device(cpu: u64, size: u64) -> TraceEvent {
    ev(EV_DMA_SYNC_DEVICE, CALLER, dma_of(cpu), size, 0)
}

#[test]
fn a_correct_map_sync_unmap_cycle_is_clean() {
    let o = check(&[
        alloc(B, 2048),
        dma_map(B, 2048, FROM_DEVICE),
        sync_cpu(B, 64), access(READ8, B + 8),
        sync_device(B, 64),
        dma_unmap(B, 2048, FROM_DEVICE), access(READ8, B + 1000), access(WRITE8, B),
        ev(EV_FILL, CALLER, B, 0, 2048),
        dma_map(B, 2048, TO_DEVICE), access(READ8, B + 8), dma_unmap(B, 2048, TO_DEVICE),
        ev(EV_DMA_ALLOC, CALLER, ARENA + 0x10000, 4096, IOVA + 0x10000), access(WRITE8, ARENA + 0x10000),
        ev(EV_DMA_FREE, CALLER, ARENA + 0x10000, 4096, 0),
        ev(EV_STOP, 0, 0, 0, 0),
    ]);
    assert_eq!(o.kinds(), Vec::<&str>::new(), "{:#?}", o.findings);
    assert_eq!(o.verdict_at, 0);
}

#[test]
fn a_cpu_write_to_a_buffer_the_device_owns_is_fatal() {
    let o = check(&[dma_map(B, 2048, TO_DEVICE), access(READ4, B), access(WRITE4, B + 16)]);
    let f = o.only("device-owned-write");
    assert_eq!(f["other"]["mapping"]["direction"], "to-device");
    assert_eq!(f["other"]["mapping"]["dma"], format!("{:#x}", dma_of(B)));
    assert_eq!((o.approved, o.verdict_at), (2, 3));
}

#[test]
fn reads_count_when_the_device_writes_and_syncs_give_back_only_their_range() {
    let o = check(&[dma_map(B, 2048, FROM_DEVICE), access(READ4, B)]);
    assert_eq!(o.only("device-owned-read")["fatal"], false);

    // Synced for the CPU: bytes 0..64 are the CPU's, 64.. still the device's;
    // synced back for the device, 0..64 are the device's again.
    let o = check(&[dma_map(B, 2048, BIDIRECTIONAL), sync_cpu(B, 64), access(READ8, B + 56), access(READ4, B + 64),
                    sync_device(B, 64), access(READ8, B)]);
    assert_eq!(o.kinds(), ["device-owned-read", "device-owned-read"]);
    assert_eq!((o.findings[0]["event"].as_u64(), o.findings[1]["event"].as_u64()), (Some(3), Some(5)));
}

#[test]
fn memcpy_into_a_mapped_buffer_is_a_write() {
    let o = check(&[alloc(HEAP, 64), ev(EV_FILL, CALLER, HEAP, 0, 64), dma_map(B, 2048, FROM_DEVICE),
                    ev(EV_COPY, OTHER_CALLER, B, HEAP, 64)]);
    assert_eq!(o.only("device-owned-write")["site"]["address"], format!("{OTHER_CALLER:#x}"));
}

#[test]
fn repeated_map_and_unmap_and_unmap_of_the_never_mapped() {
    let o = check(&[dma_map(B, 2048, TO_DEVICE), dma_map(B + 1024, 2048, TO_DEVICE)]);
    assert_eq!(o.only("repeated-map")["other"]["mapping"]["event"], 0);

    let o = check(&[dma_map(B, 2048, TO_DEVICE), dma_unmap(B, 2048, TO_DEVICE), dma_unmap(B, 2048, TO_DEVICE)]);
    assert_eq!(o.only("repeated-unmap")["other"]["unmap"]["event"], 1);
    assert_eq!(o.verdict_at, 0);

    let o = check(&[dma_unmap(B, 2048, TO_DEVICE)]);
    let f = o.only("unmap-never-mapped");
    assert_eq!(f["other"]["cpu"], format!("{B:#x}"));
    assert_eq!((f["fatal"].as_bool(), o.verdict_at), (Some(true), 1));

    // An address inside a mapping is not the mapping.
    let o = check(&[dma_map(B, 2048, TO_DEVICE), dma_unmap(B + 64, 64, TO_DEVICE)]);
    assert_eq!(o.only("unmap-never-mapped")["other"]["inside"]["event"], 0);
}

#[test]
fn an_unmap_must_repeat_the_maps_size_and_direction() {
    let o = check(&[dma_map(B, 2048, TO_DEVICE), dma_unmap(B, 1024, TO_DEVICE)]);
    assert_eq!(o.only("unmap-size-mismatch")["other"]["unmap_size"], 1024);
    let o = check(&[dma_map(B, 2048, TO_DEVICE), dma_unmap(B, 2048, FROM_DEVICE)]);
    assert_eq!(o.only("unmap-direction-mismatch")["other"]["unmap_direction"], "from-device");
    let o = check(&[dma_map(B, 2048, 3)]);
    assert_eq!(o.only("invalid-direction")["other"]["mapping"]["direction"], "none");
}

#[test]
fn syncs_of_what_is_not_mapped() {
    let o = check(&[sync_cpu(B, 64), sync_device(B, 64)]);
    assert_eq!(o.only("sync-not-mapped")["count"], 1);
    assert_eq!(o.summary[0]["count"], 2);
}

#[test]
fn what_is_mapped_or_allocated_at_detach_has_leaked() {
    let o = check(&[dma_map(B, 2048, TO_DEVICE), dma_map(B + 4096, 2048, TO_DEVICE),
                    ev(EV_DMA_ALLOC, OTHER_CALLER, ARENA + 0x10000, 4096, IOVA + 0x10000),
                    ev(EV_STOP, 0, 0, STOP_DETACH, 0),
                    // After STOP the driver starts afresh.
                    dma_map(B, 2048, TO_DEVICE), dma_unmap(B, 2048, TO_DEVICE)]);
    assert_eq!(o.kinds(), ["mapping-leak", "coherent-leak"]);
    assert_eq!(o.summary[0]["count"], 2, "two leaks of one map site");
    assert_eq!(o.findings[0]["event"], 3);
    assert_eq!(o.findings[1]["other"]["coherent"]["size"], 4096);
}

#[test]
fn a_close_leaves_the_probes_coherent_rings_to_the_detach() {
    let ring = ev(EV_DMA_ALLOC, OTHER_CALLER, ARENA + 0x10000, 4096, IOVA + 0x10000);
    let o = check(&[ring, dma_map(B, 2048, TO_DEVICE), ev(EV_STOP, 0, 0, STOP_CLOSE, 0),
                    // opened again: the ring is still the driver's, and coherent
                    access(WRITE8, ARENA + 0x10000),
                    ev(EV_DMA_FREE, CALLER, ARENA + 0x10000, 4096, 0), ev(EV_STOP, 0, 0, STOP_DETACH, 0)]);
    assert_eq!(o.kinds(), ["mapping-leak"], "{:#?}", o.findings);
    let o = check(&[ring, ev(EV_STOP, 0, 0, STOP_CLOSE, 0), ev(EV_STOP, 0, 0, STOP_DETACH, 0)]);
    assert_eq!(o.kinds(), ["coherent-leak"], "{:#?}", o.findings);
}

#[test]
fn a_stop_of_an_unknown_kind_breaks_the_contract() {
    let o = check(&[ev(EV_STOP, 0, 0, 7, 0)]);
    assert!(o.error.is_some());
}

#[test]
fn a_coherent_free_must_match_an_allocation() {
    let o = check(&[ev(EV_DMA_ALLOC, CALLER, ARENA, 4096, IOVA), ev(EV_DMA_FREE, CALLER, ARENA, 2048, 0),
                    ev(EV_DMA_FREE, CALLER, ARENA, 4096, 0)]);
    assert_eq!(o.only("invalid-coherent-free")["other"]["allocation"]["size"], 4096);
    assert_eq!(o.summary[0]["count"], 2);
}

#[test]
fn a_buffer_sharing_a_cache_line_with_other_data_is_misaligned() {
    // skb-like: the mapping starts 2 bytes into a line whose first bytes are
    // the same block's headroom, and ends mid-line before more of it.
    let o = check(&[alloc(B, 2048), dma_map(B + 66, 1514, FROM_DEVICE)]);
    let f = o.only("misaligned-buffer");
    assert_eq!((f["other"]["shares_line_before"].as_u64(), f["other"]["shares_line_after"].as_u64()),
               (Some(2), Some(1600 - 1580)));
    // Whole lines, or partial lines whose other bytes are nobody's: clean.
    assert_eq!(check(&[alloc(B, 2048), dma_map(B, 2048, FROM_DEVICE)]).kinds(), Vec::<&str>::new());
    assert_eq!(check(&[dma_map(B + 2, 100, FROM_DEVICE)]).kinds(), Vec::<&str>::new());
    // Two mappings in one line.
    let o = check(&[dma_map(B, 32, TO_DEVICE), dma_map(B + 32, 32, TO_DEVICE)]);
    assert_eq!(o.only("misaligned-buffer")["other"]["shares_line_before"], 32);
}
