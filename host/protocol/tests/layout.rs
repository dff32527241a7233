// SPDX-License-Identifier: GPL-2.0
//! `include/understudy/protocol.h` and this crate declare the same protocol.
//!
//! Both sides are reduced to the same list of C expressions and their values:
//! `US_X` for every constant, `sizeof(struct us_x)` for every struct,
//! `offsetof(...)` and the size of every member (of one element for a
//! flexible array member), and sample calls of every `static inline us_*()`.
//! The header's list comes from reading the header (its grammar is the small
//! one `header_items` accepts) and its values from a C program compiled against
//! it; this crate's from [`CONSTANTS`], [`layouts`] and [`function_samples`].
//! An expression on one side only fails the test, as does a value the two
//! sides disagree on.
//!
//! `a_change_to_the_header_alone_is_reported` runs the same comparison on
//! copies of the header that add a `#define US_NEW 1`, add a message type,
//! drop a constant, add a struct member or change a value, and checks that
//! each is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use understudy_protocol::*;

/// A C expression (`US_MSG_MAX`, `sizeof(struct us_hello)`, ...) and its value.
type Values = BTreeMap<String, u64>;

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
        ("us_ring_stride", vec![
            ("us_ring_stride(US_RING_SIZE)", ring_stride(RING_SIZE)),
            ("us_ring_stride(100)", ring_stride(100)),
        ]),
    ]
}

fn sizeof_struct(s: &str) -> String {
    format!("sizeof(struct {s})")
}

fn offsetof(s: &str, field: &str) -> String {
    format!("offsetof(struct {s}, {field})")
}

/// A member's size; of one element for a flexible array member (`entries[]`).
fn sizeof_member(s: &str, field: &str, flexible: bool) -> String {
    format!("sizeof(((struct {s} *)0)->{field}{})", if flexible { "[0]" } else { "" })
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

/// What the header declares, as read from its text.
#[derive(Debug, Default)]
struct HeaderItems {
    includes: Vec<String>,
    constants: Vec<String>,
    /// (struct tag, [(member, flexible)])
    structs: Vec<(String, Vec<(String, bool)>)>,
    functions: Vec<String>,
}

/// The header without comments, continuation lines joined.
fn strip_comments(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('/', Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
                out.push(' ');
            }
            ('/', Some('/')) => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            ('"', _) => {
                out.push(c);
                while let Some(c) = chars.next() {
                    out.push(c);
                    match c {
                        '\\' => out.extend(chars.next()),
                        '"' => break,
                        _ => {}
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out.replace("\\\n", " ")
}

/// C tokens: identifiers and numbers whole, string literals whole, any other
/// character alone.
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_whitespace() {
            continue;
        }
        let mut tok = c.to_string();
        if c.is_ascii_alphanumeric() || c == '_' {
            while let Some(&n) = chars.peek().filter(|n| n.is_ascii_alphanumeric() || **n == '_') {
                tok.push(n);
                chars.next();
            }
        } else if c == '"' {
            while let Some(n) = chars.next() {
                tok.push(n);
                match n {
                    '\\' => tok.extend(chars.next()),
                    '"' => break,
                    _ => {}
                }
            }
        }
        out.push(tok);
    }
    out
}

fn is_ident(tok: &str) -> bool {
    tok.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
}

/// The index of the token that closes the bracket at `open`.
fn closing(toks: &[String], open: usize) -> usize {
    let mut depth = 0;
    for (i, t) in toks.iter().enumerate().skip(open) {
        match t.as_str() {
            "{" | "(" | "[" => depth += 1,
            "}" | ")" | "]" => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced {:?}", toks[open]);
}

/// Reads the header's declarations. Its grammar: `#include <...>`,
/// `#define NAME ...`, `enum [tag] { NAME [= value], ... };`, `struct tag {
/// type name[dims]...; ... } [attributes];`, `static inline type name(...)
/// { ... }` and anything else without braces (`_Static_assert`). A construct
/// outside it (a nested struct, a union, a function-like `US_` macro) fails
/// the test rather than go unchecked.
fn header_items(text: &str) -> HeaderItems {
    let mut items = HeaderItems::default();
    let mut code = String::new();
    for line in strip_comments(text).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["#include", what, ..] => items.includes.push(what.to_string()),
            ["#define", name, ..] if name.starts_with("US_") => {
                assert!(!name.contains('('), "function-like macro {name}: not comparable, make it a function");
                items.constants.push(name.to_string());
            }
            [w, ..] if w.starts_with('#') => {}
            _ => {
                code.push_str(line);
                code.push('\n');
            }
        }
    }
    let toks = tokens(&code);
    let mut i = 0;
    while i < toks.len() {
        match toks[i].as_str() {
            "enum" => {
                let open = if toks[i + 1] == "{" { i + 1 } else { i + 2 };
                assert_eq!(toks[open], "{", "enum at token {i}");
                let close = closing(&toks, open);
                for member in toks[open + 1..close].split(|t| t == ",").filter(|m| !m.is_empty()) {
                    assert!(member[0].starts_with("US_"), "enum member {} is not US_*", member[0]);
                    items.constants.push(member[0].clone());
                }
                i = close + 1;
            }
            "struct" if toks.get(i + 2).is_some_and(|t| t == "{") => {
                let tag = toks[i + 1].clone();
                assert!(tag.starts_with("us_"), "struct {tag} is not us_*");
                let close = closing(&toks, i + 2);
                let mut members = Vec::new();
                for decl in toks[i + 3..close].split(|t| t == ";").filter(|d| !d.is_empty()) {
                    assert!(!decl.iter().any(|t| t == "{" || t == "union" || t == ","),
                            "struct {tag}: member {decl:?} is not `type name[dims];`");
                    let end = decl.iter().position(|t| t == "[").unwrap_or(decl.len());
                    let name = decl[..end].last().filter(|t| is_ident(t)).expect("member name");
                    let flexible = decl.get(end + 1).is_some_and(|t| t == "]");
                    members.push((name.clone(), flexible));
                }
                items.structs.push((tag, members));
                i = close + 1;
            }
            "static" if toks.get(i + 1).is_some_and(|t| t == "inline") => {
                let paren = (i..toks.len()).find(|&j| toks[j] == "(").expect("function parameters");
                items.functions.push(toks[paren - 1].clone());
                let body = closing(&toks, paren) + 1;
                assert_eq!(toks[body], "{", "function {}", toks[paren - 1]);
                i = closing(&toks, body) + 1;
            }
            "{" => panic!("a brace outside enum, struct and function definitions: {:?}", &toks[i.saturating_sub(5)..i]),
            _ => i += 1,
        }
    }
    items
}

/// The header's expressions; values from a C program compiled in `work`.
fn header_values(header: &Path, work: &Path) -> Values {
    let items = header_items(&std::fs::read_to_string(header).unwrap());
    // The contract belongs to neither world (docs/protocol.md): no Linux, no
    // host header, nothing of libc beyond the fixed-width integers.
    assert_eq!(items.includes, ["<stdint.h>"], "{} includes more than <stdint.h>", header.display());

    let mut exprs = items.constants.clone();
    for (tag, members) in &items.structs {
        exprs.push(sizeof_struct(tag));
        for (m, flexible) in members {
            exprs.push(offsetof(tag, m));
            exprs.push(sizeof_member(tag, m, *flexible));
        }
    }
    let samples = function_samples();
    for f in &items.functions {
        let (_, calls) = samples.iter().find(|(name, _)| name == f)
            .unwrap_or_else(|| panic!("{f}() of the header has no samples in function_samples()"));
        exprs.extend(calls.iter().map(|(call, _)| call.to_string()));
    }
    let header_functions: BTreeSet<_> = items.functions.iter().map(String::as_str).collect();
    for (f, _) in &samples {
        assert!(header_functions.contains(f), "function_samples() names {f}(), which the header lacks");
    }

    std::fs::create_dir_all(work).unwrap();
    let (src, exe) = (work.join("protocol_values.c"), work.join("protocol_values"));
    let mut c = String::from("#include <stddef.h>\n#include <stdio.h>\n#include <understudy/protocol.h>\n\n");
    c += "int main(void)\n{\n";
    for e in &exprs {
        c += &format!("\tprintf(\"%llu\\n\", (unsigned long long)({e}));\n");
    }
    c += "\treturn 0;\n}\n";
    std::fs::write(&src, c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    // -std=c11 -pedantic: the header is plain C11 (and GCC's attributes).
    let status = Command::new(&cc)
        .args(["-std=c11", "-pedantic", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(header.parent().unwrap().parent().unwrap())
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?}: {e}"));
    assert!(status.success(), "{} does not compile: see {}", header.display(), src.display());
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let values = String::from_utf8(out.stdout).unwrap();
    let values: Vec<u64> = values.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(values.len(), exprs.len());
    exprs.into_iter().zip(values).collect()
}

/// Every disagreement between `header` (`.../understudy/protocol.h`) and this
/// crate, one line each. `work` is a directory of the caller's own: the tests
/// run in parallel.
fn disagreements(header: &Path, work: &Path) -> Vec<String> {
    let (c, rust) = (header_values(header, work), rust_values());
    let mut out = Vec::new();
    for (expr, &value) in &c {
        match rust.get(expr) {
            None => out.push(format!("{expr} = {value}: in the header only")),
            Some(&r) if r != value => out.push(format!("{expr}: the header says {value}, host/protocol {r}")),
            Some(_) => {}
        }
    }
    for (expr, value) in &rust {
        if !c.contains_key(expr) {
            out.push(format!("{expr} = {value}: in host/protocol only"));
        }
    }
    out
}

#[test]
fn rust_and_c_agree_on_every_constant_struct_and_member() {
    let problems = disagreements(&header(), &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("layout"));
    assert!(problems.is_empty(), "include/understudy/protocol.h and host/protocol disagree:\n{}", problems.join("\n"));
}

/// The negative test: the comparison, run on copies of the header changed
/// alone, reports each change (a constant or member added, a constant dropped,
/// a value changed), so the test above cannot pass by comparing too little.
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

/// A declaration the reader cannot list must fail the test, not go unchecked.
#[test]
fn constructs_the_reader_does_not_know_fail() {
    for text in ["#define US_F(x) (x)\n", "struct us_u { union { uint8_t a; } u; };\n", "struct us_m { int a, b; };\n"] {
        assert!(std::panic::catch_unwind(|| header_items(text)).is_err(), "{text:?} was accepted");
    }
}
