// SPDX-License-Identifier: GPL-2.0
//! The kernel's own NBD client against this crate's server end, with the
//! export held in memory by the test (the stand-in for a block driver,
//! which this crate does not know). Needs root and `nbd.ko`, so it is
//! ignored by `cargo test`: tests/lab/test_nbd.py runs it inside a lab
//! guest, whose Debian kernel has the module.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use understudy_nbd::{check_range, connect, disconnect, Command, Connection, ConnectionError, Export};

const SIZE: usize = 16 << 20;

struct Served {
    disk: Mutex<Vec<u8>>,
    flushes: AtomicU32,
    stop: AtomicBool,
}

/// Serves one connection from the shared memory disk until the client goes.
fn serve(mut conn: Connection, served: Arc<Served>) {
    while !served.stop.load(Ordering::Relaxed) {
        let incoming = match conn.receive(32 << 20) {
            Ok(v) => v,
            Err(ConnectionError::Closed) => return,
            Err(e) => panic!("{e}"),
        };
        for i in incoming {
            let r = i.request;
            let (at, len) = (r.offset as usize, r.len as usize);
            let mut disk = served.disk.lock().unwrap();
            let ok = check_range(r.offset, r.len, SIZE as u64, 512).is_ok();
            match r.command {
                Command::Read if ok => conn.queue_reply(r.handle, 0, &disk[at..at + len]),
                Command::Write { .. } if ok => {
                    disk[at..at + len].copy_from_slice(&i.data);
                    conn.queue_reply(r.handle, 0, &[]);
                }
                Command::Flush => {
                    served.flushes.fetch_add(1, Ordering::Relaxed);
                    conn.queue_reply(r.handle, 0, &[]);
                }
                Command::Trim if ok => {
                    disk[at..at + len].fill(0);
                    conn.queue_reply(r.handle, 0, &[]);
                }
                Command::Disconnect => return,
                _ => conn.queue_reply(r.handle, libc::EINVAL as u32, &[]),
            }
        }
        while !conn.flush().unwrap() {
            std::thread::sleep(Duration::from_micros(100));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A 4 KiB-aligned buffer for O_DIRECT.
fn aligned(len: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; len + 4096];
    let off = v.as_ptr().align_offset(4096);
    (v, off)
}

#[test]
#[ignore = "needs root and nbd.ko: tests/lab/test_nbd.py runs it in a lab guest"]
fn the_kernels_nbd_client_reads_and_writes_through_two_connections() {
    let served = Arc::new(Served { disk: Mutex::new(vec![0; SIZE]), flushes: AtomicU32::new(0), stop: AtomicBool::new(false) });
    served.disk.lock().unwrap()[4 << 20..(4 << 20) + 8192].fill(0xc3);
    let (mut kernel_ends, mut threads) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let (ours, theirs) = UnixStream::pair().unwrap();
        kernel_ends.push(theirs);
        let s = served.clone();
        let conn = Connection::new(ours).unwrap();
        threads.push(std::thread::spawn(move || serve(conn, s)));
    }
    let export = Export { size_bytes: SIZE as u64, block_size: 512, read_only: false, write_cache: true, trim: true,
                          backend: "understudy-test".into() };
    let fds: Vec<_> = kernel_ends.iter().map(|s| s.as_fd()).collect();
    let index = connect(&export, &fds).expect("NBD_CMD_CONNECT");
    drop(fds);
    let dev = format!("/dev/nbd{index}");
    let sys = format!("/sys/block/nbd{index}");
    // The disk appears with the export's size once the client has it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("{sys}/size")).map_or(true, |s| s.trim() != (SIZE / 512).to_string()) {
        assert!(Instant::now() < deadline, "{dev} never showed {SIZE} bytes");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(std::fs::read_to_string(format!("{sys}/backend")).unwrap().trim(), "understudy-test");

    // A read bypassing the page cache comes from the export.
    let mut f = OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(&dev).unwrap();
    let (mut buf, off) = aligned(8192);
    f.seek(SeekFrom::Start(4 << 20)).unwrap();
    f.read_exact(&mut buf[off..off + 8192]).unwrap();
    assert!(buf[off..off + 8192].iter().all(|&b| b == 0xc3));

    // A write and an fsync land in the export, and the fsync is a flush.
    buf[off..off + 8192].fill(0x5e);
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.write_all(&buf[off..off + 8192]).unwrap();
    f.sync_all().unwrap();
    assert!(served.disk.lock().unwrap()[1 << 20..(1 << 20) + 8192].iter().all(|&b| b == 0x5e));
    assert!(served.flushes.load(Ordering::Relaxed) >= 1, "fsync sent no flush");
    drop(f);

    disconnect(index).expect("NBD_CMD_DISCONNECT");
    served.stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
}
