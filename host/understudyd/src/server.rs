// SPDX-License-Identifier: GPL-2.0
//! The CLI's socket: one JSON request per connection, one JSON response.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use log::{info, warn};
use sha2::{Digest, Sha256};
use understudy_api::{ModuleInfo, Request, Response};
use understudy_protocol::{MAX_MODULES, PATH_MAX};
use understudy_shm::Geometry;
use understudy_vfio::PciAddress;

use crate::config::Config;
use crate::placement::Placement;
use crate::supervisor::{self, Handle, Setup};
use crate::policy::AgentPolicy;
use crate::recovery::RestartPolicy;
use crate::watchdog::Detection;

/// A device is `Starting` while `run` sets it up: a second `run` is refused
/// from the first moment, not only once the first has finished.
enum Slot {
    Starting,
    Running(Handle),
}

struct Daemon {
    driver: PathBuf,
    detection: Detection,
    restarts: RestartPolicy,
    agent: AgentPolicy,
    devices: Mutex<BTreeMap<PciAddress, Slot>>,
}

/// Serves the CLI on `socket`; first starts the devices of `config`. A device
/// of the config that cannot start is logged and left out, and the daemon
/// serves the others (`understudy status` shows which run).
pub fn serve(socket: &Path, driver: PathBuf, detection: Detection, restarts: RestartPolicy, agent: AgentPolicy,
             config: Config) -> Result<(), String> {
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
    let daemon = Arc::new(Daemon { driver, detection, restarts, agent, devices: Mutex::new(BTreeMap::new()) });
    spawn_signal_handler(daemon.clone(), socket.to_path_buf())?;
    for d in config.devices {
        match daemon.run(&d.pci, &d.modules, d.ifname, d.cpu) {
            Ok(status) => info!("{}: started from the config, interface {}", status.device, status.ifname),
            Err(e) => log::error!("{}: the config's device could not start: {e}. The daemon goes on without it; \
                                   fix the cause and `understudy run` it", d.pci),
        }
    }
    info!("understudyd listening on {} (driver executable {})", socket.display(), daemon.driver.display());
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
            for (_, slot) in devices {
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
            Request::Run { device, modules, ifname, cpu } => match self.run(&device, &modules, ifname, cpu) {
                Ok(status) => Response::ok(vec![status]),
                Err(e) => {
                    warn!("run {device}: refused: {e}");
                    Response::error(e)
                }
            },
            Request::Status => {
                let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
                Response::ok(devices.values().filter_map(|s| match s {
                    Slot::Running(h) => Some(h.status()),
                    Slot::Starting => None,
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
                match update {
                    Ok(record) if record.outcome == "updated" => Response { handover: Some(record), ..Response::ok(Vec::new()) },
                    Ok(record) => Response { handover: Some(record.clone()), ..Response::error(format!("{device}: {}", record.outcome)) },
                    Err(e) => {
                        warn!("update {device}: refused: {e}");
                        Response::error(e)
                    }
                }
            }
        }
    }

    fn run(&self, device: &str, modules: &[String], ifname: Option<String>, cpu: Option<u32>)
           -> Result<understudy_api::DeviceStatus, String> {
        let addr: PciAddress = device.parse().map_err(|e: understudy_vfio::VfioError| e.to_string())?;
        let placement = cpu.map(Placement::on).transpose()?;
        let infos = module_infos(modules)?;
        if !self.driver.is_file() {
            return Err(format!("the driver executable {} does not exist (build it with `make -C runtime`, or start understudyd with --driver)", self.driver.display()));
        }
        let ifname = {
            let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
            if devices.contains_key(&addr) {
                return Err(format!("{addr} is already run by this understudyd (see `understudy status`; `understudy stop {addr}` releases it)"));
            }
            let ifname = match ifname {
                Some(name) => name,
                None => (0..).map(|i| format!("us{i}")).find(|n| !Path::new("/sys/class/net").join(n).exists()).expect("a free name"),
            };
            devices.insert(addr.clone(), Slot::Starting);
            ifname
        };
        let setup = Setup {
            device: addr.clone(),
            modules: infos,
            ifname,
            driver_binary: self.driver.clone(),
            placement,
            geometry: Geometry::default(),
            detection: self.detection,
            restarts: self.restarts,
            agent: self.agent.clone(),
        };
        let result = supervisor::start(setup);
        let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(handle) => {
                let status = handle.status();
                devices.insert(addr, Slot::Running(handle));
                Ok(status)
            }
            Err(e) => {
                devices.remove(&addr);
                Err(e)
            }
        }
    }

    /// The device named by its PCI address or its interface.
    fn requester_for(&self, name: &str) -> Result<supervisor::Requester, String> {
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        devices
            .iter()
            .find_map(|(addr, slot)| match slot {
                Slot::Running(h) if addr.to_string() == name || h.status().ifname == name => Some(h.requester()),
                _ => None,
            })
            .ok_or_else(|| format!("no device or interface {name} is run by this understudyd (see `understudy status`)"))
    }

    fn stop(&self, device: &str) -> Result<(), String> {
        let addr: PciAddress = device.parse().map_err(|e: understudy_vfio::VfioError| e.to_string())?;
        let slot = {
            let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
            match devices.get(&addr) {
                None => return Err(format!("{addr} is not run by this understudyd")),
                Some(Slot::Starting) => return Err(format!("{addr} is still starting; try again")),
                Some(Slot::Running(_)) => devices.remove(&addr).expect("present"),
            }
        };
        if let Slot::Running(h) = slot {
            h.stop();
        }
        Ok(())
    }
}
