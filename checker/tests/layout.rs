// SPDX-License-Identifier: GPL-2.0
//! `include/understudy/trace.h` and `src/trace.rs` declare the same region.
//!
//! Both are reduced to the same list of C expressions and their values
//! (`understudy-cheader`): every `US_*` constant, every struct's size, every
//! member's offset and size. An expression on one side only fails the test,
//! as does a value the two disagree on; the second test checks that a change
//! to the header alone is caught.

use std::path::{Path, PathBuf};

use understudy_cheader::{header_values, offsetof, sizeof_member, sizeof_struct, Values};
use understudy_checker::trace::{layouts, CONSTANTS};

fn header() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../include/understudy/trace.h")
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

fn disagreements(header: &Path, work: &Path) -> Vec<String> {
    // trace.h has no functions, hence no samples.
    let c = header_values(header, work, &[]);
    understudy_cheader::disagreements(&c, &rust_values(), "checker/src/trace.rs")
}

#[test]
fn rust_and_c_agree_on_every_constant_struct_and_member() {
    let problems = disagreements(&header(), &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("trace-layout"));
    assert!(problems.is_empty(), "include/understudy/trace.h and checker/src/trace.rs disagree:\n{}", problems.join("\n"));
}

#[test]
fn a_change_to_the_header_alone_is_reported() {
    let original = std::fs::read_to_string(header()).unwrap();
    let edit = |from: &str, to: &str| {
        assert!(original.contains(from), "the header no longer has {from:?}: update this test");
        original.replacen(from, to, 1)
    };
    let cases = [
        ("define", edit("#endif /* UNDERSTUDY_TRACE_H */", "#define US_NEW 1\n#endif"), "US_NEW = 1: in the header only"),
        ("event", edit("\tUS_EV_STOP = 31,", "\tUS_EV_STOP = 31,\n\tUS_EV_NEW = 32,"), "US_EV_NEW = 32: in the header only"),
        ("dropped", edit("#define US_SITE_PORT   0x40u", ""), "US_SITE_PORT = 64: in checker/src/trace.rs only"),
        ("member", edit("\tuint8_t reserved;", "\tuint8_t spare;"),
         "offsetof(struct us_trace_site, spare) = 15: in the header only"),
        ("value", edit("#define US_TRACE_VERSION      2u", "#define US_TRACE_VERSION      3u"),
         "US_TRACE_VERSION: the header says 3, checker/src/trace.rs 2"),
    ];
    for (name, text, expected) in cases {
        let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("trace-layout-{name}"));
        let dir = work.join("include/understudy");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("trace.h"), text).unwrap();
        let problems = disagreements(&dir.join("trace.h"), &work);
        assert!(problems.iter().any(|p| p == expected), "{name}: {expected:?} not among {problems:#?}");
    }
}
