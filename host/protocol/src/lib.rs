// SPDX-License-Identifier: GPL-2.0
//! The host ↔ driver-process wire formats of `docs/protocol.md`.
//!
//! Every constant and struct here mirrors one in `include/understudy/protocol.h`,
//! the driver's side. [`CONSTANTS`] and [`layouts`] list them all, generated
//! with the items themselves; `tests/layout.rs` reads the header, lists its
//! `US_*` constants and `us_*` structs, and fails unless both lists hold the
//! same names with the same values, sizes and offsets (docs/protocol.md,
//! "Control messages").
//!
//! Everything a driver sends is untrusted: [`parse_driver_message`] turns raw
//! bytes into a [`DriverMessage`] or a [`ProtocolError`] that names the
//! offending value, and never panics, whatever the bytes.

use std::mem::size_of;

pub mod ethtool;
mod from_driver;
mod request;

pub use from_driver::*;
pub use request::*;

/// Declares the protocol's constants and [`CONSTANTS`] from one list, so that
/// no constant can be declared without being listed (and compared with the
/// header by `tests/layout.rs`). Each constant's C name is `US_` and its name.
macro_rules! protocol_constants {
    ($($(#[$meta:meta])* $name:ident: $ty:ty = $value:expr;)*) => {
        $($(#[$meta])* pub const $name: $ty = $value;)*

        /// Every constant of the protocol as (its C name, its value):
        /// `tests/layout.rs` fails unless `include/understudy/protocol.h`
        /// defines exactly these `US_*` names with these values.
        pub const CONSTANTS: &[(&str, u64)] = &[$((concat!("US_", stringify!($name)), $name as u64),)*];
    };
}

protocol_constants! {
    PROTOCOL_VERSION: u32 = 6;

    ARENA_SIZE: u64 = 64 << 20;
    ARENA_IOVA: u64 = 0x1000_0000;
    POOL_BUFFERS: u32 = 4096;
    BUFFER_SIZE: u32 = 2048;
    RING_SIZE: u32 = 512;
    MAX_QUEUES: usize = 8;

    RING_TX: usize = 0;
    RING_TX_DONE: usize = 1;
    RING_COUNT: usize = 2;

    CLASS_NET: u32 = 1;
    CLASS_BLOCK: u32 = 2;

    BLK_RING_SUBMIT: usize = 0;
    BLK_RING_DONE: usize = 1;
    BLK_RING_COUNT: usize = 2;
    BLK_OP_READ: u16 = 0;
    BLK_OP_WRITE: u16 = 1;
    BLK_OP_FLUSH: u16 = 2;
    BLK_OP_DISCARD: u16 = 3;
    BLK_OP_WRITE_ZEROES: u16 = 4;
    BLK_FUA: u16 = 0x0001;

    DISK_WRITE_CACHE: u32 = 0x0001;
    DISK_FUA: u32 = 0x0002;
    DISK_READ_ONLY: u32 = 0x0004;
    DISK_ROTATIONAL: u32 = 0x0008;

    TX_CSUM: u16 = 0x0001;
    TX_GSO_TCPV4: u16 = 0x0002;
    TX_GSO_TCPV6: u16 = 0x0004;
    TX_GSO_ECN: u16 = 0x0008;
    TX_DONE_DROPPED: u16 = 0x0001;
    TX_TAILROOM: u32 = 512;
    TX_MAX_FRAME: u32 = 65536 + 18;

    OFFLOAD_CSUM: u32 = 0x0001;
    OFFLOAD_TSO4: u32 = 0x0002;
    OFFLOAD_TSO6: u32 = 0x0004;
    OFFLOAD_TSO_ECN: u32 = 0x0008;
    OFFLOAD_RX_CSUM: u32 = 0x0010;
    RING_ENTRIES_OFFSET: usize = 192;
    HELD_OFFSET: usize = 192;
    PAGE_SIZE: u64 = 4096;

    /// A driver process that exits with this panicked, as a kernel would.
    EXIT_PANIC: i32 = 70;
    /// A driver process that exits with this was stopped by its gate at its
    /// checker's fatal verdict, before a device write (docs/checking.md, "The gate").
    EXIT_VERDICT: i32 = 3;

    MSG_HELLO: u16 = 1;
    MSG_PROBE: u16 = 2;
    MSG_OPEN: u16 = 3;
    MSG_STOP: u16 = 4;
    MSG_SET_MTU: u16 = 5;
    MSG_SET_MAC: u16 = 6;
    MSG_SET_RX_MODE: u16 = 7;
    MSG_SET_FEATURES: u16 = 8;
    MSG_ETHTOOL: u16 = 9;
    MSG_PING: u16 = 10;
    MSG_SPAWN: u16 = 11;
    MSG_LOAD: u16 = 12;
    MSG_SET_CHANNELS: u16 = 13;
    MSG_REPLY: u16 = 64;
    MSG_REGISTERED: u16 = 65;
    MSG_CARRIER: u16 = 66;
    MSG_LOG: u16 = 68;
    MSG_WARN: u16 = 69;
    MSG_DISK: u16 = 70;

    MSG_MAX: usize = 4096;
    MAX_MODULES: usize = 8;
    PATH_MAX: usize = 256;
    PCI_ADDR_MAX: usize = 16;
    NAME_MAX: usize = 32;
    TEXT_MAX: usize = 1024;
    MAX_MC: usize = 64;
    ETHTOOL_DATA_MAX: usize = 512;
    SERIAL_MAX: usize = 64;
    WWID_MAX: usize = 192;

    RX_MODE_PROMISC: u32 = 0x1;
    RX_MODE_ALLMULTI: u32 = 0x2;

    ETHTOOL_DRVINFO: u32 = 1;
    ETHTOOL_LINK: u32 = 2;
    ETHTOOL_STATS: u32 = 3;
    /// Statistics one `ETHTOOL_STATS` reply holds at most.
    ETHTOOL_STATS_PER_REPLY: usize =
        (ETHTOOL_DATA_MAX - size_of::<EthtoolStats>()) / size_of::<EthtoolStat>();

    /// The most data a `REPLY` carries: a whole message (`LOAD`'s text fills one).
    REPLY_DATA_MAX: usize = MSG_MAX - size_of::<MsgHeader>() - size_of::<Reply>();
}

/// The slot of the ring entry a free-running counter names; `ring_size` is
/// a power of two (`us_ring_slot`).
pub const fn ring_slot(counter: u32, ring_size: u32) -> u32 {
    counter & (ring_size - 1)
}

/// The entries published and not yet consumed, modulo 2^32: more than the
/// ring's size says the other end broke the ring (`us_ring_used`).
pub const fn ring_used(head: u32, tail: u32) -> u32 {
    head.wrapping_sub(tail)
}

/// Bytes ring `i` occupies in the rings memfd: header and entries, rounded up
/// to whole pages (`us_ring_stride`).
pub const fn ring_stride(ring_size: u32) -> u64 {
    stride_of(ring_size, size_of::<RingEntry>())
}

/// `bytes` rounded up to whole pages.
const fn whole_pages(bytes: u64) -> u64 {
    (bytes + PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}

/// A ring's header and `ring_size` entries of `entry` bytes, in whole pages.
const fn stride_of(ring_size: u32, entry: usize) -> u64 {
    whole_pages(RING_ENTRIES_OFFSET as u64 + ring_size as u64 * entry as u64)
}

/// Where the TAP's state starts in the rings memfd (`us_tap_state_offset`).
pub const fn tap_state_offset(ring_size: u32) -> u64 {
    RING_COUNT as u64 * ring_stride(ring_size)
}

/// The rings memfd's size: the rings, then the TAP's state with a held
/// frame's record per ring entry, in whole pages (`us_rings_size`).
pub const fn rings_size(ring_size: u32) -> u64 {
    tap_state_offset(ring_size) + whole_pages(HELD_OFFSET as u64 + ring_size as u64 * size_of::<Held>() as u64)
}

/// Consecutive pool buffers a block request's `len` bytes of data occupy (`us_blk_span`).
pub const fn blk_span(len: u32, buffer_size: u32) -> u32 {
    len.div_ceil(buffer_size)
}

/// Bytes one block ring occupies in a block device's rings memfd: the
/// header of [`RingHeader`], then [`BlkEntry`]s, in whole pages (`us_blk_ring_stride`).
pub const fn blk_ring_stride(ring_size: u32) -> u64 {
    stride_of(ring_size, size_of::<BlkEntry>())
}

/// A block device's rings memfd: its two rings (`us_blk_rings_size`).
pub const fn blk_rings_size(ring_size: u32) -> u64 {
    BLK_RING_COUNT as u64 * blk_ring_stride(ring_size)
}

/// Whether `n` queues (or queue pairs) fit the protocol: 1 to `MAX_QUEUES`.
pub fn check_queue_count(n: u32) -> Result<(), String> {
    if n == 0 || n as usize > MAX_QUEUES {
        return Err(format!("1 to {MAX_QUEUES} queues, not {n}"));
    }
    Ok(())
}

/// Consecutive pool buffers a `len`-byte tx frame occupies (`us_tx_span`):
/// the frame and `TX_TAILROOM` for the driver's skb_shared_info.
pub const fn tx_span(len: u32, buffer_size: u32) -> u32 {
    (len + TX_TAILROOM).div_ceil(buffer_size)
}

/// Plain old data: every bit pattern is a valid value and there is no padding
/// the compiler could leave uninitialised.
///
/// # Safety
/// Implement only for `#[repr(C, packed)]` structs of integers and byte arrays.
pub unsafe trait Wire: Copy + Sized {
    fn from_prefix(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < size_of::<Self>() {
            return None;
        }
        // SAFETY: the length is checked, Self is packed (alignment 1) POD.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<Self>()) })
    }

    fn as_bytes(&self) -> &[u8] {
        // SAFETY: Self is packed POD without padding.
        unsafe { std::slice::from_raw_parts((self as *const Self).cast::<u8>(), size_of::<Self>()) }
    }
}

/// The layout of one wire struct, what `tests/layout.rs` compares with the C
/// struct of the same name in `include/understudy/protocol.h`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructLayout {
    /// The C struct's tag (`us_ring_entry` for [`RingEntry`]).
    pub c_name: &'static str,
    pub size: usize,
    pub fields: Vec<FieldLayout>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldLayout {
    /// The C member's name: the Rust field's without the trailing `_` that
    /// keeps a keyword (`type_`) an identifier.
    pub c_name: &'static str,
    pub offset: usize,
    /// The member's size or, for a flexible array member, one element's.
    pub size: usize,
    /// A flexible array member (`entries[]`): not part of the Rust struct,
    /// its elements follow it.
    pub flexible: bool,
}

/// Declares the wire structs and [`layouts`], the list of their layouts, from
/// one place. `pub struct Rust as c_tag { fields }`: the C struct it mirrors
/// is `struct c_tag`; a last `..name: [Element]` is the C struct's flexible
/// array member, which the Rust struct leaves out.
macro_rules! wire_structs {
    ($($(#[$meta:meta])* pub struct $name:ident as $c_name:ident {
        $(pub $field:ident : $ty:ty,)*
        $(..$tail:ident : [$tail_ty:ty],)?
    })*) => {
        $(
            $(#[$meta])*
            #[repr(C, packed)]
            #[derive(Clone, Copy, Debug)]
            pub struct $name { $(pub $field: $ty,)* }
            // SAFETY: repr(C, packed), and every field an integer or a byte
            // array (tests/layout.rs holds each against protocol.h).
            unsafe impl Wire for $name {}
            impl Default for $name {
                fn default() -> Self {
                    // SAFETY: all-zero is a valid value of a Wire struct.
                    unsafe { std::mem::zeroed() }
                }
            }
        )*

        /// The layout of every wire struct: `tests/layout.rs` fails unless
        /// `include/understudy/protocol.h` defines exactly these structs with
        /// these members, sizes and offsets.
        pub fn layouts() -> Vec<StructLayout> {
            vec![$(StructLayout {
                c_name: stringify!($c_name),
                size: size_of::<$name>(),
                fields: vec![
                    $(FieldLayout {
                        c_name: stringify!($field).trim_end_matches('_'),
                        offset: std::mem::offset_of!($name, $field),
                        size: size_of::<$ty>(),
                        flexible: false,
                    },)*
                    $(FieldLayout {
                        c_name: stringify!($tail),
                        offset: size_of::<$name>(),
                        size: size_of::<$tail_ty>(),
                        flexible: true,
                    },)?
                ],
            },)*]
        }
    };
}

wire_structs! {
    pub struct RingEntry as us_ring_entry {
        pub buf: u32, pub len: u32, pub flags: u16,
        pub gso_size: u16, pub csum_start: u16, pub csum_offset: u16,
        pub queue: u16, pub reserved: u16,
    }

    /// The header of one ring; `RING_ENTRIES_OFFSET` bytes, entries follow.
    pub struct RingHeader as us_ring {
        pub head: u32, pub pad0: [u8; 60],
        pub tail: u32, pub pad1: [u8; 60],
        pub consumer_waiting: u32, pub pad2: [u8; 60],
        ..entries: [RingEntry],
    }

    /// A frame the driver read from the TAP and has not yet sent (docs/protocol.md, "Sending").
    pub struct Held as us_held {
        pub seq: u64, pub offset: u32, pub len: u32, pub flags: u16,
        pub gso_size: u16, pub csum_start: u16, pub csum_offset: u16,
        pub queue: u16, pub pad: [u8; 6],
    }

    /// The TAP's state; `HELD_OFFSET` bytes, the held frames follow.
    pub struct TapState as us_tap_state {
        pub gate: u32, pub pad0: [u8; 60],
        pub taken: u32, pub sent: u32, pub dropped: u32, pub pad_sent: u32,
        pub last_sent_ns: u64, pub pad1: [u8; 40],
        pub host_waiting: u32, pub pad2: [u8; 60],
        ..held: [Held],
    }

    pub struct MsgHeader as us_msg_header { pub type_: u16, pub flags: u16, pub seq: u32, }

    pub struct Hello as us_hello {
        pub version: u32, pub ring_size: u32, pub pool_buffers: u32, pub buffer_size: u32,
        pub arena_size: u64, pub arena_iova: u64, pub pool_size: u64, pub rings_size: u64,
        pub device_class: u32, pub reserved: u32,
    }

    pub struct Probe as us_probe {
        pub pci_address: [u8; PCI_ADDR_MAX],
        pub n_modules: u32,
        pub modules: [[u8; PATH_MAX]; MAX_MODULES],
    }

    /// A device's PCI ids (its config space), matched against the modules'
    /// PCI device tables by `LOAD`. `class` is base class << 16 | subclass << 8 | prog-if.
    pub struct PciIds as us_pci_ids {
        pub vendor: u16, pub device: u16, pub subvendor: u16, pub subdevice: u16, pub class: u32,
    }

    pub struct Load as us_load {
        pub n_modules: u32,
        pub modules: [[u8; PATH_MAX]; MAX_MODULES],
        pub ids: PciIds,
    }

    pub struct SetMtu as us_set_mtu { pub mtu: u32, }
    pub struct SetMac as us_set_mac { pub mac: [u8; 6], }
    pub struct SetRxMode as us_set_rx_mode { pub flags: u32, pub n_mc: u16, }
    pub struct SetFeatures as us_set_features { pub features: u64, }
    pub struct SetChannels as us_set_channels { pub combined: u32, }
    pub struct Ethtool as us_ethtool { pub cmd: u32, pub first: u32, }

    pub struct EthtoolDrvinfo as us_ethtool_drvinfo {
        pub driver: [u8; NAME_MAX], pub version: [u8; NAME_MAX],
        pub fw_version: [u8; NAME_MAX], pub bus_info: [u8; NAME_MAX],
    }

    pub struct EthtoolLink as us_ethtool_link { pub speed: u32, pub duplex: u8, pub autoneg: u8, pub port: u8, pub link: u8, }
    pub struct EthtoolStat as us_ethtool_stat { pub name: [u8; NAME_MAX], pub value: u64, }
    /// `n` [`EthtoolStat`]s follow.
    pub struct EthtoolStats as us_ethtool_stats { pub total: u32, pub n: u32, ..stats: [EthtoolStat], }

    pub struct Reply as us_reply { pub status: i32, pub data_len: u32, }

    pub struct Registered as us_registered {
        pub perm_addr: [u8; 6], pub dev_addr: [u8; 6],
        pub mtu: u32, pub min_mtu: u32, pub max_mtu: u32,
        pub features: u64, pub hw_features: u64,
        pub n_tx_queues: u16, pub n_rx_queues: u16,
        pub driver: [u8; NAME_MAX], pub version: [u8; NAME_MAX],
        pub offloads: u32,
    }

    /// One block request, or its completion (docs/protocol.md, "Block devices").
    pub struct BlkEntry as us_blk_entry {
        pub tag: u64, pub sector: u64, pub len: u32, pub buf: u32,
        pub op: u16, pub flags: u16, pub status: i16, pub queue: u16,
    }

    /// A block driver's disk, as applications are to see it (`DISK`).
    pub struct Disk as us_disk {
        pub capacity: u64,
        pub logical_block_size: u32, pub physical_block_size: u32,
        pub max_sectors: u32, pub max_discard_sectors: u32, pub max_write_zeroes_sectors: u32,
        pub features: u32,
        pub n_queues: u16, pub queue_depth: u16,
        pub driver: [u8; NAME_MAX], pub disk_name: [u8; NAME_MAX],
        pub serial: [u8; SERIAL_MAX], pub wwid: [u8; WWID_MAX],
    }

    pub struct Carrier as us_carrier { pub on: u8, }
    pub struct Log as us_log { pub level: u32, }
    pub struct Warn as us_warn { pub line: u32, pub file: [u8; 128], }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_stride_is_whole_pages() {
        assert_eq!(ring_stride(512), 12288);
        assert_eq!(ring_stride(128), 4096);
        assert_eq!(size_of::<RingHeader>(), RING_ENTRIES_OFFSET);
        assert_eq!(size_of::<TapState>(), HELD_OFFSET);
        assert_eq!(rings_size(512), 2 * 12288 + 20480);
    }

    #[test]
    fn block_rings_are_whole_pages() {
        assert_eq!(size_of::<BlkEntry>(), 32);
        assert_eq!(blk_ring_stride(128), 8192);
        assert_eq!(blk_rings_size(128), 16384);
        assert_eq!(blk_span(0, 4096), 0);
        assert_eq!(blk_span(4096, 4096), 1);
        assert_eq!(blk_span(4097, 4096), 2);
    }

    #[test]
    fn a_queue_count_is_1_to_max_queues() {
        assert_eq!(check_queue_count(0), Err(format!("1 to {MAX_QUEUES} queues, not 0")));
        assert!(check_queue_count(1).is_ok() && check_queue_count(MAX_QUEUES as u32).is_ok());
        assert!(check_queue_count(MAX_QUEUES as u32 + 1).is_err());
    }

    #[test]
    fn a_tx_span_leaves_the_tailroom() {
        assert_eq!(tx_span(1514, 2048), 1);
        assert_eq!(tx_span(2048 - TX_TAILROOM, 2048), 1);
        assert_eq!(tx_span(2048 - TX_TAILROOM + 1, 2048), 2);
        assert_eq!(tx_span(TX_MAX_FRAME, 2048), 33);
    }
}
