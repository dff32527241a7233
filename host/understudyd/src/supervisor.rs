// SPDX-License-Identifier: GPL-2.0
//! One device and its driver process: the daemon's per-device thread.
//!
//! It owns the VFIO device, the shared memory, the TAP interface and the
//! driver's process, moves frames between TAP and rings, handles control
//! messages, and when the driver dies (or breaks the protocol, which ends
//! it) stops the device and keeps the interface.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use log::{error, info, warn};
use understudy_api::{Counters, DeviceStatus, DeviceStop, DriverState, ModuleInfo};
use understudy_protocol::{parse_driver_message, DriverMessage, Request, MSG_MAX};
use understudy_shm::{Geometry, SharedMemory, ShmError};
use understudy_vfio::{bus_master_enabled, PciAddress, Vfio};

use crate::process::{self, DriverFds, DriverProcess};
use crate::tap::Tap;

/// Free buffers kept back from `rx_fill` so the stack can always transmit.
const KEEP_FOR_TX: usize = 512;

pub struct Setup {
    pub device: PciAddress,
    pub modules: Vec<ModuleInfo>,
    pub ifname: String,
    pub driver_binary: PathBuf,
    pub geometry: Geometry,
}

/// What the rest of the daemon holds for a device.
pub struct Handle {
    status: Arc<Mutex<DeviceStatus>>,
    started: Instant,
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl Handle {
    pub fn status(&self) -> DeviceStatus {
        let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner()).clone();
        st.uptime_s = (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
        st
    }

    /// Ends the driver, releases the device and removes the interface.
    pub fn stop(mut self) {
        signal_eventfd(self.stop.as_fd());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is a new fd we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn signal_eventfd(fd: BorrowedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: an 8-byte write to an eventfd.
    unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
}

fn drain_eventfd(fd: BorrowedFd) {
    let mut v = [0u8; 8];
    // SAFETY: an 8-byte read from an eventfd that poll reported readable.
    unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
}

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: plain syscall filling two fds we then own.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Starts the device's thread; returns once the device is taken, the
/// interface exists and the driver process runs, or with why not (and then
/// nothing is left behind: every resource is dropped on the way out).
pub fn start(setup: Setup) -> Result<Handle, String> {
    let (tx, rx) = mpsc::channel();
    let name = format!("dev-{}", setup.device);
    let thread = std::thread::Builder::new()
        .name(name)
        .spawn(move || match Supervisor::new(setup) {
            Ok(mut s) => {
                let stop = s.stop.try_clone().expect("dup of an eventfd");
                let _ = tx.send(Ok((s.status.clone(), stop)));
                s.run();
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    match rx.recv() {
        Ok(Ok((status, stop))) => Ok(Handle { status, started: Instant::now(), stop, thread: Some(thread) }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => Err("the device thread ended before reporting".into()),
    }
}

/// Why the event loop ends the driver.
enum Fault {
    Violation(String),
    Io(String),
}

struct Supervisor {
    // Declared in teardown order: the driver goes first, the interface last.
    driver: Option<DriverProcess>,
    control: OwnedFd,
    kick: OwnedFd,
    notify: OwnedFd,
    stop: OwnedFd,
    vfio: Vfio,
    shm: SharedMemory,
    tap: Tap,
    status: Arc<Mutex<DeviceStatus>>,
    next_seq: u32,
    pending: HashMap<u32, Request>,
    tx_stopped: bool,
    frame: Vec<u8>,
}

impl Supervisor {
    fn new(setup: Setup) -> Result<Self, String> {
        let mut vfio = Vfio::open(&setup.device).map_err(|e| e.to_string())?;
        let shm = SharedMemory::create(setup.geometry).map_err(|e| e.to_string())?;
        let g = setup.geometry;
        vfio.map_dma(shm.arena().base(), g.arena_iova, g.arena_size).map_err(|e| e.to_string())?;
        let tap = Tap::create(&setup.ifname).map_err(|e| e.to_string())?;
        let (control, driver_control) = seqpacket_pair().map_err(|e| format!("socketpair: {e}"))?;
        let (kick, notify, stop) = (eventfd(), eventfd(), eventfd());
        let (kick, notify, stop) = (kick.map_err(|e| e.to_string())?, notify.map_err(|e| e.to_string())?, stop.map_err(|e| e.to_string())?);
        set_nonblocking(control.as_fd());
        let driver = process::spawn(&setup.driver_binary, &DriverFds {
            control: driver_control.as_fd(),
            device: vfio.device_fd(),
            arena: shm.arena().as_fd(),
            rings: shm.rings().region().as_fd(),
            kick: kick.as_fd(),
            notify: notify.as_fd(),
        })
        .map_err(|e| e.to_string())?;
        drop(driver_control);
        info!("{}: driver process {} started ({}), interface {}, IOMMU group {}, arena {} MiB at IOVA {:#x}",
              setup.device, driver.pid, setup.driver_binary.display(), setup.ifname, vfio.group_id(),
              g.arena_size >> 20, g.arena_iova);
        let status = DeviceStatus {
            device: setup.device.to_string(),
            ifname: setup.ifname.clone(),
            iommu_group: vfio.group_id(),
            modules: setup.modules.clone(),
            driver_binary: setup.driver_binary.display().to_string(),
            pid: Some(driver.pid as u32),
            state: DriverState::Starting,
            death: None,
            device_stop: None,
            uptime_s: 0.0,
            carrier: false,
            mac: None,
            mtu: None,
            driver_name: None,
            counters: Counters::default(),
        };
        let mut s = Supervisor {
            driver: Some(driver),
            control,
            kick,
            notify,
            stop,
            shm,
            vfio,
            tap,
            status: Arc::new(Mutex::new(status)),
            next_seq: 1,
            pending: HashMap::new(),
            tx_stopped: false,
            frame: Vec::with_capacity(MSG_MAX),
        };
        let hello = Request::Hello(g.hello());
        let probe = Request::Probe {
            pci_address: setup.device.to_string(),
            modules: setup.modules.iter().map(|m| m.path.clone()).collect(),
        };
        for request in [hello, probe] {
            if let Err(e) = s.send_request(request) {
                s.end_driver(&format!("could not send its first requests: {e}"));
                return Err(format!("the driver process did not take its first requests: {e}"));
            }
        }
        Ok(s)
    }

    fn update(&self, f: impl FnOnce(&mut DeviceStatus)) {
        let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut st);
    }

    fn send_request(&mut self, request: Request) -> io::Result<()> {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let bytes = request.encode(seq).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: sending our own buffer on our socket.
        let n = unsafe { libc::send(self.control.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.pending.insert(seq, request);
        Ok(())
    }

    fn run(&mut self) {
        loop {
            let alive = self.driver.is_some();
            let want_tap = alive && !self.tx_stopped && self.status.lock().map(|s| s.state == DriverState::Running).unwrap_or(false);
            let mut fds = vec![pollfd(self.stop.as_fd())];
            if let Some(d) = &self.driver {
                fds.push(pollfd(d.pidfd.as_fd()));
                fds.push(pollfd(self.control.as_fd()));
                fds.push(pollfd(self.notify.as_fd()));
                if want_tap {
                    fds.push(pollfd(self.tap.as_fd()));
                }
            }
            // SAFETY: fds is a valid array of pollfd.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                error!("{}: poll failed: {e}", self.vfio.address());
                return;
            }
            let ready = |i: usize| fds.get(i).is_some_and(|p| p.revents != 0);
            if ready(0) {
                self.shut_down();
                return;
            }
            if !alive {
                continue;
            }
            if ready(1) {
                let pid = self.driver.as_ref().map(|d| d.pid).expect("alive");
                let how = process::wait(pid);
                self.driver = None;
                self.after_death(format!("the driver process {pid} {how}"));
                continue;
            }
            let mut outcome = Ok(());
            if ready(2) {
                outcome = self.handle_control();
            }
            if outcome.is_ok() && (ready(3) || ready(4)) {
                if ready(3) {
                    drain_eventfd(self.notify.as_fd());
                }
                outcome = self.move_frames(ready(4));
            }
            if let Err(fault) = outcome {
                let why = match fault {
                    Fault::Violation(v) => format!("protocol violation: {v}"),
                    Fault::Io(e) => e,
                };
                self.end_driver(&why);
            }
        }
    }

    fn handle_control(&mut self) -> Result<(), Fault> {
        let mut buf = vec![0u8; MSG_MAX + 1];
        loop {
            // MSG_TRUNC: the real length of an oversized message, so it is refused, not cut.
            // SAFETY: receiving into our own buffer.
            let n = unsafe {
                libc::recv(self.control.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_TRUNC | libc::MSG_DONTWAIT)
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(()),
                    _ => Err(Fault::Io(format!("control socket: {e}"))),
                };
            }
            if n == 0 {
                return Err(Fault::Io("the driver closed its control socket".into()));
            }
            let n = n as usize;
            if n > MSG_MAX {
                return Err(Fault::Violation(format!("message of {n} bytes is longer than the protocol's {MSG_MAX}")));
            }
            let msg = parse_driver_message(&buf[..n]).map_err(|e| Fault::Violation(e.to_string()))?;
            self.handle_message(msg)?;
        }
    }

    fn handle_message(&mut self, msg: DriverMessage) -> Result<(), Fault> {
        let dev = self.vfio.address().clone();
        match msg {
            DriverMessage::Reply { seq, status, .. } => {
                let request = self.pending.remove(&seq)
                    .ok_or_else(|| Fault::Violation(format!("reply to seq {seq}, which no request has")))?;
                if status != 0 {
                    let errno = io::Error::from_raw_os_error(-status);
                    warn!("{dev}: the driver answered {:?} with {status} ({errno})", request.type_());
                    if matches!(request, Request::Hello(_) | Request::Probe { .. } | Request::Open) {
                        return Err(Fault::Io(format!("request type {} failed in the driver: {errno}", request.type_())));
                    }
                }
            }
            DriverMessage::Registered(r) => {
                info!("{dev}: {} registered its net_device: MAC {}, MTU {}", r.driver, format_mac(&r.dev_addr), r.mtu);
                self.tap.set_mac(r.dev_addr).map_err(|e| Fault::Io(e.to_string()))?;
                self.tap.set_mtu(r.mtu).map_err(|e| Fault::Io(e.to_string()))?;
                self.update(|s| {
                    s.state = DriverState::Running;
                    s.mac = Some(format_mac(&r.dev_addr));
                    s.mtu = Some(r.mtu);
                    s.driver_name = Some(r.driver.clone());
                });
                // The net_device is the TAP's stand-in: open it now so packets flow.
                self.send_request(Request::Open).map_err(|e| Fault::Io(format!("control socket: {e}")))?;
                self.move_frames(false)?;
            }
            DriverMessage::Carrier(on) => {
                info!("{dev}: carrier {}", if on { "on" } else { "off" });
                self.tap.set_carrier(on).map_err(|e| Fault::Io(e.to_string()))?;
                self.update(|s| s.carrier = on);
            }
            DriverMessage::TxQueue { stopped } => self.tx_stopped = stopped,
            DriverMessage::Log { level, text } => match level {
                0..=3 => error!("{dev}: driver: {text}"),
                4 => warn!("{dev}: driver: {text}"),
                _ => info!("{dev}: driver: {text}"),
            },
            DriverMessage::Warn { file, line, text } => warn!("{dev}: driver WARN at {file}:{line}: {text}"),
        }
        Ok(())
    }

    /// Completions and received frames from the driver; new frames from the
    /// TAP (if `tap_ready`); refills; one kick if the driver asked for one.
    fn move_frames(&mut self, tap_ready: bool) -> Result<(), Fault> {
        let violation = |e: ShmError| Fault::Violation(e.to_string());
        let mut counters = Counters::default();
        loop {
            while let Some(done) = self.shm.reap_tx_done().map_err(violation)? {
                counters.tx_dropped += done.dropped as u64;
            }
            let mut frame = std::mem::take(&mut self.frame);
            let mut got = false;
            while self.shm.take_rx(&mut frame).map_err(violation)? {
                got = true;
                counters.rx_packets += 1;
                counters.rx_bytes += frame.len() as u64;
                if !self.tap.write_frame(&frame).map_err(|e| Fault::Io(format!("TAP write: {e}")))? {
                    counters.rx_packets -= 1;
                }
            }
            self.frame = frame;
            self.shm.fill_rx(KEEP_FOR_TX).map_err(violation)?;
            if !got && self.shm.prepare_to_sleep() {
                break;
            }
        }
        if tap_ready && !self.tx_stopped {
            while let Some(buf) = self.shm.take_free() {
                let n = match self.tap.read_frame(self.shm.host_buffer(buf)) {
                    Ok(Some(n)) => n,
                    Ok(None) => {
                        self.shm.put_free(buf);
                        break;
                    }
                    Err(e) => {
                        self.shm.put_free(buf);
                        return Err(Fault::Io(format!("TAP read: {e}")));
                    }
                };
                if !self.shm.send(buf, n as u16).map_err(violation)? {
                    // Ring full: the frame is dropped, as a NIC's full queue would.
                    self.shm.put_free(buf);
                    counters.tx_dropped += 1;
                    break;
                }
                counters.tx_packets += 1;
                counters.tx_bytes += n as u64;
            }
        }
        if self.shm.driver_wants_kick() {
            signal_eventfd(self.kick.as_fd());
        }
        self.update(|s| {
            s.counters.tx_packets += counters.tx_packets;
            s.counters.tx_bytes += counters.tx_bytes;
            s.counters.tx_dropped += counters.tx_dropped;
            s.counters.rx_packets += counters.rx_packets;
            s.counters.rx_bytes += counters.rx_bytes;
        });
        Ok(())
    }

    /// Ends a misbehaving or unusable driver process; the device is then stopped.
    fn end_driver(&mut self, why: &str) {
        let Some(d) = self.driver.take() else { return };
        error!("{}: ending driver process {}: {why}", self.vfio.address(), d.pid);
        process::kill(d.pid);
        let how = process::wait(d.pid);
        self.after_death(format!("{why} (the process was ended by the daemon: {how})"));
    }

    /// DESIGN.md decision 4: stop the device, then drop its IOMMU mapping, then
    /// take every buffer back. The interface stays, without carrier.
    fn after_death(&mut self, cause: String) {
        let dev = self.vfio.address().clone();
        let report = self.vfio.stop_device();
        let unmapped = self.vfio.unmap_all();
        self.shm.reclaim_all();
        self.pending.clear();
        self.tx_stopped = false;
        let _ = self.tap.set_carrier(false);
        let bus_master_off = report.command_after.is_some_and(|c| !bus_master_enabled(c));
        let reset = match &report.reset {
            Ok(()) => "done".to_string(),
            Err(e) => e.clone(),
        };
        error!("{dev}: driver died: {cause}. Device stopped (bus mastering {}, interrupts {}, reset: {reset}), \
                IOMMU mappings {}; {} kept without carrier. `understudy stop {dev}` releases it.",
               if bus_master_off { "off" } else { "STILL ON" },
               if report.irqs_disabled { "disabled" } else { "not all disabled" },
               if unmapped.is_ok() { "cleared" } else { "NOT cleared" },
               self.tap.name());
        self.update(|s| {
            s.state = DriverState::Dead;
            s.pid = None;
            s.death = Some(cause);
            s.carrier = false;
            s.device_stop = Some(DeviceStop { bus_master_off, irqs_disabled: report.irqs_disabled, reset, iommu_unmapped: unmapped.is_ok() });
        });
    }

    fn shut_down(&mut self) {
        if self.driver.is_some() {
            self.end_driver("stopped by request");
        }
        info!("{}: released; interface {} removed", self.vfio.address(), self.tap.name());
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // A driver must never outlive the device it was given.
        if let Some(d) = self.driver.take() {
            process::kill(d.pid);
            process::wait(d.pid);
        }
    }
}

fn pollfd(fd: BorrowedFd) -> libc::pollfd {
    libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }
}

fn set_nonblocking(fd: BorrowedFd) {
    // SAFETY: fcntl on our own fd.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}
