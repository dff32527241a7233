// SPDX-License-Identifier: GPL-2.0
//! `understudy`: asks understudyd to run, report on and stop devices.

mod check;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use understudy_api::{DeviceStatus, DiskStatus, EthtoolQueries, EthtoolReport, GateMode, HandoverOutcome, HandoverRecord, Request, Response, RunRequest,
                     StandbyRequest, DEFAULT_SOCKET};

/// understudy — run unmodified Linux NIC drivers as isolated user-space processes.
///
/// The daemon understudyd (run it as root) owns each device through VFIO and
/// its TAP interface; the driver itself runs in a process of its own and can
/// die without taking the interface, the daemon or the machine with it.
///
/// Exit status: 0 done; 1 the daemon refused or failed the request (the
/// message says why); 2 bad usage; 3 the daemon is not reachable; 4 an
/// update or a move was rolled back (the old driver serves again).
/// `check report` has its own: see `understudy check report --help`.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    /// The daemon's socket.
    #[arg(long, env = "UNDERSTUDY_SOCKET", default_value = DEFAULT_SOCKET, global = true)]
    socket: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Take a device and run a driver module for it.
    ///
    /// The device must be bound to vfio-pci and have an IOMMU group. The
    /// daemon opens it, maps a DMA arena into its IOMMU domain, creates the
    /// TAP interface and starts the driver process, which loads the modules
    /// (dependencies first, the driver last) and probes the device.
    Run {
        /// PCI address of the device, e.g. 0000:00:02.0.
        #[arg(long)]
        device: String,
        /// A kernel module (.ko) to load; repeat for dependencies, driver last.
        /// One module of a module tree gets its dependencies from modules.dep,
        /// and a driver of another bus (virtio_net) the chain of the PCI driver
        /// that claims the device (virtio_pci) before it.
        #[arg(long = "module", required = true)]
        modules: Vec<String>,
        /// Name of the network interface to create (default: the first free usN).
        #[arg(long)]
        ifname: Option<String>,
        /// Run the driver process on this CPU and the daemon's thread for the
        /// device on the others (default: wherever the scheduler puts them).
        /// The driver process is one CPU's worth of work; sharing a CPU with
        /// the daemon's thread slows sending (docs/performance.md §5).
        #[arg(long)]
        cpu: Option<u32>,
        /// With --cpu: after its last work the driver's TX thread keeps
        /// polling for up to N microseconds instead of sleeping, while the
        /// traffic is sparse, so that the next request or reply finds it
        /// running: a round trip no longer waits for it to be woken. Costs
        /// the CPU kept busy while requests come closer together than N and
        /// for N after the last; dense traffic keeps the thread busy by
        /// itself and it sleeps as without (docs/performance.md §8). 1 to
        /// 1000000; default: it never polls.
        #[arg(long, value_name = "N", requires = "cpu",
              value_parser = clap::value_parser!(u32).range(1..=understudy_api::MAX_POLL_US as i64))]
        poll_us: Option<u32>,
        /// A device the interface may move to (`understudy migrate`, and by
        /// itself when its device fails), as ADDR or ADDR=MODULE.ko (default:
        /// the module that claims it in the driver's module tree; its
        /// dependencies come from modules.dep). Repeatable. Each is probed
        /// now on memory of its own and kept for the interface, which then
        /// advertises only the offloads and MTU range every driver has.
        #[arg(long, value_name = "ADDR[=MODULE]")]
        standby: Vec<String>,
        /// Run every driver process of the device (the first, each restart,
        /// an update's or a move's successor) under a checker, on another
        /// CPU if --cpu leaves one, that checks the module's memory
        /// accesses, DMA and locking and approves its device writes at a
        /// gate (docs/checking.md). A checker that dies, or a fatal verdict,
        /// ends the driver, which is restarted like a crashed one (if
        /// understudyd's --max-restarts allows). A checked device has no
        /// post-probe template: restarts load and probe the driver again.
        /// See the findings with `understudy check report`.
        #[arg(long, value_enum, value_name = "MODE")]
        check: Option<CheckMode>,
        /// For a machine without an IOMMU: bind the device to
        /// uio_pci_generic instead of vfio-pci and give the driver an arena
        /// of 2 MiB hugepages, which the device reaches by physical address.
        /// Nothing then confines the device's DMA: a driver can make it read
        /// or write any memory of the machine (docs/design.md §4, "Without an
        /// IOMMU"). Frames to send are copies the daemon makes. Needs free
        /// hugepages (64 MiB: echo 32 > /proc/sys/vm/nr_hugepages) and a
        /// device no kernel driver holds; not with --check or --standby.
        #[arg(long)]
        no_iommu: bool,
        /// Give the interface N queues for the driver, each flow steered to
        /// one by its hash, and ask the driver to run N queue pairs
        /// (`ethtool -L combined N`; asked again of every successor). For
        /// drivers of multi-queue devices (virtio_net); one that cannot is
        /// logged and runs its own count, the TAP's queues feeding it (1 to 8;
        /// default 1; docs/protocol.md, "Several queues").
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=8))]
        queues: Option<u16>,
    },
    /// Show every device: driver module and its sha256, process, uptime,
    /// counters, carrier, and why a driver died.
    Status {
        /// Print the daemon's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Ask a device's driver what ethtool would: driver info, link settings,
    /// statistics (all three unless some are picked).
    ///
    /// The daemon forwards the query to the driver process (its ethtool_ops
    /// run there), so it needs a driver that has registered its net_device.
    Ethtool {
        /// The interface (e.g. us0) or the device's PCI address.
        device: String,
        /// Driver name, version, firmware version and bus address (ethtool -i).
        #[arg(long)]
        driver_info: bool,
        /// Speed, duplex, autonegotiation, port and link (ethtool).
        #[arg(long)]
        link: bool,
        /// The driver's statistics, name and value (ethtool -S).
        #[arg(long)]
        stats: bool,
        /// Print the daemon's JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Restart a device's driver process and give the fresh one the
    /// settings in force, as after a crash (the interface keeps its carrier;
    /// counted by understudyd's --max-restarts).
    Recover {
        /// The interface (e.g. us0) or the device's PCI address.
        device: String,
    },
    /// Replace a device's running driver with another build of it (live
    /// update), keeping the interface, its settings and its traffic.
    ///
    /// The new modules load and are checked (kernel ABI, CRCs, imports, the
    /// device's ID) in a new driver process while the old driver still
    /// serves; a refusal lists every problem and changes nothing. Then the
    /// old driver is stopped, the new one probes and is given the settings in
    /// force, and its frames follow once its link is up. If it fails, offers
    /// fewer features than the old one exposed, or dies within 5 s, the old
    /// version is started again with the same settings (rolled back). Waits
    /// until the update is over and prints its phases.
    Update {
        /// The interface (e.g. us0) or the device's PCI address.
        device: String,
        /// The new module(s), dependencies first, driver last.
        #[arg(long = "module", required_unless_present = "abi", conflicts_with = "abi")]
        modules: Vec<String>,
        /// Shorthand: the same module files of Debian ABI 6.1.0-N, from the
        /// lab's cache ($UNDERSTUDY_CACHE or ~/.cache/understudy/kernel).
        #[arg(long)]
        abi: Option<String>,
        /// Go on even if the new driver lacks features the old one exposed;
        /// the stack then sees the interface's features change.
        #[arg(long)]
        allow_feature_loss: bool,
        /// Print the daemon's JSON (with the update's record) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Move an interface to another device, usually with another driver,
    /// keeping its name, addresses, MAC, settings and open connections.
    ///
    /// The destination is checked while the old driver serves: it must be
    /// present, bound to vfio-pci and free, and its driver must load, probe
    /// it (on memory of its own) and offer the offloads and MTU the interface
    /// uses; otherwise nothing changes. Then the old driver is stopped, the
    /// new one probes the destination and is given the settings in force
    /// (the MAC included), its frames follow once its link is up, and
    /// gratuitous ARP / neighbour advertisements tell the network. If it
    /// fails within 5 s the interface goes back to the old device. The device
    /// left stays reserved as a standby. Waits until the move is over.
    Migrate {
        /// The interface (e.g. us0) or the PCI address of the device serving it.
        device: String,
        /// PCI address of the destination.
        #[arg(long)]
        to: String,
        /// The destination's driver module(s), dependencies first (one module
        /// gets its dependencies from modules.dep). Default: a standby's, or
        /// the module that claims the destination in the running driver's tree.
        #[arg(long = "module")]
        modules: Vec<String>,
        /// Print the daemon's JSON (with the move's record) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// End a device's driver, release the device and remove its interface.
    Stop {
        /// PCI address of the device.
        device: String,
    },
    /// What the checkers of a device run with `run --check` found.
    Check {
        #[command(subcommand)]
        command: CheckCommand,
    },
}

#[derive(Subcommand, Debug)]
enum CheckCommand {
    /// Print a checked device's findings -- kind, site in the module, how
    /// often, in which driver processes -- most frequent first, its
    /// verdicts, its checkers' event rate, and each driver process checked.
    /// Findings outlive restarts: a restarted driver's are added.
    ///
    /// Exit status: 0 no findings; 1 findings; 2 bad usage, the daemon is
    /// not reachable, or it refused (the device is not run or not checked).
    Report {
        /// The interface (e.g. us0) or the device's PCI address.
        device: String,
        /// Print the daemon's JSON: every finding with the checker's own
        /// detail (access, allocation, mapping, other access...).
        #[arg(long)]
        json: bool,
    },
}

/// The gate's modes (docs/checking.md, "The gate").
#[derive(Debug, Clone, Copy, ValueEnum)]
enum CheckMode {
    /// Device writes flow; findings are only reported.
    Triage,
    /// Device writes flow; a fatal verdict stops the driver before its next one.
    Permissive,
    /// Each device write waits until the checker approved everything before it.
    Stringent,
}

impl From<CheckMode> for GateMode {
    fn from(m: CheckMode) -> GateMode {
        match m {
            CheckMode::Triage => GateMode::Triage,
            CheckMode::Permissive => GateMode::Permissive,
            CheckMode::Stringent => GateMode::Stringent,
        }
    }
}

fn ask(socket: &PathBuf, request: &Request) -> Result<Response, String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        format!("cannot reach understudyd at {}: {e} (is it running? start it as root: understudyd)", socket.display())
    })?;
    let mut line = serde_json::to_string(request).expect("requests serialise");
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(|e| format!("talking to understudyd: {e}"))?;
    let mut reply = String::new();
    BufReader::new(&stream).read_line(&mut reply).map_err(|e| format!("talking to understudyd: {e}"))?;
    serde_json::from_str(&reply).map_err(|e| format!("understudyd answered something unreadable ({e}): {reply:?}"))
}

fn print_disk(disk: &DiskStatus, hugepages: bool) {
    if let Some(path) = &disk.path {
        println!("    disk {path}  driver {} ({})  {} bytes in {}-byte blocks  {} queue(s)  {}",
                 disk.driver_name.as_deref().unwrap_or("?"), disk.disk_name.as_deref().unwrap_or("?"), disk.size_bytes,
                 disk.logical_block_size, disk.queues, if disk.features.is_empty() { "no features".into() } else { disk.features.join(", ") });
    }
    let c = &disk.counts;
    println!("    reads {} ({} bytes)  writes {} ({} bytes)  flushes {}  discards {}  errors {}",
             c.reads, c.bytes_read, c.writes, c.bytes_written, c.flushes, c.discards, c.errors);
    println!("    {} acknowledged change(s) ({} bytes) kept until a flush; {} done again after handovers; {} request(s) \
              unanswered; arena in {}", disk.kept_changes, disk.kept_bytes, c.replayed, disk.unanswered,
             if hugepages { "2 MiB hugepages" } else { "base pages" });
}

fn print_device(d: &DeviceStatus) {
    let state = serde_json::to_value(d.driver.state).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
    let carrier = match d.disk {
        None => format!("  carrier {}", if d.net.carrier { "on" } else { "off" }),
        Some(_) => String::new(),
    };
    println!("{}  {} {}  {}  pid {}  up {:.1} s{carrier}",
             d.device, d.class.name(), d.ifname, state, d.driver.pid.map_or("-".into(), |p| p.to_string()), d.driver.uptime_s);
    if d.dma.dma_unconfined {
        println!("    DMA UNCONFINED: no IOMMU, uio_pci_generic; the driver can make its device reach any memory");
    }
    for m in &d.driver.modules {
        println!("    module {}  sha256 {}", m.path, m.sha256);
    }
    if let (Some(mac), Some(mtu)) = (&d.net.mac, d.net.mtu) {
        println!("    driver {}  mac {mac}  mtu {mtu} ({}..{})  features {:#x}", d.net.driver_name.as_deref().unwrap_or("?"),
                 d.net.min_mtu.unwrap_or(0), d.net.max_mtu.unwrap_or(0), d.net.features.unwrap_or(0));
        if !d.net.offloads.is_empty() {
            println!("    offloads {}", d.net.offloads.join(", "));
        }
    }
    if let Some(c) = &d.check {
        check::print_status(c);
    }
    if d.driver.warnings > 0 {
        println!("    {} WARN(s) from the driver", d.driver.warnings);
    }
    if d.driver.log_lines_suppressed > 0 {
        println!("    {} driver log lines dropped by the rate limit", d.driver.log_lines_suppressed);
    }
    match &d.disk {
        Some(disk) => print_disk(disk, d.dma.arena_in_hugepages),
        None => {
            let c = &d.net.counters;
            println!("    tx {} packets {} bytes ({} dropped)  rx {} packets {} bytes ({} dropped)",
                     c.tx_packets, c.tx_bytes, c.tx_dropped, c.rx_packets, c.rx_bytes, c.rx_dropped);
            println!("    pool {} of {} buffers free; arena in {}; {} TAP queue(s) for the driver", d.net.pool_free,
                     d.net.pool_buffers, if d.dma.arena_in_hugepages { "2 MiB hugepages" } else { "base pages" }, d.net.queues);
        }
    }
    if let Some(death) = &d.driver.death {
        // A refused LOAD quotes the driver's lines: under the reason, indented.
        println!("    died: {}", death.replace('\n', "\n          "));
    }
    for s in &d.handovers.standby {
        let modules = s.modules.iter().map(|m| m.path.as_str()).collect::<Vec<_>>().join(", ");
        println!("    standby {}  {modules}  offloads {}", s.device, if s.offloads.is_empty() { "none".into() } else { s.offloads.join(", ") });
    }
    for r in &d.handovers.updates {
        print!("    update ");
        print_update(r);
    }
    for r in &d.handovers.migrations {
        print!("    move ");
        print_update(r);
    }
    for r in &d.handovers.recoveries {
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        println!("    restarted after: {}\n      {}: stop {:.1} ms, {} {} ms, replay {} ms, link {} ms, first frame at {} ms, \
                  downtime {} ms, {} frame(s) given again",
                 r.cause, r.outcome, r.stop_ms, r.start.phase_name(), ms(r.start_ms), ms(r.replay_ms), ms(r.link_ms),
                 ms(r.first_packet_ms), ms(r.downtime_ms), r.tx_resubmitted);
    }
    if let Some(s) = &d.driver.device_stop {
        println!("    device stopped: bus mastering {}, interrupts {}, reset {}, IOMMU mappings {}",
                 if s.bus_master_off { "off" } else { "STILL ON" },
                 if s.irqs_disabled { "disabled" } else { "not all disabled" }, s.reset,
                 if d.dma.dma_unconfined { "none (no IOMMU)" } else if s.iommu_unmapped { "cleared" } else { "NOT cleared" });
    }
}

fn print_ethtool(r: &EthtoolReport) {
    if let Some(d) = &r.driver_info {
        println!("driver: {}\nversion: {}\nfirmware-version: {}\nbus-info: {}", d.driver, d.version, d.fw_version, d.bus_info);
    }
    if let Some(l) = &r.link {
        println!("Settings for {}:", r.ifname);
        println!("\tSpeed: {}", l.speed.map_or("Unknown!".to_string(), |s| format!("{s}Mb/s")));
        println!("\tDuplex: {}", l.duplex.as_deref().map_or("Unknown!".to_string(), |d| {
            let mut c = d.chars();
            c.next().map_or(String::new(), |f| f.to_uppercase().chain(c).collect())
        }));
        println!("\tPort: {}", match l.port {
            0 => "Twisted Pair".to_string(),
            1 => "AUI".to_string(),
            2 => "BNC".to_string(),
            3 => "FIBRE".to_string(),
            4 => "MII".to_string(),
            5 => "Direct Attach Copper".to_string(),
            p => format!("port type {p}"),
        });
        println!("\tAuto-negotiation: {}", if l.autoneg { "on" } else { "off" });
        println!("\tLink detected: {}", if l.link { "yes" } else { "no" });
    }
    if let Some(stats) = &r.stats {
        println!("NIC statistics:");
        stats.iter().for_each(|s| println!("     {}: {}", s.name, s.value));
    }
}

/// `--abi N`: the running driver's module files, taken from Debian ABI N's
/// tree in the lab's cache instead (each path from `lib/modules/<release>/` on).
fn modules_of_abi(socket: &PathBuf, device: &str, abi: &str) -> Result<Vec<String>, String> {
    let status = ask(socket, &Request::Status)?;
    let d = status.devices.iter().find(|d| d.device == device || d.ifname == device)
        .ok_or_else(|| format!("no device or interface {device} is run by understudyd"))?;
    let cache = std::env::var_os("UNDERSTUDY_CACHE").map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/understudy")))
        .ok_or("neither UNDERSTUDY_CACHE nor HOME is set")?;
    let release = format!("{abi}-amd64");
    let root = cache.join("kernel").join(&release).join("lib/modules").join(&release);
    d.driver.modules.iter().map(|m| {
        let inside = m.path.split_once("/lib/modules/").and_then(|(_, rest)| rest.split_once('/')).map(|(_, rel)| rel)
            .ok_or_else(|| format!("{} is not under a lib/modules/<release>/ tree: name the new module with --module", m.path))?;
        let path = root.join(inside);
        if !path.is_file() {
            return Err(format!("{} does not exist (is ABI {abi} in lab/lab.toml's update ABIs? `python3 -m lab setup` fetches them)",
                               path.display()));
        }
        Ok(path.display().to_string())
    }).collect()
}

fn print_update(r: &HandoverRecord) {
    let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    let names = |m: &Option<Vec<understudy_api::ModuleInfo>>| {
        m.iter().flatten().map(|m| m.path.as_str()).collect::<Vec<_>>().join(", ")
    };
    match (&r.from_device, &r.to_device) {
        (Some(from), Some(to)) => println!("{}: {from} ({}) -> {to} ({})", r.outcome, names(&r.from_modules), names(&r.to_modules)),
        _ => println!("{}: {} -> {}", r.outcome, names(&r.from_modules), names(&r.to_modules)),
    }
    if let Some(half) = &r.kernel_half {
        println!("  kernel half: {half}");
    }
    let load = r.load_ms.map_or(String::new(), |l| format!("load {l:.1} ms (while the old driver served), "));
    println!("  {load}stop {:.1} ms, {} {} ms, replay {} ms, link {} ms; \
              serving {} ms after the request, first frame at {} ms, downtime {} ms, {} frame(s) given again",
             r.stop_ms, r.start.phase_name(), ms(r.start_ms), ms(r.replay_ms), ms(r.link_ms),
             ms(r.serving_ms), ms(r.first_packet_ms), ms(r.downtime_ms), r.tx_resubmitted);
    if r.announced > 0 {
        println!("  announced with {} gratuitous ARP / neighbour advertisement(s)", r.announced);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (request, json) = match cli.command {
        Command::Update { device, modules, abi, allow_feature_loss, json } => {
            let modules = match abi {
                Some(abi) => match modules_of_abi(&cli.socket, &device, &abi) {
                    Ok(m) => m,
                    Err(e) => {
                        eprintln!("understudy: {e}");
                        return ExitCode::from(1);
                    }
                },
                None => modules,
            };
            (Request::Update { device, modules, allow_feature_loss }, json)
        }
        Command::Run { device, modules, ifname, cpu, poll_us, standby, check, no_iommu, queues } => {
            let standby = standby.into_iter().map(|s| match s.split_once('=') {
                Some((device, module)) => StandbyRequest { device: device.into(), modules: vec![module.into()] },
                None => StandbyRequest { device: s, modules: Vec::new() },
            }).collect();
            (Request::Run(RunRequest { device, modules, ifname, cpu, poll_us, standby, check: check.map(GateMode::from),
                                       no_iommu, queues }), false)
        }
        Command::Check { command: CheckCommand::Report { device, json } } => return check::report(&cli.socket, device, json),
        Command::Migrate { device, to, modules, json } => (Request::Migrate { device, to, modules }, json),
        Command::Status { json } => (Request::Status, json),
        Command::Ethtool { device, driver_info, link, stats, json } => {
            let all = !(driver_info || link || stats);
            let queries = EthtoolQueries { driver_info: driver_info || all, link: link || all, stats: stats || all };
            (Request::Ethtool { device, queries }, json)
        }
        Command::Stop { device } => (Request::Stop { device }, false),
        Command::Recover { device } => (Request::Recover { device }, false),
    };
    let response = match ask(&cli.socket, &request) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("understudy: {e}");
            return ExitCode::from(3);
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&response).expect("serialisable"));
    } else if let Some(e) = &response.error {
        eprintln!("understudy: {e}");
        response.handover.iter().for_each(print_update);
    } else {
        match &request {
            Request::Run(RunRequest { check: None, .. }) => response.devices.iter().for_each(|d| {
                match d.disk {
                    // The kernel names the disk once the driver has registered it.
                    Some(_) => println!("{}: driver process {} started; its disk appears as /dev/nbdN when the driver \
                                         registers it (`understudy status {}`)", d.device, d.driver.pid.unwrap_or(0), d.device),
                    None => println!("{}: driver process {} started, interface {}", d.device, d.driver.pid.unwrap_or(0), d.ifname),
                }
            }),
            Request::Run(RunRequest { check: Some(mode), .. }) => {
                for d in &response.devices {
                    let Some(c) = &d.check else {
                        // A daemon older than checking ignores the option: say so, never run unchecked silently.
                        eprintln!("understudy: {}: understudyd runs it UNCHECKED: it does not know --check (is it \
                                   older than this CLI?); `understudy stop {}` stops it", d.device, d.device);
                        return ExitCode::from(1);
                    };
                    println!("{}: driver process {} started, interface {}; checked ({mode}) by checker {}", d.device,
                             d.driver.pid.unwrap_or(0), d.ifname, c.checker_pid.map_or("-".into(), |p| p.to_string()));
                }
            }
            Request::Status if response.devices.is_empty() => println!("no devices"),
            Request::Status => response.devices.iter().for_each(print_device),
            Request::Ethtool { .. } => response.ethtool.iter().for_each(print_ethtool),
            Request::Stop { device } => println!("{device}: stopped and released"),
            Request::Recover { device } => println!("{device}: restarting its driver (see `understudy status`)"),
            Request::Update { .. } | Request::Migrate { .. } => response.handover.iter().for_each(print_update),
            Request::CheckReport { .. } => unreachable!("`check report` answers on its own"),
        }
    }
    let rolled_back = response.handover.as_ref().is_some_and(|r| matches!(r.outcome, HandoverOutcome::RolledBack(_)));
    match (response.ok, rolled_back) {
        (true, _) => ExitCode::SUCCESS,
        (false, true) => ExitCode::from(4),
        (false, false) => ExitCode::from(1),
    }
}
