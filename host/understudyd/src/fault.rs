// SPDX-License-Identifier: GPL-2.0
//! Why a device's thread ends its driver: the faults every class shares
//! (protocol violations, a dead or hung driver or checker, a device the
//! kernel takes back), with the words the log and `status` give them.

use understudy_shm::ShmError;

/// Why the event loop ends the driver.
pub enum Fault {
    Violation(String),
    Io(String),
    /// The driver closed its control socket: usually it is exiting.
    Closed,
    /// `understudy recover`.
    RecoverRequested,
    /// The kernel asked for the device back: it is being hot-unplugged or unbound.
    DeviceRemoved,
    /// The driver's checker is gone: nothing approves its device writes any
    /// more, so it must not go on (docs/checking.md, "Failing closed").
    CheckerGone(String),
    /// The driver missed a deadline while it waited on a checker that
    /// approved nothing: the checker is hung, and is ended with it.
    CheckerHung(String),
    /// Its checker's fatal verdict: its own gate should stop it, but the
    /// gate runs in the untrusted process.
    Verdict(String),
}

impl Fault {
    /// Why the driver is ended, for the log and `status`.
    pub fn describe(self) -> String {
        match self {
            Fault::Violation(v) => format!("protocol violation: {v}"),
            Fault::Io(e) => e,
            Fault::Closed => "the driver closed its control socket".into(),
            Fault::RecoverRequested => "restart requested (`understudy recover`)".into(),
            Fault::DeviceRemoved => "the kernel asked for the device back (hot-unplug or unbind)".into(),
            Fault::CheckerGone(why) => format!("{why}: its driver's device writes are no longer approved, so the driver \
                                                is ended (a restart gets a fresh checker)"),
            Fault::CheckerHung(why) => format!("{why}; the driver and its checker are ended (a restart starts both \
                                                afresh)"),
            Fault::Verdict(verdict) => format!("its checker's fatal verdict: {verdict}"),
        }
    }
}

/// What a driver wrote into the memory it shares with the daemon is garbage.
impl From<ShmError> for Fault {
    fn from(e: ShmError) -> Self {
        Fault::Violation(e.to_string())
    }
}
