// SPDX-License-Identifier: GPL-2.0
//! One checker process, `understudy-checker --trace-fd N [--cpu C]`, and
//! what it prints (docs/checking.md, "The checker process"). It lives
//! exactly as long as its driver process: it is started just before it,
//! and stopped -- asked with SIGTERM to print its summary, killed if it
//! does not within `STOP_GRACE` -- when it ends. A checker that approves
//! nothing while its driver waits on it is hung (`hung`): the driver's
//! missed deadline is put down to it, and it is killed without a grace.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use log::{info, warn};

use super::lines::{self, Framed, Line, Lines, MAX_LINE};
use super::findings::CheckLog;
use super::region::{self, Counters};
use super::Checking;
use crate::os::fd;
use crate::os::process;

/// How long a stopped checker may take to print its summary and exit.
pub const STOP_GRACE: Duration = Duration::from_millis(500);
/// How long a checker that closed its output may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_millis(200);
/// At most this much output is read at once, so a chatty checker cannot
/// keep the device's thread from its other work.
const READ_AT_ONCE: usize = 256 << 10;
/// Malformed lines logged per checker; the rest are only counted.
const MALFORMED_LOGGED: u32 = 10;
/// How often the region's counters are looked at (`observe`), and the
/// least time a checker must have approved nothing to be called hung.
const OBSERVE_EVERY: Duration = Duration::from_millis(200);

pub struct Checker {
    pub pid: libc::pid_t,
    /// Its stdout, non-blocking; `None` once it was closed.
    stdout: Option<OwnedFd>,
    lines: Lines,
    log: Arc<Mutex<CheckLog>>,
    incarnation: u32,
    label: String,
    driver_pid: Option<libc::pid_t>,
    malformed: u32,
    /// The summary's error, for the description of its end.
    error: Option<String>,
    /// The daemon's own fd of the trace region, for its counters.
    region: OwnedFd,
    /// Since when the driver has waited on an `approved` that did not move.
    stall: Option<Stall>,
    last_observed: Option<Instant>,
    /// Why it was found hung: then it is killed without a grace.
    hung: Option<String>,
}

/// The driver waits on the checker, which has approved nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stall {
    approved: u64,
    since: Instant,
}

impl Stall {
    /// The stall that the counters `c`, read at `now`, continue or begin;
    /// none if the driver does not wait on the checker. The producer waits
    /// until `approved` reaches its target or the checker gives a verdict
    /// (runtime/check/producer.c, `wait_approved`), so while `approved`
    /// does not move, the driver waits one wait from `since` on.
    fn next(previous: Option<Stall>, c: Counters, now: Instant) -> Option<Stall> {
        if !c.producer_waiting || c.head <= c.approved {
            return None;
        }
        match previous {
            Some(p) if p.approved == c.approved => Some(p),
            _ => Some(Stall { approved: c.approved, since: now }),
        }
    }
}

/// Why the driver must stop now.
#[derive(Debug, PartialEq, Eq)]
pub enum Alarm {
    /// The checker is gone: nothing approves the driver's device writes any more.
    Gone(String),
    /// A fatal verdict.
    Verdict(String),
}

impl Checker {
    /// Starts a checker for `region`, for a driver process of `label`'s
    /// device that will run `modules`.
    pub fn spawn(checking: &Checking, region: BorrowedFd, label: &str, modules: Vec<String>) -> io::Result<Checker> {
        let trace_fd = region.as_raw_fd();
        let own_region = region.try_clone_to_owned()?;
        let mut cmd = Command::new(&checking.binary);
        cmd.arg("--trace-fd").arg(trace_fd.to_string());
        if let Some(cpu) = checking.cpu {
            cmd.arg("--cpu").arg(cpu.to_string());
        }
        // Its log (stderr) joins the daemon's.
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(trace_fd, libc::F_SETFD, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
                // Like a driver, a checker never outlives its daemon.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd.spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start the checker {}: {e}", checking.binary.display())))?;
        let pid = child.id() as libc::pid_t;
        let stdout: OwnedFd = child.stdout.take().expect("piped").into();
        if let Err(e) = fd::set_nonblocking(stdout.as_fd()) {
            process::kill(pid);
            process::wait(pid);
            return Err(e);
        }
        let incarnation = lock(&checking.log).begin(pid as u32, modules);
        Ok(Checker {
            pid, stdout: Some(stdout), lines: Lines::new(MAX_LINE), log: checking.log.clone(), incarnation,
            label: label.to_string(), driver_pid: None, malformed: 0, error: None,
            region: own_region, stall: None, last_observed: None, hung: None,
        })
    }

    /// Its driver process started.
    pub fn driver_started(&mut self, pid: libc::pid_t) {
        self.driver_pid = Some(pid);
        lock(&self.log).driver_started(self.incarnation, pid as u32);
    }

    /// Readable when it printed something or closed its output.
    pub fn stdout(&self) -> Option<BorrowedFd<'_>> {
        self.stdout.as_ref().map(|s| s.as_fd())
    }

    /// Takes what it printed. An alarm says the driver must be ended: the
    /// checker is gone, or gave a fatal verdict (docs/checking.md, "Failing
    /// closed").
    pub fn read(&mut self) -> Result<(), Alarm> {
        let verdict = self.read_available();
        if self.stdout.is_none() {
            let how = self.reap_after_close();
            let why = format!("checker {} of driver process {} {how}", self.pid, self.driver());
            lock(&self.log).ended(self.incarnation, how, Some(format!("{why}: its driver was ended")));
            return Err(Alarm::Gone(why));
        }
        verdict.map_or(Ok(()), |v| Err(Alarm::Verdict(v)))
    }

    /// Reads up to `READ_AT_ONCE` bytes; returns a verdict they carried.
    fn read_available(&mut self) -> Option<String> {
        let mut verdict = None;
        let mut buf = [0u8; 16 << 10];
        let mut taken = 0;
        while taken < READ_AT_ONCE {
            let Some(stdout) = &self.stdout else { break };
            match nix::unistd::read(stdout.as_raw_fd(), &mut buf) {
                Ok(0) => self.stdout = None,
                Ok(n) => {
                    taken += n;
                    for framed in self.lines.push(&buf[..n]) {
                        verdict = self.take(framed).or(verdict);
                    }
                }
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    warn!("{}: reading checker {}: {e}", self.label, self.pid);
                    self.stdout = None;
                }
            }
        }
        verdict
    }

    fn take(&mut self, framed: Framed) -> Option<String> {
        let parsed = match framed {
            Framed::Line(line) => lines::parse(&line),
            Framed::TooLong => Err(format!("a line longer than {MAX_LINE} bytes")),
        };
        let line = match parsed {
            Ok(line) => line,
            Err(why) => {
                self.malformed += 1;
                if self.malformed <= MALFORMED_LOGGED {
                    warn!("{}: checker {} printed a line the daemon does not take ({why}); ignored{}", self.label, self.pid,
                          if self.malformed == MALFORMED_LOGGED { "; further ones are not logged" } else { "" });
                }
                return None;
            }
        };
        match &line {
            Line::Unknown(kind) => info!("{}: checker {} printed a {kind:?} line, which this daemon does not know; ignored",
                                          self.label, self.pid),
            Line::Summary(s) => self.error = s.error.clone(),
            _ => {}
        }
        let effect = lock(&self.log).line(self.incarnation, line);
        if let Some(finding) = &effect.new_finding {
            warn!("{}: checker {} found {finding} in driver process {}", self.label, self.pid, self.driver());
        }
        effect.verdict
    }

    /// Looks at the region's counters, at most every `OBSERVE_EVERY`: how
    /// long the driver has waited on an `approved` that does not move.
    pub fn observe(&mut self, now: Instant) {
        if self.last_observed.is_some_and(|t| now < t + OBSERVE_EVERY) {
            return;
        }
        self.last_observed = Some(now);
        self.stall = region::counters(self.region.as_fd()).ok().and_then(|c| Stall::next(self.stall, c, now));
    }

    /// The driver missed a deadline at `now`: if it has waited on its
    /// checker all along, and the checker approved nothing for at least
    /// `OBSERVE_EVERY`, the checker is hung: says how, and `stop` then kills
    /// it without a grace (docs/checking.md, "Failing closed").
    ///
    /// The counters are the driver's word (region.rs): a driver that forges
    /// them changes only how its own hang is described, and ends the same.
    pub fn hung(&mut self, now: Instant) -> Option<String> {
        let c = region::counters(self.region.as_fd()).ok()?;
        self.last_observed = Some(now);
        self.stall = Stall::next(self.stall, c, now);
        let waited = now.duration_since(self.stall?.since);
        if waited < OBSERVE_EVERY {
            return None;
        }
        // While the producer waits it holds the driver's CPU, so none of the
        // driver's code runs, and a stringent gate lets no write out before
        // its events are approved (docs/checking.md, "The gate").
        let why = format!("checker {} of driver process {} approved nothing for at least {:.1} s while the driver \
                           waited on it (approved {} of {} events), so no device write passed meanwhile",
                          self.pid, self.driver(), waited.as_secs_f64(), c.approved, c.head);
        self.hung = Some(why.clone());
        Some(why)
    }

    /// It closed its output: it is exiting, or is killed if it is not within `EXIT_GRACE`.
    fn reap_after_close(&mut self) -> String {
        let exited = process::watch(self.pid).is_ok_and(|p| {
            let mut fds = [fd::readable(p.pidfd.as_fd())];
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(fds.as_mut_ptr(), 1, EXIT_GRACE.as_millis() as libc::c_int) > 0 }
        });
        if !exited {
            process::kill(self.pid);
        }
        let how = process::wait(self.pid);
        let how = if exited { how } else { format!("closed its output and was killed ({how})") };
        match self.error.take() {
            Some(e) => format!("{how}: {e}"),
            None => how,
        }
    }

    /// The driver process ended: asks the checker for its summary (SIGTERM),
    /// reads it for at most `STOP_GRACE`, then kills and reaps it. Returns
    /// the incarnation's verdict, if it had one; with `at_gate` (the driver
    /// said its gate stopped it), one is recorded if the checker gave none.
    pub fn stop(mut self, at_gate: bool) -> Option<String> {
        self.finish();
        let mut log = lock(&self.log);
        if at_gate { log.stopped_at_gate(self.incarnation) } else { log.verdict_of(self.incarnation).map(str::to_string) }
    }

    fn finish(&mut self) {
        if self.stdout.is_none() {
            return;
        }
        if let Some(why) = self.hung.take() {
            // It would print no summary: SIGKILL ends it stopped or not.
            process::kill(self.pid);
            let how = format!("killed: hung ({})", process::wait(self.pid));
            self.stdout = None;
            lock(&self.log).ended(self.incarnation, how, Some(format!("{why}: its driver was ended")));
            return;
        }
        // SAFETY: our own child, not yet reaped.
        unsafe { libc::kill(self.pid, libc::SIGTERM) };
        let end = Instant::now() + STOP_GRACE;
        while let Some(stdout) = &self.stdout {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let mut fds = [fd::readable(stdout.as_fd())];
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(fds.as_mut_ptr(), 1, left.as_millis().max(1) as libc::c_int) } > 0 {
                self.read_available();
            }
        }
        let summarised = self.stdout.is_none();
        process::kill(self.pid);
        let how = process::wait(self.pid);
        let how = if summarised { format!("stopped with its driver ({how})") }
                  else { format!("killed: no summary within {} ms ({how})", STOP_GRACE.as_millis()) };
        self.stdout = None;
        lock(&self.log).ended(self.incarnation, how, None);
    }

    fn driver(&self) -> String {
        self.driver_pid.map_or("(not started)".into(), |p| p.to_string())
    }
}

impl Drop for Checker {
    /// A checker never outlives its driver link (see `stop`).
    fn drop(&mut self) {
        self.finish();
    }
}

fn lock(log: &Mutex<CheckLog>) -> MutexGuard<'_, CheckLog> {
    log.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testing::{checking, fake_checker_script};
    use super::super::region::write_counters;
    use understudy_api::GateMode;

    /// Reads until the checker has something to say that ends the driver, or `limit` passes.
    fn read_until_alarm(c: &mut Checker, limit: Duration) -> Option<Alarm> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            let Some(stdout) = c.stdout() else { break };
            let mut fds = [fd::readable(stdout)];
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(fds.as_mut_ptr(), 1, 100) };
            if let Err(alarm) = c.read() {
                return Some(alarm);
            }
        }
        None
    }

    use crate::check::testing::FINDING;

    #[test]
    fn a_checker_that_dies_under_its_driver_is_an_alarm_with_fake_checker_script() {
        let script = fake_checker_script("dies", &format!(
            "[ \"$1\" = --trace-fd ] && [ -e /proc/$$/fd/$2 ] || exit 9\necho 'not json'\necho '{FINDING}'\nexit 1"));
        let c = checking(&script.path, GateMode::Triage);
        let region = super::super::region::create().unwrap();
        let mut checker = Checker::spawn(&c, region.as_fd(), "0000:00:02.0", vec!["/m/e1000.ko".into()]).unwrap();
        checker.driver_started(4242);
        let alarm = read_until_alarm(&mut checker, Duration::from_secs(5));
        // Fail closed: a checker that ends by itself means the driver must be ended.
        match alarm {
            Some(Alarm::Gone(why)) => assert!(why.contains("of driver process 4242 exited with status 1"), "{why}"),
            other => panic!("not a death: {other:?}"),
        }
        // What it printed before it died is kept; triage made no verdict of the fatal kind.
        let status = c.log.lock().unwrap().status(None);
        assert_eq!((status.findings, status.verdicts), (1, 0));
        assert!(status.last_error.unwrap().contains("exited with status 1"));
        assert_eq!(checker.stop(false), None);
    }

    #[test]
    fn a_fatal_finding_in_permissive_mode_is_a_verdict_with_fake_checker_script() {
        let script = fake_checker_script("verdict", &format!("echo '{FINDING}'\nexec sleep 30"));
        let c = checking(&script.path, GateMode::Permissive);
        let region = super::super::region::create().unwrap();
        let mut checker = Checker::spawn(&c, region.as_fd(), "0000:00:02.0", Vec::new()).unwrap();
        let alarm = read_until_alarm(&mut checker, Duration::from_secs(5));
        assert_eq!(alarm, Some(Alarm::Verdict("use-after-free at e1000:e1000_xmit_frame+0x4c (event 3)".into())));
        // The driver's exit at its gate is then put down to that verdict; the
        // sleeping checker is killed within the grace.
        let began = Instant::now();
        assert_eq!(checker.stop(true).as_deref(), Some("use-after-free at e1000:e1000_xmit_frame+0x4c (event 3)"));
        assert!(began.elapsed() < STOP_GRACE + Duration::from_secs(2));
        let report = c.log.lock().unwrap().report(String::new(), String::new(), None);
        assert!(report.incarnations[0].ended.as_deref().unwrap().starts_with("stopped with its driver"), "{:?}",
                report.incarnations[0].ended);
    }

    #[test]
    fn a_stall_is_a_wait_on_an_approved_that_does_not_move() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let waiting = Counters { head: 10, producer_waiting: true, approved: 4 };
        let begun = Stall::next(None, waiting, t0);
        assert_eq!(begun, Some(Stall { approved: 4, since: t0 }));
        assert_eq!(Stall::next(begun, Counters { head: 12, ..waiting }, t1), begun);
        // The checker approved more: a new stall, if any, begins now.
        assert_eq!(Stall::next(begun, Counters { approved: 5, ..waiting }, t1), Some(Stall { approved: 5, since: t1 }));
        // The driver does not wait, or waits on nothing the checker has not approved.
        assert_eq!(Stall::next(begun, Counters { producer_waiting: false, ..waiting }, t1), None);
        assert_eq!(Stall::next(begun, Counters { head: 4, ..waiting }, t1), None);
    }

    #[test]
    fn a_stopped_checker_its_driver_waits_on_is_hung_and_killed_at_once_with_fake_checker_script() {
        // It would print its summary at SIGTERM, were it not stopped.
        let summary = r#"{"summary": {"events": 4, "events_per_s": 1, "seconds": 4, "findings": [], "verdict_at": null}}"#;
        let script = fake_checker_script("hung", &format!(
            "trap \"echo '{summary}'; exit 0\" TERM\nwhile :; do sleep 0.05; done"));
        let c = checking(&script.path, GateMode::Stringent);
        let region = super::super::region::create().unwrap();
        let mut checker = Checker::spawn(&c, region.as_fd(), "0000:00:02.0", Vec::new()).unwrap();
        checker.driver_started(4242);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        write_counters(region.as_fd(), Counters { head: 10, producer_waiting: true, approved: 4 });
        checker.observe(at(0));
        // Too short a stall to blame the checker; a driver waiting on nothing unapproved does not either.
        assert_eq!(checker.hung(at(100)), None);
        write_counters(region.as_fd(), Counters { head: 4, producer_waiting: true, approved: 4 });
        assert_eq!(checker.hung(at(1000)), None);
        write_counters(region.as_fd(), Counters { head: 10, producer_waiting: true, approved: 4 });
        checker.observe(at(1100));
        // The checker approved more since: the stall began at the last look.
        write_counters(region.as_fd(), Counters { head: 10, producer_waiting: true, approved: 6 });
        checker.observe(at(1300));
        assert_eq!(checker.hung(at(1400)), None);
        // SAFETY: the test's own child.
        unsafe { libc::kill(checker.pid, libc::SIGSTOP) };
        let why = checker.hung(at(2800)).expect("a checker that approved nothing for 1.5 s is hung");
        assert_eq!(why, format!("checker {} of driver process 4242 approved nothing for at least 1.5 s while the driver waited \
                                 on it (approved 6 of 10 events), so no device write passed meanwhile", checker.pid));
        // Killed without the grace, though stopped, and reaped.
        let (pid, began) = (checker.pid, Instant::now());
        assert_eq!(checker.stop(false), None);
        assert!(began.elapsed() < STOP_GRACE, "{:?}", began.elapsed());
        // SAFETY: signal 0 only asks whether the pid exists.
        assert_eq!(unsafe { libc::kill(pid, 0) }, -1, "checker {pid} was not reaped");
        let report = c.log.lock().unwrap().report(String::new(), String::new(), None);
        assert_eq!(report.incarnations[0].ended.as_deref(), Some("killed: hung (killed by signal 9 (Killed))"));
        assert_eq!(report.status.last_error, Some(format!("{why}: its driver was ended")));
    }

    #[test]
    fn a_stopped_checker_gets_to_print_its_summary_with_fake_checker_script() {
        let summary = r#"{"summary": {"events": 77, "events_per_s": 7, "seconds": 11, "findings": [], "verdict_at": null}}"#;
        let script = fake_checker_script("summary", &format!(
            "summary() {{ echo '{summary}'; exit 0; }}\ntrap summary TERM\n\
             echo '{{\"progress\": {{\"events\": 5, \"events_per_s\": 5}}}}'\nwhile :; do sleep 0.05; done"));
        let c = checking(&script.path, GateMode::Stringent);
        let region = super::super::region::create().unwrap();
        let mut checker = Checker::spawn(&c, region.as_fd(), "0000:00:02.0", Vec::new()).unwrap();
        assert_eq!(read_until_alarm(&mut checker, Duration::from_millis(300)), None);
        assert_eq!(c.log.lock().unwrap().status(None).events, 5);
        checker.stop(false);
        let report = c.log.lock().unwrap().report(String::new(), String::new(), None);
        assert_eq!(report.status.events, 77);
        assert_eq!(report.incarnations[0].events_per_s, 7.0);
    }
}
