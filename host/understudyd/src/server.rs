// SPDX-License-Identifier: GPL-2.0
//! The CLI's socket: one JSON request per connection, one JSON response.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use log::{info, warn};
use sha2::{Digest, Sha256};
use understudy_api::{DeviceClass, HandoverOutcome, ModuleInfo, Request, Response, RunRequest};
use understudy_protocol::{check_queue_count, MAX_MODULES, PATH_MAX};
use understudy_shm::Geometry;
use understudy_vfio::PciAddress;

use crate::config::Config;
use crate::handover::Driver;
use crate::os::{device, modtree};
use crate::os::placement::Placement;
use crate::os::process::DriverCommand;
use crate::supervisor::{self, Handle, Setup};
use crate::handover::policy::AgentPolicy;
use crate::handover::policy::RestartPolicy;
use crate::supervisor::watchdog::Detection;

/// An interface is `Starting` while `run` sets it up: a second `run` of its
/// devices is refused from the first moment, not only once the first has
/// finished. A running one is found by its interface or its devices, which a
/// move changes.
enum Slot {
    Starting { devices: Vec<PciAddress> },
    Running(Handle),
}

impl Slot {
    /// The interface that uses `device` (serving it, or holding it as a standby).
    fn uses(&self, device: &PciAddress) -> Option<String> {
        match self {
            Slot::Starting { devices } => devices.contains(device).then(|| "an interface being set up".into()),
            Slot::Running(h) => {
                let st = h.status();
                let name = device.as_str();
                // A parked interface names the device it had, which the kernel has taken back.
                let serves = st.device == name && st.driver.state != understudy_api::DriverState::Parked;
                (serves || st.handovers.standby.iter().any(|s| s.device == name)).then_some(st.ifname)
            }
        }
    }

    /// Whether `name` is this interface or the device serving it.
    fn is(&self, name: &str) -> bool {
        matches!(self, Slot::Running(h) if { let st = h.status(); st.device == name || st.ifname == name })
    }
}

struct Daemon {
    driver: DriverCommand,
    /// `understudyd --checker`: for `run --check`.
    checker: PathBuf,
    detection: Detection,
    restarts: RestartPolicy,
    agent: AgentPolicy,
    devices: Mutex<Vec<Slot>>,
}

/// Serves the CLI on `socket`; first starts the devices of `config`. A device
/// of the config that cannot start is logged and left out, and the daemon
/// serves the others (`understudy status` shows which run).
pub fn serve(socket: &Path, driver: DriverCommand, checker: PathBuf, detection: Detection, restarts: RestartPolicy,
             agent: AgentPolicy, config: Config) -> Result<(), String> {
    if UnixStream::connect(socket).is_ok() {
        return Err(format!("another understudyd already answers on {}", socket.display()));
    }
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let _ = std::fs::remove_file(socket); // a stale socket of a daemon that died
    let listener = UnixListener::bind(socket).map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
    // Only root may drive devices.
    let _ = std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600));
    let daemon = Arc::new(Daemon { driver, checker, detection, restarts, agent, devices: Mutex::new(Vec::new()) });
    spawn_signal_handler(daemon.clone(), socket.to_path_buf())?;
    for d in config.devices {
        let pci = d.pci.clone();
        match daemon.run(d.into_request()) {
            Ok(status) => info!("{}: started from the config, interface {}", status.device, status.ifname),
            Err(e) => log::error!("{}: the config's device could not start: {e}. The daemon goes on without it; \
                                   fix the cause and `understudy run` it", pci),
        }
    }
    info!("understudyd listening on {} (driver executable {})", socket.display(), daemon.driver.binary.display());
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let d = daemon.clone();
                let _ = std::thread::Builder::new().name("cli".into()).spawn(move || d.serve_client(stream));
            }
            Err(e) => warn!("accept on {}: {e}", socket.display()),
        }
    }
    Ok(())
}

/// SIGTERM/SIGINT: stop every device (drivers ended, devices released,
/// interfaces removed), remove the socket, exit 0.
fn spawn_signal_handler(daemon: Arc<Daemon>, socket: PathBuf) -> Result<(), String> {
    // SAFETY: signal-mask manipulation before any other thread exists, so
    // every thread inherits the mask and only sigwait sees these signals.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `set` is ours and initialised by sigemptyset first.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut sig = 0;
            // SAFETY: waits for one of the blocked signals.
            unsafe { libc::sigwait(&set, &mut sig) };
            info!("signal {sig}: stopping every device");
            let devices = std::mem::take(&mut *daemon.devices.lock().unwrap_or_else(|p| p.into_inner()));
            for slot in devices {
                if let Slot::Running(h) = slot {
                    h.stop();
                }
            }
            let _ = std::fs::remove_file(&socket);
            std::process::exit(0);
        })
        .map(drop)
        .map_err(|e| format!("cannot start the signal thread: {e}"))
}

fn sha256_file(path: &Path) -> io::Result<String> {
    let mut hasher = Sha256::new();
    io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The modules, dependencies first, as the driver process is given them:
/// absolute paths, each with its sha256 (so `status` says which build runs).
fn module_infos(modules: &[String]) -> Result<Vec<ModuleInfo>, String> {
    if modules.is_empty() || modules.len() > MAX_MODULES {
        return Err(format!("give 1 to {MAX_MODULES} modules (dependencies first), not {}", modules.len()));
    }
    modules.iter().map(|m| {
        let path = std::fs::canonicalize(m).map_err(|e| format!("module {m}: {e}"))?;
        let shown = path.display().to_string();
        if shown.len() >= PATH_MAX {
            return Err(format!("module path {shown} is longer than {} bytes", PATH_MAX - 1));
        }
        let sha256 = sha256_file(&path).map_err(|e| format!("module {shown}: {e}"))?;
        Ok(ModuleInfo { path: shown, sha256 })
    }).collect()
}

impl Daemon {
    fn serve_client(&self, stream: UnixStream) {
        let mut line = String::new();
        let response = match BufReader::new(&stream).read_line(&mut line) {
            Ok(_) => match serde_json::from_str::<Request>(&line) {
                Ok(request) => self.handle(request),
                Err(e) => Response::error(format!("bad request: {e}")),
            },
            Err(e) => Response::error(format!("bad request: {e}")),
        };
        let mut out = serde_json::to_string(&response).expect("responses serialise");
        out.push('\n');
        let _ = (&stream).write_all(out.as_bytes());
    }

    fn handle(&self, request: Request) -> Response {
        match request {
            Request::Run(run) => match (run.device.clone(), self.run(run)) {
                (_, Ok(status)) => Response::ok(vec![status]),
                (device, Err(e)) => {
                    warn!("run {device}: refused: {e}");
                    Response::error(e)
                }
            },
            Request::Status => {
                let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
                Response::ok(devices.iter().filter_map(|s| match s {
                    Slot::Running(h) => Some(h.status()),
                    Slot::Starting { .. } => None,
                }).collect())
            }
            Request::Ethtool { device, queries } => match self.requester_for(&device) {
                Ok(requester) => match requester.ethtool(queries) {
                    Ok(report) => Response { ethtool: Some(report), ..Response::ok(Vec::new()) },
                    Err(e) => Response::error(e),
                },
                Err(e) => Response::error(e),
            },
            Request::Recover { device } => match self.requester_for(&device).and_then(|r| r.recover()) {
                Ok(()) => Response::ok(Vec::new()),
                Err(e) => Response::error(e),
            },
            Request::Stop { device } => match self.stop(&device) {
                Ok(()) => Response::ok(Vec::new()),
                Err(e) => Response::error(e),
            },
            Request::Update { device, modules, allow_feature_loss } => {
                let update = module_infos(&modules)
                    .and_then(|infos| self.requester_for(&device).map(|r| (r, infos)))
                    .and_then(|(requester, infos)| requester.update(infos, allow_feature_loss));
                handover_response("update", &device, HandoverOutcome::Updated, update)
            }
            Request::Migrate { device, to, modules } => {
                let moved = self.migrate(&device, &to, &modules);
                handover_response("migrate", &device, HandoverOutcome::Moved, moved)
            }
            Request::CheckReport { device } => match self.check_report(&device) {
                Ok(report) => Response { check: Some(report), ..Response::ok(Vec::new()) },
                Err(e) => Response::error(e),
            },
        }
    }

    fn run(&self, request: RunRequest) -> Result<understudy_api::DeviceStatus, String> {
        let RunRequest { device, modules, ifname, cpu, poll_us, standby, check, no_iommu, queues } = request;
        let addr = parse_address(&device)?;
        let queues = queues.unwrap_or(1);
        check_queue_count(queues.into()).map_err(|e| format!("--queues: {e}"))?;
        if no_iommu && (check.is_some() || !standby.is_empty()) {
            // A checker relates DMA to IOVAs, and a standby is probed on an arena of its own.
            return Err("--no-iommu goes with neither --check nor --standby".into());
        }
        if poll_us.is_some() && cpu.is_none() {
            // A polling thread keeps its CPU busy: only one given to the driver.
            return Err("--poll-us goes with --cpu: the TX thread polls on the driver's own CPU".into());
        }
        let placement = cpu.map(|cpu| Placement::on(cpu)?.polling(poll_us)).transpose()?;
        let class = device::device_class(&addr).transpose()?.unwrap_or(DeviceClass::Net);
        if class == DeviceClass::Block && ifname.is_some() {
            return Err(format!("{addr} is a disk: --ifname names a network interface, and the kernel names the disk (nbdN)"));
        }
        let infos = module_infos(&given_chain(&modules, &addr))?;
        let standby = standby.iter().map(|s| {
            let device = parse_address(&s.device)?;
            if device == addr {
                return Err(format!("standby {device} is the device itself"));
            }
            let modules = resolve_modules(&s.modules, &infos, &device)?;
            Ok(Driver { device, modules: module_infos(&modules)? })
        }).collect::<Result<Vec<_>, String>>()?;
        if !self.driver.binary.is_file() {
            return Err(format!("the driver executable {} does not exist (build it with `make -C runtime`, or start understudyd with --driver)", self.driver.binary.display()));
        }
        if check.is_some() && !self.checker.is_file() {
            return Err(format!("--check: the checker executable {} does not exist (build it with `make -C host`, \
                                or start understudyd with --checker)", self.checker.display()));
        }
        let ifname = {
            let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
            let claimed = std::iter::once(&addr).chain(standby.iter().map(|d| &d.device));
            if let Some((device, user)) = claimed.filter_map(|d| devices.iter().find_map(|s| s.uses(d)).map(|u| (d, u))).next() {
                return Err(format!("{device} is already used by this understudyd ({user}; see `understudy status`, \
                                    `understudy stop` releases it)"));
            }
            let ifname = match (ifname, class) {
                (Some(name), _) => name,
                // The kernel names the disk (`nbdN`) when it is connected.
                (None, DeviceClass::Block) => String::new(),
                (None, DeviceClass::Net) => {
                    (0..).map(|i| format!("us{i}")).find(|n| !Path::new("/sys/class/net").join(n).exists()).expect("a free name")
                }
            };
            devices.push(Slot::Starting { devices: std::iter::once(addr.clone()).chain(standby.iter().map(|d| d.device.clone())).collect() });
            ifname
        };
        let setup = Setup {
            device: addr.clone(),
            class,
            modules: infos,
            ifname,
            driver: self.driver.clone(),
            placement,
            geometry: match class {
                DeviceClass::Net => Geometry::default(),
                DeviceClass::Block => Geometry::block_default(),
            },
            detection: self.detection,
            restarts: self.restarts,
            agent: self.agent.clone(),
            standby,
            check,
            checker_binary: self.checker.clone(),
            no_iommu,
            queues,
        };
        let result = supervisor::start(setup);
        let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        let starting = devices.iter().position(|s| matches!(s, Slot::Starting { devices } if devices[0] == addr))
            .expect("its slot");
        match result {
            Ok(handle) => {
                let status = handle.status();
                devices[starting] = Slot::Running(handle);
                Ok(status)
            }
            Err(e) => {
                devices.remove(starting);
                Err(e)
            }
        }
    }

    /// `migrate`: the destination must not be another interface's; the
    /// modules are the caller's, else the standby's, else the module tree's.
    fn migrate(&self, device: &str, to: &str, modules: &[String]) -> Result<understudy_api::HandoverRecord, String> {
        let to = parse_address(to)?;
        let status = self.status_of(device)?;
        // Absent, or bound to a kernel driver: said before anything else is looked up.
        understudy_vfio::check_device(Path::new(understudy_vfio::SYSFS_PCI_DEVICES), &to)
            .map_err(|e| format!("the destination cannot be taken: {e}"))?;
        let standby = status.handovers.standby.iter().find(|s| s.device == to.as_str());
        let infos = match (modules.is_empty(), standby) {
            (true, Some(s)) => s.modules.clone(),
            _ => module_infos(&resolve_modules(modules, &status.driver.modules, &to)?)?,
        };
        if standby.is_none() {
            let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(user) = devices.iter().find_map(|s| s.uses(&to)) {
                return Err(format!("{to} is already used by this understudyd ({user})"));
            }
        }
        self.requester_for(device)?.migrate(to, infos)
    }

    fn check_report(&self, name: &str) -> Result<understudy_api::CheckReport, String> {
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        match devices.iter().find(|s| s.is(name)) {
            Some(Slot::Running(h)) => h.check_report(),
            _ => Err(not_run(name)),
        }
    }

    fn status_of(&self, name: &str) -> Result<understudy_api::DeviceStatus, String> {
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        devices.iter().find(|s| s.is(name)).and_then(|s| match s {
            Slot::Running(h) => Some(h.status()),
            Slot::Starting { .. } => None,
        }).ok_or_else(|| not_run(name))
    }

    /// The device named by its PCI address or its interface.
    fn requester_for(&self, name: &str) -> Result<supervisor::Requester, String> {
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        devices.iter().find(|s| s.is(name)).and_then(|s| match s {
            Slot::Running(h) => Some(h.requester()),
            Slot::Starting { .. } => None,
        }).ok_or_else(|| not_run(name))
    }

    fn stop(&self, device: &str) -> Result<(), String> {
        let slot = {
            let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
            if let Ok(addr) = parse_address(device) {
                if devices.iter().any(|s| matches!(s, Slot::Starting { devices } if devices[0] == addr)) {
                    return Err(format!("{addr} is still starting; try again"));
                }
            }
            let at = devices.iter().position(|s| s.is(device)).ok_or_else(|| not_run(device))?;
            devices.remove(at)
        };
        if let Slot::Running(h) = slot {
            h.stop();
        }
        Ok(())
    }
}

fn parse_address(device: &str) -> Result<PciAddress, String> {
    device.parse().map_err(|e: understudy_vfio::VfioError| e.to_string())
}

fn not_run(name: &str) -> String {
    format!("no device or interface {name} is run by this understudyd (see `understudy status`)")
}

/// The modules for `device`: `given` (given_chain), or if none, the one that
/// claims the device in the module tree of `running` (the interface's
/// driver today).
fn resolve_modules(given: &[String], running: &[ModuleInfo], device: &PciAddress) -> Result<Vec<String>, String> {
    match given {
        [] => {
            let driver = running.last().ok_or("no running module to find a module tree from")?;
            modtree::for_device(&modtree::tree_of(Path::new(&driver.path))?, device.as_str())
        }
        given => Ok(given_chain(given, device)),
    }
}

/// The chain a user's modules make for `device`: one module with its
/// dependencies from its tree's modules.dep, after its transport's chain
/// if it is not a PCI driver (modtree::for_driver); one outside a module
/// tree, or several, as given.
fn given_chain(given: &[String], device: &PciAddress) -> Vec<String> {
    match given {
        [one] => modtree::for_driver(Path::new(one), device.as_str()).unwrap_or_else(|_| vec![one.clone()]),
        many => many.to_vec(),
    }
}

/// The answer to `update` or `migrate` (`what`): ok with the record if its
/// outcome is `done`, else an error that carries the record.
fn handover_response(what: &str, device: &str, done: HandoverOutcome,
                     result: Result<understudy_api::HandoverRecord, String>) -> Response {
    match result {
        Ok(record) if record.outcome == done => Response { handover: Some(record), ..Response::ok(Vec::new()) },
        Ok(record) => Response { handover: Some(record.clone()), ..Response::error(format!("{device}: {}", record.outcome)) },
        Err(e) => {
            warn!("{what} {device}: refused: {e}");
            Response::error(e)
        }
    }
}
