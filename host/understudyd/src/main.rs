// SPDX-License-Identifier: GPL-2.0
//! understudyd: the trusted host daemon of understudy.
//!
//! For each device it runs, it owns the VFIO container, group and device, the
//! shared DMA arena and rings, and the TAP interface, and supervises one
//! untrusted driver process (docs/protocol.md). The `understudy` CLI talks to
//! it over a unix socket.

mod check;
mod class;
mod config;
mod fault;
mod handover;
mod os;
mod server;
mod status;
mod supervisor;
#[cfg(test)]
mod test_script;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::handover::policy::{AgentPolicy, OnExhausted};
use crate::handover::policy::RestartPolicy;
use crate::supervisor::watchdog::Detection;

const DEFAULT_DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../runtime/build/understudy-driver");
const DEFAULT_CHECKER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release/understudy-checker");

/// understudyd — runs unmodified Linux NIC drivers as supervised user-space processes.
///
/// Start it as root; then use `understudy run` to hand it a device bound to
/// vfio-pci. It creates the device's TAP interface, starts a driver process
/// for it and moves packets between the two. When a driver process dies, the
/// daemon stops the device, clears its IOMMU mappings and keeps the interface.
/// SIGTERM or SIGINT stops every driver, releases every device and removes the
/// interfaces. Log verbosity: RUST_LOG=debug|info|warn (default info).
///
/// A driver is alive while its control loop answers: each request must be
/// answered in time and an idle driver is sent a PING every interval. A
/// driver that misses a deadline is declared hung and handled like a dead
/// one (`understudy status` says "hung: no reply to PING within N ms"); so
/// is one that WARNs too often (--warn-storm).
///
/// `understudy run --check MODE` runs a device's every driver process under
/// a checker (--checker), on another CPU than the driver's when `run --cpu`
/// leaves one, which checks the module's memory accesses and approves its
/// device writes (docs/checking.md). A checker
/// that dies or hangs, or a fatal verdict, ends the driver, which is
/// restarted like a crashed one, with a fresh checker; a checked device gets no post-probe
/// template, so its restarts load and probe the driver again.
///
/// For debugging (docs/debugging.md): UNDERSTUDY_DRIVER_WRAPPER="valgrind
/// --tool=memcheck" starts every driver process under that command, and
/// UNDERSTUDY_PERF_MAP=1, passed on to them, makes them write perf's map of
/// the modules' functions.
///
/// Exit status: 0 after a clean shutdown, 1 if it could not start (bad
/// options or config, socket in use).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The unix socket the CLI connects to.
    #[arg(long, default_value = understudy_api::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// The driver-process executable started for each device (it receives the
    /// fds of docs/protocol.md as --control-fd, --device-fd, ... options).
    #[arg(long, default_value = DEFAULT_DRIVER)]
    driver: PathBuf,
    /// The checker executable started beside each driver process of a device
    /// run with `understudy run --check` (given --trace-fd and --cpu; it
    /// prints JSON lines the daemon reads: docs/checking.md).
    #[arg(long, default_value = DEFAULT_CHECKER)]
    checker: PathBuf,
    /// Devices to run at start (TOML: [[device]] tables with pci, modules
    /// and optional ifname, cpu and check). A device that cannot start is logged and
    /// skipped; a config that does not parse stops the daemon.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Send a PING after a driver has been idle this long.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    ping_interval_ms: u64,
    /// A PING not answered within this is a hung driver.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    ping_timeout_ms: u64,
    /// Any other request (OPEN, STOP, SET_*, ETHTOOL) not answered within this is a hung driver.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout_ms: u64,
    /// HELLO and PROBE (module loading and the driver's probe) not answered within this is a hung driver.
    #[arg(long, default_value_t = 60000, value_parser = clap::value_parser!(u64).range(1..))]
    probe_timeout_ms: u64,
    /// A driver with its link up that holds frames to send and completes none
    /// within this is a hung driver (the kernel's transmit timeout, from outside).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    tx_timeout_ms: u64,
    /// A driver that WARNs this many times within --warn-window-ms is failing
    /// and handled like a dead one (a WARN in its data path fires for every
    /// frame); fewer are only logged. 0: never.
    #[arg(long, default_value_t = 20)]
    warn_storm: u32,
    /// The window --warn-storm counts WARNs in.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    warn_window_ms: u64,
    /// Restart a device's driver process when it dies or hangs, at most this
    /// many times within --restart-window-s; then the interface is left down.
    /// 0: a dead driver stays dead.
    #[arg(long, default_value_t = 0)]
    max_restarts: u32,
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    restart_window_s: u64,
    /// Restart a driver by starting a new process that loads the modules and
    /// probes the device again, instead of forking it from the post-probe
    /// template (the default, docs/design.md §8). A driver whose probe
    /// keeps its interrupt, or that has no resume callback, is always
    /// restarted this way.
    #[arg(long)]
    cold_restarts: bool,
    /// When a driver died more often than --max-restarts allows: leave the
    /// interface down with the reason in `status` (down, the default), or
    /// keep restarting it, waiting 1 s, 2 s, 4 s, ... up to --retry-max-s
    /// between attempts (retry). Also `on_exhausted` in the config's [recovery].
    #[arg(long, value_enum)]
    on_exhausted: Option<OnExhausted>,
    /// The longest wait between attempts of --on-exhausted retry [default: 60].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    retry_max_s: Option<u64>,
    /// A program run after every recovery or update outcome (not waited for;
    /// its exit status is logged), with UNDERSTUDY_DEVICE, UNDERSTUDY_IFNAME,
    /// UNDERSTUDY_OUTCOME (recovered, failed, down, retrying; updated,
    /// rolled-back, refused), UNDERSTUDY_CAUSE, UNDERSTUDY_RECOVERY_COUNT and,
    /// when they apply, UNDERSTUDY_REASON, UNDERSTUDY_RESTART_MS and
    /// UNDERSTUDY_RETRY_IN_MS in its environment.
    /// Also `hook` in the config's [recovery].
    #[arg(long)]
    recovery_hook: Option<PathBuf>,
    /// Driver processes give up root once they hold their device, and run
    /// as user and group this number plus the device's PCI address
    /// (domain << 16 | bus << 8 | devfn): IDs no account has, one per
    /// device (docs/design.md §0, "The driver process's sandbox").
    #[arg(long, default_value_t = os::process::DEFAULT_DRIVER_UID_BASE, value_parser = clap::value_parser!(u32).range(65536..))]
    driver_uid_base: u32,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = Args::parse();
    let driver = std::fs::canonicalize(&args.driver).unwrap_or(args.driver);
    if !driver.exists() {
        log::warn!("the driver executable {} does not exist yet: `understudy run` will fail until it does \
                    (build it with `make -C runtime`, or pass --driver)", driver.display());
    }
    let checker = std::fs::canonicalize(&args.checker).unwrap_or(args.checker);
    let config = match &args.config {
        Some(path) => match config::load(path) {
            Ok(c) => c,
            Err(e) => {
                log::error!("{e}");
                return ExitCode::FAILURE;
            }
        },
        None => config::Config::default(),
    };
    let detection = Detection {
        ping_interval: Duration::from_millis(args.ping_interval_ms),
        ping: Duration::from_millis(args.ping_timeout_ms),
        request: Duration::from_millis(args.request_timeout_ms),
        probe: Duration::from_millis(args.probe_timeout_ms),
        tx: Duration::from_millis(args.tx_timeout_ms),
        warns: args.warn_storm,
        warn_window: Duration::from_millis(args.warn_window_ms),
    };
    let restarts = RestartPolicy {
        max: args.max_restarts,
        window: Duration::from_secs(args.restart_window_s),
        template: !args.cold_restarts,
    };
    let hook = args.recovery_hook.clone().or_else(|| config.recovery.hook.as_ref().map(PathBuf::from));
    if let Some(h) = &hook {
        if !h.is_file() {
            log::error!("the recovery hook {} is not a file", h.display());
            return ExitCode::FAILURE;
        }
    }
    let agent = AgentPolicy {
        on_exhausted: args.on_exhausted.or(config.recovery.on_exhausted).unwrap_or_default(),
        retry_max: Duration::from_secs(args.retry_max_s.or(config.recovery.retry_max_s).unwrap_or(60).max(1)),
        hook,
    };
    let driver = os::process::DriverCommand { binary: driver, uid_base: args.driver_uid_base };
    match server::serve(&args.socket, driver, checker, detection, restarts, agent, config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
