// SPDX-License-Identifier: GPL-2.0
//! What a driver process sends the host, validated: everything in it is
//! untrusted, so each value is checked and a refusal names it
//! (docs/protocol.md, "Control messages").

use std::mem::size_of;

use crate::*;

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
    Disk(DiskInfo),
}

/// `DISK` after validation (docs/protocol.md, "Block devices"): sizes that
/// a block device can have, strings printable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskInfo {
    /// 512-byte sectors.
    pub capacity: u64,
    pub logical_block_size: u32,
    pub physical_block_size: u32,
    /// The most 512-byte sectors of one read or write.
    pub max_sectors: u32,
    /// 0: none.
    pub max_discard_sectors: u32,
    pub max_write_zeroes_sectors: u32,
    /// `DISK_*`.
    pub features: u32,
    pub n_queues: u16,
    pub queue_depth: u16,
    pub driver: String,
    pub disk_name: String,
    pub serial: String,
    pub wwid: String,
}

impl DiskInfo {
    pub fn has(&self, feature: u32) -> bool {
        self.features & feature != 0
    }
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

/// A wire boolean: 0 or 1, anything else refused.
pub(crate) fn boolean(field: &'static str, value: u8) -> Result<bool, ProtocolError> {
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
        MSG_DISK => parse_disk(exact(type_, body)?).map(DriverMessage::Disk),
        MSG_HELLO..=MSG_SET_CHANNELS => Err(ProtocolError::NotFromDriver(type_)),
        other => Err(ProtocolError::UnknownType(other)),
    }
}

fn parse_disk(d: Disk) -> Result<DiskInfo, ProtocolError> {
    let bad = |field, value: u64| Err(ProtocolError::OutOfRange { field, value });
    let (lbs, pbs) = (d.logical_block_size, d.physical_block_size);
    if !lbs.is_power_of_two() || !(512..=4096).contains(&lbs) {
        return bad("disk.logical_block_size", lbs.into());
    }
    if !pbs.is_power_of_two() || pbs < lbs || pbs > 1 << 20 {
        return bad("disk.physical_block_size", pbs.into());
    }
    let (capacity, sectors_per_block) = (d.capacity, (lbs / 512) as u64);
    if capacity == 0 || capacity % sectors_per_block != 0 || capacity > u64::MAX >> 9 {
        return bad("disk.capacity", capacity);
    }
    let max_sectors = d.max_sectors;
    if (max_sectors as u64) < sectors_per_block {
        return bad("disk.max_sectors", max_sectors.into());
    }
    let known = DISK_WRITE_CACHE | DISK_FUA | DISK_READ_ONLY | DISK_ROTATIONAL;
    if d.features & !known != 0 {
        return bad("disk.features", d.features.into());
    }
    if d.n_queues == 0 || d.n_queues as usize > MAX_QUEUES {
        return bad("disk.n_queues", d.n_queues.into());
    }
    if d.queue_depth == 0 {
        return bad("disk.queue_depth", 0);
    }
    Ok(DiskInfo {
        capacity,
        logical_block_size: lbs,
        physical_block_size: pbs,
        max_sectors,
        max_discard_sectors: d.max_discard_sectors,
        max_write_zeroes_sectors: d.max_write_zeroes_sectors,
        features: d.features,
        n_queues: d.n_queues,
        queue_depth: d.queue_depth,
        driver: c_string("disk.driver", &d.driver)?,
        disk_name: c_string("disk.disk_name", &d.disk_name)?,
        serial: c_string("disk.serial", &d.serial)?,
        wwid: c_string("disk.wwid", &d.wwid)?,
    })
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

    fn disk() -> Disk {
        let mut d = Disk { capacity: 131072, logical_block_size: 512, physical_block_size: 512, max_sectors: 256,
                           features: DISK_WRITE_CACHE, n_queues: 1, queue_depth: 128, ..Default::default() };
        d.driver[..10].copy_from_slice(b"virtio_blk");
        d.disk_name[..3].copy_from_slice(b"vda");
        d.serial[..8].copy_from_slice(b"lab-disk");
        d
    }

    #[test]
    fn a_valid_disk_parses() {
        let DriverMessage::Disk(d) = parse_driver_message(&msg(MSG_DISK, 0, disk().as_bytes())).unwrap() else { panic!() };
        assert_eq!((d.capacity, d.driver.as_str(), d.serial.as_str(), d.wwid.as_str()), (131072, "virtio_blk", "lab-disk", ""));
        assert!(d.has(DISK_WRITE_CACHE) && !d.has(DISK_FUA));
    }

    #[test]
    fn a_disk_no_device_could_have_is_refused() {
        type Change = fn(&mut Disk);
        let cases: [(&str, Change); 9] = [
            ("disk.logical_block_size", |d| d.logical_block_size = 1000),
            ("disk.logical_block_size", |d| d.logical_block_size = 8192),
            ("disk.physical_block_size", |d| d.physical_block_size = 256),
            ("disk.capacity", |d| d.capacity = 0),
            ("disk.capacity", |d| { d.logical_block_size = 4096; d.physical_block_size = 4096; d.capacity = 9 }),
            ("disk.max_sectors", |d| d.max_sectors = 0),
            ("disk.features", |d| d.features = 0x100),
            ("disk.n_queues", |d| d.n_queues = MAX_QUEUES as u16 + 1),
            ("disk.queue_depth", |d| d.queue_depth = 0),
        ];
        for (field, change) in cases {
            let mut d = disk();
            change(&mut d);
            match parse_driver_message(&msg(MSG_DISK, 0, d.as_bytes())) {
                Err(ProtocolError::OutOfRange { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        let mut d = disk();
        d.serial = [b'x'; SERIAL_MAX];
        assert_eq!(parse_driver_message(&msg(MSG_DISK, 0, d.as_bytes())), Err(ProtocolError::Unterminated("disk.serial")));
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
