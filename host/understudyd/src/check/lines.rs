// SPDX-License-Identifier: GPL-2.0
//! The checker's stdout: one JSON object a line (docs/checking.md, "What
//! the daemon reads"), `{"finding": ...}`, `{"progress": ...}` and a last
//! `{"summary": ...}`.
//!
//! The checker is the daemon's own program, but what it prints comes from
//! the driver process: sites are symbolised from `.ko` files the driver
//! named, and the trace it reads is the driver's to write. So its lines are
//! read like anything else that crosses from a driver: bounded in length,
//! every number checked, every text cut short and stripped of control
//! characters before it reaches a log or a terminal, and a line that does
//! not parse is dropped, never half-used.

use serde_json::{Map, Value};
use understudy_api::FindingSite;

/// The longest line taken. A summary repeats every finding of its checker,
/// so it is the long one; one that is longer is dropped, and the counts
/// its findings' own lines gave are kept.
pub const MAX_LINE: usize = 1 << 20;
/// The longest text (a kind, a function name, ...) kept, in characters.
const MAX_TEXT: usize = 128;
/// The longest error text of a summary kept, in characters.
const MAX_ERROR: usize = 512;
/// The most of a finding's own line kept as its detail, in bytes of JSON.
const MAX_DETAIL: usize = 4096;

/// One finding as a checker printed it.
#[derive(Debug, Clone, PartialEq)]
pub struct FindingLine {
    pub checker: String,
    pub kind: String,
    pub fatal: bool,
    pub site: FindingSite,
    /// Index of the event of its first occurrence.
    pub event: u64,
    /// Occurrences in this checker's trace: 1 on the finding's own line, the
    /// final count in the summary.
    pub count: u64,
    /// The line itself without `count`, or a note saying it was too long.
    pub detail: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub events: u64,
    pub events_per_s: f64,
    pub findings: Vec<FindingLine>,
    /// 1 + the index of the first event not approved, if approval stopped.
    pub verdict_at: Option<u64>,
    /// Why the checker stopped reading the trace, if it was not told to.
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Finding(FindingLine),
    /// `profile`: where the events came from (the checker's `profile.rs`), bounded and sanitised.
    Progress { events: u64, events_per_s: f64, profile: Option<Value> },
    Summary(Summary),
    /// A kind of line this daemon does not know (a newer checker's): ignored.
    Unknown(String),
}

/// Reads one line (without its newline).
pub fn parse(line: &[u8]) -> Result<Line, String> {
    let value: Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(object) = value else { return Err("not a JSON object".into()) };
    let mut entries = object.into_iter();
    let (Some((key, body)), None) = (entries.next(), entries.next()) else {
        return Err("not an object with exactly one key".into());
    };
    let body = match body {
        Value::Object(body) => body,
        _ => return Err(format!("{:?} is not an object", text(&key, MAX_TEXT))),
    };
    match key.as_str() {
        "finding" => finding(body).map(Line::Finding),
        "progress" => Ok(Line::Progress { events: count(&body, "events")?, events_per_s: rate(&body)?,
                                          profile: body.get("profile").cloned().and_then(bounded) }),
        "summary" => summary(body).map(Line::Summary),
        other => Ok(Line::Unknown(text(other, MAX_TEXT))),
    }
}

fn finding(mut body: Map<String, Value>) -> Result<FindingLine, String> {
    let occurrences = match body.remove("count") {
        None => 1,
        Some(c) => c.as_u64().filter(|&c| c > 0).ok_or("`count` is not a positive integer")?,
    };
    let site = match body.get("site") {
        Some(Value::Object(site)) => FindingSite {
            module: optional_text(site, "module")?,
            function: optional_text(site, "function")?,
            offset: optional_text(site, "offset")?,
            address: optional_text(site, "address")?,
        },
        _ => return Err("a finding without a `site` object".into()),
    };
    let line = FindingLine {
        checker: required_text(&body, "checker")?,
        kind: required_text(&body, "kind")?,
        fatal: body.get("fatal").and_then(Value::as_bool).ok_or("`fatal` is not a boolean")?,
        site,
        event: count(&body, "event")?,
        count: occurrences,
        detail: Value::Null,
    };
    let detail = Value::Object(body);
    let size = detail.to_string().len();
    let detail = bounded(detail).unwrap_or_else(|| {
        serde_json::json!({ "omitted": format!("the checker's line held {size} bytes of detail; {MAX_DETAIL} are kept") })
    });
    Ok(FindingLine { detail, ..line })
}

/// A JSON object of the checker's, sanitised, if it is at most MAX_DETAIL bytes.
fn bounded(value: Value) -> Option<Value> {
    (value.is_object() && value.to_string().len() <= MAX_DETAIL).then(|| sanitize(value))
}

fn summary(body: Map<String, Value>) -> Result<Summary, String> {
    let findings = match body.get("findings") {
        Some(Value::Array(list)) => list.iter().map(|f| match f {
            Value::Object(f) => finding(f.clone()),
            _ => Err("a summary finding is not an object".into()),
        }).collect::<Result<Vec<_>, String>>()?,
        _ => return Err("a summary without a `findings` list".into()),
    };
    let verdict_at = match body.get("verdict_at") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().filter(|&v| v > 0).ok_or("`verdict_at` is not null or a positive integer")?),
    };
    Ok(Summary {
        events: count(&body, "events")?,
        events_per_s: rate(&body)?,
        findings,
        verdict_at,
        error: body.get("error").and_then(Value::as_str).map(|e| text(e, MAX_ERROR)),
    })
}

fn count(body: &Map<String, Value>, key: &str) -> Result<u64, String> {
    body.get(key).and_then(Value::as_u64).ok_or_else(|| format!("`{key}` is not a non-negative integer"))
}

fn rate(body: &Map<String, Value>) -> Result<f64, String> {
    body.get("events_per_s").and_then(Value::as_f64).filter(|r| r.is_finite() && *r >= 0.0)
        .ok_or_else(|| "`events_per_s` is not a non-negative number".into())
}

fn required_text(body: &Map<String, Value>, key: &str) -> Result<String, String> {
    match body.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(text(s, MAX_TEXT)),
        _ => Err(format!("`{key}` is not a non-empty string")),
    }
}

fn optional_text(body: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(text(s, MAX_TEXT))),
        Some(_) => Err(format!("site `{key}` is not a string or null")),
    }
}

/// `s` without control characters (a terminal's escapes among them), at
/// most `max` characters.
pub fn text(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).map(|c| if c.is_control() { '?' } else { c }).collect();
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// Every string in `value`, keys too, passed through `text`.
fn sanitize(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(text(&s, MAX_TEXT)),
        Value::Array(a) => Value::Array(a.into_iter().map(sanitize).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (text(&k, MAX_TEXT), sanitize(v))).collect()),
        other => other,
    }
}

/// Splits what the checker writes into lines, dropping any longer than
/// `max` bytes without holding more than that.
pub struct Lines {
    buf: Vec<u8>,
    max: usize,
    /// Inside a line that was too long: everything up to its newline goes.
    skipping: bool,
}

/// A complete line, or the end of one that was too long.
#[derive(Debug, PartialEq, Eq)]
pub enum Framed {
    Line(Vec<u8>),
    TooLong,
}

impl Lines {
    pub fn new(max: usize) -> Self {
        Lines { buf: Vec::new(), max, skipping: false }
    }

    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<Framed> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (part, rest) = match newline {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &[][..]),
            };
            if !self.skipping {
                if self.buf.len() + part.len() > self.max {
                    self.buf = Vec::new();
                    self.skipping = true;
                } else {
                    self.buf.extend_from_slice(part);
                }
            }
            if newline.is_some() {
                out.push(if std::mem::take(&mut self.skipping) {
                    Framed::TooLong
                } else {
                    Framed::Line(std::mem::take(&mut self.buf))
                });
            }
            bytes = rest;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FINDING: &str = r#"{"finding": {"checker": "memory", "kind": "use-after-free", "fatal": true,
        "site": {"module": "e1000", "function": "e1000_clean_rx_irq", "offset": "0x1a3",
                 "section": ".text", "section_offset": "0x2c43", "address": "0x1003f21"},
        "access": {"address": "0x1000000008", "size": 4, "write": true},
        "other": {"allocation": {"address": "0x1000000000", "size": 64, "event": 0}}, "event": 3, "count": 1}}"#;

    fn parsed(line: &str) -> Result<Line, String> {
        parse(line.replace('\n', " ").as_bytes())
    }

    #[test]
    fn a_finding_line_is_read_whole() {
        let Line::Finding(f) = parsed(FINDING).unwrap() else { panic!("not a finding") };
        assert_eq!((f.checker.as_str(), f.kind.as_str(), f.fatal, f.event, f.count), ("memory", "use-after-free", true, 3, 1));
        assert_eq!(f.site.to_string(), "e1000:e1000_clean_rx_irq+0x1a3");
        assert_eq!(f.site.address.as_deref(), Some("0x1003f21"));
        // The detail keeps what the daemon does not interpret, without the count.
        assert_eq!(f.detail["site"]["section_offset"], "0x2c43");
        assert_eq!(f.detail["access"]["size"], 4);
        assert!(f.detail.get("count").is_none());
    }

    #[test]
    fn progress_and_summary_lines_are_read() {
        assert_eq!(parsed(r#"{"progress": {"events": 123, "events_per_s": 4100000.0, "seconds": 30.0, "findings": 3}}"#),
                   Ok(Line::Progress { events: 123, events_per_s: 4_100_000.0, profile: None }));
        let profile = r#"{"progress": {"events": 1, "events_per_s": 1, "profile": {"by_kind": {"ACCESS": 1}}}}"#;
        let Ok(Line::Progress { profile: Some(p), .. }) = parsed(profile) else { panic!("no profile") };
        assert_eq!(p["by_kind"]["ACCESS"], 1);
        let huge = profile.replace(r#""ACCESS": 1"#, &format!(r#""{}": 1"#, "A".repeat(2 * MAX_DETAIL)));
        assert!(matches!(parsed(&huge), Ok(Line::Progress { profile: None, .. })));
        let finding: Value = serde_json::from_str(FINDING).unwrap();
        let summary = serde_json::json!({"summary": {"events": 9, "events_per_s": 3, "seconds": 1.5,
                                                     "findings": [finding["finding"]], "verdict_at": 4}});
        let Line::Summary(s) = parsed(&summary.to_string()).unwrap() else { panic!("not a summary") };
        assert_eq!((s.events, s.verdict_at, s.findings.len(), s.error), (9, Some(4), 1, None));
        let Line::Summary(s) = parsed(r#"{"summary": {"events": 0, "events_per_s": 0, "findings": [], "verdict_at": null,
                                          "error": "the trace region's header: bad magic"}}"#).unwrap() else { panic!() };
        assert_eq!((s.verdict_at, s.error.as_deref()), (None, Some("the trace region's header: bad magic")));
    }

    #[test]
    fn unknown_kinds_of_line_are_told_apart_and_unknown_finding_kinds_kept() {
        assert_eq!(parsed(r#"{"heartbeat": {"at": 1}}"#), Ok(Line::Unknown("heartbeat".into())));
        let newer = FINDING.replace("use-after-free", "torn-descriptor-write").replace(r#""memory""#, r#""ring""#);
        let Line::Finding(f) = parsed(&newer).unwrap() else { panic!("not a finding") };
        assert_eq!((f.checker.as_str(), f.kind.as_str()), ("ring", "torn-descriptor-write"));
    }

    #[test]
    fn malformed_lines_are_refused_whole() {
        for bad in [
            "not json",
            "[1, 2]",
            r#"{"progress": {"events": 1, "events_per_s": 1}, "finding": {}}"#,
            r#"{"progress": 5}"#,
            r#"{"progress": {"events": -1, "events_per_s": 1}}"#,
            r#"{"progress": {"events": 1}}"#,
            r#"{"summary": {"events": 1, "events_per_s": 1, "findings": [], "verdict_at": 0}}"#,
            r#"{"summary": {"events": 1, "events_per_s": 1, "findings": [7], "verdict_at": null}}"#,
            &FINDING.replace(r#""fatal": true"#, r#""fatal": "yes""#),
            &FINDING.replace(r#""count": 1"#, r#""count": 0"#),
            &FINDING.replace(r#""kind": "use-after-free""#, r#""kind": """#),
            &FINDING.replace(r#""module": "e1000""#, r#""module": 5"#),
            &FINDING.replace(r#""event": 3"#, r#""event": 3.5"#),
        ] {
            assert!(parsed(bad).is_err(), "accepted: {bad}");
        }
    }

    #[test]
    fn text_from_the_checker_is_cut_and_cleaned() {
        let evil = FINDING.replace("e1000_clean_rx_irq", &format!("\\u001b[2J{}", "f".repeat(500)));
        let Line::Finding(f) = parsed(&evil).unwrap() else { panic!("not a finding") };
        let function = f.site.function.unwrap();
        assert!(function.starts_with("?[2Jfff") && function.ends_with('…'), "{function}");
        assert_eq!(function.chars().count(), MAX_TEXT + 1);
        assert!(!f.detail.to_string().contains('\u{1b}'));
        let huge = FINDING.replace(r#""size": 64"#, &format!(r#""size": 64, "pad": "{}""#, "x".repeat(2 * MAX_DETAIL)));
        let Line::Finding(f) = parsed(&huge).unwrap() else { panic!("not a finding") };
        assert!(f.detail["omitted"].as_str().unwrap().contains("bytes of detail"));
    }

    #[test]
    fn an_oversized_line_is_dropped_once_and_the_next_one_read() {
        let mut lines = Lines::new(16);
        assert_eq!(lines.push(b"{\"a\":1}\n{\"b\""), vec![Framed::Line(b"{\"a\":1}".to_vec())]);
        assert_eq!(lines.push(b":2}\n"), vec![Framed::Line(b"{\"b\":2}".to_vec())]);
        // 40 bytes in three writes: one TooLong, and nothing held beyond the limit meanwhile.
        assert_eq!(lines.push(&[b'x'; 15]), vec![]);
        assert_eq!(lines.push(&[b'x'; 15]), vec![]);
        assert!(lines.buf.len() <= 16);
        assert_eq!(lines.push(b"xxxxxxxxxx\nok\n"), vec![Framed::TooLong, Framed::Line(b"ok".to_vec())]);
        // A line of exactly the limit is taken.
        let mut exact = vec![b'y'; 16];
        exact.push(b'\n');
        assert_eq!(lines.push(&exact), vec![Framed::Line(vec![b'y'; 16])]);
    }
}
