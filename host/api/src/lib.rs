// SPDX-License-Identifier: GPL-2.0
//! The CLI ↔ daemon messages: one JSON request per connection to the daemon's
//! unix socket, answered by one JSON response, each on one line.

use serde::{Deserialize, Serialize};

mod check;

pub use check::{CheckReport, CheckStatus, Finding, FindingSite, GateMode, Incarnation, SeenIn, Verdict};

pub const DEFAULT_SOCKET: &str = "/run/understudy/understudyd.sock";

/// `run --poll-us`'s largest window, a second: longer would only keep the
/// CPU busy (the driver process checks the same limit on its command line).
pub const MAX_POLL_US: u32 = 1_000_000;

/// Take `device` through VFIO, create `ifname`, start a driver process for `modules`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunRequest {
    pub device: String,
    pub modules: Vec<String>,
    pub ifname: Option<String>,
    /// The CPU the driver process runs on, the daemon's thread for the
    /// device kept off it (`understudy run --cpu`).
    pub cpu: Option<u32>,
    /// With `cpu`: the driver's TX thread polls instead of sleeping for up
    /// to this many microseconds after its last work while the traffic is
    /// sparse (`understudy run --poll-us`); absent, it never polls.
    /// 1 to MAX_POLL_US.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_us: Option<u32>,
    /// Devices the interface may move to, each with its modules (as
    /// `Migrate`'s); the interface advertises only what every one's driver offers.
    #[serde(default)]
    pub standby: Vec<StandbyRequest>,
    /// Run every driver process of the device under a checker with this
    /// gate (docs/checking.md); absent, unchecked. Left out of the JSON when
    /// absent, so a request without it reads as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<GateMode>,
    /// The device goes to uio_pci_generic, its DMA unconfined
    /// (docs/design.md §4, "Without an IOMMU"); never chosen without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_iommu: bool,
    /// Queues of the interface for the driver, and the queue pairs its
    /// driver is asked to run (`ethtool -L combined`); absent, one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<u16>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    Run(RunRequest),
    Status,
    /// Ask the driver of `device` (a PCI address or an interface name) its ethtool answers.
    Ethtool { device: String, queries: EthtoolQueries },
    /// Stop the driver, release the device and remove the interface.
    Stop { device: String },
    /// Restart the driver of `device` (a PCI address or an interface name) and
    /// give the fresh one its settings, as after a death (counted by the restart limit).
    Recover { device: String },
    /// Hand the interface of `device` to another build of its driver:
    /// `modules` (dependencies first) load and are checked while the running
    /// driver serves; then it is replaced, and rolled back if the new one
    /// fails or offers less (unless `allow_feature_loss`). Answered when the
    /// update is over (committed, rolled back or refused).
    Update { device: String, modules: Vec<String>, #[serde(default)] allow_feature_loss: bool },
    /// Move the interface of `device` to the device `to`, driven by `modules`
    /// (dependencies first; empty: a declared standby's, else the module
    /// tree's match for the device). The destination is checked -- present,
    /// free, its driver loads and probes, it offers what the interface
    /// advertises -- while the running driver serves; if the new driver
    /// fails, the interface goes back. Answered when the move is over.
    Migrate { device: String, to: String, #[serde(default)] modules: Vec<String> },
    /// What the checkers of `device` (a PCI address or an interface name)
    /// found: answered with `check`.
    CheckReport { device: String },
}

/// A standby device of `run`, and its driver's modules (empty: found for it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StandbyRequest {
    pub device: String,
    #[serde(default)]
    pub modules: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub devices: Vec<DeviceStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ethtool: Option<EthtoolReport>,
    /// `update`'s and `migrate`'s record: how it ended and its phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<HandoverRecord>,
    /// `check_report`'s answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckReport>,
}

impl Response {
    pub fn ok(devices: Vec<DeviceStatus>) -> Self {
        Response { ok: true, error: None, devices, ethtool: None, handover: None, check: None }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Response { ok: false, error: Some(message.into()), devices: Vec::new(), ethtool: None, handover: None, check: None }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ModuleInfo {
    pub path: String,
    pub sha256: String,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Counters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_dropped: u64,
    /// Received: the interface's own counts (the kernel's statistics of the
    /// TAP, which the driver process writes received frames to; a frame
    /// it merged from several segments counts once).
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Frames the driver wrote that the stack dropped.
    pub rx_dropped: u64,
}

/// The class of a device: which shadow stands in for its driver
/// (understudyd's class interface, docs/design.md §0).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DeviceClass {
    /// A NIC behind a TAP interface.
    #[default]
    Net,
    /// A disk behind an NBD device.
    Block,
}

impl DeviceClass {
    pub fn name(self) -> &'static str {
        match self {
            DeviceClass::Net => "net",
            DeviceClass::Block => "block",
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DriverState {
    /// Spawned, HELLO/PROBE under way.
    Starting,
    /// Registered its net_device, not opened yet: the interface has not been
    /// set up (`ip link set IFNAME up` opens it). Shown once the probe is
    /// answered: with a post-probe template, `pid` is then the template's fork.
    Registered,
    /// Opened (ndo_open): packets flow.
    Open,
    /// Opened, then stopped because the interface was set down.
    Stopped,
    /// The process is gone; `death` says why, the device is stopped.
    Dead,
    /// The driver died and a fresh process is being started and given the
    /// dead one's settings; the interface keeps its carrier meanwhile.
    Recovering,
    /// Its device was removed and no standby was left: the interface waits,
    /// with its settings, for `understudy migrate IFACE --to ADDR`.
    Parked,
}

/// How a successor driver process started.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StartKind {
    /// Forked from the post-probe template; the driver's resume callback
    /// brought the reset device back (no probe).
    Template,
    /// A new process loaded the modules and probed the device.
    #[default]
    Probe,
}

impl HandoverReason {
    /// What the handover is called in log lines.
    pub fn name(self) -> &'static str {
        match self {
            HandoverReason::Death | HandoverReason::Requested => "restart",
            HandoverReason::Update => "update",
            HandoverReason::Migrate => "move",
            HandoverReason::Failover => "failover",
        }
    }
}

impl StartKind {
    /// The start phase's name in log lines and tables.
    pub fn phase_name(self) -> &'static str {
        match self {
            StartKind::Template => "fork+resume",
            StartKind::Probe => "spawn+probe",
        }
    }
}

/// How a handover ended, or that it has not yet. In JSON it is the words
/// `status` shows: "under way", "recovered", "updated", "moved",
/// "rolled back: why", "refused: why" (an update or a move that changed
/// nothing), "failed: why" or "abandoned: why".
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(into = "String", from = "String")]
pub enum HandoverOutcome {
    #[default]
    UnderWay,
    Recovered,
    Updated,
    Moved,
    RolledBack(String),
    Refused(String),
    Failed(String),
    /// Ended without an outcome: the device was released meanwhile.
    Abandoned(String),
    /// Words this program does not know (a newer daemon's), as they came.
    Other(String),
}

impl std::fmt::Display for HandoverOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            HandoverOutcome::UnderWay => f.write_str("under way"),
            HandoverOutcome::Recovered => f.write_str("recovered"),
            HandoverOutcome::Updated => f.write_str("updated"),
            HandoverOutcome::Moved => f.write_str("moved"),
            HandoverOutcome::RolledBack(why) => write!(f, "rolled back: {why}"),
            HandoverOutcome::Refused(why) => write!(f, "refused: {why}"),
            HandoverOutcome::Failed(why) => write!(f, "failed: {why}"),
            HandoverOutcome::Abandoned(why) => write!(f, "abandoned: {why}"),
            HandoverOutcome::Other(words) => f.write_str(words),
        }
    }
}

impl From<HandoverOutcome> for String {
    fn from(outcome: HandoverOutcome) -> String {
        outcome.to_string()
    }
}

impl From<String> for HandoverOutcome {
    fn from(words: String) -> Self {
        let why = |prefix: &str| words.strip_prefix(prefix).map(str::to_string);
        match words.as_str() {
            "under way" => HandoverOutcome::UnderWay,
            "recovered" => HandoverOutcome::Recovered,
            "updated" => HandoverOutcome::Updated,
            "moved" => HandoverOutcome::Moved,
            _ => None
                .or_else(|| why("rolled back: ").map(HandoverOutcome::RolledBack))
                .or_else(|| why("refused: ").map(HandoverOutcome::Refused))
                .or_else(|| why("failed: ").map(HandoverOutcome::Failed))
                .or_else(|| why("abandoned: ").map(HandoverOutcome::Abandoned))
                .unwrap_or(HandoverOutcome::Other(words)),
        }
    }
}

/// Why a driver handed its interface to a successor.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HandoverReason {
    /// It died, hung or broke the protocol.
    #[default]
    Death,
    /// `understudy recover`.
    Requested,
    /// `understudy update`: another build of the driver.
    Update,
    /// `understudy migrate`: another device and its driver.
    Migrate,
    /// The device was being removed, or its driver exceeded the restart
    /// limit: the interface moved to a standby by itself.
    Failover,
}

/// One handover of the interface to a successor driver process (a restart
/// after a death, `recover`, or an update), with how long each phase took,
/// in milliseconds. A restart's phases count from the moment the death was
/// seen; an update's `stop_ms` from the end of the successor's load.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HandoverRecord {
    #[serde(default)]
    pub reason: HandoverReason,
    pub cause: String,
    pub outcome: HandoverOutcome,
    /// An update's or a move's modules before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_modules: Option<Vec<ModuleInfo>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_modules: Option<Vec<ModuleInfo>>,
    /// A move's devices before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_device: Option<String>,
    /// An update or a move: the kernel half the successor's LOAD chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_half: Option<String>,
    /// An update or a move: the successor loaded and checked its modules --
    /// a move's also probed its device on scratch memory -- while the
    /// predecessor still served (not part of the downtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_ms: Option<f64>,
    /// A failover whose device was removed with no standby left: how long
    /// the interface waited, without a device, until it was given one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked_ms: Option<f64>,
    /// Predecessor ended, device stopped, buffers reclaimed, the interrupt allowed again.
    pub stop_ms: f64,
    /// The part of `stop_ms` that stopped the device: bus mastering off,
    /// interrupts off and the reset (VFIO_DEVICE_RESET).
    pub device_stop_ms: f64,
    /// How the successor process started (see `StartKind`).
    pub start: StartKind,
    /// The successor started and its driver registered (REGISTERED).
    pub start_ms: Option<f64>,
    /// OPEN, MTU, MAC and receive mode given again and accepted.
    pub replay_ms: Option<f64>,
    /// The successor's link came up (its carrier on): frames wait for it,
    /// since a driver without carrier drops them. A driver that resets its
    /// PHY when it resumes spends most of a fast restart here.
    #[serde(default)]
    pub link_ms: Option<f64>,
    /// From the handover's start until the successor carried frames again.
    #[serde(default)]
    pub serving_ms: Option<f64>,
    /// An update that rolled back: when its successor failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_at_ms: Option<f64>,
    /// The first frame through the successor.
    pub first_packet_ms: Option<f64>,
    /// From the last frame through the predecessor to the first through the successor.
    pub downtime_ms: Option<f64>,
    /// Frames the predecessor took and never completed, given to the successor.
    pub tx_resubmitted: u32,
    /// A move: gratuitous ARP and unsolicited neighbour advertisements sent
    /// from the interface once its successor served.
    #[serde(default)]
    pub announced: u32,
}

/// What the daemon did to the device after its driver died.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceStop {
    pub bus_master_off: bool,
    pub irqs_disabled: bool,
    /// "done", or why no reset happened.
    pub reset: String,
    /// The arena's IOMMU mapping was dropped: the device was given up. A
    /// restarted driver keeps the mapping (the device is stopped and reset).
    pub iommu_unmapped: bool,
}

fn one_queue() -> u16 {
    1
}

/// What `understudy status` says of one device, grouped by the part of the
/// daemon that reports it. In JSON the groups are flattened: one object of
/// fields, as before they were grouped.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeviceStatus {
    pub device: String,
    /// Which class's shadow stands in for the driver.
    #[serde(default)]
    pub class: DeviceClass,
    pub ifname: String,
    #[serde(flatten)]
    pub dma: DmaStatus,
    #[serde(flatten)]
    pub driver: DriverStatus,
    #[serde(flatten)]
    pub net: NetStatus,
    #[serde(flatten)]
    pub handovers: HandoverHistory,
    /// The block class's disk: absent for other classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskStatus>,
    /// Checking (`run --check`): absent for an unchecked device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckStatus>,
}

/// How the device reaches memory: the IOMMU and the DMA arena.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DmaStatus {
    /// The IOMMU group; with `dma_unconfined`, 0: there is none.
    pub iommu_group: u32,
    /// `run --no-iommu`: the device is uio_pci_generic's and its DMA reaches
    /// all of memory (docs/design.md §4, "Without an IOMMU").
    #[serde(default)]
    pub dma_unconfined: bool,
    /// Whether the DMA arena lies in 2 MiB hugepages, or in base pages when
    /// none were free (docs/design.md §4, "The arena's pages").
    #[serde(default)]
    pub arena_in_hugepages: bool,
}

/// The driver process that serves the device, and how the last one ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DriverStatus {
    pub modules: Vec<ModuleInfo>,
    pub driver_binary: String,
    pub pid: Option<u32>,
    /// The CPU the driver process runs on, if `run` placed it.
    #[serde(default)]
    pub cpu: Option<u32>,
    /// The TX thread's poll window in microseconds (`run --poll-us`), if any.
    #[serde(default)]
    pub poll_us: Option<u32>,
    pub state: DriverState,
    pub death: Option<String>,
    pub device_stop: Option<DeviceStop>,
    pub uptime_s: f64,
    /// The post-probe template restarts fork from, if the driver has one.
    pub template_pid: Option<u32>,
    /// Driver log lines dropped by the rate limit.
    pub log_lines_suppressed: u64,
    /// WARNs the device's driver processes reported, all of them (their
    /// lines in the log share the log's rate limit).
    #[serde(default)]
    pub warnings: u64,
}

/// The network class's interface: what the driver registered, and the frames.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NetStatus {
    pub carrier: bool,
    pub mac: Option<String>,
    pub mtu: Option<u32>,
    pub driver_name: Option<String>,
    /// NETIF_F_* bits of the driver's net_device (REGISTERED).
    pub features: Option<u64>,
    pub hw_features: Option<u64>,
    /// What the driver does for the stack (REGISTERED's offloads, as the TAP
    /// was told them): tx-checksum, tso4, tso6, tso-ecn, rx-checksum.
    #[serde(default)]
    pub offloads: Vec<String>,
    /// The driver's MTU range (REGISTERED).
    pub min_mtu: Option<u32>,
    pub max_mtu: Option<u32>,
    pub counters: Counters,
    /// The shared packet pool: buffers in all, and how many the host holds
    /// free (the rest are lent to the driver or hold frames it has not sent).
    #[serde(default)]
    pub pool_buffers: u32,
    #[serde(default)]
    pub pool_free: u32,
    /// The TAP's queues for the driver (`run --queues`), as many queue pairs
    /// as the driver is asked for.
    #[serde(default = "one_queue")]
    pub queues: u16,
}

/// The block class's disk: what the kernel was told of it when its NBD
/// device was connected, and what it has done.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DiskStatus {
    /// `/dev/nbdN`, once the first driver registered the disk.
    pub path: Option<String>,
    pub driver_name: Option<String>,
    /// The driver's own name for it (`vda`, `nvme0n1`), in its process.
    pub disk_name: Option<String>,
    pub size_bytes: u64,
    pub logical_block_size: u32,
    /// write-cache, fua, read-only, rotational, discard, write-zeroes.
    pub features: Vec<String>,
    /// The hardware queues of the driver serving now.
    pub queues: u16,
    pub counts: DiskCounts,
    /// Acknowledged changes no flush has covered yet, which a successor is
    /// given again: how many, and their bytes.
    pub kept_changes: u64,
    pub kept_bytes: u64,
    /// Requests of the kernel's not answered yet.
    pub unanswered: u64,
}

/// What the disk has done since it was connected.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DiskCounts {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub discards: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Requests answered with an error.
    pub errors: u64,
    /// Kept changes done again after handovers.
    pub replayed: u64,
}

/// The handovers the device has had, and where it may move.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HandoverHistory {
    /// Restarts of the driver process, oldest first: the last
    /// `RECOVERIES_KEPT` of them (`recovery_count` counts them all).
    pub recoveries: Vec<HandoverRecord>,
    pub recovery_count: u32,
    /// Updates (`understudy update`), oldest first: the last `RECOVERIES_KEPT`.
    #[serde(default)]
    pub updates: Vec<HandoverRecord>,
    /// Moves to another device (`understudy migrate`), oldest first: the last `RECOVERIES_KEPT`.
    #[serde(default)]
    pub migrations: Vec<HandoverRecord>,
    /// The devices the interface may move to (`run --standby`), with their drivers.
    #[serde(default)]
    pub standby: Vec<Standby>,
}

/// A device an interface may move to, and the driver that would run it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Standby {
    pub device: String,
    pub modules: Vec<ModuleInfo>,
    /// The offloads its driver registered when it was probed (`run --standby`).
    pub offloads: Vec<String>,
}

/// How many recovery records `status` keeps: a driver restarted thousands of
/// times must not grow the daemon without bound.
pub const RECOVERIES_KEPT: usize = 100;

/// Which ethtool answers to ask for.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct EthtoolQueries {
    pub driver_info: bool,
    pub link: bool,
    pub stats: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DriverInfo {
    pub driver: String,
    pub version: String,
    pub fw_version: String,
    pub bus_info: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LinkSettings {
    /// Mb/s; null when unknown.
    pub speed: Option<u32>,
    /// "full", "half", or null when unknown.
    pub duplex: Option<String>,
    pub autoneg: bool,
    /// PORT_* of the kernel ABI.
    pub port: u8,
    pub link: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Statistic {
    pub name: String,
    pub value: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EthtoolReport {
    pub device: String,
    pub ifname: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_info: Option<DriverInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Vec<Statistic>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `status --json` is one flat object whatever groups the struct has:
    /// scripts and the lab read `mac`, `pid`, `recoveries` at its top.
    #[test]
    fn a_device_status_is_one_flat_object_naming_its_class() {
        let old = r#"{"device":"0000:01:00.0","ifname":"us0","iommu_group":7,"modules":[],"driver_binary":"d",
            "pid":42,"state":"open","death":null,"device_stop":null,"uptime_s":1.5,"carrier":true,
            "mac":"52:54:00:12:34:56","mtu":1500,"driver_name":"e1000","features":3,"hw_features":3,
            "min_mtu":46,"max_mtu":16110,"log_lines_suppressed":0,"counters":{"tx_packets":1,"tx_bytes":2,
            "tx_dropped":0,"rx_packets":3,"rx_bytes":4,"rx_dropped":0},"recoveries":[],"recovery_count":2,
            "template_pid":null}"#;
        let status: DeviceStatus = serde_json::from_str(old).unwrap();
        assert_eq!((status.class, status.driver.pid, status.net.mtu, status.handovers.recovery_count, status.dma.iommu_group),
                   (DeviceClass::Net, Some(42), Some(1500), 2, 7));
        assert_eq!(status.net.queues, 1, "a status without queues has one");
        let json: serde_json::Value = serde_json::to_value(&status).unwrap();
        let object = json.as_object().unwrap();
        for key in ["class", "device", "pid", "state", "mac", "counters", "recoveries", "iommu_group", "queues"] {
            assert!(object.contains_key(key), "{key} is not at the top: {json}");
        }
        assert_eq!(object["class"], "net");
        assert!(["dma", "driver", "net", "handovers"].iter().all(|group| !object.contains_key(*group)), "{json}");
    }

    #[test]
    fn a_handover_outcome_is_its_words_in_json_and_back() {
        for outcome in [HandoverOutcome::UnderWay, HandoverOutcome::Recovered, HandoverOutcome::Updated,
                        HandoverOutcome::Moved, HandoverOutcome::RolledBack("the new driver failed: x".into()),
                        HandoverOutcome::Refused("crc".into()), HandoverOutcome::Failed("y".into()),
                        HandoverOutcome::Abandoned("released".into())] {
            let json = serde_json::to_string(&outcome).unwrap();
            assert_eq!(json, format!("\"{outcome}\""));
            assert_eq!(serde_json::from_str::<HandoverOutcome>(&json).unwrap(), outcome);
        }
        assert_eq!(serde_json::to_string(&HandoverOutcome::RolledBack("why".into())).unwrap(), r#""rolled back: why""#);
        assert_eq!(serde_json::from_str::<HandoverOutcome>(r#""replanted""#).unwrap(),
                   HandoverOutcome::Other("replanted".into()));
    }

    #[test]
    fn requests_are_tagged_json() {
        let r = Request::Stop { device: "0000:00:02.0".into() };
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(j, r#"{"request":"stop","device":"0000:00:02.0"}"#);
        assert_eq!(serde_json::from_str::<Request>(&j).unwrap(), r);
        assert!(serde_json::from_str::<Request>(r#"{"request":"reboot"}"#).is_err());
    }

    #[test]
    fn run_carries_its_gate_mode_and_reads_without_one() {
        let run = |check| Request::Run(RunRequest { device: "0000:00:02.0".into(), modules: vec!["/m/e1000.ko".into()],
                                                    cpu: Some(1), check, ..Default::default() });
        let checked = serde_json::to_string(&run(Some(GateMode::Stringent))).unwrap();
        assert!(checked.contains(r#""check":"stringent""#), "{checked}");
        assert_eq!(serde_json::from_str::<Request>(&checked).unwrap(), run(Some(GateMode::Stringent)));
        // Unchecked, the request is the one older daemons read...
        let unchecked = serde_json::to_string(&run(None)).unwrap();
        assert!(!unchecked.contains("check"), "{unchecked}");
        // ...and what older clients send reads as unchecked.
        let old = r#"{"request":"run","device":"0000:00:02.0","modules":["/m/e1000.ko"],"ifname":null,"cpu":1}"#;
        assert_eq!(serde_json::from_str::<Request>(old).unwrap(), run(None));
        let bad = r#"{"request":"run","device":"0000:00:02.0","modules":[],"ifname":null,"cpu":null,"check":"strict"}"#;
        assert!(serde_json::from_str::<Request>(bad).is_err());
    }

    #[test]
    fn check_report_is_a_request_of_its_own() {
        let r = Request::CheckReport { device: "us0".into() };
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(j, r#"{"request":"check_report","device":"us0"}"#);
        assert_eq!(serde_json::from_str::<Request>(&j).unwrap(), r);
    }
}
