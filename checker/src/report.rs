// SPDX-License-Identifier: GPL-2.0
//! Findings and the JSON lines the daemon reads on the checker's stdout.
//!
//! A finding is deduplicated by (kind, site): the first occurrence is
//! printed at once, with the details only it carries; later ones only add
//! to its count, which the summary line reports. The checkers describe a
//! finding with a closure that runs for the first occurrence only, so a
//! site that repeats a million times costs a hash lookup each time.

use std::collections::hash_map::Entry;
use std::io::Write;
use std::rc::Rc;
use std::time::Instant;

use rustc_hash::FxHashMap;
use serde_json::{json, Value};

use crate::symbols::{SiteRef, Symbols};

macro_rules! kinds {
    ($($variant:ident = $name:literal, $checker:literal, $fatal:literal;)*) => {
        /// What a finding is. Each belongs to one checker; `fatal` is the
        /// default for stopping the driver (`--fatal` overrides it).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Kind { $($variant,)* }

        impl Kind {
            pub const ALL: &[Kind] = &[$(Kind::$variant,)*];

            pub fn name(self) -> &'static str {
                match self { $(Kind::$variant => $name,)* }
            }

            pub fn checker(self) -> &'static str {
                match self { $(Kind::$variant => $checker,)* }
            }

            pub fn fatal_by_default(self) -> bool {
                match self { $(Kind::$variant => $fatal,)* }
            }
        }
    };
}

kinds! {
    UseAfterFree = "use-after-free", "memory", true;
    OutOfBoundsWrite = "out-of-bounds-write", "memory", true;
    OutOfBoundsRead = "out-of-bounds-read", "memory", false;
    DoubleFree = "double-free", "memory", true;
    InvalidFree = "invalid-free", "memory", true;
    UninitialisedRead = "uninitialised-read", "memory", false;
    DeviceOwnedWrite = "device-owned-write", "dma", true;
    DeviceOwnedRead = "device-owned-read", "dma", false;
    RepeatedMap = "repeated-map", "dma", false;
    RepeatedUnmap = "repeated-unmap", "dma", false;
    UnmapNeverMapped = "unmap-never-mapped", "dma", true;
    UnmapSizeMismatch = "unmap-size-mismatch", "dma", false;
    UnmapDirectionMismatch = "unmap-direction-mismatch", "dma", false;
    SyncNotMapped = "sync-not-mapped", "dma", false;
    InvalidDirection = "invalid-direction", "dma", false;
    MisalignedBuffer = "misaligned-buffer", "dma", false;
    MappingLeak = "mapping-leak", "dma", false;
    CoherentLeak = "coherent-leak", "dma", false;
    InvalidCoherentFree = "invalid-coherent-free", "dma", false;
    DataRace = "data-race", "race", false;
}

impl Kind {
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| k.name() == name)
    }
}

/// The bytes the driver touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub address: u64,
    pub size: u64,
    pub write: bool,
}

/// One access to memory by the driver, or by the runtime's memcpy/memset
/// on its behalf, as every checker sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Touch {
    pub address: u64,
    /// At least 1.
    pub size: u64,
    pub read: bool,
    pub write: bool,
    pub site: SiteRef,
    pub event: u64,
    /// Part of a copy (memcpy, rep movs): the bytes move and nothing uses
    /// them, so their definedness is carried over, not checked.
    pub copy: bool,
}

impl Touch {
    pub fn end(&self) -> u64 {
        self.address.saturating_add(self.size)
    }

    pub fn access(&self) -> Access {
        Access { address: self.address, size: self.size, write: self.write }
    }
}

/// What the first occurrence of a finding says beyond its kind and site.
pub struct Detail {
    pub access: Option<Access>,
    /// The other party: the allocation, the mapping, the other access.
    pub other: Value,
}

struct Record {
    json: Value,
    count: u64,
}

pub fn hex(value: u64) -> String {
    format!("{value:#x}")
}

pub struct Reporter {
    out: Box<dyn Write>,
    symbols: Rc<Symbols>,
    fatal: Vec<Kind>,
    records: Vec<Record>,
    seen: FxHashMap<(Kind, SiteRef), usize>,
    /// The first event that had a fatal finding.
    first_fatal: Option<u64>,
    started: Instant,
    last_progress: (Instant, u64),
}

impl Reporter {
    pub fn new(out: Box<dyn Write>, symbols: Rc<Symbols>, fatal: Vec<Kind>) -> Reporter {
        let now = Instant::now();
        Reporter { out, symbols, fatal, records: Vec::new(), seen: FxHashMap::default(), first_fatal: None,
                   started: now, last_progress: (now, 0) }
    }


    /// Records a finding of `kind` at `site` in event `event`; `detail` runs
    /// for its first occurrence only.
    pub fn report(&mut self, kind: Kind, site: SiteRef, event: u64, detail: impl FnOnce(&Symbols) -> Detail) {
        let fatal = self.fatal.contains(&kind);
        if fatal && self.first_fatal.is_none() {
            self.first_fatal = Some(event);
        }
        match self.seen.entry((kind, site)) {
            Entry::Occupied(e) => self.records[*e.get()].count += 1,
            Entry::Vacant(e) => {
                let d = detail(&self.symbols);
                let mut finding = json!({
                    "checker": kind.checker(),
                    "kind": kind.name(),
                    "fatal": fatal,
                    "site": self.symbols.describe(site),
                    "access": d.access.map(|a| json!({ "address": hex(a.address), "size": a.size, "write": a.write })),
                    "other": d.other,
                    "event": event,
                    "count": 1,
                });
                if d.access.is_none() {
                    finding.as_object_mut().unwrap().remove("access");
                }
                e.insert(self.records.len());
                self.line(&json!({ "finding": &finding }));
                self.records.push(Record { json: finding, count: 1 });
            }
        }
    }

    /// The first event with a fatal finding, if any.
    pub fn first_fatal(&self) -> Option<u64> {
        self.first_fatal
    }

    fn line(&mut self, value: &Value) {
        // The daemon reading this pipe is the checker's reason to exist: if
        // it is gone, there is nobody to tell, and the process ends.
        if writeln!(self.out, "{value}").and_then(|()| self.out.flush()).is_err() {
            log::error!("stdout is closed: the daemon stopped reading; exiting");
            std::process::exit(1);
        }
    }

    /// A progress line: events so far, the rate since the previous one and
    /// where the events came from.
    pub fn progress(&mut self, events: u64, profile: Value) {
        let now = Instant::now();
        let (then, before) = self.last_progress;
        let rate = (events - before) as f64 / now.duration_since(then).as_secs_f64().max(1e-9);
        self.last_progress = (now, events);
        let line = json!({ "progress": {
            "events": events,
            "events_per_s": rate.round(),
            "seconds": round3(now.duration_since(self.started).as_secs_f64()),
            "findings": self.records.len(),
            "profile": profile,
        }});
        self.line(&line);
    }

    /// The last line: every finding with its final count. `error` says why
    /// the checker stopped reading the trace, if it was not told to;
    /// `profile` is where the events came from (`profile.rs`).
    pub fn summary(&mut self, events: u64, verdict_at: Option<u64>, error: Option<&str>, profile: Option<Value>) {
        let seconds = self.started.elapsed().as_secs_f64();
        let findings: Vec<Value> = self.records.iter().map(|r| {
            let mut f = r.json.clone();
            f["count"] = r.count.into();
            f
        }).collect();
        let mut summary = json!({
            "events": events,
            "events_per_s": (events as f64 / seconds.max(1e-9)).round(),
            "seconds": round3(seconds),
            "findings": findings,
            "verdict_at": verdict_at,
        });
        if let Some(e) = error {
            summary["error"] = e.into();
        }
        if let Some(p) = profile {
            summary["profile"] = p;
        }
        self.line(&json!({ "summary": summary }));
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
