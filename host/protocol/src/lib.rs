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
    PROTOCOL_VERSION: u32 = 5;

    ARENA_SIZE: u64 = 64 << 20;
    ARENA_IOVA: u64 = 0x1000_0000;
    POOL_BUFFERS: u32 = 4096;
    BUFFER_SIZE: u32 = 2048;
    RING_SIZE: u32 = 512;
    MAX_QUEUES: usize = 8;

    RING_TX: usize = 0;
    RING_TX_DONE: usize = 1;
    RING_COUNT: usize = 2;

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

    MSG_MAX: usize = 4096;
    MAX_MODULES: usize = 8;
    PATH_MAX: usize = 256;
    PCI_ADDR_MAX: usize = 16;
    NAME_MAX: usize = 32;
    TEXT_MAX: usize = 1024;
    MAX_MC: usize = 64;
    ETHTOOL_DATA_MAX: usize = 512;

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

/// Bytes ring `i` occupies in the rings memfd: header and entries, rounded up
/// to whole pages (`us_ring_stride`).
pub const fn ring_stride(ring_size: u32) -> u64 {
    let bytes = RING_ENTRIES_OFFSET as u64 + ring_size as u64 * size_of::<RingEntry>() as u64;
    (bytes + PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}

/// Where the TAP's state starts in the rings memfd (`us_tap_state_offset`).
pub const fn tap_state_offset(ring_size: u32) -> u64 {
    RING_COUNT as u64 * ring_stride(ring_size)
}

/// The rings memfd's size: the rings, then the TAP's state with a held
/// frame's record per ring entry, in whole pages (`us_rings_size`).
pub const fn rings_size(ring_size: u32) -> u64 {
    let bytes = HELD_OFFSET as u64 + ring_size as u64 * size_of::<Held>() as u64;
    tap_state_offset(ring_size) + ((bytes + PAGE_SIZE - 1) & !(PAGE_SIZE - 1))
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

    pub struct Carrier as us_carrier { pub on: u8, }
    pub struct Log as us_log { pub level: u32, }
    pub struct Warn as us_warn { pub line: u32, pub file: [u8; 128], }
}

/// Why a driver's message was refused. Each one ends that driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("message of {0} bytes is shorter than its 8-byte header")]
    TooShort(usize),
    #[error("message of {0} bytes is longer than the protocol's {MSG_MAX}")]
    TooLong(usize),
    #[error("unknown message type {0}")]
    UnknownType(u16),
    #[error("message type {0} is a host request; a driver may not send it")]
    NotFromDriver(u16),
    #[error("reserved header flags {0:#x} are set")]
    ReservedFlags(u16),
    #[error("message type {type_} has {len} bytes, expected {expected}")]
    WrongSize { type_: u16, len: usize, expected: usize },
    #[error("{field} = {value} is out of range")]
    OutOfRange { field: &'static str, value: u64 },
    #[error("{0} is not NUL-terminated")]
    Unterminated(&'static str),
}

/// A validated message from a driver process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverMessage {
    Reply { seq: u32, status: i32, data: Vec<u8> },
    Registered(RegisteredInfo),
    Carrier(bool),
    Log { level: u32, text: String },
    Warn { file: String, line: u32, text: String },
}

/// `REGISTERED` after validation: strings are printable, MTUs consistent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredInfo {
    pub perm_addr: [u8; 6],
    pub dev_addr: [u8; 6],
    pub mtu: u32,
    pub min_mtu: u32,
    pub max_mtu: u32,
    pub features: u64,
    pub hw_features: u64,
    pub n_tx_queues: u16,
    pub n_rx_queues: u16,
    pub driver: String,
    pub version: String,
    /// `OFFLOAD_*`: which tx offloads the host may pass on to this driver.
    pub offloads: u32,
}

/// Text from a driver made safe for a log line: control characters and
/// invalid UTF-8 are escaped, so a driver cannot forge log lines.
pub fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).chars().flat_map(char::escape_debug).collect()
}

/// A NUL-terminated string from a fixed-size field.
pub fn c_string(field: &'static str, bytes: &[u8]) -> Result<String, ProtocolError> {
    let end = bytes.iter().position(|&b| b == 0).ok_or(ProtocolError::Unterminated(field))?;
    Ok(printable(&bytes[..end]))
}

fn exact<T: Wire>(type_: u16, body: &[u8]) -> Result<T, ProtocolError> {
    if body.len() != size_of::<T>() {
        return Err(ProtocolError::WrongSize {
            type_,
            len: body.len() + size_of::<MsgHeader>(),
            expected: size_of::<T>() + size_of::<MsgHeader>(),
        });
    }
    Ok(T::from_prefix(body).expect("length checked"))
}

/// A fixed part followed by at most `max_tail` bytes.
fn with_tail<T: Wire>(type_: u16, body: &[u8], max_tail: usize) -> Result<(T, &[u8]), ProtocolError> {
    let fixed = size_of::<T>();
    if body.len() < fixed || body.len() - fixed > max_tail {
        return Err(ProtocolError::WrongSize {
            type_,
            len: body.len() + size_of::<MsgHeader>(),
            expected: fixed + size_of::<MsgHeader>(),
        });
    }
    Ok((T::from_prefix(body).expect("length checked"), &body[fixed..]))
}

fn boolean(field: &'static str, value: u8) -> Result<bool, ProtocolError> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(ProtocolError::OutOfRange { field, value: v.into() }),
    }
}

/// Validates one message received from a driver process.
pub fn parse_driver_message(msg: &[u8]) -> Result<DriverMessage, ProtocolError> {
    if msg.len() > MSG_MAX {
        return Err(ProtocolError::TooLong(msg.len()));
    }
    let header = MsgHeader::from_prefix(msg).ok_or(ProtocolError::TooShort(msg.len()))?;
    let body = &msg[size_of::<MsgHeader>()..];
    let type_ = header.type_;
    if header.flags != 0 {
        return Err(ProtocolError::ReservedFlags(header.flags));
    }
    match type_ {
        MSG_REPLY => {
            let (reply, data) = with_tail::<Reply>(type_, body, REPLY_DATA_MAX)?;
            if reply.data_len as usize != data.len() {
                return Err(ProtocolError::OutOfRange { field: "reply.data_len", value: reply.data_len.into() });
            }
            // A status is 0 or a negative errno; anything else is a confused driver.
            if reply.status > 0 || reply.status < -4095 {
                return Err(ProtocolError::OutOfRange { field: "reply.status", value: reply.status as i64 as u64 });
            }
            Ok(DriverMessage::Reply { seq: header.seq, status: reply.status, data: data.to_vec() })
        }
        MSG_REGISTERED => {
            let r: Registered = exact(type_, body)?;
            let (mtu, min_mtu, max_mtu) = (r.mtu, r.min_mtu, r.max_mtu);
            if min_mtu > max_mtu || mtu < min_mtu || mtu > max_mtu || max_mtu > 65535 {
                return Err(ProtocolError::OutOfRange { field: "registered.mtu", value: mtu.into() });
            }
            let known = OFFLOAD_CSUM | OFFLOAD_TSO4 | OFFLOAD_TSO6 | OFFLOAD_TSO_ECN | OFFLOAD_RX_CSUM;
            if r.offloads & !known != 0 {
                return Err(ProtocolError::OutOfRange { field: "registered.offloads", value: r.offloads.into() });
            }
            if r.n_tx_queues == 0 || r.n_rx_queues == 0 {
                return Err(ProtocolError::OutOfRange { field: "registered.n_queues", value: 0 });
            }
            Ok(DriverMessage::Registered(RegisteredInfo {
                perm_addr: r.perm_addr,
                dev_addr: r.dev_addr,
                mtu,
                min_mtu,
                max_mtu,
                features: r.features,
                hw_features: r.hw_features,
                n_tx_queues: r.n_tx_queues,
                n_rx_queues: r.n_rx_queues,
                driver: c_string("registered.driver", &r.driver)?,
                version: c_string("registered.version", &r.version)?,
                offloads: r.offloads,
            }))
        }
        MSG_CARRIER => Ok(DriverMessage::Carrier(boolean("carrier.on", exact::<Carrier>(type_, body)?.on)?)),
        MSG_LOG => {
            let (log, text) = with_tail::<Log>(type_, body, TEXT_MAX)?;
            if log.level > 7 {
                return Err(ProtocolError::OutOfRange { field: "log.level", value: log.level.into() });
            }
            Ok(DriverMessage::Log { level: log.level, text: printable(text) })
        }
        MSG_WARN => {
            let (warn, text) = with_tail::<Warn>(type_, body, TEXT_MAX)?;
            Ok(DriverMessage::Warn { file: c_string("warn.file", &warn.file)?, line: warn.line, text: printable(text) })
        }
        MSG_HELLO..=MSG_SET_CHANNELS => Err(ProtocolError::NotFromDriver(type_)),
        other => Err(ProtocolError::UnknownType(other)),
    }
}

/// A request the host sends; each is answered by a `REPLY` with its `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Hello(Hello),
    Probe { pci_address: String, modules: Vec<String> },
    Open,
    Stop,
    SetMtu(u32),
    SetMac([u8; 6]),
    SetRxMode { flags: u32, multicast: Vec<[u8; 6]> },
    SetFeatures(u64),
    /// `ethtool -L combined N`: the queue pairs the driver runs, 1 to `MAX_QUEUES`.
    SetChannels(u32),
    /// An `ETHTOOL_*` command; `first` is the first statistic wanted (0 otherwise).
    Ethtool { cmd: u32, first: u32 },
    Ping,
    /// To a post-probe template: fork a driver process. Its control socket
    /// travels with the message (SCM_RIGHTS); the reply's data is its pid.
    Spawn,
    /// Before `HELLO`: load and check `modules` (dependencies first) for the
    /// device `ids`, running nothing. The reply's data is UTF-8 text: the
    /// kernel half used, or every reason for a refusal, one per line.
    Load { modules: Vec<String>, ids: PciIds },
}

impl PartialEq for PciIds {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}
impl Eq for PciIds {}

impl PartialEq for Hello {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}
impl Eq for Hello {}

/// Copies `s` into a fixed NUL-terminated field; `None` if it does not fit.
fn fill_c_string(dst: &mut [u8], s: &str) -> Option<()> {
    let b = s.as_bytes();
    if b.len() >= dst.len() || b.contains(&0) {
        return None;
    }
    dst[..b.len()].copy_from_slice(b);
    Some(())
}

/// `PROBE`'s and `LOAD`'s module list: 1 to `MAX_MODULES` paths; returns how many.
fn fill_modules(slots: &mut [[u8; PATH_MAX]; MAX_MODULES], modules: &[String]) -> Result<u32, EncodeError> {
    if modules.is_empty() || modules.len() > MAX_MODULES {
        return Err(EncodeError(format!("1 to {MAX_MODULES} modules, not {}", modules.len())));
    }
    for (slot, path) in slots.iter_mut().zip(modules) {
        fill_c_string(slot, path)
            .ok_or_else(|| EncodeError(format!("module path {path:?} is longer than {} bytes", PATH_MAX - 1)))?;
    }
    Ok(modules.len() as u32)
}

/// A request that cannot be expressed on the wire (the host's own input check).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EncodeError(pub String);

impl Request {
    pub fn type_(&self) -> u16 {
        match self {
            Request::Hello(_) => MSG_HELLO,
            Request::Probe { .. } => MSG_PROBE,
            Request::Open => MSG_OPEN,
            Request::Stop => MSG_STOP,
            Request::SetMtu(_) => MSG_SET_MTU,
            Request::SetMac(_) => MSG_SET_MAC,
            Request::SetRxMode { .. } => MSG_SET_RX_MODE,
            Request::SetFeatures(_) => MSG_SET_FEATURES,
            Request::SetChannels(_) => MSG_SET_CHANNELS,
            Request::Ethtool { .. } => MSG_ETHTOOL,
            Request::Ping => MSG_PING,
            Request::Spawn => MSG_SPAWN,
            Request::Load { .. } => MSG_LOAD,
        }
    }

    /// The message type's name in docs/protocol.md, for log lines.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Hello(_) => "HELLO",
            Request::Probe { .. } => "PROBE",
            Request::Open => "OPEN",
            Request::Stop => "STOP",
            Request::SetMtu(_) => "SET_MTU",
            Request::SetMac(_) => "SET_MAC",
            Request::SetRxMode { .. } => "SET_RX_MODE",
            Request::SetFeatures(_) => "SET_FEATURES",
            Request::SetChannels(_) => "SET_CHANNELS",
            Request::Ethtool { .. } => "ETHTOOL",
            Request::Ping => "PING",
            Request::Spawn => "SPAWN",
            Request::Load { .. } => "LOAD",
        }
    }

    pub fn encode(&self, seq: u32) -> Result<Vec<u8>, EncodeError> {
        let mut out = MsgHeader { type_: self.type_(), flags: 0, seq }.as_bytes().to_vec();
        match self {
            Request::Hello(h) => out.extend_from_slice(h.as_bytes()),
            Request::Probe { pci_address, modules } => {
                let mut p = Probe::default();
                p.n_modules = fill_modules(&mut p.modules, modules)?;
                fill_c_string(&mut p.pci_address, pci_address)
                    .ok_or_else(|| EncodeError(format!("PCI address {pci_address:?} is too long")))?;
                out.extend_from_slice(p.as_bytes());
            }
            Request::Load { modules, ids } => {
                let mut l = Load { ids: *ids, ..Default::default() };
                l.n_modules = fill_modules(&mut l.modules, modules)?;
                out.extend_from_slice(l.as_bytes());
            }
            Request::Open | Request::Stop | Request::Ping | Request::Spawn => {}
            Request::SetMtu(mtu) => out.extend_from_slice(SetMtu { mtu: *mtu }.as_bytes()),
            Request::SetMac(mac) => out.extend_from_slice(SetMac { mac: *mac }.as_bytes()),
            Request::SetRxMode { flags, multicast } => {
                if multicast.len() > MAX_MC {
                    return Err(EncodeError(format!("{} multicast addresses, at most {MAX_MC}", multicast.len())));
                }
                out.extend_from_slice(SetRxMode { flags: *flags, n_mc: multicast.len() as u16 }.as_bytes());
                multicast.iter().for_each(|mac| out.extend_from_slice(mac));
            }
            Request::SetFeatures(f) => out.extend_from_slice(SetFeatures { features: *f }.as_bytes()),
            Request::SetChannels(n) => {
                if *n == 0 || *n as usize > MAX_QUEUES {
                    return Err(EncodeError(format!("1 to {MAX_QUEUES} channels, not {n}")));
                }
                out.extend_from_slice(SetChannels { combined: *n }.as_bytes());
            }
            Request::Ethtool { cmd, first } => out.extend_from_slice(Ethtool { cmd: *cmd, first: *first }.as_bytes()),
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(type_: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut m = MsgHeader { type_, flags: 0, seq }.as_bytes().to_vec();
        m.extend_from_slice(body);
        m
    }

    fn registered() -> Registered {
        let mut r = Registered {
            perm_addr: [0x52, 0x54, 0, 0x12, 0x34, 0x56],
            dev_addr: [0x52, 0x54, 0, 0x12, 0x34, 0x56],
            mtu: 1500,
            min_mtu: 46,
            max_mtu: 16110,
            n_tx_queues: 1,
            n_rx_queues: 1,
            ..Default::default()
        };
        r.driver[..5].copy_from_slice(b"e1000");
        r
    }

    #[test]
    fn ring_stride_is_whole_pages() {
        assert_eq!(ring_stride(512), 12288);
        assert_eq!(ring_stride(128), 4096);
        assert_eq!(size_of::<RingHeader>(), RING_ENTRIES_OFFSET);
        assert_eq!(size_of::<TapState>(), HELD_OFFSET);
        assert_eq!(rings_size(512), 2 * 12288 + 20480);
    }

    #[test]
    fn a_valid_registered_parses() {
        let m = parse_driver_message(&msg(MSG_REGISTERED, 0, registered().as_bytes())).unwrap();
        let DriverMessage::Registered(info) = m else { panic!("{m:?}") };
        assert_eq!(info.driver, "e1000");
        assert_eq!(info.mtu, 1500);
    }

    #[test]
    fn registered_offloads_beyond_the_known_ones_are_refused() {
        let mut r = registered();
        r.offloads = OFFLOAD_CSUM | OFFLOAD_TSO4;
        assert!(parse_driver_message(&msg(MSG_REGISTERED, 0, r.as_bytes())).is_ok());
        r.offloads = 0x100;
        assert_eq!(parse_driver_message(&msg(MSG_REGISTERED, 0, r.as_bytes())),
                   Err(ProtocolError::OutOfRange { field: "registered.offloads", value: 0x100 }));
    }

    #[test]
    fn a_tx_span_leaves_the_tailroom() {
        assert_eq!(tx_span(1514, 2048), 1);
        assert_eq!(tx_span(2048 - TX_TAILROOM, 2048), 1);
        assert_eq!(tx_span(2048 - TX_TAILROOM + 1, 2048), 2);
        assert_eq!(tx_span(TX_MAX_FRAME, 2048), 33);
    }

    #[test]
    fn registered_with_inconsistent_mtu_or_unterminated_name_is_refused() {
        let mut r = registered();
        r.mtu = 20000;
        assert!(matches!(parse_driver_message(&msg(MSG_REGISTERED, 0, r.as_bytes())),
                         Err(ProtocolError::OutOfRange { field: "registered.mtu", .. })));
        let mut r = registered();
        r.version = [b'x'; NAME_MAX];
        assert_eq!(parse_driver_message(&msg(MSG_REGISTERED, 0, r.as_bytes())),
                   Err(ProtocolError::Unterminated("registered.version")));
    }

    #[test]
    fn sizes_flags_types_and_booleans_are_checked() {
        assert_eq!(parse_driver_message(&[1, 2, 3]), Err(ProtocolError::TooShort(3)));
        assert!(matches!(parse_driver_message(&msg(MSG_CARRIER, 0, &[1, 0])), Err(ProtocolError::WrongSize { .. })));
        assert_eq!(parse_driver_message(&msg(MSG_CARRIER, 0, &[2])),
                   Err(ProtocolError::OutOfRange { field: "carrier.on", value: 2 }));
        assert_eq!(parse_driver_message(&msg(MSG_CARRIER, 0, &[1])), Ok(DriverMessage::Carrier(true)));
        assert_eq!(parse_driver_message(&msg(MSG_OPEN, 0, &[])), Err(ProtocolError::NotFromDriver(MSG_OPEN)));
        assert_eq!(parse_driver_message(&msg(999, 0, &[])), Err(ProtocolError::UnknownType(999)));
        let mut m = msg(MSG_CARRIER, 0, &[1]);
        m[2] = 1;
        assert_eq!(parse_driver_message(&m), Err(ProtocolError::ReservedFlags(1)));
        assert_eq!(parse_driver_message(&vec![0; MSG_MAX + 1]), Err(ProtocolError::TooLong(MSG_MAX + 1)));
    }

    #[test]
    fn reply_length_and_status_are_checked() {
        let mut body = Reply { status: -22, data_len: 2 }.as_bytes().to_vec();
        body.extend_from_slice(&[7, 8]);
        assert_eq!(parse_driver_message(&msg(MSG_REPLY, 9, &body)),
                   Ok(DriverMessage::Reply { seq: 9, status: -22, data: vec![7, 8] }));
        body.push(0);
        assert!(parse_driver_message(&msg(MSG_REPLY, 9, &body)).is_err());
        let body = Reply { status: 5, data_len: 0 }.as_bytes().to_vec();
        assert!(parse_driver_message(&msg(MSG_REPLY, 9, &body)).is_err());
    }

    #[test]
    fn log_text_cannot_forge_log_lines() {
        let mut body = Log { level: 6 }.as_bytes().to_vec();
        body.extend_from_slice(b"e1000: up\n[daemon] fake\x1b[31m\xff");
        let DriverMessage::Log { text, .. } = parse_driver_message(&msg(MSG_LOG, 0, &body)).unwrap() else {
            panic!()
        };
        assert!(!text.contains('\n') && !text.contains('\x1b'), "{text}");
    }

    /// A small xorshift generator: deterministic, no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..200_000 {
            let len = (rng.next() % 200) as usize;
            let mut m: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            // Steer half of the inputs to valid types so the bodies get exercised.
            if len >= 8 && rng.next() & 1 == 0 {
                let t = [MSG_REPLY, MSG_REGISTERED, MSG_CARRIER, MSG_LOG, MSG_WARN][(rng.next() % 5) as usize];
                m[..2].copy_from_slice(&t.to_le_bytes());
                m[2] = 0;
                m[3] = 0;
            }
            let _ = parse_driver_message(&m);
        }
    }

    #[test]
    fn requests_encode_to_their_c_sizes() {
        assert_eq!(Request::Open.encode(1).unwrap().len(), 8);
        assert_eq!(Request::SetMtu(9000).encode(1).unwrap().len(), 12);
        let p = Request::Probe { pci_address: "0000:00:02.0".into(), modules: vec!["/x/e1000.ko".into()] };
        assert_eq!(p.encode(1).unwrap().len(), 8 + size_of::<Probe>());
        let m = Request::SetRxMode { flags: RX_MODE_PROMISC, multicast: vec![[1, 0, 0x5e, 0, 0, 1]] };
        assert_eq!(m.encode(1).unwrap().len(), 8 + 6 + 6);
        assert_eq!(Request::Ethtool { cmd: ETHTOOL_STATS, first: 12 }.encode(1).unwrap().len(), 16);
        assert!(Request::Probe { pci_address: "0".repeat(16), modules: vec!["a".into()] }.encode(1).is_err());
    }

    fn e1000_ids() -> PciIds {
        PciIds { vendor: 0x8086, device: 0x100e, subvendor: 0x1af4, subdevice: 0x1100, class: 0x02_0000 }
    }

    #[test]
    fn load_encodes_its_modules_and_ids_where_the_c_struct_has_them() {
        let req = Request::Load { modules: vec!["/m/mii.ko".into(), "/m/8139cp.ko".into()], ids: e1000_ids() };
        assert_eq!(req.name(), "LOAD");
        let m = req.encode(7).unwrap();
        assert_eq!(m.len(), size_of::<MsgHeader>() + size_of::<Load>());
        let header = MsgHeader::from_prefix(&m).unwrap();
        assert_eq!((header.type_, header.seq), (MSG_LOAD, 7));
        let l = Load::from_prefix(&m[size_of::<MsgHeader>()..]).unwrap();
        let (n, modules, ids) = (l.n_modules, l.modules, l.ids);
        assert_eq!(n, 2);
        assert_eq!(&modules[1][..13], b"/m/8139cp.ko\0");
        assert_eq!(modules[2], [0; PATH_MAX]);
        assert_eq!(ids, e1000_ids());
    }

    #[test]
    fn load_refuses_what_the_wire_cannot_carry() {
        let load = |modules: Vec<String>| Request::Load { modules, ids: e1000_ids() }.encode(1);
        assert!(load(vec![]).is_err());
        assert!(load(vec!["a".into(); MAX_MODULES + 1]).is_err());
        assert!(load(vec!["x".repeat(PATH_MAX)]).is_err());
        assert!(load(vec!["a\0b".into()]).is_err());
        assert!(load(vec!["x".repeat(PATH_MAX - 1)]).is_ok());
    }

    #[test]
    fn a_reply_may_fill_a_whole_message_and_no_more() {
        let reply = |len: usize| {
            let mut body = Reply { status: -8, data_len: len as u32 }.as_bytes().to_vec();
            body.resize(body.len() + len, b'x');
            parse_driver_message(&msg(MSG_REPLY, 3, &body))
        };
        assert_eq!(size_of::<MsgHeader>() + size_of::<Reply>() + REPLY_DATA_MAX, MSG_MAX);
        assert!(matches!(reply(REPLY_DATA_MAX), Ok(DriverMessage::Reply { status: -8, .. })));
        assert!(reply(REPLY_DATA_MAX + 1).is_err());
        assert_eq!(parse_driver_message(&msg(MSG_LOAD, 0, &[])), Err(ProtocolError::NotFromDriver(MSG_LOAD)));
    }
}
