//! Shell scripts that tests execute, written so that executing them cannot fail
//! with "Text file busy".
//!
//! Tests run on several threads. While this thread holds a script open for
//! writing, another thread may fork to spawn its own child; until that child
//! execs, it holds a copy of the write descriptor, and the kernel refuses to
//! execute a file open for writing (ETXTBSY). Once our descriptor is closed no
//! new copy can appear, so one successful exec proves every later one will
//! succeed: `write` probes until then.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The argument that makes a script written by `write` exit at once.
const PROBE: &str = "--probe-exec";

/// Writes an executable shell script running `body`, and returns once it can be executed.
pub fn write(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n[ \"$1\" = {PROBE} ] && exit 0\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Command::new(path).arg(PROBE).status() {
            Ok(status) => {
                assert!(status.success(), "{} {PROBE}: {status}", path.display());
                return;
            }
            Err(e) if e.kind() == ErrorKind::ExecutableFileBusy && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("cannot execute {}: {e}", path.display()),
        }
    }
}
