// SPDX-License-Identifier: GPL-2.0
//! The CLI ↔ daemon messages: one JSON request per connection to the daemon's
//! unix socket, answered by one JSON response, each on one line.

use serde::{Deserialize, Serialize};

pub const DEFAULT_SOCKET: &str = "/run/understudy/understudyd.sock";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// Take `device` through VFIO, create `ifname`, start a driver process for `modules`.
    Run { device: String, modules: Vec<String>, ifname: Option<String> },
    Status,
    /// Stop the driver, release the device and remove the interface.
    Stop { device: String },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub devices: Vec<DeviceStatus>,
}

impl Response {
    pub fn ok(devices: Vec<DeviceStatus>) -> Self {
        Response { ok: true, error: None, devices }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Response { ok: false, error: Some(message.into()), devices: Vec::new() }
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
    pub rx_packets: u64,
    pub rx_bytes: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DriverState {
    /// Spawned, HELLO/PROBE under way.
    Starting,
    /// Registered its net_device: packets flow.
    Running,
    /// The process is gone; `death` says why, the device is stopped.
    Dead,
}

/// What the daemon did to the device after its driver died.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceStop {
    pub bus_master_off: bool,
    pub irqs_disabled: bool,
    /// "done", or why no reset happened.
    pub reset: String,
    pub iommu_unmapped: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeviceStatus {
    pub device: String,
    pub ifname: String,
    pub iommu_group: u32,
    pub modules: Vec<ModuleInfo>,
    pub driver_binary: String,
    pub pid: Option<u32>,
    pub state: DriverState,
    pub death: Option<String>,
    pub device_stop: Option<DeviceStop>,
    pub uptime_s: f64,
    pub carrier: bool,
    pub mac: Option<String>,
    pub mtu: Option<u32>,
    pub driver_name: Option<String>,
    pub counters: Counters,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_tagged_json() {
        let r = Request::Stop { device: "0000:00:02.0".into() };
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(j, r#"{"request":"stop","device":"0000:00:02.0"}"#);
        assert_eq!(serde_json::from_str::<Request>(&j).unwrap(), r);
        assert!(serde_json::from_str::<Request>(r#"{"request":"reboot"}"#).is_err());
    }
}
