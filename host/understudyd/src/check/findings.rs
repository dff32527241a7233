// SPDX-License-Identifier: GPL-2.0
//! What a device's checkers found, over all its driver processes: a
//! restart does not erase what was found (docs/checking.md, "Findings").
//!
//! Each checker reports a finding once per driver process, when it first
//! sees it, and its final count in its summary; the same bug in the next
//! driver process is reported again by the next checker. Here a finding is
//! one (kind, site) of the device, with its occurrences summed over the
//! driver processes ("incarnations") that had it. Everything is bounded: at
//! most `FINDINGS_KEPT` distinct findings (later ones are only counted as
//! not kept), and the newest `RECOVERIES_KEPT` incarnations and verdicts.

use std::collections::HashMap;

use understudy_api::{CheckReport, CheckStatus, Finding, GateMode, Incarnation, SeenIn, Verdict, RECOVERIES_KEPT};

use super::lines::{FindingLine, Line};

/// Distinct findings kept per device.
pub const FINDINGS_KEPT: usize = 1000;
/// Driver processes named per finding (the newest).
const SEEN_IN_KEPT: usize = 32;

/// A finding's identity across driver processes: its kind and where it is
/// in the module. The load address is only used when the checker could
/// not name a function: it may differ from one process to the next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    kind: String,
    module: Option<String>,
    function: Option<String>,
    offset: Option<String>,
    address: Option<String>,
}

impl Key {
    fn of(f: &FindingLine) -> Key {
        let s = &f.site;
        Key {
            kind: f.kind.clone(),
            module: s.module.clone(),
            function: s.function.clone(),
            offset: s.offset.clone(),
            address: if s.function.is_some() { None } else { s.address.clone() },
        }
    }
}

struct Run {
    record: Incarnation,
    verdict: Option<String>,
    running: bool,
}

/// What one line changed that the device's thread acts on or logs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Effect {
    /// A finding the device had not had before, described.
    pub new_finding: Option<String>,
    /// The incarnation's first fatal verdict, described: its driver must stop.
    pub verdict: Option<String>,
}

pub struct CheckLog {
    mode: GateMode,
    checker_cpu: Option<u32>,
    cap: usize,
    findings: Vec<Finding>,
    index: HashMap<Key, usize>,
    not_kept: u64,
    runs: Vec<Run>,
    /// Events checked for incarnations no longer in `runs`.
    events_forgotten: u64,
    incarnations: u32,
    verdicts: Vec<Verdict>,
    verdict_count: u32,
    last_error: Option<String>,
}

impl CheckLog {
    pub fn new(mode: GateMode, checker_cpu: Option<u32>) -> Self {
        Self::with_cap(mode, checker_cpu, FINDINGS_KEPT)
    }

    fn with_cap(mode: GateMode, checker_cpu: Option<u32>, cap: usize) -> Self {
        CheckLog {
            mode, checker_cpu, cap,
            findings: Vec::new(), index: HashMap::new(), not_kept: 0,
            runs: Vec::new(), events_forgotten: 0, incarnations: 0,
            verdicts: Vec::new(), verdict_count: 0, last_error: None,
        }
    }

    /// A checker started for a driver process that runs `modules`; returns the incarnation's number.
    pub fn begin(&mut self, checker_pid: u32, modules: Vec<String>) -> u32 {
        self.incarnations += 1;
        if self.runs.len() >= RECOVERIES_KEPT {
            let gone = self.runs.remove(0);
            self.events_forgotten += gone.record.events;
        }
        self.runs.push(Run {
            record: Incarnation {
                number: self.incarnations, driver_pid: None, checker_pid, modules,
                events: 0, events_per_s: 0.0, findings: 0, ended: None, profile: None,
            },
            verdict: None,
            running: true,
        });
        self.incarnations
    }

    fn run(&mut self, incarnation: u32) -> Option<&mut Run> {
        self.runs.iter_mut().find(|r| r.record.number == incarnation)
    }

    pub fn driver_started(&mut self, incarnation: u32, pid: u32) {
        if let Some(r) = self.run(incarnation) {
            r.record.driver_pid = Some(pid);
        }
    }

    /// The incarnation's checker is gone (`how`); with `error`, that went wrong.
    pub fn ended(&mut self, incarnation: u32, how: String, error: Option<String>) {
        if let Some(r) = self.run(incarnation) {
            r.running = false;
            r.record.ended = Some(how);
        }
        if error.is_some() {
            self.last_error = error;
        }
    }

    /// Something went wrong with checking outside a checker's lines (it could not start).
    pub fn error(&mut self, why: String) {
        self.last_error = Some(why);
    }

    /// The incarnation's verdict, if it had one.
    pub fn verdict_of(&self, incarnation: u32) -> Option<&str> {
        self.runs.iter().find(|r| r.record.number == incarnation).and_then(|r| r.verdict.as_deref())
    }

    /// A line of the incarnation's checker.
    pub fn line(&mut self, incarnation: u32, line: Line) -> Effect {
        let mut effect = Effect::default();
        match line {
            Line::Finding(f) => {
                let fatal = f.fatal && self.mode.stops_on_fatal();
                let described = describe(&f);
                if self.add(incarnation, f) {
                    effect.new_finding = Some(described.clone());
                }
                if let Some(r) = self.run(incarnation) {
                    r.record.findings += 1;
                }
                if fatal {
                    effect.verdict = self.verdict(incarnation, described);
                }
            }
            Line::Progress { events, events_per_s, profile } => {
                if let Some(r) = self.run(incarnation) {
                    r.record.events = events;
                    r.record.events_per_s = events_per_s;
                    r.record.profile = profile.or(r.record.profile.take());
                }
            }
            Line::Summary(s) => {
                let fatal = s.findings.iter().find(|f| f.fatal && self.mode.stops_on_fatal()).map(describe);
                for f in s.findings.iter() {
                    self.settle(incarnation, f);
                }
                if let Some(r) = self.run(incarnation) {
                    r.record.events = s.events;
                    r.record.events_per_s = s.events_per_s;
                    r.record.findings = s.findings.len().try_into().unwrap_or(u32::MAX);
                }
                if let Some(at) = s.verdict_at {
                    let cause = fatal.or(s.error.clone())
                        .unwrap_or_else(|| "a fatal finding its checker did not describe".into());
                    effect.verdict = self.verdict(incarnation, format!("{cause} (nothing approved from event {} on)", at - 1));
                }
                if let Some(e) = s.error {
                    self.last_error = Some(format!("the checker of incarnation {incarnation} stopped: {e}"));
                }
            }
            Line::Unknown(_) => {}
        }
        effect
    }

    /// Counts a finding's line; true if the device had not had it before.
    fn add(&mut self, incarnation: u32, f: FindingLine) -> bool {
        let key = Key::of(&f);
        let driver_pid = self.run(incarnation).and_then(|r| r.record.driver_pid);
        if let Some(&at) = self.index.get(&key) {
            let kept = &mut self.findings[at];
            kept.count = kept.count.saturating_add(f.count);
            seen(kept, incarnation, driver_pid, f.count);
            return false;
        }
        if self.findings.len() >= self.cap {
            self.not_kept += 1;
            return false;
        }
        self.index.insert(key, self.findings.len());
        let mut kept = Finding {
            checker: f.checker, kind: f.kind, fatal: f.fatal, site: f.site, count: f.count,
            seen_in: Vec::new(), detail: f.detail,
        };
        seen(&mut kept, incarnation, driver_pid, f.count);
        self.findings.push(kept);
        true
    }

    /// A summary's final count for a finding of the incarnation: what its
    /// lines did not already count is added. A finding whose own line was
    /// lost (too long) is added now.
    fn settle(&mut self, incarnation: u32, f: &FindingLine) {
        let Some(&at) = self.index.get(&Key::of(f)) else {
            if self.findings.len() < self.cap {
                self.add(incarnation, f.clone());
            }
            return;
        };
        let counted = self.findings[at].seen_in.iter().find(|s| s.incarnation == incarnation).map_or(0, |s| s.count);
        if f.count > counted {
            let more = FindingLine { count: f.count - counted, ..f.clone() };
            self.add(incarnation, more);
        }
    }

    /// Records the incarnation's first verdict; returns it, or None if it had one.
    fn verdict(&mut self, incarnation: u32, cause: String) -> Option<String> {
        let run = self.run(incarnation)?;
        if run.verdict.is_some() {
            return None;
        }
        run.verdict = Some(cause.clone());
        let driver_pid = run.record.driver_pid;
        self.verdict_count += 1;
        if self.verdicts.len() >= RECOVERIES_KEPT {
            self.verdicts.remove(0);
        }
        self.verdicts.push(Verdict { incarnation, driver_pid, cause: cause.clone() });
        Some(cause)
    }

    /// The incarnation's driver exited saying its gate stopped it at the
    /// checker's verdict (docs/checking.md, "The gate"); returns the verdict
    /// if the checker gave one.
    pub fn stopped_at_gate(&mut self, incarnation: u32) -> Option<String> {
        if let Some(v) = self.verdict_of(incarnation) {
            return Some(v.to_string());
        }
        self.verdict(incarnation, "the driver stopped at its gate, but its checker reported no fatal finding".into());
        None
    }

    /// `status`'s `check`; `serving` is the pid of the driver process that serves.
    pub fn status(&self, serving: Option<u32>) -> CheckStatus {
        let current = self.runs.iter().rev().find(|r| r.running && serving.is_some() && r.record.driver_pid == serving);
        CheckStatus {
            mode: self.mode,
            checker_pid: current.map(|r| r.record.checker_pid),
            checker_cpu: self.checker_cpu,
            events: self.runs.iter().fold(self.events_forgotten, |sum, r| sum.saturating_add(r.record.events)),
            events_per_s: current.map_or(0.0, |r| r.record.events_per_s),
            findings: self.findings.len() as u32,
            verdicts: self.verdict_count,
            last_error: self.last_error.clone(),
        }
    }

    /// `check report`: the most frequent findings first.
    pub fn report(&self, device: String, ifname: String, serving: Option<u32>) -> CheckReport {
        let mut findings = self.findings.clone();
        findings.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.kind.cmp(&b.kind)).then_with(|| a.site.cmp(&b.site)));
        CheckReport {
            device,
            ifname,
            status: self.status(serving),
            findings,
            findings_not_kept: self.not_kept,
            verdicts: self.verdicts.clone(),
            incarnations: self.runs.iter().map(|r| r.record.clone()).collect(),
        }
    }
}

/// "use-after-free at e1000:e1000_clean_rx_irq+0x1a3 (event 3)"
fn describe(f: &FindingLine) -> String {
    format!("{} at {} (event {})", f.kind, f.site, f.event)
}

/// Adds `count` occurrences in `incarnation` to a finding's list of driver processes.
fn seen(f: &mut Finding, incarnation: u32, driver_pid: Option<u32>, count: u64) {
    match f.seen_in.iter_mut().find(|s| s.incarnation == incarnation) {
        Some(s) => s.count = s.count.saturating_add(count),
        None => {
            if f.seen_in.len() >= SEEN_IN_KEPT {
                f.seen_in.remove(0);
            }
            f.seen_in.push(SeenIn { incarnation, driver_pid, count });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::lines::Summary;
    use understudy_api::FindingSite;

    fn finding(kind: &str, function: &str, fatal: bool, count: u64) -> FindingLine {
        FindingLine {
            checker: "memory".into(), kind: kind.into(), fatal,
            site: FindingSite { module: Some("e1000".into()), function: Some(function.into()), offset: Some("0x10".into()),
                                address: Some("0x1000010".into()) },
            event: 7, count, detail: serde_json::json!({}),
        }
    }

    fn summary(findings: Vec<FindingLine>, verdict_at: Option<u64>) -> Line {
        Line::Summary(Summary { events: 100, events_per_s: 50.0, findings, verdict_at, error: None })
    }

    #[test]
    fn repeats_are_counted_once_per_site_across_driver_processes() {
        let mut log = CheckLog::new(GateMode::Triage, None);
        let first = log.begin(11, vec!["/m/e1000.ko".into()]);
        log.driver_started(first, 10);
        let e = log.line(first, Line::Finding(finding("use-after-free", "e1000_xmit", true, 1)));
        assert_eq!(e.new_finding.as_deref(), Some("use-after-free at e1000:e1000_xmit+0x10 (event 7)"));
        assert_eq!(e.verdict, None, "triage stops nothing");
        // The summary says it happened 5 times: 4 more.
        log.line(first, summary(vec![finding("use-after-free", "e1000_xmit", true, 5)], None));
        log.ended(first, "stopped".into(), None);
        // The restarted driver has the same bug, at another load address: the same finding.
        let second = log.begin(21, vec!["/m/e1000.ko".into()]);
        log.driver_started(second, 20);
        let mut again = finding("use-after-free", "e1000_xmit", true, 1);
        again.site.address = Some("0x2000010".into());
        assert_eq!(log.line(second, Line::Finding(again)).new_finding, None);
        log.line(second, Line::Finding(finding("data-race", "e1000_xmit", false, 1)));
        let report = log.report("0000:00:02.0".into(), "us0".into(), Some(20));
        assert_eq!(report.findings.len(), 2);
        let uaf = &report.findings[0];
        assert_eq!((uaf.kind.as_str(), uaf.count), ("use-after-free", 6));
        assert_eq!(uaf.seen_in, vec![SeenIn { incarnation: 1, driver_pid: Some(10), count: 5 },
                                     SeenIn { incarnation: 2, driver_pid: Some(20), count: 1 }]);
        assert_eq!(report.status.checker_pid, Some(21));
        assert_eq!(report.incarnations[0].ended.as_deref(), Some("stopped"));
        assert_eq!(report.status.events, 100);
    }

    #[test]
    fn a_summary_does_not_count_twice_what_the_lines_counted() {
        let mut log = CheckLog::new(GateMode::Permissive, None);
        let i = log.begin(11, Vec::new());
        log.line(i, Line::Finding(finding("double-free", "f", false, 1)));
        log.line(i, summary(vec![finding("double-free", "f", false, 1)], None));
        log.line(i, summary(vec![finding("double-free", "f", false, 3)], None));
        // A finding only the summary names (its own line was lost) is added.
        log.line(i, summary(vec![finding("invalid-free", "g", false, 2)], None));
        let r = log.report(String::new(), String::new(), None);
        let count = |kind: &str| r.findings.iter().find(|f| f.kind == kind).map(|f| f.count);
        assert_eq!((count("double-free"), count("invalid-free")), (Some(3), Some(2)));
    }

    #[test]
    fn distinct_findings_beyond_the_cap_are_counted_not_kept() {
        let mut log = CheckLog::with_cap(GateMode::Triage, None, 3);
        let i = log.begin(11, Vec::new());
        for n in 0..5 {
            log.line(i, Line::Finding(finding("data-race", &format!("f{n}"), false, 1)));
        }
        // Repeats of a kept finding still count.
        log.line(i, Line::Finding(finding("data-race", "f0", false, 1)));
        log.line(i, summary(vec![finding("data-race", "f4", false, 9)], None));
        let r = log.report(String::new(), String::new(), None);
        assert_eq!(r.findings.len(), 3);
        assert_eq!(r.findings_not_kept, 2);
        assert_eq!(r.findings[0].count, 2);
        assert_eq!(r.status.findings, 3);
    }

    #[test]
    fn a_fatal_finding_is_a_verdict_once_per_driver_process_unless_in_triage() {
        let mut log = CheckLog::new(GateMode::Stringent, Some(0));
        let i = log.begin(11, Vec::new());
        log.driver_started(i, 10);
        assert_eq!(log.line(i, Line::Finding(finding("data-race", "f", false, 1))).verdict, None);
        let v = log.line(i, Line::Finding(finding("use-after-free", "g", true, 1))).verdict;
        assert_eq!(v.as_deref(), Some("use-after-free at e1000:g+0x10 (event 7)"));
        assert_eq!(log.line(i, Line::Finding(finding("double-free", "h", true, 1))).verdict, None);
        // The summary repeats it: no second verdict, and the gate's exit names it.
        assert_eq!(log.line(i, summary(vec![finding("use-after-free", "g", true, 1)], Some(8))).verdict, None);
        assert_eq!(log.stopped_at_gate(i).as_deref(), Some("use-after-free at e1000:g+0x10 (event 7)"));
        let s = log.status(Some(10));
        assert_eq!((s.verdicts, s.checker_cpu), (1, Some(0)));
        let r = log.report(String::new(), String::new(), None);
        assert_eq!(r.verdicts, vec![Verdict { incarnation: 1, driver_pid: Some(10), cause: v.unwrap() }]);
    }

    #[test]
    fn a_summary_verdict_without_a_finding_line_and_a_silent_gate_stop_are_verdicts_too() {
        let mut log = CheckLog::new(GateMode::Permissive, None);
        let i = log.begin(11, Vec::new());
        let v = log.line(i, Line::Summary(Summary { events: 4, events_per_s: 1.0, findings: Vec::new(), verdict_at: Some(4),
                                                    error: Some("event 3: unknown kind 99".into()) })).verdict;
        assert_eq!(v.as_deref(), Some("event 3: unknown kind 99 (nothing approved from event 3 on)"));
        assert!(log.status(None).last_error.unwrap().contains("unknown kind 99"));
        let j = log.begin(12, Vec::new());
        assert_eq!(log.stopped_at_gate(j), None);
        assert_eq!(log.status(None).verdicts, 2);
    }

    #[test]
    fn old_incarnations_are_forgotten_but_their_events_still_counted() {
        let mut log = CheckLog::new(GateMode::Triage, None);
        for n in 0..RECOVERIES_KEPT as u32 + 5 {
            let i = log.begin(n, Vec::new());
            log.line(i, Line::Progress { events: 10, events_per_s: 1.0, profile: None });
            log.ended(i, "stopped".into(), None);
        }
        let r = log.report(String::new(), String::new(), None);
        assert_eq!(r.incarnations.len(), RECOVERIES_KEPT);
        assert_eq!(r.incarnations[0].number, 6);
        assert_eq!(r.status.events, 10 * (RECOVERIES_KEPT as u64 + 5));
    }
}
