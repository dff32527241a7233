// SPDX-License-Identifier: GPL-2.0
//! The TAP interface applications see. The daemon keeps its fd for the
//! device's whole life (not a persistent TAP): a driver restart never makes the
//! interface disappear, and the daemon's exit always removes it.
//!
//! Frames never pass the daemon: the TAP has several queues
//! (IFF_MULTI_QUEUE), the daemon's and the driver's (one or more), which the
//! daemon opens and keeps for every driver process of the interface; a
//! steering program sends every frame the stack transmits to a driver's
//! queue, by its flow's hash when there are several, and the driver process
//! writes received frames to them (docs/protocol.md, "Sending", "Receiving"
//! and "Several queues"). The daemon's queue is there for its ioctls: they
//! need a queue that is attached, and the driver could detach its own.
//!
//! Offloads: every frame crosses the TAP with a virtio_net_hdr (IFF_VNET_HDR).
//! Once the driver registers, `set_offloads` tells the stack (TUNSETOFFLOAD)
//! which of checksum and TCP segmentation offload the driver takes
//! (REGISTERED's offloads); the stack then hands the driver frames with the
//! checksum left to do (CHECKSUM_PARTIAL) and TCP frames of up to 64 KiB to
//! cut into segments (GSO), so the driver's own TSO and checksum offload do
//! the work, or the driver process's runtime does it in software where the
//! driver has none.
//!
//! The TAP's own MTU limits cannot be narrowed either: TUN fixes min_mtu/max_mtu (68..65521)
//! and has no ioctl to change them, so an MTU outside the driver's range is
//! undone by the daemon after the fact (see shadow.rs).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use understudy_protocol::{check_queue_count, OFFLOAD_CSUM, OFFLOAD_TSO4, OFFLOAD_TSO6, OFFLOAD_TSO_ECN};

const TUNSETIFF: libc::c_ulong = 0x4004_54ca; // _IOW('T', 202, int)
const TUNSETQUEUE: libc::c_ulong = 0x4004_54d9; // _IOW('T', 217, int)
const TUNSETSTEERINGEBPF: libc::c_ulong = 0x8004_54e0; // _IOR('T', 224, int)
const TUNSETCARRIER: libc::c_ulong = 0x4004_54e2; // _IOW('T', 226, int), Linux >= 5.0
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
const IFF_ATTACH_QUEUE: libc::c_short = 0x0200;
/// Every queue of the TAP is opened with the same flags.
const TAP_FLAGS: libc::c_short = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | IFF_MULTI_QUEUE;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0; // _IOW('T', 208, unsigned int)
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;
const TUN_F_TSO_ECN: libc::c_uint = 0x08;
const ARPHRD_ETHER: u16 = 1;

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
    /// The driver process's queues, until the device's datapath takes them
    /// (`take_driver_queues`) to keep across driver processes.
    driver_queues: Vec<OwnedFd>,
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

/// Every frame the stack sends goes to a driver's queue (steering.rs):
/// without a steering program the TAP would spread flows over all queues,
/// the daemon's too, and the daemon reads none. A driver that detaches its
/// queues leaves the daemon's as the only one: the frames go there, unread,
/// as if the driver did not read its own.
fn steer_to_driver_queues(tap: BorrowedFd, n: u16) -> io::Result<()> {
    let prog = crate::class::net::steering::load(n)?;
    let mut fd = prog.as_raw_fd();
    ioctl(tap, TUNSETSTEERINGEBPF, &mut fd).map_err(|e| io::Error::new(e.kind(), format!("TUNSETSTEERINGEBPF: {e}")))
}

/// Attaches a driver's queue `fd` to the TAP again, in case a
/// predecessor detached it; one still attached stays so (the kernel answers
/// EINVAL).
pub fn attach_driver_queue(fd: BorrowedFd) -> io::Result<()> {
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], data: [0; 24] };
    req.data[..2].copy_from_slice(&IFF_ATTACH_QUEUE.to_ne_bytes());
    match ioctl(fd, TUNSETQUEUE, &mut req) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        result => result.map_err(|e| io::Error::new(e.kind(), format!("TUNSETQUEUE attach: {e}"))),
    }
}

impl Tap {
    /// Creates the interface `name` with `queues` queues for its drivers
    /// (1 to `MAX_QUEUES`); fails if one of that name exists.
    pub fn create(name: &str, queues: u16) -> io::Result<Tap> {
        IfReq::new(name)?; // a name the kernel takes, checked before anything is created
        check_queue_count(queues.into()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        if std::path::Path::new("/sys/class/net").join(name).exists() {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("an interface named {name} already exists")));
        }
        let file = open_queue(name)?;
        let driver_queues = (0..queues).map(|_| open_queue(name).map(OwnedFd::from)).collect::<io::Result<Vec<_>>>()?;
        steer_to_driver_queues(file.as_fd(), queues)?;
        let tap = Tap { file, driver_queues, name: name.to_string() };
        // No carrier until the driver reports one.
        tap.set_carrier(false)?;
        Ok(tap)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The driver's queues, once: their owner hands them to each driver process.
    pub fn take_driver_queues(&mut self) -> Vec<OwnedFd> {
        std::mem::take(&mut self.driver_queues)
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
}

/// A plain socket for interface ioctls.
fn inet_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is a new fd we own.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket returned a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
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
}
