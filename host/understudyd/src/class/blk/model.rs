// SPDX-License-Identifier: GPL-2.0
//! A model of a disk with a volatile write cache, for the block class's
//! tests (a fake device: the real ones run in tests/daemon), and the
//! requests the kernel's NBD client sends. It serves what the block rings
//! carry as a device with a cache does: writes land in the cache, a flush
//! makes them stable, a reset (the driver's death) drops what is not.

use std::collections::BTreeMap;

use understudy_nbd::{Command, Incoming, NbdRequest};
use understudy_protocol::{BlkEntry, DiskInfo, BLK_FUA, BLK_OP_DISCARD, BLK_OP_FLUSH, BLK_OP_READ, BLK_OP_WRITE};
use understudy_shm::block_driver::BlockDriver;
use understudy_shm::{BlockMemory, Geometry};

use super::datapath::{Channel, Datapath};
use super::log::DiskLog;

pub const SLOT: u32 = 16384;
/// Four requests in flight of at most one 16 KiB slot each.
pub const GEOMETRY: Geometry =
    Geometry { arena_size: 1 << 20, arena_iova: 0x1000_0000, pool_buffers: 16, buffer_size: 4096, ring_size: 4 };
pub const SECTORS: u64 = 2048;

pub fn disk(features: u32) -> DiskInfo {
    DiskInfo {
        capacity: SECTORS,
        logical_block_size: 512,
        physical_block_size: 512,
        max_sectors: 2560,
        max_discard_sectors: 1 << 16,
        features,
        n_queues: 2,
        queue_depth: 4,
        driver: "virtio_blk".into(),
        disk_name: "vda".into(),
        serial: "model".into(),
        ..Default::default()
    }
}

pub fn datapath(features: u32) -> (Datapath, BlockDriver) {
    let mem = BlockMemory::create(GEOMETRY, SLOT).unwrap();
    let driver = BlockDriver::attach(&mem);
    (Datapath::new(Channel::new(mem).unwrap(), DiskLog::new(disk(features), SLOT), "test".into()), driver)
}

/// The disk, byte by byte: what is stable, and what only its cache holds.
#[derive(Default)]
pub struct Model {
    pub stable: BTreeMap<u64, u8>,
    pub cache: BTreeMap<u64, u8>,
    /// The requests the device saw, as (op, sector, len, queue).
    pub seen: Vec<(u16, u64, u32, u16)>,
}

impl Model {
    pub fn byte(&self, at: u64) -> u8 {
        self.cache.get(&at).or(self.stable.get(&at)).copied().unwrap_or(0)
    }

    pub fn bytes(&self, offset: u64, len: usize) -> Vec<u8> {
        (0..len as u64).map(|i| self.byte(offset + i)).collect()
    }

    /// Serves one request as a device with a cache does.
    pub fn serve(&mut self, driver: &BlockDriver, e: BlkEntry) -> BlkEntry {
        let (op, sector, len, flags, queue) = (e.op, e.sector, e.len, e.flags, e.queue);
        self.seen.push((op, sector, len, queue));
        let offset = sector * 512;
        match op {
            BLK_OP_READ => driver.fill(&e, &self.bytes(offset, len as usize)),
            BLK_OP_WRITE => {
                let target = if flags & BLK_FUA != 0 { &mut self.stable } else { &mut self.cache };
                for (i, b) in driver.data(&e).into_iter().enumerate() {
                    target.insert(offset + i as u64, b);
                }
            }
            BLK_OP_DISCARD => {
                for i in 0..len as u64 {
                    self.cache.insert(offset + i, 0);
                }
            }
            BLK_OP_FLUSH => {
                let cache = std::mem::take(&mut self.cache);
                self.stable.extend(cache);
            }
            other => panic!("op {other}"),
        }
        e
    }

    /// Serves everything the driver has been given, in order.
    pub fn serve_all(&mut self, driver: &BlockDriver, dp: &mut Datapath) {
        while let Some(e) = driver.take() {
            let done = self.serve(driver, e);
            driver.complete(done);
            dp.complete().unwrap();
        }
    }

    pub fn reset(&mut self) {
        self.cache.clear();
    }
}

pub fn request(command: Command, handle: u8, offset: u64, len: u32, data: Vec<u8>) -> Incoming {
    Incoming { request: NbdRequest { command, handle: [handle; 8], offset, len }, data }
}

pub fn write(handle: u8, offset: u64, data: Vec<u8>) -> Incoming {
    request(Command::Write { fua: false }, handle, offset, data.len() as u32, data)
}

pub fn read(handle: u8, offset: u64, len: u32) -> Incoming {
    request(Command::Read, handle, offset, len, Vec::new())
}

pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_mul(31).wrapping_add(i as u8 ^ (i >> 8) as u8)).collect()
}
