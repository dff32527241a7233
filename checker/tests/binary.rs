// SPDX-License-Identifier: GPL-2.0
//! The built `understudy-checker` on a memfd region, as understudyd runs it:
//! the region as an inherited descriptor, JSON lines read from its stdout,
//! SIGTERM to end it. The module is a real ELF object compiled here, so the
//! finding's site is named by function.

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use object::{Object, ObjectSection, ObjectSymbol};
use serde_json::Value;
use understudy_checker::region::{futex_wake, Region};
use understudy_checker::trace::*;

fn memfd() -> File {
    // Without MFD_CLOEXEC: the checker inherits it, as from understudyd.
    // SAFETY: a valid C string and flags.
    let fd = unsafe { libc::memfd_create(c"trace".as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a new descriptor we own.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(TRACE_REGION_SIZE).unwrap();
    // SAFETY: sealing the memfd we created.
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) }, 0);
    file
}

/// A tiny module: `xmit` stores to its argument. Returns the object's path,
/// the .text section's index and xmit's offset in it.
fn module(dir: &Path) -> (PathBuf, u16, u32) {
    std::fs::create_dir_all(dir).unwrap();
    let (src, obj) = (dir.join("tiny.c"), dir.join("tiny.ko"));
    std::fs::write(&src, "int probe(int *p) { return p[1] + 1; }\nvoid xmit(int *p) { p[2] = 5; }\n").unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc).args(["-c", "-O1", "-o"]).arg(&obj).arg(&src).status().unwrap();
    assert!(status.success());
    let bytes = std::fs::read(&obj).unwrap();
    let elf = object::File::parse(&*bytes).unwrap();
    let text = elf.section_by_name(".text").unwrap().index().0 as u16;
    let xmit = elf.symbols().find(|s| s.name() == Ok("xmit")).unwrap().address() as u32;
    (obj, text, xmit)
}

fn spawn(file: &File) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_understudy-checker"))
        .args(["--trace-fd", &file.as_raw_fd().to_string(), "--fatal", "use-after-free,double-free"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdout)
}

fn next_line(stdout: &mut BufReader<ChildStdout>) -> Value {
    let mut line = String::new();
    assert!(stdout.read_line(&mut line).unwrap() > 0, "the checker closed stdout");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?} is not JSON: {e}"))
}

fn publish(region: &Region, events: &[TraceEvent]) {
    let mut head = region.head().load(Ordering::Acquire);
    for e in events {
        region.write(RING_AT as usize + (head % RING as u64) as usize * size_of::<TraceEvent>(), *e);
        head += 1;
    }
    region.head().store(head, Ordering::SeqCst);
    if region.checker_waiting().load(Ordering::SeqCst) != 0 {
        futex_wake(region.low_word(region.head()));
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_checker_reports_a_use_after_free_by_function_and_stops_approval() {
    let (path, text, xmit) = module(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("binary"));
    let file = memfd();
    let region = Region::map(&file).unwrap();
    let (mut child, mut stdout) = spawn(&file);
    wait_for("the checker's pid", || region.checker_pid().load(Ordering::Acquire) == child.id());

    let site = TraceSite { ret: WRITE4, offset: xmit + 2, module: 0, section: text, size: 4, flags: SITE_WRITE, reserved: 0 };
    fill(&region, GATE_STRINGENT, path.to_str().unwrap(), &[site]);
    publish(&region, &[alloc(HEAP, 64), access(WRITE4, HEAP)]);
    wait_for("approval of the clean events", || region.approved().load(Ordering::Acquire) == 2);
    publish(&region, &[free(HEAP), access(WRITE4, HEAP + 8)]);

    let finding = next_line(&mut stdout)["finding"].clone();
    assert_eq!(finding["kind"], "use-after-free");
    assert_eq!(finding["checker"], "memory");
    assert_eq!(finding["fatal"], true);
    assert_eq!(finding["event"], 3);
    assert_eq!(finding["site"]["module"], "tiny");
    assert_eq!(finding["site"]["function"], "xmit");
    assert_eq!(finding["site"]["offset"], "0x2");
    assert_eq!(finding["site"]["section"], ".text");
    assert_eq!(finding["access"], serde_json::json!({ "address": format!("{:#x}", HEAP + 8), "size": 4, "write": true }));
    assert_eq!(finding["other"]["allocation"]["site"]["module"], "tiny");
    wait_for("the verdict", || region.verdict_at().load(Ordering::Acquire) == 4);
    assert_eq!(region.approved().load(Ordering::Acquire), 3);

    // SAFETY: signalling the child we spawned.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let summary = loop {
        let line = next_line(&mut stdout);
        if let Some(summary) = line.get("summary") {
            break summary.clone();
        }
        assert!(line.get("progress").is_some(), "{line}");
    };
    assert_eq!(summary["events"], 4);
    assert_eq!(summary["verdict_at"], 4);
    assert_eq!(summary["findings"][0]["count"], 1);
    assert!(summary.get("error").is_none());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_garbage_region_is_refused_with_exit_code_2() {
    let file = memfd();
    let region = Region::map(&file).unwrap();
    fill(&region, GATE_STRINGENT, "/nonexistent/e1000.ko", &sites());
    region.write(0, 0xdead_beefu32);
    let (mut child, mut stdout) = spawn(&file);
    let summary = next_line(&mut stdout)["summary"].clone();
    assert!(summary["error"].as_str().unwrap().contains("magic is 0xdeadbeef"), "{summary}");
    assert_eq!(child.wait().unwrap().code(), Some(2));
    assert_eq!((region.approved().load(Ordering::Acquire), region.verdict_at().load(Ordering::Acquire)), (0, 0));
}
