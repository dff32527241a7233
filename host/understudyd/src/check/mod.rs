// SPDX-License-Identifier: GPL-2.0
//! Running a device's driver processes under a checker (`understudy run
//! --check MODE`; docs/checking.md, docs/design.md §9).
//!
//! For every driver process of a checked device -- the first, every
//! restart, an update's successor, a move's -- the daemon creates a fresh
//! trace region (region.rs), starts a checker on it (checker.rs), then the
//! driver process with the same region and the gate's mode (`--trace-fd N
//! --gate MODE`). The checker's lines go into the device's log of findings
//! (findings.rs, lines.rs), which outlives the driver processes.
//!
//! The daemon fails closed: a checker that dies while its driver runs
//! leaves the driver's device writes unapproved, so the driver is ended and
//! restarted with a fresh checker; a driver that misses a deadline while it
//! waits on a checker that approves nothing is ended with that checker, and
//! the cause says so (checker.rs, `hung`); a fatal verdict ends the driver too,
//! whether or not its own gate (which runs in the untrusted process) stops
//! it first. A driver that exits with `EXIT_VERDICT` (understudy-protocol)
//! says its gate stopped it at the verdict; its restart's cause names the
//! verdict.
//!
//! Not checked: a prober -- the process that probes a move's destination or
//! a standby on scratch memory (docs/migration.md). It never serves, its
//! memory is mapped for its device alone, the device is stopped and reset
//! after it, and the successor that follows probes again, checked.

mod checker;
mod findings;
mod lines;
mod region;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use log::{info, warn};
use understudy_api::GateMode;

use crate::os::placement::Placement;

pub use checker::{Alarm, Checker};
pub use findings::CheckLog;
pub use region::create as create_region;

/// How a device is checked, and what its checkers found.
#[derive(Clone)]
pub struct Checking {
    pub mode: GateMode,
    /// `understudyd --checker`.
    pub binary: PathBuf,
    /// A CPU other than the driver's (placement.rs); none: the scheduler decides.
    pub cpu: Option<u32>,
    pub log: Arc<Mutex<CheckLog>>,
}

impl Checking {
    /// How `label`'s device is checked: its checkers on a CPU other than
    /// the driver's `placement` where there is one.
    pub fn new(label: &str, mode: GateMode, binary: PathBuf, placement: Option<Placement>) -> Self {
        let cpu = placement.and_then(|p| p.checker_cpu());
        match (placement, cpu) {
            (Some(p), Some(c)) => info!("{label}: checked in {mode} mode by {}, on CPU {c} (the driver's is {})",
                                        binary.display(), p.cpu),
            (Some(p), None) => warn!("{label}: checked in {mode} mode by {}; CPU {} is the only one the daemon may use, \
                                      so checking shares it with the driver and slows it", binary.display(), p.cpu),
            (None, _) => info!("{label}: checked in {mode} mode by {}; the driver and its checker go where the \
                                scheduler puts them (`run --cpu N` keeps them apart)", binary.display()),
        }
        info!("{label}: post-probe templates are off for a checked device (a template's forks would share its trace \
               region): a restart loads and probes the driver again");
        Checking { mode, binary, cpu, log: Arc::new(Mutex::new(CheckLog::new(mode, cpu))) }
    }

    /// A checker could not be started (the driver is not started either).
    pub fn failed(&self, why: &str) {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).error(format!("no checker could be started: {why}"));
    }
}

/// Why a driver process `pid` of a checked device ended, for the log and
/// its restart's record: `how` it ended, and whether it ended with
/// `EXIT_VERDICT` -- then `verdict` is its checker's, if it gave one.
pub fn death_cause(pid: libc::pid_t, how: &str, at_gate: bool, verdict: Option<&str>) -> String {
    match (at_gate, verdict) {
        (false, _) => format!("the driver process {pid} {how}"),
        (true, Some(v)) => format!("the driver process {pid} was stopped by its checker's verdict before a device write: {v}"),
        (true, None) => format!("the driver process {pid} {how}, which says its gate stopped it at the checker's verdict, \
                                 but its checker reported no fatal finding"),
    }
}

/// A stand-in for understudy-checker where a test needs a process.
#[cfg(test)]
pub mod testing {
    use std::path::{Path, PathBuf};

    use understudy_api::GateMode;

    use super::Checking;
    pub use super::region::{write_counters, Counters};

    /// A fatal finding, as understudy-checker prints it.
    pub const FINDING: &str = r#"{"finding": {"checker": "memory", "kind": "use-after-free", "fatal": true, "site": {"module": "e1000", "function": "e1000_xmit_frame", "offset": "0x4c", "address": "0x1003f21"}, "event": 3, "count": 1}}"#;

    /// A shell script standing in for understudy-checker, removed with this.
    pub struct FakeChecker {
        pub path: PathBuf,
    }

    impl Drop for FakeChecker {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.path.parent().expect("in its own directory"));
        }
    }

    /// A fake checker that runs `body`.
    pub fn fake_checker_script(name: &str, body: &str) -> FakeChecker {
        let dir = std::env::temp_dir().join(format!("understudyd-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("understudy-checker");
        crate::test_script::write(&path, body);
        FakeChecker { path }
    }

    pub fn checking(binary: &Path, mode: GateMode) -> Checking {
        Checking::new("0000:00:02.0", mode, binary.to_path_buf(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use understudy_protocol::EXIT_VERDICT;

    #[test]
    fn exit_status_3_of_a_checked_driver_is_put_down_to_the_verdict() {
        let how = crate::os::process::describe_status(EXIT_VERDICT << 8);
        assert_eq!(death_cause(7, &how, true, Some("use-after-free at e1000:e1000_xmit_frame+0x4c (event 3)")),
                   "the driver process 7 was stopped by its checker's verdict before a device write: \
                    use-after-free at e1000:e1000_xmit_frame+0x4c (event 3)");
        assert!(death_cause(7, &how, true, None).contains("exited with status 3, which says its gate stopped it"));
        assert_eq!(death_cause(7, "killed by signal 11 (Segmentation fault)", false, None),
                   "the driver process 7 killed by signal 11 (Segmentation fault)");
    }
}
