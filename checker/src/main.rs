// SPDX-License-Identifier: GPL-2.0
//! understudy-checker: checks a driver's trace and approves it at the gate.
//!
//! understudyd creates the trace region, passes it as an inherited file
//! descriptor, and reads this process's stdout, one JSON object a line
//! (checker/README.md, "Output"). Logs go to stderr. Exit codes: 0 when
//! told to stop (SIGTERM, SIGINT), 2 when the region or the trace breaks the
//! contract (nothing after that point is approved), 1 when the environment
//! fails (a bad descriptor, stdout closed).

use std::fs::File;
use std::os::fd::{FromRawFd, RawFd};
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use understudy_checker::engine::{Checkers, Engine};
use understudy_checker::gate::Gate;
use understudy_checker::region::Region;
use understudy_checker::report::{Kind, Reporter};
use understudy_checker::record::Recorder;
use understudy_checker::symbols::Symbols;
use understudy_checker::trace::TRACE_REGION_SIZE;

/// How often a progress line is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// The longest sleep on an empty ring: how late a signal may be noticed if
/// it arrives between the check and the sleep.
const IDLE_WAIT: Duration = Duration::from_millis(200);
/// Events checked between two looks at the signal flag and the clock.
const BATCH: u64 = 1 << 16;
/// While the driver is busy, an empty ring is a pause, not idleness: the
/// checker naps this long, up to NAPS times, without asking to be woken,
/// so that the driver pays no wake-up syscall per batch (the ring holds a
/// second of events); only then does it sleep until woken.
const NAP: Duration = Duration::from_micros(500);
const NAPS: u32 = 20;

#[derive(Parser)]
#[command(name = "understudy-checker", version,
          about = "Checks the trace of a rewritten driver module and approves its device I/O (checker/README.md)")]
struct Args {
    /// The trace region (a memfd of US_TRACE_REGION_SIZE bytes), inherited from understudyd.
    #[arg(long, value_name = "N")]
    trace_fd: RawFd,
    /// Pin the checker to this CPU (not the driver's).
    #[arg(long, value_name = "C")]
    cpu: Option<usize>,
    /// The finding kinds that stop the driver, replacing the defaults; `none` for none
    /// (UNDERSTUDY_CHECKER_FATAL reaches here from understudyd's environment).
    #[arg(long, value_name = "KIND,...", value_delimiter = ',', env = "UNDERSTUDY_CHECKER_FATAL")]
    fatal: Option<Vec<String>>,
    /// Run only these of memory, race and dma (to measure what each costs);
    /// understudyd passes its environment, so UNDERSTUDY_CHECKERS reaches here.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',', env = "UNDERSTUDY_CHECKERS",
          default_value = "memory,race,dma")]
    checkers: Vec<String>,
    /// Also write every event checked, with the region's header and sites, to
    /// FILE, for replaying off-line (examples/replay.rs); UNDERSTUDY_CHECKER_RECORD
    /// reaches here from understudyd's environment.
    #[arg(long, value_name = "FILE", env = "UNDERSTUDY_CHECKER_RECORD")]
    record: Option<std::path::PathBuf>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    // No SA_RESTART: a futex wait returns at once with EINTR.
    let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::empty(), SigSet::empty());
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { sigaction(signal, &action) }.expect("sigaction with a valid signal");
    }
}

fn fatal_kinds(names: Option<Vec<String>>) -> Result<Vec<Kind>, String> {
    let Some(names) = names else {
        return Ok(Kind::ALL.iter().copied().filter(|k| k.fatal_by_default()).collect());
    };
    names.iter().filter(|n| !n.is_empty() && *n != "none").map(|n| Kind::from_name(n).ok_or_else(|| {
        let all: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
        format!("--fatal: unknown finding kind {n:?}; the kinds are {}", all.join(", "))
    })).collect()
}

fn pin(cpu: usize) -> Result<(), String> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|e| format!("--cpu {cpu}: {e}"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| format!("cannot pin the checker to CPU {cpu}: {e}; give a CPU this process may use"))
}

/// The inherited region, mapped. Warns if the driver process could shrink
/// it: a shrunk mapping kills the checker with SIGBUS.
fn open_region(fd: RawFd) -> Result<Region, String> {
    // SAFETY: F_GETFD only asks whether the descriptor is open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(format!("--trace-fd {fd} is not an open file descriptor; understudyd must pass the region's memfd"));
    }
    // SAFETY: the descriptor is open and this process owns it from here on.
    let file = unsafe { File::from_raw_fd(fd) };
    let size = file.metadata().map_err(|e| format!("--trace-fd {fd}: {e}"))?.len();
    if size != TRACE_REGION_SIZE {
        log::warn!("the trace region is {size} bytes, not US_TRACE_REGION_SIZE {TRACE_REGION_SIZE}");
    }
    // SAFETY: F_GET_SEALS reads the seals of a memfd, or fails on other files.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        log::warn!("the trace region is not sealed against shrinking (F_SEAL_SHRINK): the driver process could end the checker with SIGBUS");
    }
    Region::map(&file).map_err(|e| format!("cannot map the trace region: {e}"))
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = Args::parse();
    let fatal = match fatal_kinds(args.fatal) {
        Ok(kinds) => kinds,
        Err(e) => {
            log::error!("{e}");
            return ExitCode::from(2);
        }
    };
    let checkers = match Checkers::from_names(&args.checkers) {
        Ok(checkers) => checkers,
        Err(e) => {
            log::error!("--checkers: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(cpu) = args.cpu {
        if let Err(e) = pin(cpu) {
            log::error!("{e}");
            return ExitCode::from(1);
        }
    }
    let region = match open_region(args.trace_fd) {
        Ok(region) => region,
        Err(e) => {
            log::error!("{e}");
            return ExitCode::from(1);
        }
    };
    install_signal_handlers();
    run(&region, fatal, checkers, args.record.as_deref())
}

/// Prints a summary saying why nothing was checked, and fails with 2.
fn refuse(fatal: Vec<Kind>, what: &str, error: &str) -> ExitCode {
    log::error!("{what}: {error}; nothing is approved. The driver process wrote a bad trace region: \
                 check the runtime's trace writer against include/understudy/trace.h");
    let symbols = Rc::new(Symbols::load(&[], Vec::new()));
    Reporter::new(Box::new(std::io::stdout()), symbols, fatal).summary(0, None, Some(&format!("{what}: {error}")), None);
    ExitCode::from(2)
}

fn run(region: &Region, fatal: Vec<Kind>, checkers: Checkers, record: Option<&std::path::Path>) -> ExitCode {
    if let Err(e) = region.claim() {
        return refuse(fatal, "the region's checker line", &e.to_string());
    }
    log::info!("waiting for the driver process to fill in the trace region");
    let mut waited = Instant::now();
    let ready = region.wait_ready(|| {
        if waited.elapsed() > Duration::from_secs(30) {
            log::info!("still waiting for the driver process to set `ready` in the trace region");
            waited = Instant::now();
        }
        STOP.load(Ordering::SeqCst)
    });
    let config = match ready.then(|| region.config()).transpose() {
        Err(e) => return refuse(fatal, "the trace region's header", &e.to_string()),
        Ok(None) => {
            let symbols = Rc::new(Symbols::load(&[], Vec::new()));
            Reporter::new(Box::new(std::io::stdout()), symbols, fatal).summary(0, None, None, None);
            return ExitCode::SUCCESS;
        }
        Ok(Some(config)) => config,
    };
    log::info!("checking {} ({} sites, ring of {} events, {:?} gate, checkers: {})",
               config.modules.iter().map(|m| m.path.as_str()).collect::<Vec<_>>().join(", "),
               config.sites.len(), config.ring_entries, config.gate_mode, checkers.names().join(","));
    let symbols = Rc::new(Symbols::load(&config.modules, config.sites.clone()));
    let mut engine = Engine::new(&config, symbols.clone(), Reporter::new(Box::new(std::io::stdout()), symbols, fatal))
        .only(checkers);
    let mut gate = Gate::new(region, &config);
    if let Some(path) = record {
        match Recorder::create(path, region) {
            Ok(r) => {
                log::info!("recording every event checked to {}", path.display());
                gate = gate.record(r);
            }
            Err(e) => log::error!("cannot record to {}: {e}; checking without recording", path.display()),
        }
    }
    let mut last_progress = Instant::now();
    let mut error = None;
    let mut reported_verdict = false;
    let mut naps = 0;
    while !STOP.load(Ordering::SeqCst) {
        match gate.poll(&mut engine, BATCH) {
            Ok(0) if naps < NAPS && !gate.producer_waits() => {
                naps += 1;
                std::thread::sleep(NAP);
            }
            Ok(0) => gate.wait(IDLE_WAIT),
            Ok(_) => naps = 0,
            Err(e) => {
                log::error!("the trace breaks the contract: {e}; event {} and everything after it stay unapproved",
                            gate.checked());
                error = Some(e.to_string());
                break;
            }
        }
        if let (Some(at), false) = (gate.verdict_at(), reported_verdict) {
            log::warn!("fatal finding at event {}: approval stops there; the driver must be stopped", at - 1);
            reported_verdict = true;
        }
        if last_progress.elapsed() >= PROGRESS_EVERY {
            engine.progress(gate.checked());
            last_progress = Instant::now();
        }
    }
    // Told to stop (the driver has ended): what it published before it ended is checked too,
    // so that a finding in its last moments is reported.
    while error.is_none() {
        match gate.poll(&mut engine, BATCH) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => error = Some(e.to_string()),
        }
    }
    if let Err(e) = gate.finish_recording() {
        log::error!("the recording's last events were not written: {e}");
    }
    engine.summary(gate.checked(), gate.verdict_at(), error.as_deref());
    if error.is_some() { ExitCode::from(2) } else { ExitCode::SUCCESS }
}
