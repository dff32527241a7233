// SPDX-License-Identifier: GPL-2.0
//! One driver process and its control socket: the requests in flight, the
//! heartbeat, the transmit watchdog and the WARN count (docs/protocol.md,
//! "Control messages", "Deadlines"). A link lives as long as its process;
//! a successor gets a new one.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Instant;

use nix::sys::socket::{recv, send, MsgFlags};
use understudy_protocol::{parse_driver_message, DriverMessage, Request, MSG_MAX};
use understudy_vfio::Vfio;

use super::datapath::Datapath;
use super::{Fault, Purpose};
use crate::fd;
use crate::placement::Placement;
use crate::process::{self, DriverFds, DriverProcess};
use crate::watchdog::{Detection, TxProgress, WarnStorm, Watchdog};

pub struct DriverLink {
    process: DriverProcess,
    control: OwnedFd,
    next_seq: u32,
    pending: HashMap<u32, (Request, Purpose)>,
    pub watchdog: Watchdog,
    /// Whether the driver completes what it was given to send.
    pub tx_progress: TxProgress,
    warn_storm: WarnStorm,
    buf: Vec<u8>,
}

/// Starts a driver process for `vfio`'s device on the datapath's shared
/// memory; returns the host's end of its control socket and the process.
pub fn spawn(binary: &Path, placement: Option<Placement>, vfio: &Vfio, datapath: &Datapath)
             -> Result<(OwnedFd, DriverProcess), String> {
    let (control, driver_control) = fd::seqpacket_pair().map_err(|e| format!("socketpair: {e}"))?;
    let driver = process::spawn(binary, &DriverFds {
        control: driver_control.as_fd(),
        device: vfio.device_fd(),
        arena: datapath.shm.arena().as_fd(),
        rings: datapath.shm.rings().region().as_fd(),
        kick: datapath.kick_fd(),
        notify: datapath.notify_fd(),
    }, placement)
    .map_err(|e| e.to_string())?;
    Ok((control, driver))
}

impl DriverLink {
    pub fn new(process: DriverProcess, control: OwnedFd, detection: Detection, now: Instant) -> Result<Self, String> {
        fd::set_nonblocking(control.as_fd()).map_err(|e| format!("control socket: {e}"))?;
        Ok(DriverLink {
            process,
            control,
            next_seq: 1,
            pending: HashMap::new(),
            watchdog: Watchdog::new(detection, now),
            tx_progress: TxProgress::new(now),
            warn_storm: WarnStorm::new(detection.warns, detection.warn_window),
            buf: vec![0u8; MSG_MAX + 1],
        })
    }

    pub fn pid(&self) -> libc::pid_t {
        self.process.pid
    }

    pub fn control(&self) -> BorrowedFd<'_> {
        self.control.as_fd()
    }

    /// Readable when the process has exited.
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.process.pidfd.as_fd()
    }

    pub fn take_seq(&mut self) -> u32 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        seq
    }

    pub fn send(&mut self, request: Request, purpose: Purpose) -> Result<(), Fault> {
        let name = request.name();
        let seq = self.take_seq();
        let bytes = request.encode(seq).map_err(|e| Fault::Io(format!("encoding {name}: {e}")))?;
        match send(self.control.as_raw_fd(), &bytes, MsgFlags::MSG_NOSIGNAL) {
            Ok(_) => {}
            // The driver's end is closed, as when recv sees its end: usually it is
            // exiting, and its own death (not this send) is what to report.
            Err(nix::errno::Errno::EPIPE | nix::errno::Errno::ECONNRESET) => return Err(Fault::Closed),
            Err(e) => return Err(Fault::Io(format!("control socket, sending {name}: {e}"))),
        }
        self.watchdog.sent(seq, name, Instant::now());
        self.pending.insert(seq, (request, purpose));
        Ok(())
    }

    /// The next message from the driver, or `None` if there is none now.
    pub fn receive(&mut self) -> Result<Option<DriverMessage>, Fault> {
        // MSG_TRUNC: the real length of an oversized message, so it is refused, not cut.
        let n = match recv(self.control.as_raw_fd(), &mut self.buf, MsgFlags::MSG_TRUNC | MsgFlags::MSG_DONTWAIT) {
            Ok(0) => return Err(Fault::Closed),
            Ok(n) => n,
            Err(nix::errno::Errno::EAGAIN) => return Ok(None),
            // A peer that dies with messages unread resets the socket
            // instead of closing it: the same end, seen sooner.
            Err(nix::errno::Errno::ECONNRESET) => return Err(Fault::Closed),
            Err(e) => return Err(Fault::Io(format!("control socket: {}", io::Error::from(e)))),
        };
        if n > MSG_MAX {
            return Err(Fault::Violation(format!("message of {n} bytes is longer than the protocol's {MSG_MAX}")));
        }
        parse_driver_message(&self.buf[..n]).map(Some).map_err(|e| Fault::Violation(e.to_string()))
    }

    /// The request a reply answers, and why it was sent.
    pub fn answered(&mut self, seq: u32) -> Result<(Request, Purpose), Fault> {
        let answered = self.pending.remove(&seq)
            .ok_or_else(|| Fault::Violation(format!("reply to seq {seq}, which no request has")))?;
        self.watchdog.answered(seq, Instant::now());
        Ok(answered)
    }

    /// HELLO or PROBE is not answered yet.
    pub fn starting(&self) -> bool {
        self.pending.values().any(|&(_, purpose)| purpose == Purpose::Startup)
    }

    pub fn probing(&self) -> bool {
        self.pending.values().any(|(request, _)| matches!(request, Request::Probe { .. }))
    }

    /// A WARN: `Some(verdict)` if they come as a storm.
    pub fn warned(&mut self, now: Instant) -> Option<String> {
        self.warn_storm.warned(now)
    }

    /// A process that closed its control socket while exiting has exited
    /// within a moment; its own death is then reported, not a kill.
    pub fn exits_by_itself(&self) -> bool {
        let mut fd = [fd::readable(self.process.pidfd.as_fd())];
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(fd.as_mut_ptr(), 1, 500) > 0 }
    }

    /// The process that probed became a template and handed the device to
    /// its fork: the link now talks to the fork; returns the template's
    /// process and control socket.
    pub fn hand_to_fork(&mut self, process: DriverProcess, control: OwnedFd) -> Result<(DriverProcess, OwnedFd), String> {
        fd::set_nonblocking(control.as_fd()).map_err(|e| format!("control socket: {e}"))?;
        Ok((std::mem::replace(&mut self.process, process), std::mem::replace(&mut self.control, control)))
    }

    /// Reaps the process, which has exited; says how it ended.
    pub fn reap(self) -> String {
        process::wait(self.process.pid)
    }

    /// Kills and reaps the process; says how it ended.
    pub fn end(self) -> String {
        process::kill(self.process.pid);
        process::wait(self.process.pid)
    }
}
