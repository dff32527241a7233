// SPDX-License-Identifier: GPL-2.0
//! A successor that loads while its predecessor serves (docs/live-update.md,
//! docs/migration.md). On the serving device it can only LOAD: the modules
//! are checked (ABI, CRCs, imports, the device's ids) and nothing else is
//! touched. On another device -- a move's destination, a declared standby --
//! it also probes that device on scratch memory of its own: the probe says
//! what the driver offers there before anything stops. Either way the
//! process is not the successor's yet: an update's is kept and resumed
//! (HELLO, PROBE on the real pool), a prober is ended. An update's is
//! therefore checked from its start, like any driver process of a checked
//! device; a prober is not (check/mod.rs says why).

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use understudy_api::ModuleInfo;
use understudy_protocol::{DriverMessage, PciIds, Request};
use understudy_shm::DriverMemory;
use understudy_vfio::Device;

use log::warn;

use super::link::{self, DriverLink, Spawn};
use super::{device, driver_log, Fault, Purpose, Supervisor};
use crate::class::{Class, Log, Shared};
use crate::os::fd;
use crate::handover::{Driver, Event, Loaded};

pub struct Loader<C: Class> {
    pub link: DriverLink,
    /// A prober's memory: its own pool and arena, mapped for its device only.
    scratch: Option<C::Scratch>,
    kernel_half: Option<String>,
    registration: Option<<C::Log as Log>::Offer>,
}

impl<C: Class> Loader<C> {
    /// A process that LOADs `modules` for the serving device (`vfio`, `shared`).
    pub fn load(spawn: &Spawn, vfio: &Device, shared: &C, modules: &[ModuleInfo]) -> Result<Self, String> {
        let ids = device::pci_ids(vfio.address()).map_err(|e| format!("cannot read the device's PCI ids: {e}"))?;
        let mut loader = Self::spawn(spawn, vfio, shared, modules)?;
        loader.send(Self::load_request(modules, ids))?;
        Ok(loader)
    }

    /// A process that LOADs `modules` and probes `vfio`'s device with them on
    /// scratch memory, mapped into that device's IOMMU container in place of
    /// `real`'s arena, which `finish_probe` -- or a failure here -- maps back.
    pub fn probe(spawn: &Spawn, vfio: &mut Device, modules: &[ModuleInfo], real: &dyn DriverMemory) -> Result<Self, String> {
        let ids = device::pci_ids(vfio.address()).map_err(|e| format!("cannot read the device's PCI ids: {e}"))?;
        let scratch = C::scratch(vfio.address().as_str())?;
        vfio.unmap_all().map_err(|e| e.to_string())?;
        let started = device::map_arena(vfio, scratch.memory())
            .map_err(|e| format!("mapping scratch memory for {}: {e}", vfio.address()))
            .and_then(|()| Self::start_probe(&Spawn { check: None, ..*spawn }, vfio, modules, ids, scratch));
        if started.is_err() {
            let _ = map_real(vfio, real);
        }
        started
    }

    fn start_probe(spawn: &Spawn, vfio: &Device, modules: &[ModuleInfo], ids: PciIds, scratch: C::Scratch)
                   -> Result<Self, String> {
        let mut loader = Self::spawn(spawn, vfio, &scratch, modules)?;
        let hello = Request::Hello(scratch.memory().hello());
        let probe = Request::Probe {
            pci_address: vfio.address().to_string(),
            modules: modules.iter().map(|m| m.path.clone()).collect(),
        };
        loader.scratch = Some(scratch);
        for request in [Self::load_request(modules, ids), hello, probe] {
            loader.send(request)?;
        }
        Ok(loader)
    }

    fn spawn(spawn: &Spawn, vfio: &Device, shared: &dyn Shared, modules: &[ModuleInfo]) -> Result<Self, String> {
        let link = DriverLink::new(link::spawn(spawn, vfio, shared, modules)?, spawn.detection, Instant::now())?;
        Ok(Loader { link, scratch: None, kernel_half: None, registration: None })
    }

    fn load_request(modules: &[ModuleInfo], ids: PciIds) -> Request {
        Request::Load { modules: modules.iter().map(|m| m.path.clone()).collect(), ids }
    }

    fn send(&mut self, request: Request) -> Result<(), String> {
        let name = request.name();
        self.link.send(request, Purpose::Load).map_err(|f| format!("sending {name}: {}", f.describe()))
    }

    pub fn probes(&self) -> bool {
        self.scratch.is_some()
    }

    /// The control socket, the process's end and its checker's output, to poll.
    pub fn poll_fds(&self) -> Vec<BorrowedFd<'_>> {
        [self.link.control(), self.link.pidfd()].into_iter().chain(self.link.checker_fd()).collect()
    }

    /// Reads what the process said: `Some` once it is done -- loaded (and
    /// probed), or why not. Its log lines go to `log`. A checker that is
    /// gone or gave a verdict makes it a refusal.
    pub fn read(&mut self, mut log: impl FnMut(u32, &str)) -> Option<Result<Loaded<C::Log>, String>> {
        if let Err(fault) = self.link.read_checker() {
            return Some(Err(fault.describe()));
        }
        loop {
            let message = match self.link.receive() {
                Ok(None) => return self.overdue(Instant::now()).map(Err),
                Ok(Some(message)) => message,
                Err(Fault::Closed) => return Some(Err("it closed its control socket (it is exiting)".into())),
                Err(fault) => return Some(Err(fault.describe())),
            };
            match message {
                DriverMessage::Log { level, text } => log(level, &text),
                DriverMessage::Warn { file, line, text } => log(4, &format!("WARN at {file}:{line}: {text}")),
                DriverMessage::Reply { seq, status, data } => {
                    let request = match self.link.answered(seq) {
                        Ok((request, _)) => request,
                        Err(fault) => return Some(Err(fault.describe())),
                    };
                    let text = String::from_utf8_lossy(&data).trim_end().to_string();
                    if status < 0 {
                        let errno = std::io::Error::from_raw_os_error(-status);
                        return Some(Err(match request {
                            Request::Load { .. } => format!("{errno}:\n{text}"),
                            other => format!("{} failed: {errno}", other.name()),
                        }));
                    }
                    match request {
                        Request::Load { .. } => self.kernel_half = Some(text),
                        Request::Probe { .. } => return Some(self.loaded()),
                        _ => {}
                    }
                    if !self.probes() {
                        return Some(self.loaded());
                    }
                }
                other if self.probes() => match C::probed(other) {
                    Ok(Some(offer)) if self.registration.is_none() => self.registration = Some(offer),
                    Ok(None) => {}
                    Ok(Some(_)) => return Some(Err(format!("protocol violation: a second {}", C::Log::REGISTERS))),
                    Err(other) => return Some(Err(format!("protocol violation: {other:?} before it was loaded"))),
                },
                other => return Some(Err(format!("protocol violation: {other:?} before it was loaded"))),
            }
        }
    }

    fn loaded(&mut self) -> Result<Loaded<C::Log>, String> {
        let kernel_half = self.kernel_half.take().ok_or("it answered PROBE before LOAD")?;
        Ok(Loaded { kernel_half, registration: self.registration.take() })
    }

    /// Why a request is overdue (the probe timeout, docs/protocol.md "Deadlines").
    fn overdue(&mut self, now: Instant) -> Option<String> {
        self.link.watchdog.overdue(now)
    }

    /// When the next request falls due.
    pub fn deadline(&self) -> Instant {
        self.link.watchdog.next_event()
    }

    /// Waits for `read` to be done, for at most `limit` (`run --standby`).
    pub fn wait(&mut self, limit: Duration, mut log: impl FnMut(u32, &str)) -> Result<Loaded<C::Log>, String> {
        let end = Instant::now() + limit;
        loop {
            if let Some(done) = self.read(&mut log) {
                return done;
            }
            let now = Instant::now();
            if now >= end {
                return Err(format!("no answer within {} s", limit.as_secs()));
            }
            let mut fds: Vec<libc::pollfd> = self.poll_fds().into_iter().map(fd::readable).collect();
            let wait = end.min(self.deadline()).saturating_duration_since(now).as_millis().clamp(1, 1000) as libc::c_int;
            // SAFETY: valid pollfds.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
        }
    }

    /// Ends a prober and gives its device back: stopped, reset, and `real`'s
    /// arena mapped where the scratch memory was, ready for a successor.
    pub fn finish_probe(self, vfio: &mut Device, real: &dyn DriverMemory) -> Result<(), String> {
        self.link.end();
        device::stop(vfio);
        map_real(vfio, real)
    }

    /// Ends the process.
    pub fn end(self) {
        self.link.end();
    }
}

/// The front-end's arena mapped for `vfio`'s device, and nothing else.
fn map_real(vfio: &mut Device, real: &dyn DriverMemory) -> Result<(), String> {
    vfio.unmap_all().map_err(|e| e.to_string())?;
    device::map_arena(vfio, real).map_err(|e| format!("mapping the arena for {}: {e}", vfio.address()))
}

impl<C: Class> Supervisor<C> {
    /// Starts the successor that loads while the driver serves: on the
    /// serving device it only LOADs (it maps no shared memory and touches no
    /// device until HELLO and PROBE); on the destination of a move it also
    /// probes it, on scratch memory.
    pub(super) fn start_loader(&mut self, driver: &Driver) -> Result<(), Fault> {
        let spawn = self.launch.spawn();
        let started = match self.devices.serving() {
            Some(vfio) if driver.device == *vfio.address() => Loader::load(&spawn, vfio, &self.class, &driver.modules),
            _ => match self.devices.other.as_mut() {
                Some(destination) => Loader::probe(&spawn, destination, &driver.modules, self.class.memory()),
                None => Err(format!("{} is not open", driver.device)),
            },
        };
        match started {
            Ok(loader) => {
                self.succession.loader = Some(loader);
                Ok(())
            }
            Err(why) => self.feed(Event::Loaded(Err(why))),
        }
    }

    /// What the loading successor says; once it is done, the handover hears.
    pub(super) fn read_loader(&mut self) {
        let Some(loader) = self.succession.loader.as_mut() else { return };
        let (limit, dev) = (&mut self.log_limit, self.devices.address().clone());
        let Some(mut result) = loader.read(|level, text| driver_log(limit, &dev, level, text)) else { return };
        let loader = self.succession.loader.take().expect("read above");
        if loader.probes() {
            // A prober's work is done: its device is given back ready for the successor.
            let finished = match self.devices.other.as_mut() {
                Some(destination) => loader.finish_probe(destination, self.class.memory()),
                None => Err("the destination was released meanwhile".into()),
            };
            if let (Ok(_), Err(why)) = (&result, finished) {
                result = Err(why);
            }
        } else if result.is_ok() {
            self.succession.loader = Some(loader);
        } else {
            loader.end();
        }
        if let Err(why) = &result {
            warn!("{}: the successor was refused: {why}", self.label());
        }
        self.feed_quietly(Event::Loaded(result));
    }

    /// Ends the loading successor; a prober's device is stopped and given back
    /// its arena mapping, as after a probe that finished.
    pub(super) fn end_loader(&mut self) {
        let Some(loader) = self.succession.loader.take() else { return };
        match self.devices.other.as_mut() {
            Some(destination) if loader.probes() => {
                if let Err(e) = loader.finish_probe(destination, self.class.memory()) {
                    warn!("{}: giving it back after its probe: {e}", destination.address());
                }
            }
            _ => loader.end(),
        }
    }
}
