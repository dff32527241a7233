// SPDX-License-Identifier: GPL-2.0
//! What the CLI prints of checking (docs/checking.md): the `check` line of
//! `status`, and `understudy check report`.

use std::path::PathBuf;
use std::process::ExitCode;

use understudy_api::{CheckReport, CheckStatus, Request};

/// `check report`'s exit statuses (its --help says them).
const NO_FINDINGS: u8 = 0;
const FINDINGS: u8 = 1;
const FAILED: u8 = 2;

/// `status`'s line for a checked device.
pub fn print_status(c: &CheckStatus) {
    let checker = c.checker_pid.map_or("no checker running".into(), |p| format!("checker {p}"));
    let cpu = c.checker_cpu.map_or(String::new(), |cpu| format!(" on CPU {cpu}"));
    println!("    checked ({}): {checker}{cpu}, {} events ({:.0}/s), {} finding(s), {} fatal verdict(s)",
             c.mode, c.events, c.events_per_s, c.findings, c.verdicts);
    if let Some(e) = &c.last_error {
        println!("    checking: {e}");
    }
}

/// `understudy check report DEVICE [--json]`.
pub fn report(socket: &PathBuf, device: String, json: bool) -> ExitCode {
    let response = match crate::ask(socket, &Request::CheckReport { device }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("understudy: {e}");
            return ExitCode::from(FAILED);
        }
    };
    let report = match (&response.error, response.check) {
        (None, Some(report)) => report,
        (error, _) => {
            eprintln!("understudy: {}", error.as_deref().unwrap_or("understudyd sent no report"));
            return ExitCode::from(FAILED);
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report).expect("serialisable"));
    } else {
        print_report(&report);
    }
    ExitCode::from(if report.findings.is_empty() && report.findings_not_kept == 0 { NO_FINDINGS } else { FINDINGS })
}

fn print_report(r: &CheckReport) {
    let s = &r.status;
    println!("{} ({}): {} mode; {} events checked, {:.0}/s now; {} finding(s), {} fatal verdict(s)",
             r.ifname, r.device, s.mode, s.events, s.events_per_s, r.findings.len(), s.verdicts);
    if let Some(e) = &s.last_error {
        println!("last error: {e}");
    }
    if r.findings.is_empty() {
        println!("no findings");
    } else {
        println!();
        let rows: Vec<[String; 6]> = r.findings.iter().map(|f| [
            f.count.to_string(),
            if f.fatal { "yes".into() } else { String::new() },
            f.kind.clone(),
            f.site.to_string(),
            f.checker.clone(),
            f.seen_in.iter().map(|s| s.driver_pid.map_or("?".into(), |p| p.to_string())).collect::<Vec<_>>().join(", "),
        ]).collect();
        print_table(["COUNT", "FATAL", "KIND", "SITE", "CHECKER", "DRIVER PROCESSES"], &rows);
    }
    if r.findings_not_kept > 0 {
        println!("{} more distinct finding(s) beyond the daemon's limit were not kept", r.findings_not_kept);
    }
    if !r.verdicts.is_empty() {
        println!("\nverdicts:");
        for v in &r.verdicts {
            println!("  driver process {}: {}", v.driver_pid.map_or("?".into(), |p| p.to_string()), v.cause);
        }
    }
    if !r.incarnations.is_empty() {
        println!("\ndriver processes checked:");
        for i in &r.incarnations {
            println!("  #{} driver {} checker {}: {} events, {} finding(s); {}", i.number,
                     i.driver_pid.map_or("-".into(), |p| p.to_string()), i.checker_pid, i.events, i.findings,
                     i.ended.as_deref().unwrap_or("running"));
        }
    }
}

/// Columns as wide as their widest cell; the count right-aligned.
fn print_table<const N: usize>(header: [&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = format!("{:>w$}", cells[0], w = widths[0]);
        for (cell, w) in cells.iter().zip(widths).skip(1) {
            out += &format!("  {cell:<w$}");
        }
        println!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}
