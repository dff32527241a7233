// SPDX-License-Identifier: GPL-2.0
//! What the serving driver says on its control socket (docs/protocol.md,
//! "Control messages"): replies, routed by why their request was sent;
//! its log lines and WARNs; what its class's messages say (REGISTERED,
//! CARRIER, DISK: `Class::on_message`).

use std::io;
use std::time::Instant;

use log::{info, warn};
use understudy_api::DriverState;
use understudy_protocol::{printable, DriverMessage, Request};

use super::{driver_log, Fault, Purpose, Supervisor};
use crate::class::{Class, Log, Offering, Said};
use crate::handover::Event;

impl<C: Class> Supervisor<C> {
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
        if purpose != Purpose::Query && !load && !data.is_empty() {
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
                    if let Some(state) = self.class.state() {
                        self.set_status(|s| s.driver.state = state);
                    }
                }
            }
            Purpose::Replay => {
                if status >= 0 {
                    let log = self.succession.log().expect("replay belongs to a handover");
                    self.class.replayed(&request, log);
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
                self.class.config_answered(status, &self.status);
            }
            Purpose::Query => {
                for next in self.class.query_answered(&request, status, data, dev.as_str())? {
                    self.send(next, Purpose::Query)?;
                }
            }
            // LOAD goes to the loader's link, never the serving driver's.
            Purpose::Load => return Err(Fault::Violation("a reply to LOAD from the serving driver".into())),
        }
        Ok(())
    }

    pub(super) fn handle_message(&mut self, msg: DriverMessage) -> Result<(), Fault> {
        let dev = self.label().clone();
        match msg {
            DriverMessage::Reply { seq, status, data } => self.handle_reply(seq, status, &data)?,
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
            class_message => match self.class.on_message(class_message, &self.status)? {
                Said::Registered(offer) => return self.registered(offer),
                Said::Ready(on) => return self.feed(Event::Ready(on)),
            },
        }
        Ok(())
    }

    /// The driver registered its device: a template's first fork says again
    /// what the template did; a successor's goes to the handover; the first
    /// driver's is the front-end's from now on.
    fn registered(&mut self, offer: <C::Log as Log>::Offer) -> Result<(), Fault> {
        if self.succession.templates.takeover_registered(&offer, self.class.log())? {
            return Ok(());
        }
        if self.class.log().is_some() {
            return Err(Fault::Violation(format!("a second {}", C::Log::REGISTERS)));
        }
        info!("{}: {}; {} {} follows it", self.label(), offer.describe(), C::FRONTEND, self.class.name());
        if self.succession.under_way() {
            return self.feed(Event::Registered(offer));
        }
        self.class.take_registration(&offer)?;
        self.adopt(offer);
        // During the probe the process that probed may still hand the
        // device to its fork (the template's): "registered" waits for
        // PROBE's reply, which settles whose pid `status` shows.
        if !self.link.as_ref().is_some_and(|l| l.probing()) {
            self.set_status(|s| s.driver.state = DriverState::Registered);
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
