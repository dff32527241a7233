// SPDX-License-Identifier: GPL-2.0
//! What the CLI sees of checking (docs/checking.md): the gate's mode asked
//! for by `run --check`, the `check` object of `status`, and `check report`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How the driver's device writes wait for the checker (docs/checking.md,
/// "The gate"; `enum us_gate_mode` of include/understudy/trace.h).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum GateMode {
    /// Writes flow; findings are only reported.
    Triage,
    /// Writes flow; a fatal verdict stops the driver before its next device write.
    Permissive,
    /// Each device write waits until the checker approved everything before it.
    Stringent,
}

impl GateMode {
    /// The name on command lines (`--check`, the driver's `--gate`) and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            GateMode::Triage => "triage",
            GateMode::Permissive => "permissive",
            GateMode::Stringent => "stringent",
        }
    }

    /// Whether a fatal finding is a verdict that stops the driver (not in triage).
    pub fn stops_on_fatal(self) -> bool {
        self != GateMode::Triage
    }
}

impl fmt::Display for GateMode {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for GateMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [GateMode::Triage, GateMode::Permissive, GateMode::Stringent].into_iter().find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown gate mode {s:?}: triage, permissive or stringent"))
    }
}

/// `status`'s `check` object: present when the device runs checked.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CheckStatus {
    pub mode: GateMode,
    /// The checker of the driver process that serves now.
    pub checker_pid: Option<u32>,
    /// The CPU the checkers are pinned to, if any (none: they share the driver's).
    pub checker_cpu: Option<u32>,
    /// Events checked, by every checker the device has had.
    pub events: u64,
    /// The serving driver's checker's rate at its last progress line.
    pub events_per_s: f64,
    /// Distinct findings (kind and site), across the device's driver processes.
    pub findings: u32,
    /// Fatal verdicts: driver processes stopped by their checker.
    pub verdicts: u32,
    /// The last thing that went wrong with checking ("checker ... died ...").
    pub last_error: Option<String>,
}

/// Where a finding is, as the checker symbolised it from the module's `.ko`.
/// Every field is the checker's text, cut to a bounded length and stripped
/// of control characters; null when the checker could not tell.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FindingSite {
    pub module: Option<String>,
    pub function: Option<String>,
    /// Within `function`, "0x1a3".
    pub offset: Option<String>,
    /// In the loaded image.
    pub address: Option<String>,
}

impl fmt::Display for FindingSite {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let module = self.module.as_deref().unwrap_or("?");
        match (&self.function, &self.offset) {
            (Some(function), Some(offset)) => write!(f, "{module}:{function}+{offset}"),
            (Some(function), None) => write!(f, "{module}:{function}"),
            _ => write!(f, "{module}@{}", self.address.as_deref().unwrap_or("?")),
        }
    }
}

/// One distinct finding of a device's checkers, with how often it was seen.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Finding {
    /// memory, dma, race (the checker's names; kept as given).
    pub checker: String,
    /// use-after-free, device-owned-write, data-race, ... (kept as given).
    pub kind: String,
    /// A kind that stops the driver (except in triage mode).
    pub fatal: bool,
    pub site: FindingSite,
    /// Occurrences, over every driver process that had it.
    pub count: u64,
    /// The driver processes that had it, oldest first (the last 32).
    pub seen_in: Vec<SeenIn>,
    /// The checker's own line for its first occurrence: `site` in full,
    /// `access`, `other`, `event` (docs/checking.md, "Findings").
    pub detail: serde_json::Value,
}

/// A finding in one driver process.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SeenIn {
    /// Which of the device's checked driver processes (`Incarnation::number`).
    pub incarnation: u32,
    pub driver_pid: Option<u32>,
    pub count: u64,
}

/// A driver process stopped by its checker's fatal verdict.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Verdict {
    pub incarnation: u32,
    pub driver_pid: Option<u32>,
    /// The fatal finding ("use-after-free at e1000:e1000_clean_rx_irq+0x1a3"),
    /// or why the checker stopped approving.
    pub cause: String,
}

/// One checked driver process of the device and its checker.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Incarnation {
    /// 1 for the device's first checked driver process, then counting up.
    pub number: u32,
    pub driver_pid: Option<u32>,
    pub checker_pid: u32,
    /// The modules it ran.
    pub modules: Vec<String>,
    pub events: u64,
    pub events_per_s: f64,
    /// Distinct findings its checker reported.
    pub findings: u32,
    /// How its checker ended; none while it runs.
    pub ended: Option<String>,
    /// Where its events came from, at its checker's last progress line:
    /// `by_kind` counts and the `functions` with the largest shares of a
    /// sample (docs/checking.md, "What it costs").
    #[serde(default)]
    pub profile: Option<serde_json::Value>,
}

/// `understudy check report`: everything the device's checkers found.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CheckReport {
    pub device: String,
    pub ifname: String,
    pub status: CheckStatus,
    /// Most frequent first.
    pub findings: Vec<Finding>,
    /// Distinct findings beyond the daemon's limit, not kept (their occurrences are not counted).
    pub findings_not_kept: u64,
    /// Oldest first: the last 100.
    pub verdicts: Vec<Verdict>,
    /// Oldest first: the last 100.
    pub incarnations: Vec<Incarnation>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_modes_read_and_print_as_the_driver_takes_them() {
        for name in ["triage", "permissive", "stringent"] {
            let mode: GateMode = name.parse().unwrap();
            assert_eq!(mode.name(), name);
            assert_eq!(serde_json::to_string(&mode).unwrap(), format!("\"{name}\""));
        }
        assert!("strict".parse::<GateMode>().is_err());
        assert!(!GateMode::Triage.stops_on_fatal() && GateMode::Permissive.stops_on_fatal());
    }

    #[test]
    fn a_site_reads_as_module_function_offset() {
        let site = |f: Option<&str>, o: Option<&str>| FindingSite {
            module: Some("e1000".into()), function: f.map(Into::into), offset: o.map(Into::into), address: Some("0x1003f21".into()),
        };
        assert_eq!(site(Some("e1000_clean_rx_irq"), Some("0x1a3")).to_string(), "e1000:e1000_clean_rx_irq+0x1a3");
        assert_eq!(site(None, None).to_string(), "e1000@0x1003f21");
    }
}
