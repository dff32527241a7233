// SPDX-License-Identifier: GPL-2.0
//! The post-probe template of a device's driver (docs/design.md §8;
//! runtime/driver/template.c is the other side).
//!
//! A cold restart loads the modules and probes the device again, which
//! costs the driver's whole probe. Instead, the process that probed first is
//! asked, with SPAWN, to become a template: it stops its threads, keeps a
//! copy of the memory its fork will change, and forks a driver process that
//! resumes the device through the driver's own resume callback. Every
//! restart after a death is one more SPAWN. The fork is the daemon's child
//! (CLONE_PARENT), so it is reaped and killed like any driver process.
//!
//! The template ran the driver's probe: it is as untrusted as any driver
//! process. Its reply must name a child of this daemon, it may send nothing
//! but log lines meanwhile, and it must answer in time.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use understudy_protocol::{parse_driver_message, DriverMessage, Request, MSG_MAX};

use crate::os::fd;
use crate::os::process::{self, DriverProcess};

/// How long a template may take to fork a driver: restoring a few MiB and
/// one fork, so anything near this means it is broken.
pub const SPAWN_TIMEOUT: Duration = Duration::from_secs(2);

/// The template process and the host's end of its control socket.
pub struct Template {
    pub process: DriverProcess,
    pub control: OwnedFd,
}

#[derive(Debug)]
pub enum SpawnError {
    /// The process cannot be a template (its reply's errno): the driver
    /// holds its interrupt after probe, has no resume callback, ... It goes
    /// on as the driver, and what it said meanwhile about its carrier and
    /// queue (a link that came up after probe: virtio_net's) is its own.
    Refused(io::Error, Vec<DriverMessage>),
    /// It broke the protocol, died or did not answer: end it.
    Broken(String),
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            SpawnError::Refused(e, _) => write!(f, "it cannot be a template: {e}"),
            SpawnError::Broken(why) => write!(f, "{why}"),
        }
    }
}

impl Template {
    pub fn spawn(&self, seq: u32, log: impl FnMut(u32, &str)) -> Result<(OwnedFd, DriverProcess), SpawnError> {
        spawn(self.control.as_fd(), self.process.pidfd.as_fd(), seq, log)
    }
}

/// Sends SPAWN on `control` (the process behind `pidfd`) with a fresh control
/// socket and waits for the reply; returns the host's end of the new
/// driver's socket and the driver. Log lines meanwhile go to `log`.
pub fn spawn(control: BorrowedFd, pidfd: BorrowedFd, seq: u32, mut log: impl FnMut(u32, &str))
             -> Result<(OwnedFd, DriverProcess), SpawnError> {
    let broken = |why: String| SpawnError::Broken(why);
    let (host_end, driver_end) = fd::seqpacket_pair().map_err(|e| broken(format!("socketpair: {e}")))?;
    let bytes = Request::Spawn.encode(seq).expect("SPAWN has no fields");
    fd::send_with_fd(control, &bytes, driver_end.as_fd()).map_err(|e| broken(format!("sending SPAWN: {e}")))?;
    drop(driver_end);
    let deadline = Instant::now() + SPAWN_TIMEOUT;
    let mut buf = vec![0u8; MSG_MAX + 1];
    let mut state_said = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(broken(format!("no reply to SPAWN within {} ms", SPAWN_TIMEOUT.as_millis())));
        }
        let mut fds = [fd::readable(control), fd::readable(pidfd)];
        // SAFETY: fds is a valid array of pollfd.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, left.as_millis().max(1) as libc::c_int) };
        if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return Err(broken(format!("poll: {}", io::Error::last_os_error())));
        }
        if fds[1].revents != 0 {
            return Err(broken("it died before it answered SPAWN".into()));
        }
        if fds[0].revents == 0 {
            continue;
        }
        // SAFETY: receiving into our own buffer; MSG_TRUNC reports an oversized message's real length.
        let n = unsafe { libc::recv(control.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_TRUNC | libc::MSG_DONTWAIT) };
        match n {
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock {
                    continue;
                }
                return Err(broken(format!("control socket: {e}")));
            }
            0 => return Err(broken("it closed its control socket".into())),
            n if n as usize > MSG_MAX => return Err(broken(format!("a message of {n} bytes"))),
            _ => {}
        }
        match parse_driver_message(&buf[..n as usize]).map_err(|e| broken(format!("protocol violation: {e}")))? {
            DriverMessage::Log { level, text } => log(level, &text),
            DriverMessage::Warn { file, line, text } => log(4, &format!("WARN at {file}:{line}: {text}")),
            // Kept for a refusal; a fork announces the carrier it starts with.
            said @ DriverMessage::Carrier(_) => state_said.push(said),
            DriverMessage::Reply { seq: s, status, data } if s == seq => {
                if status < 0 {
                    return Err(SpawnError::Refused(io::Error::from_raw_os_error(-status), state_said));
                }
                let pid = <[u8; 4]>::try_from(data.as_slice())
                    .map(|b| u32::from_ne_bytes(b) as libc::pid_t)
                    .map_err(|_| broken(format!("protocol violation: SPAWN's reply carries {} bytes, not a pid", data.len())))?;
                let driver = adopt(pid).map_err(|e| broken(format!("protocol violation: SPAWN's reply names pid {pid}: {e}")))?;
                return Ok((host_end, driver));
            }
            other => return Err(broken(format!("protocol violation: {other:?} while spawning"))),
        }
    }
}

/// The driver a template forked, once it is known to be this daemon's own
/// child (a template could name any pid).
fn adopt(pid: libc::pid_t) -> io::Result<DriverProcess> {
    if pid <= 0 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // SAFETY: waitid fills `info`; WNOWAIT leaves the child to be reaped later.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is ours to fill, and nothing else is passed.
    if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) } < 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("not a child of the daemon ({})", io::Error::last_os_error())));
    }
    process::watch(pid)
}
