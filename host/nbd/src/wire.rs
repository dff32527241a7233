// SPDX-License-Identifier: GPL-2.0
//! NBD's transmission phase as the kernel's client speaks it: a 28-byte
//! request (a write's data after it), a 16-byte reply (a read's data after
//! it), big-endian, matched by the client's 8-byte handle.
//!
//! The kernel is trusted, but a request is checked all the same: a disk
//! never returns wrong data, so a request understudyd cannot read exactly
//! ends the connection rather than being guessed at.

/// NBD_REQUEST_MAGIC, NBD_REPLY_MAGIC (include/uapi/linux/nbd.h).
const REQUEST_MAGIC: u32 = 0x2560_9513;
const REPLY_MAGIC: u32 = 0x6744_6698;
pub const REQUEST_LEN: usize = 28;
pub const REPLY_LEN: usize = 16;

const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;
const CMD_TRIM: u16 = 4;
/// NBD_CMD_FLAG_FUA: in the type's upper half.
const CMD_FLAG_FUA: u16 = 1;

/// What the kernel asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read,
    /// Its `len` bytes of data follow the request on the socket.
    Write { fua: bool },
    Flush,
    Trim,
    /// The client is going away: no reply.
    Disconnect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NbdRequest {
    pub command: Command,
    pub handle: [u8; 8],
    /// Byte offset on the disk.
    pub offset: u64,
    pub len: u32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("NBD request with magic {0:#010x}, not {REQUEST_MAGIC:#010x}")]
    Magic(u32),
    #[error("NBD request of type {0} (flags {1:#x}), which understudy does not serve")]
    Command(u16, u16),
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b.try_into().expect("4 bytes"))
}

impl NbdRequest {
    pub fn parse(b: &[u8; REQUEST_LEN]) -> Result<NbdRequest, WireError> {
        let magic = be32(&b[0..4]);
        if magic != REQUEST_MAGIC {
            return Err(WireError::Magic(magic));
        }
        let (flags, type_) = (u16::from_be_bytes([b[4], b[5]]), u16::from_be_bytes([b[6], b[7]]));
        let command = match (type_, flags) {
            (CMD_READ, 0) => Command::Read,
            (CMD_WRITE, f) if f & !CMD_FLAG_FUA == 0 => Command::Write { fua: f & CMD_FLAG_FUA != 0 },
            (CMD_FLUSH, 0) => Command::Flush,
            (CMD_TRIM, 0) => Command::Trim,
            (CMD_DISC, 0) => Command::Disconnect,
            (t, f) => return Err(WireError::Command(t, f)),
        };
        Ok(NbdRequest {
            command,
            handle: b[8..16].try_into().expect("8 bytes"),
            offset: u64::from_be_bytes(b[16..24].try_into().expect("8 bytes")),
            len: be32(&b[24..28]),
        })
    }

    /// The request as the kernel would send it (for tests and tools).
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let (type_, flags) = match self.command {
            Command::Read => (CMD_READ, 0),
            Command::Write { fua } => (CMD_WRITE, if fua { CMD_FLAG_FUA } else { 0 }),
            Command::Flush => (CMD_FLUSH, 0),
            Command::Trim => (CMD_TRIM, 0),
            Command::Disconnect => (CMD_DISC, 0),
        };
        let mut b = [0u8; REQUEST_LEN];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&flags.to_be_bytes());
        b[6..8].copy_from_slice(&type_.to_be_bytes());
        b[8..16].copy_from_slice(&self.handle);
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.len.to_be_bytes());
        b
    }
}

/// The reply to `handle`: `errno` 0 for success (a read's data follows it),
/// else the positive errno the kernel ends the request with.
pub fn reply(handle: [u8; 8], errno: u32) -> [u8; REPLY_LEN] {
    let mut b = [0u8; REPLY_LEN];
    b[0..4].copy_from_slice(&REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&errno.to_be_bytes());
    b[8..16].copy_from_slice(&handle);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_back_as_it_was_sent() {
        for command in [Command::Read, Command::Write { fua: false }, Command::Write { fua: true }, Command::Flush,
                        Command::Trim, Command::Disconnect] {
            let r = NbdRequest { command, handle: *b"handle!!", offset: 1 << 33, len: 131072 };
            assert_eq!(NbdRequest::parse(&r.encode()), Ok(r));
        }
    }

    /// Bytes as Linux 6.1's nbd_send_cmd lays them out: a 4 KiB FUA write at 1 MiB.
    #[test]
    fn the_kernels_bytes_are_read_as_it_means_them() {
        let mut b = [0u8; REQUEST_LEN];
        b[..8].copy_from_slice(&[0x25, 0x60, 0x95, 0x13, 0x00, 0x01, 0x00, 0x01]);
        b[8..16].copy_from_slice(&[0, 0, 0, 7, 0, 0, 0, 3]);
        b[16..24].copy_from_slice(&(1u64 << 20).to_be_bytes());
        b[24..].copy_from_slice(&4096u32.to_be_bytes());
        let r = NbdRequest::parse(&b).unwrap();
        assert_eq!(r.command, Command::Write { fua: true });
        assert_eq!((r.offset, r.len, r.handle), (1 << 20, 4096, [0, 0, 0, 7, 0, 0, 0, 3]));
        assert_eq!(reply(r.handle, 5)[..8], [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 5]);
    }

    #[test]
    fn what_understudy_does_not_serve_is_refused_not_guessed() {
        let r = NbdRequest { command: Command::Read, handle: [0; 8], offset: 0, len: 512 };
        let mut b = r.encode();
        b[0] = 0;
        assert_eq!(NbdRequest::parse(&b), Err(WireError::Magic(0x0060_9513)));
        let mut b = r.encode();
        b[7] = 6; // NBD_CMD_WRITE_ZEROES: not advertised
        assert_eq!(NbdRequest::parse(&b), Err(WireError::Command(6, 0)));
        let mut b = r.encode();
        b[5] = 1; // FUA on a read
        assert_eq!(NbdRequest::parse(&b), Err(WireError::Command(0, 1)));
    }
}
