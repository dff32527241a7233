// SPDX-License-Identifier: GPL-2.0
//! `include/understudy/protocol.h` and this crate declare the same protocol.
//!
//! Both sides are reduced to the same list of C expressions and their values:
//! `US_X` for every constant, `sizeof(struct us_x)` for every struct,
//! `offsetof(...)` and the size of every member (of one element for a
//! flexible array member), and sample calls of every `static inline us_*()`.
//! The header's list comes from reading the header and its values from a C
//! program compiled against it (`understudy-cheader`); this crate's from
//! [`CONSTANTS`], [`layouts`] and [`function_samples`].
//! An expression on one side only fails the test, as does a value the two
//! sides disagree on.
//!
//! `a_change_to_the_header_alone_is_reported` runs the same comparison on
//! copies of the header that add a `#define US_NEW 1`, add a message type,
//! drop a constant, add a struct member, change a value or an exit status
//! or change the ring arithmetic, and checks that each is reported.

use std::path::{Path, PathBuf};

use understudy_cheader::{header_values, offsetof, sizeof_member, sizeof_struct, Values};
use understudy_protocol::*;

fn header() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../include/understudy/protocol.h")
}

/// The header's functions, each with calls whose values the Rust twin gives.
/// Every `static inline us_*()` of the header must be here.
fn function_samples() -> Vec<(&'static str, Vec<(&'static str, u64)>)> {
    vec![
        ("us_tx_span", vec![
            ("us_tx_span(1514, 2048)", tx_span(1514, 2048).into()),
            ("us_tx_span(1537, 2048)", tx_span(1537, 2048).into()),
            ("us_tx_span(US_TX_MAX_FRAME, 2048)", tx_span(TX_MAX_FRAME, 2048).into()),
        ]),
        ("us_blk_span", vec![
            ("us_blk_span(0, 4096)", blk_span(0, 4096).into()),
            ("us_blk_span(4096, 4096)", blk_span(4096, 4096).into()),
            ("us_blk_span(1048576 + 512, 4096)", blk_span(1_048_576 + 512, 4096).into()),
        ]),
        ("us_blk_ring_stride", vec![
            ("us_blk_ring_stride(US_RING_SIZE)", blk_ring_stride(RING_SIZE)),
            ("us_blk_ring_stride(100)", blk_ring_stride(100)),
        ]),
        ("us_blk_rings_size", vec![("us_blk_rings_size(128)", blk_rings_size(128))]),
        ("us_ring_slot", vec![
            ("us_ring_slot(5, US_RING_SIZE)", ring_slot(5, RING_SIZE).into()),
            ("us_ring_slot(US_RING_SIZE + 3, US_RING_SIZE)", ring_slot(RING_SIZE + 3, RING_SIZE).into()),
            ("us_ring_slot(0xffffffff, 8)", ring_slot(0xffff_ffff, 8).into()),
        ]),
        ("us_ring_used", vec![
            ("us_ring_used(7, 3)", ring_used(7, 3).into()),
            ("us_ring_used(7, 7)", ring_used(7, 7).into()),
            // The counters wrap at 2^32; a tail past head is a huge count.
            ("us_ring_used(2, 0xfffffffe)", ring_used(2, 0xffff_fffe).into()),
            ("us_ring_used(3, 7)", ring_used(3, 7).into()),
        ]),
        ("us_ring_stride", vec![
            ("us_ring_stride(US_RING_SIZE)", ring_stride(RING_SIZE)),
            ("us_ring_stride(100)", ring_stride(100)),
        ]),
        ("us_tap_state_offset", vec![("us_tap_state_offset(US_RING_SIZE)", tap_state_offset(RING_SIZE))]),
        ("us_rings_size", vec![
            ("us_rings_size(US_RING_SIZE)", rings_size(RING_SIZE)),
            ("us_rings_size(128)", rings_size(128)),
        ]),
    ]
}

/// What this crate declares, as C expressions and values.
fn rust_values() -> Values {
    let mut v = Values::new();
    for &(name, value) in CONSTANTS {
        v.insert(name.into(), value);
    }
    for s in layouts() {
        v.insert(sizeof_struct(s.c_name), s.size as u64);
        for f in s.fields {
            v.insert(offsetof(s.c_name, f.c_name), f.offset as u64);
            v.insert(sizeof_member(s.c_name, f.c_name, f.flexible), f.size as u64);
        }
    }
    for (_, samples) in function_samples() {
        v.extend(samples.into_iter().map(|(call, value)| (call.to_string(), value)));
    }
    v
}

/// Every disagreement between `header` (`.../understudy/protocol.h`) and this
/// crate, one line each. `work` is a directory of the caller's own: the tests
/// run in parallel.
fn disagreements(header: &Path, work: &Path) -> Vec<String> {
    let c = header_values(header, work, &function_samples());
    understudy_cheader::disagreements(&c, &rust_values(), "host/protocol")
}

#[test]
fn rust_and_c_agree_on_every_constant_struct_and_member() {
    let problems = disagreements(&header(), &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("layout"));
    assert!(problems.is_empty(), "include/understudy/protocol.h and host/protocol disagree:\n{}", problems.join("\n"));
}

/// The negative test: the comparison, run on copies of the header changed
/// alone, reports each change (a constant or member added, a constant dropped,
/// a value changed, a function that computes otherwise), so the test above
/// cannot pass by comparing too little.
#[test]
fn a_change_to_the_header_alone_is_reported() {
    let original = std::fs::read_to_string(header()).unwrap();
    let edit = |from: &str, to: &str| {
        assert!(original.contains(from), "the header no longer has {from:?}: update this test");
        original.replacen(from, to, 1)
    };
    let cases = [
        ("define", edit("#endif /* UNDERSTUDY_PROTOCOL_H */", "#define US_NEW 1\n#endif"),
         "US_NEW = 1: in the header only"),
        ("message", edit("\tUS_MSG_WARN = 69,\n", "\tUS_MSG_WARN = 69,\n\tUS_MSG_NEW = 70,\n"),
         "US_MSG_NEW = 70: in the header only"),
        ("dropped", edit("#define US_RX_MODE_ALLMULTI 0x2u\n", ""),
         "US_RX_MODE_ALLMULTI = 2: in host/protocol only"),
        ("member", edit("\tuint8_t on;\n", "\tuint8_t on;\n\tuint8_t spare;\n"),
         "offsetof(struct us_carrier, spare) = 1: in the header only"),
        ("value", edit("#define US_TEXT_MAX 1024u", "#define US_TEXT_MAX 1000u"),
         "US_TEXT_MAX: the header says 1000, host/protocol 1024"),
        ("exit-status", edit("#define US_EXIT_VERDICT 3\n", "#define US_EXIT_VERDICT 4\n"),
         "US_EXIT_VERDICT: the header says 4, host/protocol 3"),
        ("ring-arithmetic", edit("\treturn head - tail;\n", "\treturn head > tail ? head - tail : 0;\n"),
         "us_ring_used(3, 7): the header says 0, host/protocol 4294967292"),
    ];
    for (name, text, expected) in cases {
        let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("layout-{name}"));
        let dir = work.join("include/understudy");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("protocol.h"), text).unwrap();
        let problems = disagreements(&dir.join("protocol.h"), &work);
        assert!(problems.iter().any(|p| p == expected), "{name}: {expected:?} not among {problems:#?}");
    }
}
