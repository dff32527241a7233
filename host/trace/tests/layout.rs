// SPDX-License-Identifier: GPL-2.0
//! `include/understudy/trace.h` (with `trace-events.h`, which it includes)
//! and this crate declare the same region.
//!
//! Both are reduced to the same list of C expressions and their values
//! (`understudy-cheader`): every `US_*` constant, every struct's size, every
//! member's offset and size. An expression on one side only fails the test,
//! as does a value the two disagree on.
//!
//! `a_change_to_the_headers_alone_is_reported` runs the same comparison on
//! copies of the headers that add a `#define US_NEW 1`, add an event kind,
//! drop a constant, rename a struct member or change a value, and checks
//! that each is reported.

use std::path::{Path, PathBuf};

use understudy_cheader::{header_values, offsetof, sizeof_member, sizeof_struct, Values};
use understudy_trace::{layouts, CONSTANTS};

/// The contract's headers, trace.h first.
const HEADERS: [&str; 2] = ["trace.h", "trace-events.h"];

fn include_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../include/understudy")
}

fn rust_values() -> Values {
    let mut v: Values = CONSTANTS.iter().map(|&(name, value)| (name.to_string(), value)).collect();
    for s in layouts() {
        v.insert(sizeof_struct(s.c_name), s.size as u64);
        for (member, offset, size) in s.members {
            v.insert(offsetof(s.c_name, member), offset as u64);
            v.insert(sizeof_member(s.c_name, member, false), size as u64);
        }
    }
    v
}

/// Every disagreement between `header` (`.../understudy/trace.h`) and this
/// crate; `work` is the caller's own directory (the tests run in parallel).
fn disagreements(header: &Path, work: &Path) -> Vec<String> {
    // The headers have no functions, hence no samples.
    let c = header_values(header, work, &[]);
    understudy_cheader::disagreements(&c, &rust_values(), "host/trace")
}

#[test]
fn rust_and_c_agree_on_every_constant_struct_and_member() {
    let problems = disagreements(&include_dir().join(HEADERS[0]),
                                 &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("trace-layout"));
    assert!(problems.is_empty(), "include/understudy/trace.h and host/trace disagree:\n{}", problems.join("\n"));
}

/// The negative test: the comparison, run on copies of the headers of which
/// one is changed alone, reports each change, so the test above cannot pass
/// by comparing too little (or by not reading trace-events.h).
#[test]
fn a_change_to_the_headers_alone_is_reported() {
    let originals = HEADERS.map(|h| std::fs::read_to_string(include_dir().join(h)).unwrap());
    // The headers with `from` replaced by `to` in the one that has it.
    let edit = |from: &str, to: &str| {
        assert!(originals.iter().any(|o| o.contains(from)), "the headers no longer have {from:?}: update this test");
        originals.clone().map(|o| o.replacen(from, to, 1))
    };
    let cases = [
        ("define", edit("#endif /* UNDERSTUDY_TRACE_H */", "#define US_NEW 1\n#endif"), "US_NEW = 1: in the header only"),
        ("event", edit("\tUS_EV_STOP = 31,", "\tUS_EV_STOP = 31,\n\tUS_EV_NEW = 32,"), "US_EV_NEW = 32: in the header only"),
        ("dropped", edit("#define US_SITE_PORT   0x40u", ""), "US_SITE_PORT = 64: in host/trace only"),
        ("dropped-event-flag", edit("#define US_EVF_DF     0x0002u", ""), "US_EVF_DF = 2: in host/trace only"),
        ("member", edit("\tuint8_t reserved;", "\tuint8_t spare;"),
         "offsetof(struct us_trace_site, spare) = 15: in the header only"),
        ("value", edit("#define US_TRACE_VERSION      2u", "#define US_TRACE_VERSION      3u"),
         "US_TRACE_VERSION: the header says 3, host/trace 2"),
    ];
    for (name, texts, expected) in cases {
        let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("trace-layout-{name}"));
        let dir = work.join("include/understudy");
        std::fs::create_dir_all(&dir).unwrap();
        for (header, text) in HEADERS.iter().zip(texts) {
            std::fs::write(dir.join(header), text).unwrap();
        }
        let problems = disagreements(&dir.join(HEADERS[0]), &work);
        assert!(problems.iter().any(|p| p == expected), "{name}: {expected:?} not among {problems:#?}");
    }
}
