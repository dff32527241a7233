// SPDX-License-Identifier: GPL-2.0
//! A contract header of `include/understudy/` and its Rust mirror must declare
//! the same thing. This crate reduces the header, with the contract headers
//! beside it that it includes, to a list of C expressions and their values —
//! `US_X` for every constant, `sizeof(struct us_x)` for every struct,
//! `offsetof(...)` and the size of every member (of one element for a
//! flexible array member), and sample calls of every `static inline us_*()`
//! — the names read from the headers' text, the values from a C program
//! compiled against it. A mirror's test builds the same list from its
//! own declarations and compares the two with [`disagreements`].
//!
//! The reader knows the headers' small grammar (see [`header_items`]); a
//! construct outside it panics rather than go unchecked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// C expressions (`US_MSG_MAX`, `sizeof(struct us_hello)`, ...) and their values.
pub type Values = BTreeMap<String, u64>;

/// Sample calls of a header's functions with the values the Rust twin gives:
/// `("us_tx_span", [("us_tx_span(1514, 2048)", 1)])`.
pub type FunctionSamples = [(&'static str, Vec<(&'static str, u64)>)];

pub fn sizeof_struct(tag: &str) -> String {
    format!("sizeof(struct {tag})")
}

pub fn offsetof(tag: &str, member: &str) -> String {
    format!("offsetof(struct {tag}, {member})")
}

/// A member's size; of one element for a flexible array member (`entries[]`).
pub fn sizeof_member(tag: &str, member: &str, flexible: bool) -> String {
    format!("sizeof(((struct {tag} *)0)->{member}{})", if flexible { "[0]" } else { "" })
}

/// What a header declares, as read from its text.
#[derive(Debug, Default)]
pub struct HeaderItems {
    pub includes: Vec<String>,
    pub constants: Vec<String>,
    /// (struct tag, [(member, flexible)])
    pub structs: Vec<(String, Vec<(String, bool)>)>,
    pub functions: Vec<String>,
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

/// Reads a header's declarations. Its grammar: `#include <...>`,
/// `#define NAME ...`, `enum [tag] { NAME [= value], ... };`, `struct tag {
/// type name[dims]...; ... } [attributes];`, `static inline type name(...)
/// { ... }` and anything else without braces (`_Static_assert`). A construct
/// outside it (a nested struct, a union, a function-like `US_` macro) panics
/// rather than go unchecked.
pub fn header_items(text: &str) -> HeaderItems {
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

/// What `header` declares with the contract headers it includes, read from
/// their text. A contract belongs to neither world (docs/protocol.md): it
/// includes <stdint.h> and the contract headers beside it ("x.h"), which
/// include nothing else either; no Linux, no host header, nothing of libc
/// beyond the fixed-width integers.
pub fn contract_items(header: &Path) -> HeaderItems {
    let mut items = header_items(&std::fs::read_to_string(header).unwrap());
    for include in std::mem::take(&mut items.includes) {
        match include.strip_prefix('"').and_then(|i| i.strip_suffix('"')) {
            Some(sibling) if !sibling.contains('/') => {
                let part = contract_items(&header.with_file_name(sibling));
                items.constants.extend(part.constants);
                items.structs.extend(part.structs);
                items.functions.extend(part.functions);
            }
            _ => assert_eq!(include, "<stdint.h>",
                            "{} includes {include}: a contract includes only <stdint.h> and contract headers beside it",
                            header.display()),
        }
    }
    items
}

/// The expressions `header` (`.../understudy/x.h`) and the contract headers
/// it includes declare, and their values,
/// from a C program compiled in `work` (a directory of the caller's own: the
/// tests run in parallel). Every function of the header needs samples.
pub fn header_values(header: &Path, work: &Path, samples: &FunctionSamples) -> Values {
    let items = contract_items(header);

    let mut exprs = items.constants.clone();
    for (tag, members) in &items.structs {
        exprs.push(sizeof_struct(tag));
        for (m, flexible) in members {
            exprs.push(offsetof(tag, m));
            exprs.push(sizeof_member(tag, m, *flexible));
        }
    }
    for f in &items.functions {
        let (_, calls) = samples.iter().find(|(name, _)| name == f)
            .unwrap_or_else(|| panic!("{f}() of the header has no samples"));
        exprs.extend(calls.iter().map(|(call, _)| call.to_string()));
    }
    let header_functions: BTreeSet<_> = items.functions.iter().map(String::as_str).collect();
    for (f, _) in samples {
        assert!(header_functions.contains(f), "the samples name {f}(), which the header lacks");
    }

    // The header is included as <dir/name.h>, from the directory above its own.
    let dir = header.parent().unwrap();
    let include = format!("{}/{}", dir.file_name().unwrap().to_string_lossy(),
                          header.file_name().unwrap().to_string_lossy());
    let stem = header.file_stem().unwrap().to_string_lossy();
    std::fs::create_dir_all(work).unwrap();
    let (src, exe) = (work.join(format!("{stem}_values.c")), work.join(format!("{stem}_values")));
    let mut c = format!("#include <stddef.h>\n#include <stdio.h>\n#include <{include}>\n\n");
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
        .arg(dir.parent().unwrap())
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

/// Every disagreement between the header's values and the mirror's, one line
/// each; `mirror` names the mirror in them (`host/protocol`).
pub fn disagreements(header: &Values, rust: &Values, mirror: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (expr, &value) in header {
        match rust.get(expr) {
            None => out.push(format!("{expr} = {value}: in the header only")),
            Some(&r) if r != value => out.push(format!("{expr}: the header says {value}, {mirror} {r}")),
            Some(_) => {}
        }
    }
    for (expr, value) in rust {
        if !header.contains_key(expr) {
            out.push(format!("{expr} = {value}: in {mirror} only"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A declaration the reader cannot list must fail the test, not go unchecked.
    #[test]
    fn constructs_the_reader_does_not_know_fail() {
        for text in ["#define US_F(x) (x)\n", "struct us_u { union { uint8_t a; } u; };\n", "struct us_m { int a, b; };\n"] {
            assert!(std::panic::catch_unwind(|| header_items(text)).is_err(), "{text:?} was accepted");
        }
    }

    /// A contract's sibling headers are read with it; any other include fails.
    #[test]
    fn a_contract_is_read_with_the_headers_beside_it_it_includes() {
        let dir = std::env::temp_dir().join(format!("cheader-test-{}-siblings", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("part.h"), "enum us_k { US_K = 1 };\n").unwrap();
        std::fs::write(dir.join("whole.h"), "#include <stdint.h>\n#include \"part.h\"\n#define US_W 2u\n").unwrap();
        std::fs::write(dir.join("libc.h"), "#include <stdint.h>\n#include <stdio.h>\n").unwrap();
        assert_eq!(contract_items(&dir.join("whole.h")).constants, ["US_W", "US_K"]);
        assert!(std::panic::catch_unwind(|| contract_items(&dir.join("libc.h"))).is_err(), "<stdio.h> was accepted");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn reads_constants_enums_structs_and_functions() {
        let items = header_items(concat!(
            "#include <stdint.h>\n#define US_A 1u /* one */\n",
            "enum us_e { US_B = 2, US_C };\n",
            "struct us_s { uint32_t a; char path[16]; uint8_t tail[]; };\n",
            "_Static_assert(sizeof(struct us_s) == 20, \"s\");\n",
            "static inline uint32_t us_f(uint32_t x) { return x; }\n"));
        assert_eq!(items.includes, ["<stdint.h>"]);
        assert_eq!(items.constants, ["US_A", "US_B", "US_C"]);
        assert_eq!(items.structs, [("us_s".to_string(), vec![
            ("a".to_string(), false), ("path".to_string(), false), ("tail".to_string(), true)])]);
        assert_eq!(items.functions, ["us_f"]);
    }
}
