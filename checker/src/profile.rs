// SPDX-License-Identifier: GPL-2.0
//! Where a trace's events come from (docs/checking.md, "What it costs"):
//! the events of each kind, and the functions that produced a sample of
//! them -- what a driver's checking costs is mostly how many events it
//! writes, and this says which code writes them.
//!
//! Every event is counted by kind (an array increment); only every
//! SAMPLE_EVERY-th is attributed to its site, so that the profile costs
//! the checker nothing it would notice.

use rustc_hash::FxHashMap;
use serde_json::{json, Value};

use crate::symbols::{SiteRef, Symbols};
use crate::trace::{TraceEvent, CONSTANTS, EV_ACCESS, EV_ESCAPE, EV_FRAME, EV_PORT, EV_RETURN, EV_STRING};

const SAMPLE_EVERY: u64 = 64;
/// Functions named in the summary, most events first.
const TOP: usize = 12;

/// Every kind of the contract is below this (trace.h's US_EV_*).
const KINDS: usize = 32;

#[derive(Default)]
pub struct Profile {
    /// By kind; a kind outside the contract ends the trace before it is counted twice.
    by_kind: [u64; KINDS],
    /// Sampled events by site: a stub's return address, or a runtime call site.
    sampled: FxHashMap<SiteRef, u64>,
}

impl Profile {
    pub fn count(&mut self, index: u64, ev: &TraceEvent) {
        if let Some(n) = self.by_kind.get_mut(ev.kind() as usize) {
            *n += 1;
        }
        if index % SAMPLE_EVERY == 0 {
            *self.sampled.entry(site_of(ev)).or_default() += 1;
        }
    }

    /// `{"by_kind": {"ACCESS": n, ...}, "functions": [{"module", "function", "share"}, ...]}`,
    /// the functions' shares of the sampled events, largest first.
    pub fn json(&self, symbols: &Symbols) -> Value {
        let by_kind: serde_json::Map<String, Value> = (0..KINDS).filter(|&k| self.by_kind[k] > 0)
            .map(|k| (kind_name(k as u16), self.by_kind[k].into())).collect();
        let mut functions: FxHashMap<(Value, Value), u64> = FxHashMap::default();
        for (&site, &n) in &self.sampled {
            let d = symbols.describe(site);
            *functions.entry((d["module"].clone(), d["function"].clone())).or_default() += n;
        }
        let total: u64 = functions.values().sum();
        let mut functions: Vec<_> = functions.into_iter().collect();
        functions.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        let top: Vec<Value> = functions.into_iter().take(TOP).map(|((module, function), n)| json!({
            "module": module, "function": function,
            "share": (n as f64 / total.max(1) as f64 * 1000.0).round() / 1000.0,
        })).collect();
        json!({ "by_kind": by_kind, "functions": top, "sample_every": SAMPLE_EVERY })
    }
}

/// A stub event's site is the probe's; the runtime's events carry the
/// driver's call site.
fn site_of(ev: &TraceEvent) -> SiteRef {
    match ev.kind() {
        EV_ACCESS | EV_STRING | EV_PORT | EV_FRAME | EV_RETURN | EV_ESCAPE => SiteRef::Stub(ev.site),
        _ => SiteRef::Runtime(ev.site),
    }
}

/// `US_EV_ACCESS` → `ACCESS`; a kind outside the contract by its number.
fn kind_name(kind: u16) -> String {
    CONSTANTS.iter()
        .find(|(name, value)| name.starts_with("US_EV_") && *value == kind as u64)
        .map_or_else(|| kind.to_string(), |(name, _)| name["US_EV_".len()..].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_after_the_contract() {
        assert_eq!(kind_name(EV_ACCESS), "ACCESS");
        assert_eq!(kind_name(crate::trace::EV_DMA_MAP), "DMA_MAP");
        assert_eq!(kind_name(999), "999");
    }
}
