// SPDX-License-Identifier: GPL-2.0
//! The checkers' cost on a real driver's trace: plays a recording of
//! `understudy-checker --record FILE` (checker/src/record.rs) back through
//! the gate, as many times as asked, and times the checking alone.
//!
//!     cargo run --release -p understudy-checker --example replay -- FILE [RUNS] [CHECKERS]
//!
//! CHECKERS (`memory,dma`, as `understudy-checker --checkers` takes them)
//! times some of the checkers alone; all of them run by default.
//!
//! The modules' paths are the driver process's: where they do not exist
//! here, findings name sections rather than functions, which costs the
//! checking nothing. Run it under `perf record` to see where the time goes.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;

use common::{bench, time_checkers};
use understudy_checker::engine::Checkers;
use understudy_checker::record::replay;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(args.next().expect("usage: replay FILE [RUNS] [CHECKERS]"));
    let runs = args.next().map_or(5, |r| r.parse().expect("RUNS is a number"));
    let checkers = args.next().map_or(Checkers::ALL, |names| {
        Checkers::from_names(&names.split(',').collect::<Vec<_>>()).unwrap_or_else(|e| panic!("{e}"))
    });
    let (_, events) = replay(&path).unwrap_or_else(|e| panic!("{e}"));
    bench(events.len(), runs, || {
        let (region, _) = replay(&path).expect("read once already");
        time_checkers(&region, &events, checkers)
    });
}
