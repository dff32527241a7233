// SPDX-License-Identifier: GPL-2.0
//! understudyd: the trusted host daemon of understudy.
//!
//! For each device it runs, it owns the VFIO container, group and device, the
//! shared DMA arena and rings, and the TAP interface, and supervises one
//! untrusted driver process (docs/protocol.md). The `understudy` CLI talks to
//! it over a unix socket.

mod process;
mod server;
mod supervisor;
mod tap;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

const DEFAULT_DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../runtime/build/understudy-driver");

/// understudyd — runs unmodified Linux NIC drivers as supervised user-space processes.
///
/// Start it as root; then use `understudy run` to hand it a device bound to
/// vfio-pci. It creates the device's TAP interface, starts a driver process
/// for it and moves packets between the two. When a driver process dies, the
/// daemon stops the device, clears its IOMMU mappings and keeps the interface.
/// SIGTERM or SIGINT stops every driver, releases every device and removes the
/// interfaces. Log verbosity: RUST_LOG=debug|info|warn (default info).
///
/// Exit status: 0 after a clean shutdown, 1 if it could not start.
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
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = Args::parse();
    let driver = std::fs::canonicalize(&args.driver).unwrap_or(args.driver);
    if !driver.exists() {
        log::warn!("the driver executable {} does not exist yet: `understudy run` will fail until it does \
                    (build it with `make -C runtime`, or pass --driver)", driver.display());
    }
    match server::serve(&args.socket, driver) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
