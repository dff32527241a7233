// SPDX-License-Identifier: GPL-2.0
//! The block shadow's passive log: the disk as its first driver reported
//! it (DISK), which is what the kernel was told when the NBD device was
//! connected and what every successor must be again.
//!
//! The kernel reads a disk's size, block size and abilities once, when
//! the device is connected, and file systems on it rely on them from then
//! on; nbd cannot be told that a disk shrank or stopped taking discards.
//! So a successor is the same disk or none: the same capacity and logical
//! block size everywhere, the same identity (the serial or WWID the driver
//! read from the device) on the same device, nothing the export promised
//! missing. A disk has no configuration the admin sets through the
//! driver, so nothing is replayed.

use understudy_api::DeviceClass;
use understudy_protocol::{DiskInfo, Request, DISK_FUA, DISK_READ_ONLY, DISK_ROTATIONAL, DISK_WRITE_CACHE};

use crate::class::{Log, Offering, Place};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskLog {
    pub disk: DiskInfo,
    /// The most bytes of one request to the driver: the front-end cuts the
    /// kernel's requests into pieces of at most this (a data slot, or less
    /// if the first driver took less), and a successor must take them.
    pub piece_max: u32,
}

impl DiskLog {
    pub fn new(disk: DiskInfo, slot_bytes: u32) -> DiskLog {
        let piece_max = slot_bytes.min(disk.max_sectors.saturating_mul(512));
        DiskLog { disk, piece_max }
    }

    /// Whether the export takes discards (NBD's TRIM): it does if the first
    /// driver did, for as long as it is connected.
    pub fn discards(&self) -> bool {
        self.disk.max_discard_sectors > 0
    }

    pub fn size_bytes(&self) -> u64 {
        self.disk.capacity << 9
    }
}

/// Features every path to the disk must have for the front-end to promise them.
const SHARED_ONLY: u32 = DISK_FUA;
/// Features any one path having makes the front-end treat the disk as having.
const ANY_PATH: u32 = DISK_WRITE_CACHE | DISK_READ_ONLY | DISK_ROTATIONAL;

impl Offering for DiskInfo {
    /// A disk reached through several devices is shown as the least of
    /// them: the smallest requests, and a volatile cache (so flushes are
    /// sent) or read-only if any has it.
    fn narrow(&self, common: Option<&Self>) -> Self {
        let Some(c) = common else { return self.clone() };
        DiskInfo {
            max_sectors: c.max_sectors.min(self.max_sectors),
            max_discard_sectors: c.max_discard_sectors.min(self.max_discard_sectors),
            max_write_zeroes_sectors: c.max_write_zeroes_sectors.min(self.max_write_zeroes_sectors),
            features: (c.features & self.features & SHARED_ONLY) | ((c.features | self.features) & ANY_PATH),
            n_queues: c.n_queues.min(self.n_queues),
            queue_depth: c.queue_depth.min(self.queue_depth),
            ..c.clone()
        }
    }

    /// The common limits, with this driver's own identity and names.
    fn within(self, common: &Self) -> Self {
        common.narrow(Some(&self))
    }

    fn feature_names(&self) -> Vec<String> {
        [(DISK_WRITE_CACHE, "write-cache"), (DISK_FUA, "fua"), (DISK_READ_ONLY, "read-only"), (DISK_ROTATIONAL, "rotational")]
            .into_iter().filter(|&(f, _)| self.has(f)).map(|(_, n)| n.to_string())
            .chain((self.max_discard_sectors > 0).then(|| "discard".to_string()))
            .chain((self.max_write_zeroes_sectors > 0).then(|| "write-zeroes".to_string()))
            .collect()
    }

    fn describe(&self) -> String {
        format!("{} registered its disk {}: {} sectors ({} MiB), logical blocks of {} bytes, at most {} KiB a request, \
                 {} queue(s) of {}, features {}",
                self.driver, self.disk_name, self.capacity, self.capacity >> 11, self.logical_block_size,
                self.max_sectors / 2, self.n_queues, self.queue_depth, self.feature_names().join(", "))
    }
}

impl Log for DiskLog {
    const CLASS: DeviceClass = DeviceClass::Block;
    const REGISTERS: &'static str = "disk";
    type Offer = DiskInfo;

    /// Why a successor that reported `fresh` is not this disk, if it is
    /// not. A smaller queue count is no reason: pieces go to the queues the
    /// successor has. Losing FUA or the volatile cache is none either: the
    /// front-end writes through a flush where FUA is missing and keeps
    /// acknowledged writes wherever there is a cache.
    fn incompatibility(&self, fresh: &DiskInfo, place: Place) -> Option<String> {
        let old = &self.disk;
        if fresh.capacity != old.capacity {
            return Some(format!("it reports {} sectors, the disk has {}", fresh.capacity, old.capacity));
        }
        if fresh.logical_block_size != old.logical_block_size {
            return Some(format!("its blocks are {} bytes, the disk's {}", fresh.logical_block_size, old.logical_block_size));
        }
        if matches!(place, Place::SameDevice { .. }) && (fresh.serial != old.serial || fresh.wwid != old.wwid) {
            return Some(format!("it reads the identity serial {:?}, WWID {:?} from the device, its predecessor serial {:?}, \
                                 WWID {:?}", fresh.serial, fresh.wwid, old.serial, old.wwid));
        }
        if fresh.has(DISK_READ_ONLY) && !old.has(DISK_READ_ONLY) {
            return Some("it reports the disk read-only, and the disk was writable".into());
        }
        if (fresh.max_sectors as u64) << 9 < self.piece_max as u64 {
            return Some(format!("it takes at most {} bytes in one request, and the disk's requests are cut at {}",
                                (fresh.max_sectors as u64) << 9, self.piece_max));
        }
        if self.discards() && fresh.max_discard_sectors == 0 {
            return Some("it does not discard, and the disk was connected with discards".into());
        }
        None
    }

    fn replay(&self, _fresh: &DiskInfo) -> Vec<Request> {
        Vec::new()
    }

    /// A disk serves as soon as it is reported.
    fn waits_for_ready(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use understudy_protocol::{DISK_FUA, DISK_WRITE_CACHE};

    use super::*;

    fn disk() -> DiskInfo {
        DiskInfo {
            capacity: 1 << 15,
            logical_block_size: 512,
            physical_block_size: 4096,
            max_sectors: 2560,
            max_discard_sectors: 1 << 16,
            features: DISK_WRITE_CACHE | DISK_FUA,
            n_queues: 2,
            queue_depth: 128,
            driver: "virtio_blk".into(),
            disk_name: "vda".into(),
            serial: "understudy-disk0".into(),
            ..Default::default()
        }
    }

    const RESTART: Place = Place::SameDevice { allow_feature_loss: false };

    #[test]
    fn the_same_disk_with_fewer_queues_and_no_cache_takes_its_place() {
        let log = DiskLog::new(disk(), 128 << 10);
        assert_eq!(log.piece_max, 128 << 10);
        let fresh = DiskInfo { n_queues: 1, features: 0, ..disk() };
        assert_eq!(log.incompatibility(&fresh, RESTART), None);
        assert!(log.replay(&fresh).is_empty() && !log.waits_for_ready());
    }

    #[test]
    fn another_size_block_size_identity_or_lost_promise_is_another_disk() {
        let log = DiskLog::new(disk(), 128 << 10);
        let why = |fresh: DiskInfo, place| log.incompatibility(&fresh, place).unwrap_or_default();
        assert!(why(DiskInfo { capacity: 1 << 14, ..disk() }, RESTART).contains("sectors"));
        assert!(why(DiskInfo { logical_block_size: 4096, ..disk() }, RESTART).contains("blocks are 4096"));
        assert!(why(DiskInfo { serial: "another".into(), ..disk() }, RESTART).contains("identity"));
        assert!(why(DiskInfo { features: DISK_READ_ONLY, ..disk() }, RESTART).contains("read-only"));
        assert!(why(DiskInfo { max_sectors: 64, ..disk() }, RESTART).contains("cut at 131072"));
        assert!(why(DiskInfo { max_discard_sectors: 0, ..disk() }, RESTART).contains("discard"));
        // Another device (a move) has an identity of its own: the data must be the same, not the serial.
        assert_eq!(log.incompatibility(&DiskInfo { serial: "another".into(), ..disk() }, Place::OtherDevice), None);
    }

    #[test]
    fn a_driver_that_takes_less_than_a_slot_cuts_the_disks_requests() {
        let log = DiskLog::new(DiskInfo { max_sectors: 64, ..disk() }, 128 << 10);
        assert_eq!(log.piece_max, 32 << 10);
        assert_eq!(log.incompatibility(&DiskInfo { max_sectors: 64, ..disk() }, RESTART), None);
    }
}
