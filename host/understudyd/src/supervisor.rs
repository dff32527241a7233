// SPDX-License-Identifier: GPL-2.0
//! One device and its driver process: the daemon's per-device thread.
//!
//! It owns the VFIO device, the shared memory, the TAP interface and the
//! driver's process, moves frames between TAP and rings, handles control
//! messages, turns the admin's changes of the TAP (rtnetlink) into requests
//! to the driver (shadow.rs), answers ethtool queries, watches the driver's
//! liveness (watchdog.rs), and when the driver dies, hangs or breaks the
//! protocol, stops the device and keeps the interface.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::{error, info, warn};
use understudy_api::{Counters, DeviceStatus, DeviceStop, DriverState, EthtoolQueries, EthtoolReport, HandoverReason, HandoverRecord,
                     ModuleInfo, StartKind};
use understudy_protocol::{parse_driver_message, DriverMessage, PciIds, Request, MSG_MAX, OFFLOAD_TSO4, OFFLOAD_TSO6};
use understudy_shm::{Geometry, RxFrame, SharedMemory, ShmError, TxFrame};
use understudy_vfio::{bus_master_enabled, DeviceAccess, PciAddress, Vfio, VfioError};

use crate::coalesce::{Coalescer, Frame, RxMeta, MAX_SEGMENTS};
use crate::ethtool_job::{Answer, EthtoolJob, Progress};
use crate::multicast::read_multicast_list;
use crate::netlink::{Events, LinkInfo, LinkMonitor};
use crate::placement::Placement;
use crate::process::{self, DriverFds, DriverProcess};
use crate::ratelimit::TokenBucket;
use crate::policy::{run_hook, AgentPolicy, Backoff, HookEvent, OnExhausted};
use crate::handover::{self, describe, Event, Handover, Outcome, Reason};
use crate::recovery::{keep_record, ms_or_dash, round_ms, FirstFrameWatch, RestartBudget, RestartPolicy};
use crate::fd;
use crate::shadow::{format_mac, Action, NetShadow, PassiveLog, Phase, RxMode, TapConfig, Undo};
use crate::tap::{Tap, MAX_FRAME_PARTS};
use crate::template::{self, SpawnError, Template};
use crate::watchdog::{Detection, TxProgress, WarnStorm, Watchdog};

/// Free buffers kept back from `rx_fill` so the stack can always transmit.
const KEEP_FOR_TX: usize = 512;
/// Received frames taken between two refills of `rx_fill`. The driver polls
/// its NIC only with room for a whole NAPI budget (at most 64 frames); with
/// the buffers lent back only once the rx ring was empty, it sat idle, its
/// NIC's ring filling, for as long as the host took to merge and write the
/// batch (e1000 host → guest TCP 967 → 1056 and 934 → 1083 Mbit/s, medians
/// of 4 A/B runs each, docs/notes/bench-net-history.md, "What limits receive: the first look").
const RX_REFILL_EVERY: usize = 64;
const ETH_HLEN: usize = 14;
/// The longest Ethernet header: with one VLAN tag.
const VLAN_ETH_HLEN: usize = 18;
/// How often the TAP's multicast list is re-read (multicast.rs: no event announces it).
const MULTICAST_POLL: Duration = Duration::from_millis(200);
/// Driver LOG lines: a burst of 20, then 10 a second (printk_ratelimit allows 10 per 5 s;
/// a probe legitimately prints a dozen lines at once).
const LOG_BURST: u32 = 20;
const LOG_PER_SECOND: u32 = 10;
/// How long the TAP keeps its carrier for a restarted driver whose link is not up yet.
const CARRIER_HOLD: Duration = Duration::from_secs(10);
/// How long a CLI client waits for an ethtool answer; the watchdog ends a
/// silent driver (and so the query) long before this with sane timeouts.
const ETHTOOL_WAIT: Duration = Duration::from_secs(120);
/// How long `understudy update` waits: a load, two probes (an update and its
/// rollback) each within --probe-timeout-ms, the links and the probation.
const UPDATE_WAIT: Duration = Duration::from_secs(300);

pub struct Setup {
    pub device: PciAddress,
    pub modules: Vec<ModuleInfo>,
    pub ifname: String,
    pub driver_binary: PathBuf,
    pub placement: Option<Placement>,
    pub geometry: Geometry,
    pub detection: Detection,
    pub restarts: RestartPolicy,
    pub agent: AgentPolicy,
}

/// What the CLI asks of a running device's thread.
enum Command {
    Ethtool { queries: EthtoolQueries, answer: Answer },
    /// `understudy recover`: restart the driver as if it had died.
    Recover { answer: mpsc::Sender<Result<(), String>> },
    /// `understudy update`: answered when the update is over.
    Update { modules: Vec<ModuleInfo>, allow_feature_loss: bool, answer: UpdateAnswer },
}

/// Where an update's outcome goes: its record, or why it was not started.
type UpdateAnswer = mpsc::Sender<Result<HandoverRecord, String>>;

/// What the rest of the daemon holds for a device.
pub struct Handle {
    status: Arc<Mutex<DeviceStatus>>,
    started: Instant,
    stop: OwnedFd,
    requester: Requester,
    thread: Option<JoinHandle<()>>,
}

/// Asks a device's thread things, without holding the daemon's device table.
#[derive(Clone)]
pub struct Requester {
    commands: mpsc::Sender<Command>,
    wake: Arc<OwnedFd>,
}

impl Requester {
    /// The driver's ethtool answers (the device thread asks the driver).
    pub fn ethtool(&self, queries: EthtoolQueries) -> Result<EthtoolReport, String> {
        let (answer, answered) = mpsc::channel();
        self.commands.send(Command::Ethtool { queries, answer }).map_err(|_| "the device's thread has ended".to_string())?;
        fd::signal(self.wake.as_fd());
        answered.recv_timeout(ETHTOOL_WAIT).map_err(|_| "the device's thread did not answer".to_string())?
    }

    /// Ends the driver process and starts a fresh one through the restart
    /// path; returns once the restart has begun (`status` follows it).
    pub fn recover(&self) -> Result<(), String> {
        let (answer, answered) = mpsc::channel();
        self.commands.send(Command::Recover { answer }).map_err(|_| "the device's thread has ended".to_string())?;
        fd::signal(self.wake.as_fd());
        answered.recv_timeout(ETHTOOL_WAIT).map_err(|_| "the device's thread did not answer".to_string())?
    }

    /// Hands the interface to `modules` (live update); returns the update's
    /// record once it is over: updated, rolled back, or refused.
    pub fn update(&self, modules: Vec<ModuleInfo>, allow_feature_loss: bool) -> Result<HandoverRecord, String> {
        let (answer, answered) = mpsc::channel();
        self.commands.send(Command::Update { modules, allow_feature_loss, answer })
            .map_err(|_| "the device's thread has ended".to_string())?;
        fd::signal(self.wake.as_fd());
        answered.recv_timeout(UPDATE_WAIT).map_err(|_| "the device's thread did not answer".to_string())?
    }
}

impl Handle {
    pub fn status(&self) -> DeviceStatus {
        let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner()).clone();
        st.uptime_s = (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
        st
    }

    pub fn requester(&self) -> Requester {
        self.requester.clone()
    }

    /// Ends the driver, releases the device and removes the interface.
    pub fn stop(mut self) {
        fd::signal(self.stop.as_fd());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
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
                let wake = s.wake.try_clone().expect("dup of an eventfd");
                let _ = tx.send(Ok((s.status.clone(), stop, s.command_sender.clone(), wake)));
                s.run();
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    match rx.recv() {
        Ok(Ok((status, stop, commands, wake))) => {
            let requester = Requester { commands, wake: Arc::new(wake) };
            Ok(Handle { status, started: Instant::now(), stop, requester, thread: Some(thread) })
        }
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
    /// The driver closed its control socket: usually it is exiting.
    Closed,
    /// `understudy recover`.
    RecoverRequested,
}

/// Why a request was sent, so its reply goes to the right place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// HELLO and PROBE: a refusal ends the driver.
    Startup,
    /// From the net shadow (shadow.rs).
    Config,
    Heartbeat,
    Ethtool,
    /// The passive log, given to a successor (handover.rs).
    Replay,
}

/// `OFFLOAD_*` flags by name, for the log and `status`.
fn offload_names(offloads: u32) -> Vec<String> {
    use understudy_protocol::{OFFLOAD_CSUM, OFFLOAD_RX_CSUM, OFFLOAD_TSO_ECN};
    [(OFFLOAD_CSUM, "tx-checksum"), (OFFLOAD_TSO4, "tso4"), (OFFLOAD_TSO6, "tso6"), (OFFLOAD_TSO_ECN, "tso-ecn"),
     (OFFLOAD_RX_CSUM, "rx-checksum")]
        .iter()
        .filter(|(flag, _)| offloads & flag != 0)
        .map(|(_, name)| name.to_string())
        .collect()
}


struct Supervisor {
    // Declared in teardown order: the driver goes first, the interface last.
    driver: Option<DriverProcess>,
    /// The post-probe template restarts fork from (template.rs), once taken.
    template: Option<Template>,
    /// The first driver forked from the template has not announced itself yet.
    takeover: bool,
    control: OwnedFd,
    kick: OwnedFd,
    notify: OwnedFd,
    stop: OwnedFd,
    vfio: Vfio,
    shm: SharedMemory,
    tap: Tap,
    links: LinkMonitor,
    ifindex: i32,
    /// The TAP as the last netlink message (or our own change) described it.
    tap_link: Option<LinkInfo>,
    tap_multicast: Vec<[u8; 6]>,
    next_multicast_poll: Instant,
    /// The driver's net_device, from REGISTERED until the driver dies.
    shadow: Option<NetShadow>,
    watchdog: Watchdog,
    tx_progress: TxProgress,
    warn_storm: WarnStorm,
    log_limit: TokenBucket,
    commands: mpsc::Receiver<Command>,
    command_sender: mpsc::Sender<Command>,
    wake: OwnedFd,
    ethtool: Option<EthtoolJob>,
    ethtool_queue: VecDeque<(EthtoolQueries, Answer)>,
    status: Arc<Mutex<DeviceStatus>>,
    next_seq: u32,
    pending: HashMap<u32, (Request, Purpose)>,
    tx_stopped: bool,
    /// The offloads the TAP was told the driver takes (`Tap::set_offloads`).
    tap_offloads: u32,
    /// Received TCP segments merged into GSO frames for the TAP (LRO), named
    /// by their pool buffers.
    coalescer: Coalescer<u32>,
    /// Received frames taken from the ring, to be written.
    rx_batch: Vec<RxFrame>,
    /// Buffers of received frames the TAP has taken, to be freed.
    rx_written: Vec<u32>,
    driver_binary: PathBuf,
    placement: Option<Placement>,
    /// The modules the driver runs (and the template was made from).
    modules: Vec<ModuleInfo>,
    restarts: RestartBudget,
    /// The handover under way (handover.rs): a restart until its successor
    /// serves, an update until its probation is over.
    handover: Option<Handover<TxFrame>>,
    /// An update's successor while it loads, and the CLI waiting for the update.
    loader: Option<Loader>,
    update_answer: Option<UpdateAnswer>,
    probation_until: Option<Instant>,
    /// `understudy recover` asked for the death being handled.
    recover_requested: bool,
    /// The last handover, until the first frame through its successor.
    first_frame: Option<(FirstFrameWatch, HandoverReason)>,
    /// When a frame last went through the driver (for the downtime of a restart).
    last_packet: Option<Instant>,
    /// After a restart the TAP keeps the dead driver's carrier until the fresh
    /// one, opened, reports its link up (e1000's comes a second or two after
    /// OPEN), or until this deadline: a link that stays down is shown.
    carrier_held_until: Option<Instant>,
    /// --on-exhausted, the back-off of `retry` and the hook.
    agent: AgentPolicy,
    backoff: Backoff,
    /// With `retry`, the restart waiting for its back-off to pass.
    retry: Option<PendingRetry>,
}

/// An update's successor process, from LOAD until it is started or refused.
struct Loader {
    process: DriverProcess,
    control: OwnedFd,
    seq: u32,
}

/// A restart put off by `--on-exhausted retry` until `at`.
struct PendingRetry {
    at: Instant,
    cause: String,
    log: crate::shadow::PassiveLog,
    device_stop: DeviceStop,
}

/// Maps the arena for the device's DMA (docs/protocol.md): the runtime's
/// part read-write, the packet pool read-only. The device has no business
/// writing the pool (received frames are copied into it by the driver
/// process), so a driver that points its device's receive descriptors at
/// pool buffers cannot have it overwrite frames the host still holds and
/// would give a restarted driver again.
fn map_arena(vfio: &mut Vfio, shm: &SharedMemory) -> Result<(), VfioError> {
    let g = shm.geometry();
    let (base, pool) = (shm.arena().base(), g.pool_size());
    vfio.map_dma(base, g.arena_iova, pool, DeviceAccess::Read)?;
    // SAFETY: pool < arena_size: the pointer stays inside the arena mapping.
    vfio.map_dma(unsafe { base.add(pool as usize) }, g.arena_iova + pool, g.arena_size - pool, DeviceAccess::ReadWrite)
}

impl Supervisor {
    fn new(setup: Setup) -> Result<Self, String> {
        let mut vfio = Vfio::open(&setup.device).map_err(|e| e.to_string())?;
        let shm = SharedMemory::create(setup.geometry).map_err(|e| e.to_string())?;
        let g = setup.geometry;
        map_arena(&mut vfio, &shm).map_err(|e| e.to_string())?;
        let tap = Tap::create(&setup.ifname).map_err(|e| e.to_string())?;
        let ifindex = tap.ifindex().map_err(|e| e.to_string())?;
        let links = LinkMonitor::open().map_err(|e| format!("cannot watch {} through rtnetlink: {e}", setup.ifname))?;
        links.request_link(ifindex).map_err(|e| format!("netlink RTM_GETLINK {}: {e}", setup.ifname))?;
        let (kick, notify, stop, wake) = (fd::eventfd(), fd::eventfd(), fd::eventfd(), fd::eventfd());
        let (kick, notify, stop, wake) = (kick.map_err(|e| e.to_string())?, notify.map_err(|e| e.to_string())?,
                                          stop.map_err(|e| e.to_string())?, wake.map_err(|e| e.to_string())?);
        if let Some(p) = &setup.placement {
            p.place_daemon_thread().map_err(|e| format!("cannot keep the device's thread off CPU {}: {e}", p.cpu))?;
        }
        let (control, driver) = spawn_driver(&setup.driver_binary, setup.placement, &vfio, &shm, kick.as_fd(), notify.as_fd())?;
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
            cpu: setup.placement.map(|p| p.cpu),
            state: DriverState::Starting,
            death: None,
            device_stop: None,
            uptime_s: 0.0,
            carrier: false,
            mac: None,
            mtu: None,
            driver_name: None,
            features: None,
            hw_features: None,
            offloads: Vec::new(),
            min_mtu: None,
            max_mtu: None,
            log_lines_suppressed: 0,
            warnings: 0,
            counters: Counters::default(),
            pool_buffers: g.pool_buffers,
            pool_free: shm.free_count(),
            recoveries: Vec::new(),
            recovery_count: 0,
            updates: Vec::new(),
            template_pid: None,
        };
        let (command_sender, commands) = mpsc::channel();
        let now = Instant::now();
        let mut s = Supervisor {
            driver: Some(driver),
            template: None,
            takeover: false,
            control,
            kick,
            notify,
            stop,
            shm,
            vfio,
            tap,
            links,
            ifindex,
            tap_link: None,
            tap_multicast: Vec::new(),
            next_multicast_poll: now,
            shadow: None,
            watchdog: Watchdog::new(setup.detection, now),
            tx_progress: TxProgress::new(now),
            warn_storm: WarnStorm::new(setup.detection.warns, setup.detection.warn_window),
            log_limit: TokenBucket::new(LOG_BURST, LOG_PER_SECOND, now),
            commands,
            command_sender,
            wake,
            ethtool: None,
            ethtool_queue: VecDeque::new(),
            status: Arc::new(Mutex::new(status)),
            next_seq: 1,
            pending: HashMap::new(),
            tx_stopped: false,
            tap_offloads: 0,
            coalescer: Coalescer::default(),
            rx_batch: Vec::with_capacity(RX_REFILL_EVERY),
            rx_written: Vec::with_capacity(RX_REFILL_EVERY + MAX_SEGMENTS),
            driver_binary: setup.driver_binary.clone(),
            placement: setup.placement,
            modules: setup.modules.clone(),
            restarts: RestartBudget::new(setup.restarts),
            handover: None,
            loader: None,
            update_answer: None,
            probation_until: None,
            recover_requested: false,
            first_frame: None,
            last_packet: None,
            carrier_held_until: None,
            backoff: Backoff::new(setup.agent.retry_max),
            agent: setup.agent,
            retry: None,
        };
        let modules = s.modules.clone();
        if let Err(e) = s.send_startup(&modules) {
            s.end_driver(&format!("could not send its first requests: {e}"), false);
            return Err(format!("the driver process did not take its first requests: {e}"));
        }
        Ok(s)
    }

    /// HELLO and PROBE: the driver process maps the shared memory, loads the
    /// modules (unless LOAD did) and probes the device.
    fn send_startup(&mut self, modules: &[ModuleInfo]) -> io::Result<()> {
        self.send_request(Request::Hello(self.shm.geometry().hello()), Purpose::Startup)?;
        let probe = Request::Probe {
            pci_address: self.vfio.address().to_string(),
            modules: modules.iter().map(|m| m.path.clone()).collect(),
        };
        self.send_request(probe, Purpose::Startup)
    }

    fn update(&self, f: impl FnOnce(&mut DeviceStatus)) {
        let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut st);
    }

    fn take_seq(&mut self) -> u32 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        seq
    }

    fn send_request(&mut self, request: Request, purpose: Purpose) -> io::Result<()> {
        let seq = self.take_seq();
        let bytes = request.encode(seq).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: sending our own buffer on our socket.
        let n = unsafe { libc::send(self.control.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.watchdog.sent(seq, request.name(), Instant::now());
        self.pending.insert(seq, (request, purpose));
        Ok(())
    }

    fn send(&mut self, request: Request, purpose: Purpose) -> Result<(), Fault> {
        let name = request.name();
        self.send_request(request, purpose).map_err(|e| match e.kind() {
            // The driver's end is closed, as when recv sees its end: usually it is
            // exiting, and its own death (not this send) is what to report.
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => Fault::Closed,
            _ => Fault::Io(format!("control socket, sending {name}: {e}")),
        })
    }

    fn run(&mut self) {
        loop {
            let alive = self.driver.is_some();
            let open = self.shadow.as_ref().is_some_and(|s| s.phase() == Phase::Open);
            // While a successor starts, replays and waits for its link, the
            // TAP's frames wait: the predecessor's go first.
            let replaying = self.handover.as_ref().is_some_and(|h| !h.serving());
            // A driver holding all the tx buffers it may gets no more (can_send);
            // the completions it then owes wake this loop (tx_done_urgent).
            let want_tap = alive && !self.tx_stopped && open && !replaying && self.shm.can_send(self.tap_frames_large()).unwrap_or(true);
            let mut fds = vec![fd::readable(self.stop.as_fd()), fd::readable(self.wake.as_fd()), fd::readable(self.links.as_fd())];
            let template_at = fds.len();
            if let Some(t) = &self.template {
                fds.push(fd::readable(t.process.pidfd.as_fd()));
            }
            let loader_at = fds.len();
            if let Some(l) = &self.loader {
                fds.push(fd::readable(l.control.as_fd()));
                fds.push(fd::readable(l.process.pidfd.as_fd()));
            }
            let driver_at = fds.len();
            if let Some(d) = &self.driver {
                fds.push(fd::readable(d.pidfd.as_fd()));
                fds.push(fd::readable(self.control.as_fd()));
                fds.push(fd::readable(self.notify.as_fd()));
                if want_tap {
                    fds.push(fd::readable(self.tap.as_fd()));
                }
            }
            let timeout = self.poll_timeout(Instant::now());
            // SAFETY: fds is a valid array of pollfd.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                error!("{}: poll failed: {e}", self.vfio.address());
                return;
            }
            let ready = |i: usize| fds.get(i).is_some_and(|p| p.revents != 0);
            if self.template.is_some() && ready(template_at) {
                self.template_ended();
            }
            if self.loader.is_some() && (ready(loader_at) || ready(loader_at + 1)) {
                self.read_loader();
            }
            if ready(0) {
                self.shut_down();
                return;
            }
            if ready(1) {
                fd::drain(self.wake.as_fd());
            }
            if ready(2) {
                self.read_link_changes();
            }
            let mut outcome = self.take_commands();
            if self.driver.is_none() {
                self.retry_if_due(Instant::now());
                continue;
            }
            let (exited, control, notify, tap) = (driver_at, driver_at + 1, driver_at + 2, driver_at + 3);
            if ready(exited) {
                let pid = self.driver.as_ref().map(|d| d.pid).expect("alive");
                let how = process::wait(pid);
                self.driver = None;
                self.after_death(format!("the driver process {pid} {how}"), true);
                continue;
            }
            if outcome.is_ok() && ready(control) {
                outcome = self.handle_control();
            }
            if outcome.is_ok() && (ready(notify) || ready(tap) || self.open_without_rx_buffers()) {
                if ready(notify) {
                    fd::drain(self.notify.as_fd());
                }
                outcome = self.move_frames(ready(tap));
            }
            if outcome.is_ok() {
                outcome = self.on_timers(Instant::now());
            }
            if outcome.is_ok() {
                outcome = self.reconcile();
            }
            if let Err(fault) = outcome {
                let why = match fault {
                    Fault::Violation(v) => format!("protocol violation: {v}"),
                    Fault::Io(e) => e,
                    Fault::Closed if self.exits_by_itself() => {
                        let pid = self.driver.take().map(|d| d.pid).expect("alive");
                        let how = process::wait(pid);
                        self.after_death(format!("the driver process {pid} {how}"), true);
                        continue;
                    }
                    Fault::Closed => "the driver closed its control socket".into(),
                    Fault::RecoverRequested => {
                        self.recover_requested = true;
                        "restart requested (`understudy recover`)".into()
                    }
                };
                self.end_driver(&why, true);
            }
        }
    }

    /// The driver is open and holds no receive buffers: just opened, or
    /// reopened by a restart's replay. They are lent now, not when the first
    /// frame moves: an interface that sends nothing would receive nothing,
    /// and the driver would poll for the buffers meanwhile.
    fn open_without_rx_buffers(&self) -> bool {
        self.shm.lent().rx_fill == 0 && self.shadow.as_ref().is_some_and(|s| s.phase() == Phase::Open)
    }

    /// A process that closed its control socket while exiting has exited
    /// within a moment; its own death is then reported, not a kill.
    fn exits_by_itself(&self) -> bool {
        let Some(d) = &self.driver else { return false };
        let mut fd = [fd::readable(d.pidfd.as_fd())];
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(fd.as_mut_ptr(), 1, 500) > 0 }
    }

    /// Milliseconds until the next deadline, PING, multicast poll or log report.
    fn poll_timeout(&self, now: Instant) -> libc::c_int {
        let mut next = self.log_limit.next_report();
        for t in [self.retry.as_ref().map(|r| r.at), self.probation_until].into_iter().flatten() {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if self.driver.is_some() {
            let watchdog = self.watchdog.next_event();
            next = Some(next.map_or(watchdog, |n| n.min(watchdog)));
            if self.shadow.is_some() {
                next = next.map(|n| n.min(self.next_multicast_poll));
            }
            if let Some(t) = self.carrier_held_until {
                next = next.map(|n| n.min(t));
            }
            if self.shm.lent().tx > 0 {
                next = next.map(|n| n.min(self.tx_progress.deadline(self.watchdog.detection().tx)));
            }
        }
        match next {
            // Rounded up: waking a millisecond early would only loop.
            Some(t) => t.saturating_duration_since(now).as_micros().div_ceil(1000).min(60_000) as libc::c_int,
            None => -1,
        }
    }

    fn on_timers(&mut self, now: Instant) -> Result<(), Fault> {
        if let Some(verdict) = self.watchdog.overdue(now) {
            return Err(Fault::Io(verdict));
        }
        let carrier = self.shadow.as_ref().is_some_and(|s| s.log().carrier);
        let tx_timeout = self.watchdog.detection().tx;
        if self.tx_progress.overdue(now, self.shm.lent().tx, carrier, tx_timeout).is_some() {
            // Completions wake the daemon only when it asked for them: reap before judging.
            self.move_frames(false)?;
            if let Some(verdict) = self.tx_progress.overdue(now, self.shm.lent().tx, carrier, tx_timeout) {
                return Err(Fault::Io(verdict));
            }
        }
        if self.watchdog.ping_due(now) {
            self.send(Request::Ping, Purpose::Heartbeat)?;
        }
        if self.carrier_held_until.is_some_and(|t| now >= t) {
            self.release_carrier()?;
        }
        if self.probation_until.is_some_and(|t| now >= t) {
            self.probation_until = None;
            self.feed(Event::ProbationOver)?;
        }
        if self.shadow.is_some() && now >= self.next_multicast_poll {
            self.read_multicast_list();
            self.next_multicast_poll = now + MULTICAST_POLL;
        }
        self.report_suppressed_logs(now, false);
        Ok(())
    }

    /// The fresh driver's link has not come up in CARRIER_HOLD: the TAP
    /// stops pretending and shows the driver's carrier.
    fn release_carrier(&mut self) -> Result<(), Fault> {
        self.carrier_held_until = None;
        let on = self.shadow.as_ref().is_some_and(|s| s.log().carrier);
        warn!("{}: restart: the fresh driver's link is not up after {} s; {} shows its carrier ({})",
              self.vfio.address(), CARRIER_HOLD.as_secs(), self.tap.name(), if on { "on" } else { "off" });
        self.tap.set_carrier(on).map_err(|e| Fault::Io(e.to_string()))?;
        self.update(|s| s.carrier = on);
        self.feed(Event::LinkWaitOver)
    }

    fn report_suppressed_logs(&mut self, now: Instant, force: bool) {
        if let Some(n) = self.log_limit.take_suppressed(now, force) {
            warn!("{}: {n} driver log line(s) dropped by the rate limit ({LOG_BURST} at once, {LOG_PER_SECOND}/s)",
                  self.vfio.address());
            self.update(|s| s.log_lines_suppressed += n);
        }
    }

    fn read_link_changes(&mut self) {
        match self.links.drain() {
            Ok(Events::Links(links)) => {
                if let Some(latest) = links.into_iter().rfind(|l| l.ifindex == self.ifindex) {
                    self.tap_link = Some(latest);
                    self.read_multicast_list();
                }
            }
            Ok(Events::Overrun) => {
                warn!("{}: netlink messages about {} were lost (queue overrun); asking the kernel again",
                      self.vfio.address(), self.tap.name());
                if let Err(e) = self.links.request_link(self.ifindex) {
                    error!("{}: netlink RTM_GETLINK {}: {e}", self.vfio.address(), self.tap.name());
                }
            }
            Err(e) => error!("{}: reading netlink: {e}", self.vfio.address()),
        }
    }

    fn read_multicast_list(&mut self) {
        match read_multicast_list(self.ifindex) {
            Ok(list) => self.tap_multicast = list,
            Err(e) => error!("{}: cannot read {}: {e}", self.vfio.address(), crate::multicast::DEV_MCAST),
        }
    }

    /// The TAP's configuration, once netlink has described it.
    fn tap_config(&self) -> Option<TapConfig> {
        let link = self.tap_link.as_ref()?;
        let shadow = self.shadow.as_ref()?;
        Some(TapConfig {
            up: link.up,
            mtu: link.mtu.unwrap_or(shadow.mtu()),
            mac: link.mac.unwrap_or(shadow.mac()),
            rx: RxMode { promisc: link.promisc, allmulti: link.allmulti, multicast: self.tap_multicast.clone() },
        })
    }

    /// Sends the next request that brings the driver to the TAP's
    /// configuration, or undoes on the TAP what the driver cannot have.
    fn reconcile(&mut self) -> Result<(), Fault> {
        // A restart's replay follows the log, not the TAP; the TAP's own
        // changes meanwhile are reconciled after it. Nor is a driver
        // configured before PROBE is answered: an opened driver cannot
        // become a template.
        let starting = self.pending.values().any(|&(_, purpose)| purpose == Purpose::Startup);
        let replaying = self.handover.as_ref().is_some_and(|h| h.holds_configuration());
        if self.driver.is_none() || starting || replaying {
            return Ok(());
        }
        loop {
            let Some(tap) = self.tap_config() else { return Ok(()) };
            let Some(action) = self.shadow.as_mut().and_then(|s| s.next(&tap)) else { return Ok(()) };
            match action {
                Action::Send(request) => {
                    info!("{}: {}: asking the driver for {}", self.vfio.address(), self.tap.name(), describe(&request));
                    return self.send(request, Purpose::Config);
                }
                Action::Undo(undo) => self.undo(undo),
            }
        }
    }

    /// Puts the TAP back as the driver has it (the netlink message this
    /// causes will agree; the cached state is updated now so the next step
    /// does not undo twice).
    fn undo(&mut self, undo: Undo) {
        let (dev, ifname) = (self.vfio.address().clone(), self.tap.name().to_string());
        let link = self.tap_link.as_mut().expect("a TapConfig needs a link");
        let result = match &undo {
            Undo::Mtu { restore, why } => {
                warn!("{dev}: {ifname}: {why}; its MTU is back to {restore}");
                link.mtu = Some(*restore);
                self.tap.set_mtu(*restore)
            }
            Undo::Mac { restore, why } => {
                warn!("{dev}: {ifname}: {why}; its address is back to {}", format_mac(restore));
                link.mac = Some(*restore);
                self.tap.set_mac(*restore)
            }
            Undo::Down { why } => {
                warn!("{dev}: {ifname}: {why}; the interface is down again (`ip link set {ifname} up` retries)");
                link.up = false;
                self.tap.set_down()
            }
        };
        if let Err(e) = result {
            error!("{dev}: could not undo the change on {ifname}: {e}; it now differs from the driver's");
        }
    }

    fn take_commands(&mut self) -> Result<(), Fault> {
        let mut recover = false;
        while let Ok(command) = self.commands.try_recv() {
            match command {
                Command::Ethtool { queries, answer } => self.ethtool_queue.push_back((queries, answer)),
                Command::Recover { answer } => {
                    let accepted = self.may_hand_over();
                    recover |= accepted.is_ok();
                    let _ = answer.send(accepted.map_err(|why| format!("{}: {why}", self.vfio.address())));
                }
                Command::Update { modules, allow_feature_loss, answer } => match self.may_hand_over() {
                    Ok(()) if !recover => self.begin_update(modules, allow_feature_loss, answer)?,
                    Ok(()) => { let _ = answer.send(Err(format!("{}: a restart was requested first", self.vfio.address()))); }
                    Err(why) => { let _ = answer.send(Err(format!("{}: {why}", self.vfio.address()))); }
                },
            }
        }
        if recover {
            return Err(Fault::RecoverRequested);
        }
        // While a handover is under way queries wait for the successor's answer.
        if self.shadow.is_none() && self.handover.is_none() {
            let why = match self.driver {
                Some(_) => "the driver has not registered its net_device yet",
                None => "the driver is dead (see `understudy status`)",
            };
            for (_, answer) in self.ethtool_queue.drain(..) {
                let _ = answer.send(Err(format!("{}: {why}", self.vfio.address())));
            }
            return Ok(());
        }
        if self.ethtool.is_none() && self.shadow.is_some() {
            if let Some((queries, answer)) = self.ethtool_queue.pop_front() {
                let (job, requests) =
                    EthtoolJob::start(self.vfio.address().to_string(), self.tap.name().to_string(), queries, answer);
                if requests.is_empty() {
                    job.finish();
                    return Ok(());
                }
                self.ethtool = Some(job);
                for request in requests {
                    self.send(request, Purpose::Ethtool)?;
                }
            }
        }
        Ok(())
    }

    /// Whether the interface may change hands now (`recover`, `update`).
    fn may_hand_over(&self) -> Result<(), &'static str> {
        match (&self.driver, &self.shadow, &self.handover) {
            (None, ..) => Err("the driver is dead (see `understudy status`)"),
            (_, _, Some(h)) if matches!(h.reason(), Reason::Update { .. }) => Err("an update is already under way"),
            (_, _, Some(_)) => Err("a restart is already under way"),
            (_, None, None) => Err("the driver has not registered its net_device yet: nothing to replay"),
            _ => Ok(()),
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
                    // A peer that dies with messages unread resets the socket
                    // instead of closing it: the same end, seen sooner.
                    io::ErrorKind::ConnectionReset => Err(Fault::Closed),
                    _ => Err(Fault::Io(format!("control socket: {e}"))),
                };
            }
            if n == 0 {
                return Err(Fault::Closed);
            }
            let n = n as usize;
            if n > MSG_MAX {
                return Err(Fault::Violation(format!("message of {n} bytes is longer than the protocol's {MSG_MAX}")));
            }
            let msg = parse_driver_message(&buf[..n]).map_err(|e| Fault::Violation(e.to_string()))?;
            self.handle_message(msg)?;
        }
    }

    fn handle_reply(&mut self, seq: u32, status: i32, data: &[u8]) -> Result<(), Fault> {
        let dev = self.vfio.address().clone();
        let (request, purpose) = self.pending.remove(&seq)
            .ok_or_else(|| Fault::Violation(format!("reply to seq {seq}, which no request has")))?;
        self.watchdog.answered(seq, Instant::now());
        if purpose != Purpose::Ethtool && !data.is_empty() {
            return Err(Fault::Violation(format!("the reply to {} carries {} bytes of data", request.name(), data.len())));
        }
        let errno = || io::Error::from_raw_os_error(-status);
        match purpose {
            Purpose::Startup if status < 0 => {
                return Err(Fault::Io(format!("{} failed in the driver: {}", request.name(), errno())));
            }
            Purpose::Startup => {
                if matches!(request, Request::Probe { .. }) && self.handover.is_none() {
                    if self.restarts.policy().template {
                        self.take_template()?;
                    }
                    // The process that drives the device is settled: `status` shows its pid.
                    if let Some(state) = self.shadow.as_ref().map(|s| state_of(s.phase())) {
                        self.update(|s| s.state = state);
                    }
                }
            }
            Purpose::Replay => {
                if status >= 0 {
                    let log = self.handover.as_ref().expect("replay belongs to a handover").log();
                    self.shadow.as_mut().expect("replay follows REGISTERED").replayed(&request, log);
                }
                self.feed(Event::ReplayAnswered { status })?;
            }
            Purpose::Heartbeat if status < 0 => warn!("{dev}: the driver answered PING with {status} ({})", errno()),
            Purpose::Heartbeat => {}
            Purpose::Config => {
                if status < 0 {
                    warn!("{dev}: the driver refused {}: {}", describe(&request), errno());
                } else {
                    info!("{dev}: the driver took {}", describe(&request));
                }
                if let Some(undo) = self.shadow.as_mut().and_then(|s| s.answered(status)) {
                    self.undo(undo);
                }
                let shadow = self.shadow.as_ref().expect("config requests need a shadow");
                let (state, mtu, mac) = (state_of(shadow.phase()), shadow.mtu(), format_mac(&shadow.mac()));
                self.update(|s| {
                    s.state = state;
                    s.mtu = Some(mtu);
                    s.mac = Some(mac);
                });
            }
            Purpose::Ethtool => {
                let Some(job) = self.ethtool.as_mut() else { return Ok(()) };
                match job.answered(&request, status, data).map_err(|e| Fault::Violation(e.to_string()))? {
                    Ok(Progress::Next(next)) => self.send(next, Purpose::Ethtool)?,
                    Ok(Progress::Waiting) => {}
                    Ok(Progress::Done) => self.ethtool.take().expect("a job").finish(),
                    Err(why) => {
                        // Replies to the job's other requests are dropped when they come.
                        self.ethtool.take().expect("a job").fail(format!("{dev}: {why}"));
                    }
                }
            }
        }
        Ok(())
    }

    fn handle_message(&mut self, msg: DriverMessage) -> Result<(), Fault> {
        let dev = self.vfio.address().clone();
        match msg {
            DriverMessage::Reply { seq, status, data } => self.handle_reply(seq, status, &data)?,
            DriverMessage::Registered(r) => {
                if self.takeover {
                    // The template's first fork: the driver the template registered, resumed.
                    self.takeover = false;
                    let shadow = self.shadow.as_ref().expect("the template registered");
                    if let Some(why) = shadow.log().incompatibility(&r, false) {
                        return Err(Fault::Violation(format!("the driver forked from the template is not the one it probed: {why}")));
                    }
                    return Ok(());
                }
                if self.shadow.is_some() {
                    return Err(Fault::Violation("a second REGISTERED".into()));
                }
                info!("{dev}: {} {} registered its net_device: MAC {}, MTU {} ({}..{}), features {:#x}; \
                       it is opened when {} is set up",
                      r.driver, r.version, format_mac(&r.dev_addr), r.mtu, r.min_mtu, r.max_mtu, r.features, self.tap.name());
                if self.handover.is_some() {
                    return self.feed(Event::Registered(r));
                }
                self.tap.set_mac(r.dev_addr).map_err(|e| Fault::Io(e.to_string()))?;
                self.tap.set_mtu(r.mtu).map_err(|e| Fault::Io(e.to_string()))?;
                self.set_tap_offloads(r.offloads);
                if let Some(link) = self.tap_link.as_mut() {
                    link.mac = Some(r.dev_addr);
                    link.mtu = Some(r.mtu);
                }
                self.adopt(r.clone());
                // During the probe the process that probed may still hand the
                // device to its fork (the template's): "registered" waits for
                // PROBE's reply, which settles whose pid `status` shows.
                let probing = self.pending.values().any(|(request, _)| matches!(request, Request::Probe { .. }));
                if !probing {
                    self.update(|s| s.state = DriverState::Registered);
                }
            }
            DriverMessage::Carrier(on) => {
                if let Some(shadow) = self.shadow.as_mut() {
                    shadow.set_carrier(on);
                }
                if self.carrier_held_until.is_some() {
                    info!("{dev}: handover: the successor's carrier is {}", if on { "on" } else { "off" });
                    let open = self.shadow.as_ref().is_some_and(|s| s.phase() == Phase::Open);
                    if !(on && open) {
                        return self.feed(Event::Carrier(on));
                    }
                    // The hold is over. The TAP held the predecessor's carrier,
                    // which was off if the interface was down when it died.
                    self.carrier_held_until = None;
                } else {
                    info!("{dev}: carrier {}", if on { "on" } else { "off" });
                }
                self.tap.set_carrier(on).map_err(|e| Fault::Io(e.to_string()))?;
                self.update(|s| s.carrier = on);
                return self.feed(Event::Carrier(on));
            }
            DriverMessage::TxQueue { stopped } => self.tx_stopped = stopped,
            DriverMessage::Log { level, text } => driver_log(&mut self.log_limit, &dev, level, &text),
            DriverMessage::Warn { file, line, text } => {
                let now = Instant::now();
                if self.log_limit.admit(now) {
                    warn!("{dev}: driver WARN at {file}:{line}: {text}");
                }
                self.update(|s| s.warnings += 1);
                if let Some(verdict) = self.warn_storm.warned(now) {
                    return Err(Fault::Io(verdict));
                }
            }
        }
        Ok(())
    }

    /// New frames from the TAP (if `tap_ready`); completions and received
    /// frames from the driver; refills; one kick if the driver asked for one.
    /// The TAP goes first so that the wakeups asked for before sleeping
    /// reflect how many buffers the driver holds after it.
    fn move_frames(&mut self, tap_ready: bool) -> Result<(), Fault> {
        let violation = |e: ShmError| Fault::Violation(e.to_string());
        let mut counters = Counters::default();
        let (mut completed, mut sent) = (0u64, 0u64);
        if self.shm.lent().tx == 0 {
            self.tx_progress.progressed(Instant::now());
        }
        let large = self.tap_frames_large();
        if tap_ready && !self.tx_stopped {
            loop {
                // A driver holding its limit leaves the frames in the TAP's queue.
                if !self.shm.can_send(large).map_err(violation)? {
                    self.reap_tx_done(&mut counters, &mut completed, &mut sent)?;
                    if !self.shm.can_send(large).map_err(violation)? {
                        break;
                    }
                }
                let Some(frame) = self.read_tap_frame(large, &mut counters)? else { break };
                if !self.shm.send(frame).map_err(violation)? {
                    // Not expected after can_send; dropped, as a NIC's full queue would.
                    self.shm.put_free(frame.buf);
                    counters.tx_dropped += 1;
                    break;
                }
                counters.tx_packets += 1;
                counters.tx_bytes += frame.len as u64;
            }
        }
        loop {
            self.reap_tx_done(&mut counters, &mut completed, &mut sent)?;
            let got = self.receive_frames(&mut counters)?;
            // Completions are asked for when the driver holds many buffers, or
            // when a restart waits for its first frame.
            let want_tx_done = self.shm.tx_done_urgent(large) || self.handover.is_some() || self.first_frame.is_some();
            if !got && self.shm.prepare_to_sleep(want_tx_done) {
                break;
            }
        }
        if self.shm.driver_wants_kick() {
            fd::signal(self.kick.as_fd());
        }
        if completed > 0 {
            self.tx_progress.progressed(Instant::now());
        }
        // A frame went through the driver: one it received, or one it sent (a
        // dropped one is not: a driver without link drops them).
        if counters.rx_packets + sent > 0 {
            let now = Instant::now();
            self.last_packet = Some(now);
            if let Some((watch, reason)) = self.first_frame.take() {
                self.first_frame_passed(watch, reason, now);
            }
        }
        let pool_free = self.shm.free_count();
        self.update(|s| {
            s.pool_free = pool_free;
            s.counters.tx_packets += counters.tx_packets;
            s.counters.tx_bytes += counters.tx_bytes;
            s.counters.tx_dropped += counters.tx_dropped;
            s.counters.rx_packets += counters.rx_packets;
            s.counters.rx_bytes += counters.rx_bytes;
            s.counters.rx_dropped += counters.rx_dropped;
        });
        Ok(())
    }

    /// Takes what the driver received and writes it to the TAP, merged where
    /// the coalescer can, straight from the pool: a batch of frames at a time,
    /// then the buffers written are freed and `rx_fill` is topped up. Returns
    /// whether there was any.
    fn receive_frames(&mut self, counters: &mut Counters) -> Result<bool, Fault> {
        let violation = |e: ShmError| Fault::Violation(e.to_string());
        let mut got = false;
        loop {
            self.rx_batch.clear();
            while self.rx_batch.len() < RX_REFILL_EVERY {
                let Some(rx) = self.shm.take_rx().map_err(violation)? else { break };
                self.rx_batch.push(rx);
            }
            let last = self.rx_batch.len() < RX_REFILL_EVERY;
            got |= !self.rx_batch.is_empty();
            // A full TAP queue drops a frame, and its segments are not
            // counted as received.
            let mut undelivered = 0u64;
            let (tap, shm, written) = (&self.tap, &self.shm, &mut self.rx_written);
            let mut write = |f: Frame<u32>, meta: RxMeta| -> Result<(), Fault> {
                let mut parts: [&[u8]; MAX_FRAME_PARTS] = [&[]; MAX_FRAME_PARTS];
                parts[0] = f.head;
                for (part, p) in parts[1..].iter_mut().zip(f.pieces) {
                    *part = &shm.rx_buffer(p.from)[p.start..p.start + p.len];
                }
                if !tap.write_frame(&parts[..1 + f.pieces.len()], meta).map_err(|e| Fault::Io(format!("TAP write: {e}")))? {
                    undelivered += f.pieces.len() as u64;
                }
                written.extend(f.pieces.iter().map(|p| p.from));
                Ok(())
            };
            for rx in &self.rx_batch {
                counters.rx_packets += 1;
                counters.rx_bytes += rx.len as u64;
                self.coalescer.push(&shm.rx_buffer(rx.buf)[..rx.len as usize], rx.buf, rx.csum_valid, &mut write)?;
            }
            if last {
                self.coalescer.flush(&mut write)?;
            }
            counters.rx_packets -= undelivered;
            counters.rx_dropped += undelivered;
            for buf in self.rx_written.drain(..) {
                self.shm.put_free(buf);
            }
            self.shm.fill_rx(KEEP_FOR_TX).map_err(violation)?;
            if last {
                counters.rx_dropped += self.shm.take_rx_dropped();
                return Ok(got);
            }
        }
    }

    /// The TAP leaves to the driver the offloads it takes (REGISTERED's).
    /// A TAP that refuses them sends finished frames, as before offloads.
    fn set_tap_offloads(&mut self, offloads: u32) {
        if offloads == self.tap_offloads {
            return;
        }
        match self.tap.set_offloads(offloads) {
            Ok(()) => {
                info!("{}: {} leaves to the driver: {}", self.vfio.address(), self.tap.name(), offload_names(offloads).join(", "));
                self.tap_offloads = offloads;
            }
            Err(e) => warn!("{}: {e}; frames reach the driver checksummed and segmented", self.vfio.address()),
        }
        let tap_offloads = self.tap_offloads;
        self.update(|s| s.offloads = offload_names(tap_offloads));
    }

    /// Whether the TAP may hand over frames longer than one pool buffer
    /// holds (GSO frames, or a large MTU): those are read into a slot.
    fn tap_frames_large(&self) -> bool {
        let mtu = self.tap_link.as_ref().and_then(|l| l.mtu).unwrap_or(1500) as usize;
        self.tap_offloads & (OFFLOAD_TSO4 | OFFLOAD_TSO6) != 0 || mtu + VLAN_ETH_HLEN > self.shm.capacity(false)
    }

    /// The next frame from the TAP in free pool buffers (a slot if `large`;
    /// one that fits a single buffer is moved to one, keeping the slots for
    /// GSO frames), or `None` if the TAP has none. A frame that cannot go
    /// (cut short, or an offload the driver was not offered) is counted as
    /// dropped and the next one read.
    fn read_tap_frame(&mut self, large: bool, counters: &mut Counters) -> Result<Option<TxFrame>, Fault> {
        loop {
            let Some(buf) = self.shm.take_free(large) else { return Ok(None) };
            let capacity = self.shm.capacity(large);
            let (len, offload) = match self.tap.read_frame(&mut self.shm.host_buffer(buf)[..capacity]) {
                Ok(Some(read)) => read,
                Ok(None) => {
                    self.shm.put_free(buf);
                    return Ok(None);
                }
                Err(e) => {
                    self.shm.put_free(buf);
                    return Err(Fault::Io(format!("TAP read: {e}")));
                }
            };
            let offload = match offload {
                Ok(offload) if (ETH_HLEN..=capacity).contains(&len) => offload,
                refused => {
                    warn!("{}: dropped a {len}-byte frame from {}: {}", self.vfio.address(), self.tap.name(),
                          refused.err().unwrap_or_else(|| "longer than a buffer holds".into()));
                    self.shm.put_free(buf);
                    counters.tx_dropped += 1;
                    continue;
                }
            };
            let single = if large && len <= self.shm.capacity(false) { self.shm.move_to_single(buf, len) } else { None };
            return Ok(Some(TxFrame { buf: single.unwrap_or(buf), len: len as u32, offload }));
        }
    }

    /// Takes the driver's transmit completions; `completed` counts them all
    /// (the driver made progress), `sent` those it did not drop.
    fn reap_tx_done(&mut self, counters: &mut Counters, completed: &mut u64, sent: &mut u64)
                    -> Result<(), Fault> {
        while let Some(done) = self.shm.reap_tx_done().map_err(|e| Fault::Violation(e.to_string()))? {
            counters.tx_dropped += done.dropped as u64;
            *completed += 1;
            *sent += !done.dropped as u64;
        }
        Ok(())
    }

    /// Ends a misbehaving or unusable driver process; the device is then
    /// stopped, and the driver restarted if `restart` and the policy allow.
    fn end_driver(&mut self, why: &str, restart: bool) {
        let Some(d) = self.driver.take() else { return };
        error!("{}: ending driver process {}: {why}", self.vfio.address(), d.pid);
        process::kill(d.pid);
        let how = process::wait(d.pid);
        self.after_death(format!("{why} (the process was ended by the daemon: {how})"), restart);
    }

    /// docs/design.md §4: stops the device (bus mastering off, interrupts
    /// off, reset) and takes every buffer back from the driver that is gone.
    /// The arena's IOMMU mapping is kept: the stopped device cannot reach it,
    /// and dropping and re-creating 64 MiB of mapping cost ~70 ms of every
    /// restart under the lab's emulated IOMMU.
    fn quiesce(&mut self, seen: Instant) -> Quiesced {
        self.carrier_held_until = None;
        self.probation_until = None;
        // A handover whose first frame never came keeps its record without one.
        self.first_frame = None;
        let report = self.vfio.stop_device();
        let device_stopped = Instant::now();
        let uncompleted = self.shm.reclaim_all();
        // The frames a fault left unwritten: their buffers were just reclaimed.
        self.coalescer.discard();
        self.rx_written.clear();
        self.pending.clear();
        self.watchdog = Watchdog::new(self.watchdog.detection(), seen);
        self.tx_progress = TxProgress::new(seen);
        let detection = self.watchdog.detection();
        self.warn_storm = WarnStorm::new(detection.warns, detection.warn_window);
        if let Some(job) = self.ethtool.take() {
            job.fail(format!("{}: the driver died before it answered", self.vfio.address()));
        }
        self.report_suppressed_logs(seen, true);
        self.tx_stopped = false;
        let device_stop = DeviceStop {
            bus_master_off: report.command_after.is_some_and(|c| !bus_master_enabled(c)),
            irqs_disabled: report.irqs_disabled,
            reset: report.reset.clone().err().unwrap_or_else(|| "done".into()),
            iommu_unmapped: false,
        };
        Quiesced { uncompleted, device_stop, device_stop_ms: round_ms(device_stopped - seen) }
    }

    /// A driver process is gone: its device is stopped and its buffers taken
    /// back. A successor in a handover reports it to the handover; a serving
    /// driver's death starts one (a restart), if `restart` and the policy allow.
    fn after_death(&mut self, cause: String, restart: bool) {
        let seen_dead = Instant::now();
        let q = self.quiesce(seen_dead);
        let shadow = self.shadow.take();
        let requested = std::mem::take(&mut self.recover_requested);
        if self.handover.as_ref().is_some_and(|h| h.predecessor_serves()) {
            // The serving driver died while its update loaded: the update is off.
            self.feed_quietly(Event::Loaded(Err(format!("the running driver died meanwhile: {cause}"))));
        }
        if self.handover.is_some() {
            if !restart {
                self.abandon_handover("the device was stopped by request");
            } else {
                // The TAP holds the predecessor's carrier through a rollback's fresh leg too.
                self.carrier_held_until = Some(Instant::now() + CARRIER_HOLD);
                self.update(|s| s.device_stop = Some(q.device_stop.clone()));
                self.feed_quietly(Event::SuccessorFailed { cause, uncompleted: q.uncompleted });
                return;
            }
        }
        let reason = if requested { Reason::Requested } else { Reason::Death { cause: cause.clone() } };
        let log = shadow.map(|s| s.log().clone());
        self.restart_or_give_up(reason, cause, log, q, seen_dead, restart);
    }

    /// Starts a restart (a handover to a fresh copy of the modules) with
    /// `log`, if `restart` and the policy allow; otherwise the device stays
    /// stopped, its IOMMU mapping is dropped and the interface stays, without carrier.
    fn restart_or_give_up(&mut self, reason: Reason, cause: String, log: Option<PassiveLog>, q: Quiesced,
                          seen_dead: Instant, restart: bool) {
        let dev = self.vfio.address().clone();
        let Quiesced { uncompleted, mut device_stop, device_stop_ms } = q;
        let not_restarted = match (restart, log) {
            (false, _) => Some(None),
            (true, None) => Some(Some("it died before registering its net_device, so there is nothing to replay".to_string())),
            (true, Some(log)) => match self.restarts.take(seen_dead) {
                Err(why) if self.agent.on_exhausted == OnExhausted::Retry => {
                    let wait = self.backoff.next_delay();
                    self.retry = Some(PendingRetry { at: seen_dead + wait, cause: cause.clone(), log, device_stop: device_stop.clone() });
                    for lost in uncompleted {
                        self.shm.put_free(lost.buf);
                    }
                    Some(Some(format!("{why}; retrying in {:.1} s (--on-exhausted retry)", wait.as_secs_f64())))
                }
                Ok(()) => {
                    let held = uncompleted.len();
                    let (handover, actions) = Handover::restart(reason, log, self.modules.clone(), uncompleted, seen_dead,
                                                                device_stop_ms, Instant::now());
                    warn!("{dev}: driver died: {cause}. Device stopped (reset: {}); handing {} to a fresh driver, \
                           {} frame(s) to give it again; {} keeps its carrier",
                          device_stop.reset, self.tap.name(), held, self.tap.name());
                    self.begin_handover(handover, Some(device_stop));
                    self.carrier_held_until = Some(Instant::now() + CARRIER_HOLD);
                    self.act_quietly(actions);
                    return;
                }
                Err(why) => {
                    for lost in uncompleted {
                        self.shm.put_free(lost.buf);
                    }
                    Some(Some(why))
                }
            },
        };
        let why = not_restarted.expect("a restart returned above");
        // The device stays stopped: nothing of the arena stays reachable from it.
        let unmapped = self.vfio.unmap_all();
        device_stop.iommu_unmapped = unmapped.is_ok();
        let _ = self.tap.set_carrier(false);
        let death = match &why {
            Some(why) => format!("{cause}; not restarted: {why}"),
            None => cause.clone(),
        };
        if let Some(why) = &why {
            let (outcome, retry_in) = match &self.retry {
                Some(r) => ("retrying", Some(r.at.saturating_duration_since(seen_dead))),
                None => ("down", None),
            };
            self.hook(outcome, &cause, Some(why), None, retry_in);
        }
        error!("{dev}: driver died: {death}. Device stopped (bus mastering {}, interrupts {}, reset: {}), \
                IOMMU mappings {}; {} kept without carrier. `understudy stop {dev}` releases it.",
               if device_stop.bus_master_off { "off" } else { "STILL ON" },
               if device_stop.irqs_disabled { "disabled" } else { "not all disabled" },
               device_stop.reset,
               if unmapped.is_ok() { "cleared" } else { "NOT cleared" },
               self.tap.name());
        let pool_free = self.shm.free_count();
        self.update(|s| {
            s.pool_free = pool_free;
            s.state = DriverState::Dead;
            s.pid = None;
            s.death = Some(death);
            s.carrier = false;
            s.device_stop = Some(device_stop);
        });
    }

    /// Shows a handover that begins in `status`: a restart among the
    /// recoveries, an update among the updates.
    fn begin_handover(&mut self, handover: Handover<TxFrame>, device_stop: Option<DeviceStop>) {
        let record = handover.record().clone();
        let restart = record.reason != HandoverReason::Update;
        let death = restart.then(|| record.cause.clone());
        self.handover = Some(handover);
        self.update(|s| {
            if restart {
                s.state = DriverState::Recovering;
                s.death = death;
                s.device_stop = device_stop;
                s.recovery_count += 1;
                keep_record(&mut s.recoveries, record);
            } else {
                keep_record(&mut s.updates, record);
            }
        });
    }

    /// `understudy update`: a successor for `modules` loads while the driver serves (handover.rs).
    fn begin_update(&mut self, modules: Vec<ModuleInfo>, allow_feature_loss: bool, answer: UpdateAnswer) -> Result<(), Fault> {
        let log = self.shadow.as_ref().expect("may_hand_over checked").log().clone();
        info!("{}: update to {} requested; it loads while the driver serves", self.vfio.address(),
              modules.iter().map(|m| m.path.as_str()).collect::<Vec<_>>().join(", "));
        let reason = Reason::Update { modules, allow_feature_loss };
        let (handover, actions) = Handover::update(reason, log, self.modules.clone(), Instant::now());
        self.begin_handover(handover, None);
        self.update_answer = Some(answer);
        self.act(actions)
    }

    /// The answer of an update's successor to LOAD (or its death meanwhile).
    fn read_loader(&mut self) {
        let Some(loader) = &self.loader else { return };
        let mut buf = vec![0u8; MSG_MAX + 1];
        let received = nix::sys::socket::recv(loader.control.as_raw_fd(), &mut buf,
                                              nix::sys::socket::MsgFlags::MSG_TRUNC | nix::sys::socket::MsgFlags::MSG_DONTWAIT);
        let result = match received {
            Err(nix::errno::Errno::EAGAIN) => return,
            Err(e) => Err(format!("its control socket: {e}")),
            Ok(0) => Err("it closed its control socket (it is exiting)".to_string()),
            Ok(n) if n > MSG_MAX => Err(format!("protocol violation: a message of {n} bytes")),
            Ok(n) => match parse_driver_message(&buf[..n]) {
                Ok(DriverMessage::Log { level, text }) => {
                    driver_log(&mut self.log_limit, self.vfio.address(), level, &text);
                    return;
                }
                Ok(DriverMessage::Reply { seq, status, data }) if seq == loader.seq => {
                    let text = String::from_utf8_lossy(&data).trim_end().to_string();
                    if status < 0 {
                        Err(format!("{}:\n{text}", io::Error::from_raw_os_error(-status)))
                    } else {
                        Ok(text)
                    }
                }
                Ok(other) => Err(format!("protocol violation: {other:?} before LOAD was answered")),
                Err(e) => Err(format!("protocol violation: {e}")),
            },
        };
        if let Err(why) = &result {
            warn!("{}: the update's driver was refused: {why}", self.vfio.address());
            self.end_loader();
        }
        self.feed_quietly(Event::Loaded(result));
    }

    fn end_loader(&mut self) {
        if let Some(l) = self.loader.take() {
            process::kill(l.process.pid);
            process::wait(l.process.pid);
        }
    }

    /// An event for the handover under way; its actions are taken.
    fn feed(&mut self, event: Event<TxFrame>) -> Result<(), Fault> {
        let Some(handover) = self.handover.as_mut() else { return Ok(()) };
        let actions = handover.on(event, Instant::now());
        self.publish_handover();
        self.act(actions)
    }

    /// `feed` where no driver can be ended for a fault (the driver is gone already).
    fn feed_quietly(&mut self, event: Event<TxFrame>) {
        if let Err(e) = self.feed(event) {
            self.fault_in_handover(e);
        }
    }

    fn act_quietly(&mut self, actions: Vec<handover::Action<TxFrame>>) {
        if let Err(e) = self.act(actions) {
            self.fault_in_handover(e);
        }
    }

    /// A fault while the handover acts for a driver that is gone or was just
    /// started: the successor is ended, which the handover hears of.
    fn fault_in_handover(&mut self, fault: Fault) {
        let why = match fault {
            Fault::Violation(v) => format!("protocol violation: {v}"),
            Fault::Io(e) => e,
            Fault::Closed => "the driver closed its control socket".into(),
            Fault::RecoverRequested => return,
        };
        self.end_driver(&why, true);
    }

    fn act(&mut self, actions: Vec<handover::Action<TxFrame>>) -> Result<(), Fault> {
        use handover::Action;
        for action in actions {
            match action {
                Action::Load(modules) => self.start_loader(&modules)?,
                Action::StopPredecessor => {
                    let now = Instant::now();
                    if let Some(d) = self.driver.take() {
                        info!("{}: update: the new driver is loaded; ending driver process {}", self.vfio.address(), d.pid);
                        process::kill(d.pid);
                        process::wait(d.pid);
                    }
                    self.shadow = None;
                    let q = self.quiesce(now);
                    self.carrier_held_until = Some(Instant::now() + CARRIER_HOLD);
                    self.update(|s| {
                        s.state = DriverState::Recovering;
                        s.device_stop = Some(q.device_stop.clone());
                    });
                    self.feed(Event::Quiesced { uncompleted: q.uncompleted, device_stop_ms: q.device_stop_ms })?;
                }
                Action::Start { modules } => match self.start_successor(&modules) {
                    Ok(kind) => self.feed(Event::Started(kind))?,
                    Err(why) => {
                        error!("{}: handover: the successor did not start: {why}", self.vfio.address());
                        self.feed(Event::SuccessorFailed { cause: why, uncompleted: Vec::new() })?;
                    }
                },
                Action::EndSuccessor(why) => return Err(Fault::Io(why)),
                Action::Adopt(info) => self.adopt(info),
                Action::Send(request) => {
                    info!("{}: handover: giving the successor {}", self.vfio.address(), describe(&request));
                    self.send(request, Purpose::Replay)?;
                }
                Action::WaitForLink => {
                    info!("{}: handover: the successor has its predecessor's settings; its frames wait for its link",
                          self.vfio.address());
                    self.carrier_held_until.get_or_insert(Instant::now() + CARRIER_HOLD);
                    // Receive buffers are lent now: the link may come up with frames waiting.
                    self.move_frames(false)?;
                }
                Action::Resubmit(frames) => self.give_frames(frames)?,
                Action::StartProbation(window) => {
                    info!("{}: update: the new driver serves; it is on probation for {} s", self.vfio.address(),
                          window.as_secs());
                    self.probation_until = Some(Instant::now() + window);
                }
                Action::Done(outcome) => self.finish_handover(outcome),
            }
        }
        Ok(())
    }

    /// Starts an update's successor and sends it LOAD, before anything else:
    /// it maps no shared memory and touches no device until HELLO and PROBE.
    fn start_loader(&mut self, modules: &[ModuleInfo]) -> Result<(), Fault> {
        let ids = match read_pci_ids(self.vfio.address()) {
            Ok(ids) => ids,
            Err(e) => return self.feed(Event::Loaded(Err(format!("cannot read the device's PCI ids: {e}")))),
        };
        let started = spawn_driver(&self.driver_binary, self.placement, &self.vfio, &self.shm, self.kick.as_fd(),
                                   self.notify.as_fd());
        let (control, process) = match started {
            Ok(started) => started,
            Err(why) => return self.feed(Event::Loaded(Err(why))),
        };
        let seq = self.take_seq();
        let load = Request::Load { modules: modules.iter().map(|m| m.path.clone()).collect(), ids };
        let sent = load.encode(seq).map_err(|e| e.to_string()).and_then(|bytes| {
            nix::sys::socket::send(control.as_raw_fd(), &bytes, nix::sys::socket::MsgFlags::MSG_NOSIGNAL)
                .map(drop).map_err(|e| e.to_string())
        });
        self.loader = Some(Loader { process, control, seq });
        if let Err(e) = sent {
            self.end_loader();
            return self.feed(Event::Loaded(Err(format!("sending LOAD: {e}"))));
        }
        Ok(())
    }

    /// A successor for `modules`: the update's loaded process (sent HELLO and
    /// PROBE), a fork of the template if it was made from them, else a new
    /// process that probes. The device's interrupt is allowed again first.
    fn start_successor(&mut self, modules: &[ModuleInfo]) -> Result<StartKind, String> {
        self.vfio.allow_intx().map_err(|e| format!("cannot allow the device's interrupt again: {e}"))?;
        let forked = match self.loader.take() {
            Some(loader) => Some((loader.control, loader.process, StartKind::Probe)),
            None if modules == self.modules.as_slice() => {
                self.fork_from_template().map(|(control, driver)| (control, driver, StartKind::Template))
            }
            None => None,
        };
        let (control, driver, kind) = match forked {
            Some(started) => started,
            None => {
                let (control, driver) = spawn_driver(&self.driver_binary, self.placement, &self.vfio, &self.shm,
                                                     self.kick.as_fd(), self.notify.as_fd())?;
                (control, driver, StartKind::Probe)
            }
        };
        fd::set_nonblocking(control.as_fd()).map_err(|e| format!("control socket: {e}"))?;
        let pid = driver.pid;
        self.control = control;
        self.driver = Some(driver);
        self.update(|s| s.pid = Some(pid as u32));
        if kind == StartKind::Probe {
            // A broken control socket shows as the process's end in the run loop.
            if let Err(e) = self.send_startup(modules) {
                error!("{}: the successor {pid} did not take its first requests: {e}", self.vfio.address());
            }
        }
        info!("{}: handover: successor process {pid} started ({})", self.vfio.address(), kind.phase_name());
        Ok(kind)
    }

    /// The driver registered its net_device: the shadow starts from what it
    /// says; the TAP keeps the settings in force (a successor is given them by the replay).
    fn adopt(&mut self, r: understudy_protocol::RegisteredInfo) {
        self.set_tap_offloads(r.offloads);
        let features = r.features;
        self.update(|s| {
            s.mac.get_or_insert_with(|| format_mac(&r.dev_addr));
            s.mtu.get_or_insert(r.mtu);
            s.min_mtu = Some(r.min_mtu);
            s.max_mtu = Some(r.max_mtu);
            s.features = Some(features);
            s.hw_features = Some(r.hw_features);
            s.driver_name = Some(r.driver.clone());
        });
        self.shadow = Some(NetShadow::registered(r));
    }

    /// The successor can carry frames: gives it the ones its predecessor never
    /// completed, in order, and goes back to passive mode (the TAP's frames follow).
    fn give_frames(&mut self, frames: Vec<TxFrame>) -> Result<(), Fault> {
        let mut resubmitted = 0;
        for frame in frames {
            if self.shm.send(frame).map_err(|e| Fault::Violation(e.to_string()))? {
                resubmitted += 1;
            } else {
                // Cannot happen (the rings are empty and held at most ring_size), but a frame is never lost silently.
                self.shm.put_free(frame.buf);
                warn!("{}: handover: a frame of the predecessor did not fit the successor's tx ring", self.vfio.address());
            }
        }
        let shadow = self.shadow.as_ref().expect("frames follow REGISTERED");
        let (state, mtu, mac) = (state_of(shadow.phase()), shadow.mtu(), format_mac(&shadow.mac()));
        info!("{}: handover: the successor serves; {resubmitted} frame(s) given again", self.vfio.address());
        self.update(|s| {
            s.state = state;
            s.mtu = Some(mtu);
            s.mac = Some(mac);
        });
        let reason = self.handover.as_ref().map_or(HandoverReason::Death, |h| h.record().reason);
        let began = self.handover.as_ref().map_or_else(Instant::now, |h| h.began());
        self.first_frame = Some((FirstFrameWatch::new(began, self.last_packet), reason));
        // The fresh rings are empty and nobody waits on them yet: lend receive
        // buffers, say the host waits for completions, and kick the driver for
        // the frames just given again -- else a receiving-only stack would wait forever.
        self.move_frames(false)?;
        fd::signal(self.kick.as_fd());
        Ok(())
    }

    /// The handover is over (handover.rs's `Outcome`).
    fn finish_handover(&mut self, outcome: Outcome<TxFrame>) {
        let handover = self.handover.take().expect("a handover under way");
        let record = handover.record().clone();
        let dev = self.vfio.address().clone();
        let phases = format!("stop {:.1} ms, {} {} ms, replay {} ms, link {} ms: serving {} ms after it began; {} frame(s) given again",
                             record.stop_ms, record.start.phase_name(), ms_or_dash(record.start_ms),
                             ms_or_dash(record.replay_ms), ms_or_dash(record.link_ms), ms_or_dash(record.serving_ms),
                             record.tx_resubmitted);
        self.publish(&record);
        let update = record.reason == HandoverReason::Update;
        match outcome {
            Outcome::Committed if update => {
                let modules = record.to_modules.clone().unwrap_or_default();
                info!("{dev}: updated to {} ({}); {phases}", module_names(&modules),
                      record.kernel_half.as_deref().unwrap_or("-"));
                // The template is the old version's: restarts probe the new one from now on.
                self.end_template("the driver was updated");
                self.modules = modules.clone();
                self.update(|s| s.modules = modules);
                self.hook("updated", &record.cause, None, record.serving_ms, None);
            }
            Outcome::Committed => {
                info!("{dev}: recovered from {}: {phases}", record.cause);
                self.backoff.reset();
                self.hook("recovered", &record.cause, None, record.serving_ms, None);
            }
            Outcome::RolledBack { why } => {
                warn!("{dev}: update rolled back to {}: {why}; {phases}", module_names(&self.modules));
                self.hook("rolled-back", &record.cause, Some(&why), record.serving_ms, None);
            }
            Outcome::Refused { why } => {
                warn!("{dev}: update refused, nothing changed: {why}");
                self.end_loader();
                self.hook("refused", &record.cause, Some(&why), None, None);
            }
            Outcome::Failed { why, log, uncompleted, replaceable } => {
                error!("{dev}: handover failed: {why}");
                self.hook("failed", &record.cause, Some(&why), None, None);
                self.answer_update(record);
                // Nobody serves: what follows is a death's, with the handover's log and frames.
                let seen = Instant::now();
                let q = Quiesced { uncompleted, device_stop: self.device_stop(), device_stop_ms: 0.0 };
                self.restart_or_give_up(Reason::Death { cause: why.clone() }, why, Some(log), q, seen, replaceable);
                return;
            }
        }
        self.answer_update(record);
    }

    fn answer_update(&mut self, record: HandoverRecord) {
        if record.reason != HandoverReason::Update {
            return;
        }
        if let Some(answer) = self.update_answer.take() {
            let _ = answer.send(Ok(record));
        }
    }

    /// A handover ends without an outcome (the device is being released).
    fn abandon_handover(&mut self, why: &str) {
        self.end_loader();
        if let Some(h) = self.handover.take() {
            let mut record = h.record().clone();
            record.outcome = format!("abandoned: {why}");
            self.publish(&record);
            self.answer_update(record);
        }
    }

    fn device_stop(&self) -> DeviceStop {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).device_stop.clone().unwrap_or(DeviceStop {
            bus_master_off: true, irqs_disabled: true, reset: "done".into(), iommu_unmapped: false,
        })
    }

    /// After the first PROBE: makes the process that probed the template
    /// restarts fork from, and gives the device to its first fork. A process
    /// that cannot be a template goes on as the driver (restarts then probe).
    fn take_template(&mut self) -> Result<(), Fault> {
        let dev = self.vfio.address().clone();
        let seq = self.take_seq();
        let prober = self.driver.as_ref().expect("PROBE was answered");
        let limit = &mut self.log_limit;
        let spawned = template::spawn(self.control.as_fd(), prober.pidfd.as_fd(), seq,
                                      |level, text| driver_log(limit, &dev, level, text));
        match spawned {
            Ok((control, child)) => {
                let pid = child.pid;
                let process = self.driver.replace(child).expect("PROBE was answered");
                let template_control = std::mem::replace(&mut self.control, control);
                info!("{dev}: process {} is the post-probe template restarts fork from; its fork {pid} drives the device",
                      process.pid);
                self.update(|s| {
                    s.pid = Some(pid as u32);
                    s.template_pid = Some(process.pid as u32);
                });
                self.template = Some(Template { process, control: template_control });
                self.takeover = true;
                Ok(())
            }
            Err(SpawnError::Refused(e)) => {
                warn!("{dev}: the driver process cannot be a post-probe template ({e}); it drives the device itself, \
                       and a restart will load and probe the driver again");
                Ok(())
            }
            Err(SpawnError::Broken(why)) => Err(Fault::Violation(format!("asked to become the template: {why}"))),
        }
    }

    /// A fresh driver forked from the template, or None (then a cold start
    /// follows) if there is none or it failed -- a failed template is ended.
    fn fork_from_template(&mut self) -> Option<(OwnedFd, DriverProcess)> {
        let dev = self.vfio.address().clone();
        let seq = self.take_seq();
        let limit = &mut self.log_limit;
        let spawned = self.template.as_ref()?.spawn(seq, |level, text| driver_log(limit, &dev, level, text));
        match spawned {
            Ok(forked) => Some(forked),
            Err(e) => {
                self.end_template(&format!("it did not fork a driver: {e}"));
                None
            }
        }
    }

    fn end_template(&mut self, why: &str) {
        let Some(t) = self.template.take() else { return };
        process::kill(t.process.pid);
        let how = process::wait(t.process.pid);
        warn!("{}: post-probe template {} ended ({why}; the process {how}); a restart will load and probe the driver again",
              self.vfio.address(), t.process.pid);
        self.update(|s| s.template_pid = None);
    }

    /// The template exited by itself.
    fn template_ended(&mut self) {
        let Some(t) = self.template.take() else { return };
        let how = process::wait(t.process.pid);
        warn!("{}: post-probe template {} {how}; a restart will load and probe the driver again",
              self.vfio.address(), t.process.pid);
        self.update(|s| s.template_pid = None);
    }

    fn first_frame_passed(&mut self, watch: FirstFrameWatch, reason: HandoverReason, now: Instant) {
        let mut first = None;
        self.update(|s| {
            let records = if reason == HandoverReason::Update { &mut s.updates } else { &mut s.recoveries };
            if let Some(last) = records.last_mut() {
                watch.frame_passed(last, now);
                first = Some((last.first_packet_ms, last.downtime_ms));
            }
        });
        if let Some((first_packet, downtime)) = first {
            info!("{}: the first frame through the successor at {} ms after the handover began; downtime {} ms \
                   (from the predecessor's last frame)",
                  self.vfio.address(), ms_or_dash(first_packet), ms_or_dash(downtime));
        }
    }

    /// Starts the administrator's hook (--recovery-hook) for a recovery outcome; not waited for.
    fn hook(&self, outcome: &str, cause: &str, reason: Option<&str>, restart_ms: Option<f64>,
            retry_in: Option<Duration>) {
        let Some(path) = &self.agent.hook else { return };
        let recovery_count = self.status.lock().unwrap_or_else(|p| p.into_inner()).recovery_count;
        run_hook(path, &HookEvent {
            device: &self.vfio.address().to_string(),
            ifname: self.tap.name(),
            outcome,
            cause,
            reason,
            recovery_count,
            restart_ms,
            retry_in,
        });
    }

    /// `--on-exhausted retry`: once the back-off has passed, a fresh driver is
    /// started (the handover's failure schedules the next attempt); the
    /// interface has been down meanwhile, so its carrier follows the fresh driver's.
    fn retry_if_due(&mut self, now: Instant) {
        if self.retry.as_ref().is_none_or(|r| now < r.at) {
            return;
        }
        let retry = self.retry.take().expect("checked");
        info!("{}: --on-exhausted retry: restarting the driver after its back-off", self.vfio.address());
        // Given up, the device lost its arena's IOMMU mapping; a restart reuses the arena.
        if self.vfio.mapped_bytes() == 0 {
            if let Err(e) = map_arena(&mut self.vfio, &self.shm) {
                let wait = self.backoff.next_delay();
                let why = format!("cannot map the arena again: {e}");
                error!("{}: the retry failed: {why}; next attempt in {:.1} s", self.vfio.address(), wait.as_secs_f64());
                self.hook("retrying", &retry.cause, Some(&why), None, Some(wait));
                self.retry = Some(PendingRetry { at: now + wait, ..retry });
                return;
            }
        }
        let reason = Reason::Death { cause: retry.cause.clone() };
        let (handover, actions) = Handover::restart(reason, retry.log, self.modules.clone(), Vec::new(), now, 0.0, now);
        self.begin_handover(handover, Some(retry.device_stop));
        self.act_quietly(actions);
    }

    /// The handover's record replaces its earlier version in `status`; a
    /// first frame already timed there is kept.
    fn publish(&self, record: &HandoverRecord) {
        self.update(|s| {
            let records = if record.reason == HandoverReason::Update { &mut s.updates } else { &mut s.recoveries };
            if let Some(last) = records.last_mut() {
                let timed = (last.first_packet_ms, last.downtime_ms);
                *last = record.clone();
                if last.first_packet_ms.is_none() {
                    (last.first_packet_ms, last.downtime_ms) = timed;
                }
            }
        });
    }

    fn publish_handover(&self) {
        if let Some(h) = &self.handover {
            self.publish(h.record());
        }
    }

    fn shut_down(&mut self) {
        self.abandon_handover("the device was stopped by request");
        if self.driver.is_some() {
            self.end_driver("stopped by request", false);
        }
        self.end_template("stopped by request");
        info!("{}: released; interface {} removed", self.vfio.address(), self.tap.name());
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // A driver must never outlive the device it was given.
        let loader = self.loader.take().map(|l| l.process);
        for d in [self.driver.take(), self.template.take().map(|t| t.process), loader].into_iter().flatten() {
            process::kill(d.pid);
            process::wait(d.pid);
        }
    }
}

/// A driver that is gone: its device stopped, its buffers back.
struct Quiesced {
    /// The frames it took and never completed, oldest first.
    uncompleted: Vec<TxFrame>,
    device_stop: DeviceStop,
    device_stop_ms: f64,
}

fn module_names(modules: &[ModuleInfo]) -> String {
    modules.iter().map(|m| m.path.as_str()).collect::<Vec<_>>().join(", ")
}

/// The device's identity as its driver's ID table matches it (sysfs).
fn read_pci_ids(address: &PciAddress) -> io::Result<PciIds> {
    let dir = std::path::Path::new("/sys/bus/pci/devices").join(address.to_string());
    let read = |name: &str| -> io::Result<u32> {
        let text = std::fs::read_to_string(dir.join(name))?;
        u32::from_str_radix(text.trim().trim_start_matches("0x"), 16)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", dir.join(name).display())))
    };
    Ok(PciIds {
        vendor: read("vendor")? as u16,
        device: read("device")? as u16,
        subvendor: read("subsystem_vendor")? as u16,
        subdevice: read("subsystem_device")? as u16,
        class: read("class")?,
    })
}

/// Starts a driver process on `vfio`'s device and `shm`; returns the host's
/// end of its control socket and the process.
fn spawn_driver(binary: &std::path::Path, placement: Option<Placement>, vfio: &Vfio, shm: &SharedMemory,
                kick: BorrowedFd, notify: BorrowedFd) -> Result<(OwnedFd, DriverProcess), String> {
    let (control, driver_control) = fd::seqpacket_pair().map_err(|e| format!("socketpair: {e}"))?;
    fd::set_nonblocking(control.as_fd()).map_err(|e| format!("control socket: {e}"))?;
    let driver = process::spawn(binary, &DriverFds {
        control: driver_control.as_fd(),
        device: vfio.device_fd(),
        arena: shm.arena().as_fd(),
        rings: shm.rings().region().as_fd(),
        kick,
        notify,
    }, placement)
    .map_err(|e| e.to_string())?;
    Ok((control, driver))
}

/// A kernel log record of the driver (printk level `level`), if the rate limit admits it.
fn driver_log(limit: &mut TokenBucket, dev: &PciAddress, level: u32, text: &str) {
    if !limit.admit(Instant::now()) {
        return;
    }
    match level {
        0..=3 => error!("{dev}: driver: {text}"),
        4 => warn!("{dev}: driver: {text}"),
        _ => info!("{dev}: driver: {text}"),
    }
}

fn state_of(phase: Phase) -> DriverState {
    match phase {
        Phase::Registered => DriverState::Registered,
        Phase::Open => DriverState::Open,
        Phase::Stopped => DriverState::Stopped,
    }
}


