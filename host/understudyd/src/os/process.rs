// SPDX-License-Identifier: GPL-2.0
//! Starting the driver process with exactly the fds docs/protocol.md names
//! (and, when it is checked, its trace region: docs/checking.md), and
//! learning how it ended.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use understudy_api::GateMode;
use understudy_vfio::{Handoff, PciAddress};

use crate::os::placement::Placement;

/// The fds a driver process inherits, by their command-line option.
pub struct DriverFds<'a> {
    pub control: BorrowedFd<'a>,
    /// The device's back-end: `--device-fd` (VFIO) or `--uio-fds`.
    pub device: Handoff<'a>,
    pub arena: BorrowedFd<'a>,
    /// Without an IOMMU, the arena's physical addresses (`--dma-chunks-fd`).
    pub dma_chunks: Option<BorrowedFd<'a>>,
    pub rings: BorrowedFd<'a>,
    pub kick: BorrowedFd<'a>,
    pub notify: BorrowedFd<'a>,
    /// The driver's queues of the TAP (`--tap-fd`, once each), attached
    /// again before the process starts; a prober has none.
    pub tap: Vec<BorrowedFd<'a>>,
    /// A checked driver's trace region and gate (`--trace-fd N --gate MODE`).
    pub trace: Option<(BorrowedFd<'a>, GateMode)>,
}

pub struct DriverProcess {
    pub pid: libc::pid_t,
    /// Readable when the process has exited (pidfd_open, Linux >= 5.3).
    pub pidfd: OwnedFd,
}

/// The user and group a driver process runs as once it holds its device
/// (docs/design.md §0, "The driver process's sandbox").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
}

/// understudyd --driver-uid-base's default.
pub const DEFAULT_DRIVER_UID_BASE: u32 = 0x4000_0000;

/// How the daemon starts driver processes: the executable (understudyd
/// --driver) and the base of the users they run as (--driver-uid-base).
#[derive(Debug, Clone)]
pub struct DriverCommand {
    pub binary: PathBuf,
    pub uid_base: u32,
}

impl DriverCommand {
    /// The user and group of the driver process of the device at `address`.
    pub fn identity(&self, address: &PciAddress) -> Result<Identity, String> {
        Identity::of_device(self.uid_base, address)
    }
}

impl Identity {
    /// A device's own: the base plus its PCI address as a number, an ID no
    /// account has, so that no two drivers and no user share one.
    fn of_device(base: u32, address: &PciAddress) -> Result<Identity, String> {
        match base.checked_add(address.number()).filter(|&id| id != u32::MAX) {
            Some(id) => Ok(Identity { uid: id, gid: id }),
            None => Err(format!("{address}: no driver user ID above --driver-uid-base {base} for this address")),
        }
    }
}

/// The environment variable naming a command the driver process is run
/// under: its words (split at whitespace, no quoting) come before the
/// driver's own command line, e.g. `valgrind --tool=memcheck`
/// (docs/debugging.md, "Run a driver under Valgrind"). Host configuration,
/// trusted like the daemon's options; the wrapper must exec the driver in
/// the same process, since the daemon watches that pid.
pub const WRAPPER_ENV: &str = "UNDERSTUDY_DRIVER_WRAPPER";

/// `binary`, or `wrapper`'s words followed by `binary` when it has any.
fn driver_command(wrapper: Option<&str>, binary: &Path) -> Command {
    let mut words = wrapper.unwrap_or("").split_whitespace();
    match words.next() {
        Some(program) => {
            let mut cmd = Command::new(program);
            cmd.args(words).arg(binary);
            cmd
        }
        None => Command::new(binary),
    }
}

/// Starts `binary` with `fds`, to run as `identity` once it holds its
/// device, bound to `placement`'s CPU if given (its TX thread polling if
/// the placement says so), under the command in
/// $UNDERSTUDY_DRIVER_WRAPPER if set.
pub fn spawn(binary: &Path, fds: &DriverFds, identity: Identity, placement: Option<Placement>)
             -> io::Result<DriverProcess> {
    let named: [(&str, RawFd); 5] = [
        ("--control-fd", fds.control.as_raw_fd()),
        ("--arena-fd", fds.arena.as_raw_fd()),
        ("--rings-fd", fds.rings.as_raw_fd()),
        ("--kick-fd", fds.kick.as_raw_fd()),
        ("--notify-fd", fds.notify.as_raw_fd()),
    ];
    let mut cmd = driver_command(std::env::var(WRAPPER_ENV).ok().as_deref(), binary);
    for (opt, fd) in named {
        cmd.arg(opt).arg(fd.to_string());
    }
    cmd.arg("--run-as").arg(format!("{}:{}", identity.uid, identity.gid));
    let mut inherited: Vec<RawFd> = named.iter().map(|&(_, fd)| fd).collect();
    for (opt, value) in &fds.device.args {
        cmd.arg(opt).arg(value);
    }
    inherited.extend(fds.device.fds.iter().map(|fd| fd.as_raw_fd()));
    if let Some(chunks) = fds.dma_chunks {
        cmd.arg("--dma-chunks-fd").arg(chunks.as_raw_fd().to_string());
        inherited.push(chunks.as_raw_fd());
    }
    for &queue in &fds.tap {
        // A predecessor may have detached it.
        crate::class::net::tap::attach_driver_queue(queue)?;
        cmd.arg("--tap-fd").arg(queue.as_raw_fd().to_string());
        inherited.push(queue.as_raw_fd());
    }
    if let Some(poll_us) = placement.and_then(|p| p.poll_us) {
        cmd.arg("--poll-us").arg(poll_us.to_string());
    }
    if let Some((region, gate)) = fds.trace {
        cmd.arg("--trace-fd").arg(region.as_raw_fd().to_string()).arg("--gate").arg(gate.name());
        inherited.push(region.as_raw_fd());
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &inherited {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // The daemon blocks SIGINT and SIGTERM to wait for them, and a
            // mask survives exec: without this, a SIGTERM (the end a tool
            // such as valgrind reports at) would stay pending in the driver.
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            // A driver never outlives its daemon: the daemon holds its device.
            // (The signal follows the thread that forked: the device's supervisor.)
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if let Some(p) = &placement {
                p.place_driver_process()?;
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| io::Error::new(e.kind(), format!("cannot start the driver process {}: {e}", Path::new(cmd.get_program()).display())))?;
    let pid = child.id() as libc::pid_t;
    watch(pid).inspect_err(|_| {
        kill(pid);
        wait(pid);
    })
}

/// A driver process of ours, with a pidfd that becomes readable when it exits.
pub fn watch(pid: libc::pid_t) -> io::Result<DriverProcess> {
    // SAFETY: plain syscall; the result is a new fd we own.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as RawFd;
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pidfd_open returned a fresh fd nobody else owns.
    Ok(DriverProcess { pid, pidfd: unsafe { OwnedFd::from_raw_fd(raw) } })
}

pub fn kill(pid: libc::pid_t) {
    // SAFETY: our own child, not yet reaped, so the pid cannot be reused.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// How a process ended: its wait status, or why it could not be reaped.
pub struct Ended(Result<libc::c_int, String>);

impl Ended {
    /// Its exit status, if it exited.
    pub fn exit_code(&self) -> Option<i32> {
        self.0.as_ref().ok().filter(|&&s| libc::WIFEXITED(s)).map(|&s| libc::WEXITSTATUS(s))
    }

    pub fn describe(&self) -> String {
        match &self.0 {
            Ok(status) => describe_status(*status),
            Err(e) => e.clone(),
        }
    }
}

/// Reaps the process (blocking).
pub fn reap(pid: libc::pid_t) -> Ended {
    let mut status = 0;
    // SAFETY: our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r < 0 {
        return Ended(Err(format!("could not be reaped: {}", io::Error::last_os_error())));
    }
    Ended(Ok(status))
}

/// Reaps the process (blocking) and says how it ended.
pub fn wait(pid: libc::pid_t) -> String {
    reap(pid).describe()
}

pub fn describe_status(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // SAFETY: strsignal returns a static or thread-local string.
        let name = unsafe { std::ffi::CStr::from_ptr(libc::strsignal(sig)) }.to_string_lossy().into_owned();
        format!("killed by signal {sig} ({name}){}", if libc::WCOREDUMP(status) { ", core dumped" } else { "" })
    } else {
        format!("ended with wait status {status:#x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses_read_well() {
        assert_eq!(describe_status(3 << 8), "exited with status 3");
        assert!(describe_status(9).starts_with("killed by signal 9 (Killed"));
    }

    #[test]
    fn a_wrapper_comes_before_the_driver() {
        let words = |cmd: &Command| {
            std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|w| w.to_str().unwrap().to_owned()).collect::<Vec<_>>()
        };
        let driver = Path::new("/x/understudy-driver");
        assert_eq!(words(&driver_command(None, driver)), ["/x/understudy-driver"]);
        assert_eq!(words(&driver_command(Some(" "), driver)), ["/x/understudy-driver"]);
        assert_eq!(words(&driver_command(Some("valgrind  --tool=memcheck -q"), driver)),
                   ["valgrind", "--tool=memcheck", "-q", "/x/understudy-driver"]);
    }

    #[test]
    fn each_device_has_its_own_driver_user() {
        let id = |a: &str| Identity::of_device(0x4000_0000, &a.parse().unwrap());
        assert_eq!(id("0000:00:03.0"), Ok(Identity { uid: 0x4000_0018, gid: 0x4000_0018 }));
        assert_eq!(id("0000:01:00.0").unwrap().uid, 0x4000_0100);
        assert!(Identity::of_device(u32::MAX - 0x18, &"0000:00:03.0".parse().unwrap()).is_err(), "-1 is no ID");
        assert!(Identity::of_device(u32::MAX - 5, &"0000:00:03.0".parse().unwrap()).is_err(), "past the last ID");
    }

    #[test]
    fn only_an_exit_has_an_exit_code() {
        assert_eq!(Ended(Ok(3 << 8)).exit_code(), Some(3));
        assert_eq!(Ended(Ok(9)).exit_code(), None);
        assert_eq!(Ended(Err("could not be reaped".into())).exit_code(), None);
    }
}
