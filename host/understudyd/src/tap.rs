// SPDX-License-Identifier: GPL-2.0
//! The TAP interface applications see. The daemon keeps its fd for the
//! device's whole life (not a persistent TAP): a driver restart never makes the
//! interface disappear, and the daemon's exit always removes it.
//!
//! Offloads: every frame crosses the TAP with a virtio_net_hdr (IFF_VNET_HDR).
//! Once the driver registers, `set_offloads` tells the stack (TUNSETOFFLOAD)
//! which of checksum and TCP segmentation offload the driver takes
//! (REGISTERED's offloads); the stack then hands the TAP frames with the
//! checksum left to do (CHECKSUM_PARTIAL) and TCP frames of up to 64 KiB to cut
//! into segments (GSO), and the header's fields go into the tx ring entry
//! (docs/protocol.md), so the driver's own TSO and checksum offload do the
//! work, or the driver process's runtime does it in software where the
//! driver has none (it takes them all).
//!
//! Received frames never pass the daemon: the TAP has several queues
//! (IFF_MULTI_QUEUE), and the driver process writes them to its own,
//! detached so that the stack sends it nothing (docs/protocol.md,
//! "Receiving"); the daemon's queue is the only one the stack sends to.
//!
//! The TAP's own MTU limits cannot be narrowed either: TUN fixes min_mtu/max_mtu (68..65521)
//! and has no ioctl to change them, so an MTU outside the driver's range is
//! undone by the daemon after the fact (see shadow.rs).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use understudy_protocol::{OFFLOAD_CSUM, OFFLOAD_TSO4, OFFLOAD_TSO6, OFFLOAD_TSO_ECN, TX_CSUM, TX_GSO_ECN,
                          TX_GSO_TCPV4, TX_GSO_TCPV6};
use understudy_shm::TxOffload;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca; // _IOW('T', 202, int)
const TUNSETQUEUE: libc::c_ulong = 0x4004_54d9; // _IOW('T', 217, int)
const TUNSETSTEERINGEBPF: libc::c_ulong = 0x8004_54e0; // _IOR('T', 224, int)
const TUNSETCARRIER: libc::c_ulong = 0x4004_54e2; // _IOW('T', 226, int), Linux >= 5.0
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
const IFF_DETACH_QUEUE: libc::c_short = 0x0400;
/// Every queue of the TAP is opened with the same flags.
const TAP_FLAGS: libc::c_short = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | IFF_MULTI_QUEUE;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0; // _IOW('T', 208, unsigned int)
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;
const TUN_F_TSO_ECN: libc::c_uint = 0x08;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;
const VIRTIO_NET_HDR_GSO_TCPV6: u8 = 4;
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;
const ARPHRD_ETHER: u16 = 1;

/// `struct virtio_net_hdr` (10 bytes, the TAP's default size), native endian.
#[repr(C, packed)]
#[derive(Clone, Copy, Default, Debug)]
struct VnetHdr {
    flags: u8,
    gso_type: u8,
    hdr_len: u16,
    gso_size: u16,
    csum_start: u16,
    csum_offset: u16,
}

impl VnetHdr {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: packed POD, every bit pattern valid.
        unsafe { std::slice::from_raw_parts_mut((self as *mut Self).cast::<u8>(), std::mem::size_of::<Self>()) }
    }

    /// The ring's tx flags for what the stack left to do, or why the frame
    /// cannot go (a GSO type the TAP was not offered).
    fn tx_offload(&self) -> Result<TxOffload, String> {
        let mut flags = 0;
        if self.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
            flags |= TX_CSUM;
        }
        flags |= match self.gso_type & !VIRTIO_NET_HDR_GSO_ECN {
            VIRTIO_NET_HDR_GSO_NONE => 0,
            VIRTIO_NET_HDR_GSO_TCPV4 => TX_GSO_TCPV4,
            VIRTIO_NET_HDR_GSO_TCPV6 => TX_GSO_TCPV6,
            other => return Err(format!("GSO type {other}")),
        };
        if self.gso_type & VIRTIO_NET_HDR_GSO_ECN != 0 {
            flags |= TX_GSO_ECN;
        }
        Ok(TxOffload { flags, gso_size: self.gso_size, csum_start: self.csum_start, csum_offset: self.csum_offset })
    }
}

/// The TUN_F_* flags for REGISTERED's offloads: segmentation only with
/// checksum offload (the TAP refuses TSO without it).
fn tun_offloads(offloads: u32) -> libc::c_uint {
    if offloads & OFFLOAD_CSUM == 0 {
        return 0;
    }
    [(OFFLOAD_TSO4, TUN_F_TSO4), (OFFLOAD_TSO6, TUN_F_TSO6), (OFFLOAD_TSO_ECN, TUN_F_TSO_ECN)]
        .iter()
        .filter(|(ours, _)| offloads & ours != 0)
        .fold(TUN_F_CSUM, |f, (_, tun)| f | tun)
}

/// `struct ifreq`: the name and a 24-byte union.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> io::Result<Self> {
        let b = name.as_bytes();
        if b.is_empty() || b.len() >= libc::IFNAMSIZ || b.iter().any(|&c| c == 0 || c == b'/' || c.is_ascii_whitespace()) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput,
                format!("{name:?} is not a valid interface name (1 to 15 bytes, no '/' or spaces)")));
        }
        let mut r = IfReq { name: [0; libc::IFNAMSIZ], data: [0; 24] };
        r.name[..b.len()].copy_from_slice(b);
        Ok(r)
    }
}

fn ioctl<T>(fd: BorrowedFd, request: libc::c_ulong, arg: *mut T) -> io::Result<()> {
    // SAFETY: `arg` points to what the request expects.
    if unsafe { libc::ioctl(fd.as_raw_fd(), request, arg) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub struct Tap {
    file: File,
    /// The driver process's queue, for received frames only: detached, so
    /// the stack sends it nothing, and kept here across driver processes.
    driver_queue: File,
    name: String,
}

/// Opens a queue of the TAP `name`, creating the interface with the first.
fn open_queue(name: &str) -> io::Result<File> {
    let mut req = IfReq::new(name)?;
    let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/net/tun")
        .map_err(|e| io::Error::new(e.kind(), format!("open /dev/net/tun: {e} (modprobe tun)")))?;
    req.data[..2].copy_from_slice(&TAP_FLAGS.to_ne_bytes());
    ioctl(file.as_fd(), TUNSETIFF, &mut req).map_err(|e| io::Error::new(e.kind(), format!("TUNSETIFF {name}: {e}")))?;
    Ok(file)
}

/// `struct bpf_insn`: opcode, registers (dst low nibble, src high), offset, immediate.
#[repr(C)]
struct BpfInsn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

/// The part of `union bpf_attr` BPF_PROG_LOAD reads, zero-padded as the kernel wants.
#[repr(C)]
#[derive(Default)]
struct BpfProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    rest: [u64; 12],
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

/// Every frame the stack sends goes to the daemon's queue, the only one
/// attached: a steering program that answers queue 0. Without one, the TAP
/// steers a flow to the queue its received frames were last written to,
/// and that is the driver's, detached, where the frames (the guest's ACKs
/// of a transfer it receives) were dropped; the flow table's work per
/// frame is spared too.
fn steer_to_daemon_queue(tap: BorrowedFd) -> io::Result<()> {
    // r0 = 0; exit
    let insns = [BpfInsn { code: 0xb7, regs: 0, off: 0, imm: 0 }, BpfInsn { code: 0x95, regs: 0, off: 0, imm: 0 }];
    let license = b"GPL\0";
    let attr = BpfProgLoad {
        prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: BPF_PROG_LOAD reads `attr` and the memory it points to; the result is a new fd we own.
    let prog = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, &attr as *const BpfProgLoad, std::mem::size_of::<BpfProgLoad>()) };
    if prog < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("loading the TAP's steering program (bpf): {e}")));
    }
    // SAFETY: `prog` was just returned to us.
    let prog = unsafe { OwnedFd::from_raw_fd(prog as RawFd) };
    let mut fd = prog.as_raw_fd();
    ioctl(tap, TUNSETSTEERINGEBPF, &mut fd).map_err(|e| io::Error::new(e.kind(), format!("TUNSETSTEERINGEBPF: {e}")))
}

/// Detaches the driver's queue `fd` from the TAP: the stack sends it no
/// frames, yet writes to it still reach the stack. One already detached
/// stays so (the kernel answers EINVAL).
pub fn detach_driver_queue(fd: BorrowedFd) -> io::Result<()> {
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], data: [0; 24] };
    req.data[..2].copy_from_slice(&IFF_DETACH_QUEUE.to_ne_bytes());
    match ioctl(fd, TUNSETQUEUE, &mut req) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        result => result.map_err(|e| io::Error::new(e.kind(), format!("TUNSETQUEUE detach: {e}"))),
    }
}

impl Tap {
    /// Creates the interface `name`; fails if one of that name exists.
    pub fn create(name: &str) -> io::Result<Tap> {
        IfReq::new(name)?; // a name the kernel takes, checked before anything is created
        if std::path::Path::new("/sys/class/net").join(name).exists() {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("an interface named {name} already exists")));
        }
        let file = open_queue(name)?;
        let driver_queue = open_queue(name)?;
        detach_driver_queue(driver_queue.as_fd())?;
        steer_to_daemon_queue(file.as_fd())?;
        let tap = Tap { file, driver_queue, name: name.to_string() };
        // No carrier until the driver reports one.
        tap.set_carrier(false)?;
        Ok(tap)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Another fd of the driver's queue, for a driver process to inherit.
    pub fn driver_queue(&self) -> io::Result<OwnedFd> {
        Ok(self.driver_queue.try_clone()?.into())
    }

    pub fn set_carrier(&self, on: bool) -> io::Result<()> {
        let mut v: libc::c_int = on.into();
        ioctl(self.file.as_fd(), TUNSETCARRIER, &mut v).map_err(|e| io::Error::new(e.kind(), format!("TUNSETCARRIER {}: {e}", self.name)))
    }

    /// The driver's MAC becomes the interface's.
    pub fn set_mac(&self, mac: [u8; 6]) -> io::Result<()> {
        let mut req = IfReq::new(&self.name)?;
        req.data[..2].copy_from_slice(&ARPHRD_ETHER.to_ne_bytes());
        req.data[2..8].copy_from_slice(&mac);
        ioctl(self.file.as_fd(), libc::SIOCSIFHWADDR as libc::c_ulong, &mut req)
            .map_err(|e| io::Error::new(e.kind(), format!("SIOCSIFHWADDR {}: {e}", self.name)))
    }

    pub fn set_mtu(&self, mtu: u32) -> io::Result<()> {
        let mut req = IfReq::new(&self.name)?;
        req.data[..4].copy_from_slice(&(mtu as libc::c_int).to_ne_bytes());
        ioctl(inet_socket()?.as_fd(), libc::SIOCSIFMTU as libc::c_ulong, &mut req)
            .map_err(|e| io::Error::new(e.kind(), format!("SIOCSIFMTU {} {mtu}: {e}", self.name)))
    }

    /// The interface index, which netlink messages name it by.
    pub fn ifindex(&self) -> io::Result<i32> {
        let mut req = IfReq::new(&self.name)?;
        ioctl(inet_socket()?.as_fd(), libc::SIOCGIFINDEX as libc::c_ulong, &mut req)
            .map_err(|e| io::Error::new(e.kind(), format!("SIOCGIFINDEX {}: {e}", self.name)))?;
        Ok(i32::from_ne_bytes(req.data[..4].try_into().expect("4 bytes")))
    }

    /// Takes the interface down, as the kernel leaves a device whose ndo_open failed.
    pub fn set_down(&self) -> io::Result<()> {
        let sock = inet_socket()?;
        let mut req = IfReq::new(&self.name)?;
        ioctl(sock.as_fd(), libc::SIOCGIFFLAGS as libc::c_ulong, &mut req)
            .map_err(|e| io::Error::new(e.kind(), format!("SIOCGIFFLAGS {}: {e}", self.name)))?;
        let flags = libc::c_short::from_ne_bytes([req.data[0], req.data[1]]) & !(libc::IFF_UP as libc::c_short);
        req.data[..2].copy_from_slice(&flags.to_ne_bytes());
        ioctl(sock.as_fd(), libc::SIOCSIFFLAGS as libc::c_ulong, &mut req)
            .map_err(|e| io::Error::new(e.kind(), format!("SIOCSIFFLAGS {} down: {e}", self.name)))
    }

    /// Which offloads the stack may leave to the driver (REGISTERED's
    /// `OFFLOAD_*`); frames it already queued keep theirs.
    pub fn set_offloads(&self, offloads: u32) -> io::Result<()> {
        let flags = tun_offloads(offloads);
        // SAFETY: TUNSETOFFLOAD takes its flags by value.
        if unsafe { libc::ioctl(self.file.as_raw_fd(), TUNSETOFFLOAD, flags) } < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("TUNSETOFFLOAD {} {flags:#x}: {e}", self.name)));
        }
        Ok(())
    }

    /// One frame the stack sent, into `buf`: its length (more than
    /// `buf.len()` if it did not fit: the frame is cut short) and what the
    /// driver must still do to it; `None` if there is none now.
    pub fn read_frame(&self, buf: &mut [u8]) -> io::Result<Option<(usize, Result<TxOffload, String>)>> {
        let mut hdr = VnetHdr::default();
        let hdr_bytes = hdr.as_bytes_mut();
        let iov = [
            libc::iovec { iov_base: hdr_bytes.as_mut_ptr().cast(), iov_len: hdr_bytes.len() },
            libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() },
        ];
        // SAFETY: both iovecs point to memory we hold mutably for the call.
        let n = unsafe { libc::readv(self.file.as_raw_fd(), iov.as_ptr(), 2) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
        }
        let frame = (n as usize).saturating_sub(std::mem::size_of::<VnetHdr>());
        Ok(Some((frame, hdr.tx_offload())))
    }
}

/// A plain socket for interface ioctls.
fn inet_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is a new fd we own.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl AsFd for Tap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segmentation_is_offered_only_with_checksum_offload() {
        assert_eq!(tun_offloads(0), 0);
        assert_eq!(tun_offloads(OFFLOAD_TSO4), 0, "the TAP refuses TSO without CSUM");
        assert_eq!(tun_offloads(OFFLOAD_CSUM), TUN_F_CSUM);
        assert_eq!(tun_offloads(OFFLOAD_CSUM | OFFLOAD_TSO4 | OFFLOAD_TSO_ECN), TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO_ECN);
        assert_eq!(tun_offloads(OFFLOAD_CSUM | OFFLOAD_TSO6), TUN_F_CSUM | TUN_F_TSO6);
    }

    #[test]
    fn a_vnet_header_becomes_the_rings_tx_flags() {
        let hdr = VnetHdr { flags: VIRTIO_NET_HDR_F_NEEDS_CSUM, gso_type: VIRTIO_NET_HDR_GSO_TCPV4 | VIRTIO_NET_HDR_GSO_ECN,
                            hdr_len: 66, gso_size: 1448, csum_start: 34, csum_offset: 16 };
        assert_eq!(hdr.tx_offload().unwrap(),
                   TxOffload { flags: TX_CSUM | TX_GSO_TCPV4 | TX_GSO_ECN, gso_size: 1448, csum_start: 34, csum_offset: 16 });
        assert_eq!(VnetHdr::default().tx_offload().unwrap(), TxOffload::default());
        let udp = VnetHdr { gso_type: 3, ..Default::default() };
        assert_eq!(udp.tx_offload().unwrap_err(), "GSO type 3");
    }
}
