// SPDX-License-Identifier: GPL-2.0
//! The TAP interface applications see. The daemon keeps its fd for the
//! device's whole life (not a persistent TAP): a driver restart never makes the
//! interface disappear, and the daemon's exit always removes it.
//!
//! Offloads: the driver's features (REGISTERED) are reported in `status`, but
//! not given to the TAP with TUNSETOFFLOAD. TUNSETOFFLOAD makes the stack hand
//! the TAP unchecksummed (CHECKSUM_PARTIAL) and unsegmented (GSO) frames, whose
//! checksum start/offset and segment size travel only in a virtio_net_hdr
//! (IFF_VNET_HDR), and the rings of docs/protocol.md carry none of it: an entry
//! is a buffer, a length and no offload flags. So every frame crosses the
//! rings finished (checksummed, at most MTU-sized) and the driver's NETIF_F_*
//! offloads stay unused until the ring entry grows those fields. The TAP's own
//! MTU limits cannot be narrowed either: TUN fixes min_mtu/max_mtu (68..65521)
//! and has no ioctl to change them, so an MTU outside the driver's range is
//! undone by the daemon after the fact (see shadow.rs).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca; // _IOW('T', 202, int)
const TUNSETCARRIER: libc::c_ulong = 0x4004_54e2; // _IOW('T', 226, int), Linux >= 5.0
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const ARPHRD_ETHER: u16 = 1;

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
    name: String,
}

impl Tap {
    /// Creates the interface `name`; fails if one of that name exists.
    pub fn create(name: &str) -> io::Result<Tap> {
        let mut req = IfReq::new(name)?;
        if std::path::Path::new("/sys/class/net").join(name).exists() {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("an interface named {name} already exists")));
        }
        let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| io::Error::new(e.kind(), format!("open /dev/net/tun: {e} (modprobe tun)")))?;
        req.data[..2].copy_from_slice(&(IFF_TAP | IFF_NO_PI).to_ne_bytes());
        ioctl(file.as_fd(), TUNSETIFF, &mut req).map_err(|e| io::Error::new(e.kind(), format!("TUNSETIFF {name}: {e}")))?;
        let tap = Tap { file, name: name.to_string() };
        // No carrier until the driver reports one.
        tap.set_carrier(false)?;
        Ok(tap)
    }

    pub fn name(&self) -> &str {
        &self.name
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

    /// One frame the stack sent, or `None` if there is none now.
    pub fn read_frame(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        use std::io::Read;
        match (&self.file).read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Hands one received frame to the stack. A full queue drops it, as a NIC would.
    pub fn write_frame(&self, frame: &[u8]) -> io::Result<bool> {
        use std::io::Write;
        match (&self.file).write(frame) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
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
