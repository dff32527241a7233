// SPDX-License-Identifier: GPL-2.0
//! What the serving driver says on its control socket (docs/protocol.md,
//! "Control messages"): replies, routed by why their request was sent;
//! REGISTERED, CARRIER, its log lines and WARNs.

use std::io;
use std::time::Instant;

use log::{info, warn};
use understudy_api::DriverState;
use understudy_protocol::{printable, DriverMessage, Request};

use super::{driver_log, state_of, Fault, Purpose, Supervisor};
use crate::class::net::ethtool::Progress;
use crate::handover::Event;
use understudy_protocol::format_mac;

use crate::class::net::shadow::Phase;

impl Supervisor {
    pub(super) fn handle_control(&mut self) -> Result<(), Fault> {
        while let Some(msg) = self.link.as_mut().expect("a driver").receive()? {
            self.handle_message(msg)?;
            if self.link.is_none() {
                return Ok(());
            }
        }
        Ok(())
    }

    fn handle_reply(&mut self, seq: u32, status: i32, data: &[u8]) -> Result<(), Fault> {
        let dev = self.label().clone();
        let (request, purpose) = self.link.as_mut().expect("a driver").answered(seq)?;
        // LOAD says what it loaded, or why it would not (docs/protocol.md, "LOAD").
        let load = matches!(request, Request::Load { .. });
        if purpose != Purpose::Ethtool && !load && !data.is_empty() {
            return Err(Fault::Violation(format!("the reply to {} carries {} bytes of data", request.name(), data.len())));
        }
        let errno = || io::Error::from_raw_os_error(-status);
        // A driver requests its interrupts when it probes or when it opens.
        if status >= 0 && matches!(request, Request::Probe { .. } | Request::Open) {
            if let Some(routing) = self.interrupts.as_mut() {
                routing.route(self.devices.address());
            }
        }
        match purpose {
            Purpose::Startup if status < 0 && load => {
                return Err(Fault::Io(format!("the driver refused the modules ({}):\n{}", errno(), reply_text(data))));
            }
            Purpose::Startup if status < 0 => {
                return Err(Fault::Io(format!("{} failed in the driver: {}", request.name(), errno())));
            }
            Purpose::Startup if load => info!("{dev}: modules loaded ({})", printable(data).trim_end_matches("\\n")),
            Purpose::Startup => {
                if matches!(request, Request::Probe { .. }) && !self.succession.under_way() {
                    self.take_template()?;
                    // The process that drives the device is settled: `status` shows its pid.
                    if let Some(state) = self.net.shadow.as_ref().map(|s| state_of(s.phase())) {
                        self.set_status(|s| s.driver.state = state);
                    }
                }
            }
            Purpose::Replay => {
                if status >= 0 {
                    let log = self.succession.log().expect("replay belongs to a handover");
                    self.net.shadow.as_mut().expect("replay follows REGISTERED").replayed(&request, log);
                }
                self.feed(Event::ReplayAnswered { status })?;
            }
            Purpose::Heartbeat if status < 0 => warn!("{dev}: the driver answered PING with {status} ({})", errno()),
            Purpose::Heartbeat => {}
            Purpose::Config => {
                if status < 0 {
                    warn!("{dev}: the driver refused {}: {}", request.describe(), errno());
                } else {
                    info!("{dev}: the driver took {}", request.describe());
                }
                if let Some(undo) = self.net.shadow.as_mut().and_then(|s| s.answered(status)) {
                    self.net.interface.undo(undo);
                }
                self.show_shadow();
            }
            Purpose::Ethtool => {
                let Some(job) = self.net.ethtool.as_mut() else { return Ok(()) };
                match job.answered(&request, status, data).map_err(|e| Fault::Violation(e.to_string()))? {
                    Ok(Progress::Next(next)) => self.send(next, Purpose::Ethtool)?,
                    Ok(Progress::Waiting) => {}
                    Ok(Progress::Done) => self.net.ethtool.take().expect("a job").finish(),
                    Err(why) => {
                        // Replies to the job's other requests are dropped when they come.
                        self.net.ethtool.take().expect("a job").fail(format!("{dev}: {why}"));
                    }
                }
            }
            // LOAD goes to the loader's link, never the serving driver's.
            Purpose::Load => return Err(Fault::Violation("a reply to LOAD from the serving driver".into())),
        }
        Ok(())
    }

    /// `status` shows the shadow's state, MTU and MAC.
    pub(super) fn show_shadow(&self) {
        let Some(shadow) = self.net.shadow.as_ref() else { return };
        let (state, mtu, mac) = (state_of(shadow.phase()), shadow.mtu(), format_mac(&shadow.mac()));
        self.set_status(|s| {
            s.driver.state = state;
            s.net.mtu = Some(mtu);
            s.net.mac = Some(mac);
        });
    }

    pub(super) fn handle_message(&mut self, msg: DriverMessage) -> Result<(), Fault> {
        let dev = self.label().clone();
        match msg {
            DriverMessage::Reply { seq, status, data } => self.handle_reply(seq, status, &data)?,
            DriverMessage::Registered(r) => {
                if self.succession.templates.takeover_registered(&r, self.net.shadow.as_ref())? {
                    return Ok(());
                }
                if self.net.shadow.is_some() {
                    return Err(Fault::Violation("a second REGISTERED".into()));
                }
                info!("{dev}: {} {} registered its net_device: MAC {}, MTU {} ({}..{}), features {:#x}; \
                       it is opened when {} is set up",
                      r.driver, r.version, format_mac(&r.dev_addr), r.mtu, r.min_mtu, r.max_mtu, r.features,
                      self.net.interface.name());
                if self.succession.under_way() {
                    return self.feed(Event::Registered(r));
                }
                self.net.interface.take_registration(&r).map_err(|e| Fault::Io(e.to_string()))?;
                self.adopt(r);
                // During the probe the process that probed may still hand the
                // device to its fork (the template's): "registered" waits for
                // PROBE's reply, which settles whose pid `status` shows.
                if !self.link.as_ref().is_some_and(|l| l.probing()) {
                    self.set_status(|s| s.driver.state = DriverState::Registered);
                }
            }
            DriverMessage::Carrier(on) => {
                if let Some(shadow) = self.net.shadow.as_mut() {
                    shadow.set_carrier(on);
                }
                if self.net.interface.carrier_held_until.is_some() {
                    info!("{dev}: handover: the successor's carrier is {}", if on { "on" } else { "off" });
                    let open = self.net.shadow.as_ref().is_some_and(|s| s.phase() == Phase::Open);
                    if !(on && open) {
                        return self.feed(Event::Ready(on));
                    }
                    // The hold is over. The TAP held the predecessor's carrier,
                    // which was off if the interface was down when it died.
                    self.net.interface.carrier_held_until = None;
                } else {
                    info!("{dev}: carrier {}", if on { "on" } else { "off" });
                }
                self.set_carrier(on)?;
                return self.feed(Event::Ready(on));
            }
            // A network device's driver that registers a disk is not the driver it claimed to be.
            DriverMessage::Disk(d) => return Err(Fault::Violation(format!("a network device's driver registered a disk ({} {})",
                                                                           d.driver, d.disk_name))),
            DriverMessage::Log { level, text } => driver_log(&mut self.log_limit, &dev, level, &text),
            DriverMessage::Warn { file, line, text } => {
                let now = Instant::now();
                if self.log_limit.admit(now) {
                    warn!("{dev}: driver WARN at {file}:{line}: {text}");
                }
                self.set_status(|s| s.driver.warnings += 1);
                if let Some(verdict) = self.link.as_mut().and_then(|l| l.warned(now)) {
                    return Err(Fault::Io(verdict));
                }
            }
        }
        Ok(())
    }
}

/// A LOAD reply's text (the driver's, so untrusted): each line escaped as a
/// log line is, indented under the message that quotes it.
fn reply_text(data: &[u8]) -> String {
    data.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| format!("  {}", printable(l)))
        .collect::<Vec<_>>().join("\n")
}
