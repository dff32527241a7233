// SPDX-License-Identifier: GPL-2.0
//! One driver process and its control socket: the requests in flight, the
//! heartbeat, the transmit watchdog and the WARN count (docs/protocol.md,
//! "Control messages", "Deadlines"), and, for a checked device, its checker
//! (docs/checking.md). A link lives as long as its process; a successor
//! gets a new one.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use log::info;
use nix::sys::socket::{recv, send, MsgFlags};
use understudy_api::ModuleInfo;
use understudy_protocol::{parse_driver_message, DriverMessage, Request, MSG_MAX};
use understudy_vfio::Device;

use crate::class::Shared;
use super::{Fault, Purpose};
use crate::check::{self, Alarm, Checker, Checking};
use crate::os::fd;
use crate::os::placement::Placement;
use crate::os::process::{self, DriverCommand, DriverFds, DriverProcess};
use crate::supervisor::watchdog::{Detection, TxProgress, WarnStorm, Watchdog};

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
    /// A checked driver's checker, ended with it.
    checker: Option<Checker>,
}

/// How a driver process is started.
#[derive(Clone, Copy)]
pub struct Spawn<'a> {
    pub driver: &'a DriverCommand,
    pub placement: Option<Placement>,
    pub detection: Detection,
    /// How it is checked; `None`: it is not.
    pub check: Option<&'a Checking>,
}

/// How a device's driver processes are started, for as long as it is
/// served: every successor starts as its first did.
pub struct Launch {
    pub driver: DriverCommand,
    /// The driver's CPU, kept free of the daemon's thread.
    pub placement: Option<Placement>,
    pub detection: Detection,
    /// How every driver process is checked (`run --check`); `None`: unchecked.
    pub checking: Option<Checking>,
}

impl Launch {
    pub fn spawn(&self) -> Spawn<'_> {
        Spawn { driver: &self.driver, placement: self.placement, detection: self.detection,
                check: self.checking.as_ref() }
    }
}

/// A driver process just started: the host's end of its control socket, and its checker.
pub struct Spawned {
    pub control: OwnedFd,
    pub process: DriverProcess,
    pub checker: Option<Checker>,
}

/// Starts a driver process for `vfio`'s device on the class's shared
/// memory (`shared`), to run `modules`. A checked one's checker starts first, on a
/// fresh trace region, then the driver with the same region
/// (docs/checking.md, "Starting a checked driver").
pub fn spawn(spawn: &Spawn, vfio: &Device, shared: &dyn Shared, modules: &[ModuleInfo]) -> Result<Spawned, String> {
    let (control, driver_control) = fd::seqpacket_pair().map_err(|e| format!("socketpair: {e}"))?;
    let checked = match spawn.check {
        Some(checking) => Some(start_checker(checking, vfio, modules).inspect_err(|e| checking.failed(e))?),
        None => None,
    };
    let (region, mut checker) = checked.unzip();
    let identity = spawn.driver.identity(vfio.address())?;
    let driver = process::spawn(&spawn.driver.binary, &DriverFds {
        control: driver_control.as_fd(),
        device: vfio.handoff(),
        arena: shared.memory().arena().as_fd(),
        dma_chunks: shared.memory().bus_chunks_fd(),
        rings: shared.memory().rings_region().as_fd(),
        kick: shared.kick_fd(),
        notify: shared.notify_fd(),
        tap: shared.frontend_queues(),
        trace: region.as_ref().zip(spawn.check).map(|(r, c)| (r.as_fd(), c.mode)),
    }, identity, spawn.placement)
    .map_err(|e| e.to_string())?;
    if let (Some(c), Some(checking)) = (checker.as_mut(), spawn.check) {
        c.driver_started(driver.pid);
        info!("{}: checker {} checks driver process {} ({} gate)", vfio.address(), c.pid, driver.pid, checking.mode);
    }
    Ok(Spawned { control, process: driver, checker })
}

/// A fresh trace region and a checker reading it.
fn start_checker(checking: &Checking, vfio: &Device, modules: &[ModuleInfo]) -> Result<(OwnedFd, Checker), String> {
    let region = check::create_region().map_err(|e| format!("cannot create a trace region: {e}"))?;
    let modules = modules.iter().map(|m| m.path.clone()).collect();
    let checker = Checker::spawn(checking, region.as_fd(), vfio.address().as_str(), modules).map_err(|e| e.to_string())?;
    Ok((region, checker))
}

impl DriverLink {
    pub fn new(spawned: Spawned, detection: Detection, now: Instant) -> Result<Self, String> {
        let Spawned { control, process, checker } = spawned;
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
            checker,
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

    /// Readable when the checker printed something or is gone.
    pub fn checker_fd(&self) -> Option<BorrowedFd<'_>> {
        self.checker.as_ref().and_then(Checker::stdout)
    }

    /// Takes what the checker printed: a checker that is gone or a fatal
    /// verdict ends the driver (docs/checking.md, "Failing closed").
    pub fn read_checker(&mut self) -> Result<(), Fault> {
        let Some(checker) = self.checker.as_mut() else { return Ok(()) };
        checker.read().map_err(|alarm| match alarm {
            Alarm::Gone(why) => Fault::CheckerGone(why),
            Alarm::Verdict(verdict) => Fault::Verdict(verdict),
        })
    }

    /// Notes how far its checker has approved (check/checker.rs, `observe`).
    pub fn observe_checker(&mut self, now: Instant) {
        if let Some(checker) = self.checker.as_mut() {
            checker.observe(now);
        }
    }

    /// The driver missed a deadline at `now` (`hung` says which): the fault
    /// names its checker if the driver waited on it and it approved nothing
    /// (docs/checking.md, "Failing closed").
    pub fn hung(&mut self, hung: String, now: Instant) -> Fault {
        match self.checker.as_mut().and_then(|c| c.hung(now)) {
            Some(why) => Fault::CheckerHung(format!("{hung}: {why}")),
            None => Fault::Io(hung),
        }
    }

    /// Reaps the process, which has exited, then stops its checker; says
    /// why it ended -- a checked one that exited at its gate, by whose verdict.
    pub fn reap(mut self) -> String {
        let pid = self.process.pid;
        let ended = process::reap(pid);
        let Some(checker) = self.checker.take() else {
            return format!("the driver process {pid} {}", ended.describe());
        };
        let at_gate = ended.exit_code() == Some(understudy_protocol::EXIT_VERDICT);
        let verdict = checker.stop(at_gate);
        check::death_cause(pid, &ended.describe(), at_gate, verdict.as_deref())
    }

    /// Kills and reaps the process, then stops its checker; says how it ended.
    pub fn end(mut self) -> String {
        process::kill(self.process.pid);
        let how = process::wait(self.process.pid);
        if let Some(checker) = self.checker.take() {
            checker.stop(false);
        }
        how
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testing::{checking, fake_checker_script, write_counters, Counters, FINDING};
    use std::os::fd::AsFd;
    use std::time::Duration;
    use understudy_api::GateMode;

    fn detection() -> Detection {
        let s = Duration::from_secs(1);
        Detection { ping_interval: s, ping: s, request: s, probe: s, tx: s, warns: 0, warn_window: s }
    }

    /// `sh -c script`, standing in for a driver process: the DriverProcess
    /// reaps it (link.reap()), as it does a driver, not std's Child.
    #[allow(clippy::zombie_processes)]
    fn shell(script: &str) -> DriverProcess {
        let child = std::process::Command::new("/bin/sh").args(["-c", script]).spawn().unwrap();
        process::watch(child.id() as libc::pid_t).unwrap()
    }

    /// A link to `sh -c script` standing in for a driver process, checked by
    /// `checker`, and the trace region they share.
    fn checked_link(script: &str, checking: &Checking) -> (DriverLink, OwnedFd) {
        let region = check::create_region().unwrap();
        let mut checker = Checker::spawn(checking, region.as_fd(), "0000:00:02.0", Vec::new()).unwrap();
        let process = shell(script);
        checker.driver_started(process.pid);
        let (control, _driver_end) = fd::seqpacket_pair().unwrap();
        let link = DriverLink::new(Spawned { control, process, checker: Some(checker) }, detection(), Instant::now())
            .unwrap();
        (link, region)
    }

    /// Reads the checker until it says the driver must end, for at most 5 s.
    fn alarm(link: &mut DriverLink) -> Option<Fault> {
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            let mut fds = [fd::readable(link.checker_fd()?)];
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(fds.as_mut_ptr(), 1, 100) };
            if let Err(fault) = link.read_checker() {
                return Some(fault);
            }
        }
        None
    }

    #[test]
    fn a_checker_that_dies_ends_its_driver_with_fake_checker_script() {
        let script = fake_checker_script("link-dies", "exit 1");
        let c = checking(&script.path, GateMode::Stringent);
        let (mut link, _region) = checked_link("exec sleep 30", &c);
        let Some(Fault::CheckerGone(why)) = alarm(&mut link) else { panic!("a dead checker was not a fault") };
        let why = Fault::CheckerGone(why).describe();
        assert!(why.contains("exited with status 1: its driver's device writes are no longer approved"), "{why}");
        assert!(link.end().starts_with("killed by signal 9"));
    }

    #[test]
    fn a_driver_hung_on_a_checker_that_approves_nothing_is_put_down_to_it_with_fake_checker_script() {
        let script = fake_checker_script("link-hung", "exec sleep 30");
        let c = checking(&script.path, GateMode::Stringent);
        let (mut link, region) = checked_link("exec sleep 30", &c);
        let (t0, hung) = (Instant::now(), || "hung: no reply to PING within 1000 ms".to_string());
        write_counters(region.as_fd(), Counters { head: 9, producer_waiting: false, approved: 7 });
        link.observe_checker(t0);
        // A driver hung elsewhere than on its checker is only hung.
        assert!(matches!(link.hung(hung(), t0 + Duration::from_secs(1)), Fault::Io(h) if h == hung()));
        write_counters(region.as_fd(), Counters { head: 9, producer_waiting: true, approved: 7 });
        link.observe_checker(t0 + Duration::from_secs(2));
        let fault = link.hung(hung(), t0 + Duration::from_secs(4));
        assert!(matches!(fault, Fault::CheckerHung(_)), "{}", fault.describe());
        let why = fault.describe();
        assert!(why.starts_with("hung: no reply to PING within 1000 ms: checker "), "{why}");
        assert!(why.ends_with("approved nothing for at least 2.0 s while the driver waited on it (approved 7 of 9 events), so no \
                               device write passed meanwhile; the driver and its checker are ended (a restart starts \
                               both afresh)"), "{why}");
        assert!(link.end().starts_with("killed by signal 9"));
        // The checker was ended as hung: killed, with no SIGTERM and grace for a summary.
        let report = c.log.lock().unwrap().report(String::new(), String::new(), None);
        assert_eq!(report.incarnations[0].ended.as_deref(), Some("killed: hung (killed by signal 9 (Killed))"));
    }

    #[test]
    fn a_driver_stopped_at_its_gate_dies_of_the_verdict_with_fake_checker_script() {
        let script = fake_checker_script("link-gate", &format!("echo '{FINDING}'\nexec sleep 30"));
        let c = checking(&script.path, GateMode::Permissive);
        let (mut link, _region) = checked_link("sleep 0.5; exit 3", &c);
        let Some(Fault::Verdict(verdict)) = alarm(&mut link) else { panic!("a fatal finding was not a verdict") };
        assert_eq!(verdict, "use-after-free at e1000:e1000_xmit_frame+0x4c (event 3)");
        let pid = link.pid();
        assert_eq!(link.reap(), format!("the driver process {pid} was stopped by its checker's verdict before a device \
                                         write: use-after-free at e1000:e1000_xmit_frame+0x4c (event 3)"));
    }

    #[test]
    fn an_unchecked_driver_exiting_with_3_is_only_an_exit() {
        let process = shell("exit 3");
        let pid = process.pid;
        let (control, _driver_end) = fd::seqpacket_pair().unwrap();
        let link = DriverLink::new(Spawned { control, process, checker: None }, detection(), Instant::now())
            .unwrap();
        assert_eq!(link.reap(), format!("the driver process {pid} exited with status 3"));
    }
}
