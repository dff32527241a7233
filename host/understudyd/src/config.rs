// SPDX-License-Identifier: GPL-2.0
//! `understudyd --config FILE`: the devices to run at start, in TOML.
//!
//! ```toml
//! [[device]]
//! pci = "0000:00:02.0"                                  # bound to vfio-pci
//! modules = ["/lib/modules/6.1.0-28-amd64/kernel/drivers/net/ethernet/intel/e1000/e1000.ko"]
//! ifname = "us0"                                        # optional: the first free usN
//! cpu = 1                                               # optional: `understudy run --cpu`
//! check = "stringent"                                   # optional: `understudy run --check`
//! no_iommu = true                                       # optional: `understudy run --no-iommu`
//! queues = 2                                            # optional: `understudy run --queues`
//! poll_us = 30000                                       # optional, with cpu: `understudy run --poll-us`
//!
//! [recovery]                                            # optional; understudyd's options win
//! on_exhausted = "retry"                                # or "down" (--on-exhausted)
//! retry_max_s = 60                                      # --retry-max-s
//! hook = "/usr/local/sbin/understudy-hook"              # --recovery-hook
//! ```
//!
//! Unknown keys are refused, so a misspelt key is an error, not a silent default.

use std::path::Path;

use serde::Deserialize;

use understudy_api::{GateMode, RunRequest};

use crate::handover::policy::OnExhausted;

#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default, rename = "device")]
    pub devices: Vec<DeviceConfig>,
    #[serde(default)]
    pub recovery: RecoveryConfig,
}

/// The recovery agent's policy (handover/policy.rs), for every device.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RecoveryConfig {
    pub on_exhausted: Option<OnExhausted>,
    pub retry_max_s: Option<u64>,
    pub hook: Option<String>,
}

#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// PCI address of a device bound to vfio-pci.
    pub pci: String,
    /// Kernel modules, dependencies first, the driver last.
    pub modules: Vec<String>,
    pub ifname: Option<String>,
    pub cpu: Option<u32>,
    /// The TX thread's poll window, microseconds (`run --poll-us`, with `cpu`).
    pub poll_us: Option<u32>,
    /// Run its driver processes under a checker with this gate.
    pub check: Option<GateMode>,
    /// Bind it to uio_pci_generic, its DMA unconfined (docs/design.md §4).
    #[serde(default)]
    pub no_iommu: bool,
    /// Queues of the interface and queue pairs of the driver (`run --queues`).
    pub queues: Option<u16>,
}

impl DeviceConfig {
    /// What `understudy run` would ask for this device.
    pub fn into_request(self) -> RunRequest {
        let DeviceConfig { pci, modules, ifname, cpu, poll_us, check, no_iommu, queues } = self;
        RunRequest { device: pci, modules, ifname, cpu, poll_us, standby: Vec::new(), check, no_iommu, queues }
    }
}

pub fn parse(text: &str) -> Result<Config, String> {
    let config: Config = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut seen = std::collections::HashSet::new();
    for d in &config.devices {
        if !seen.insert(&d.pci) {
            return Err(format!("device {} is listed twice", d.pci));
        }
    }
    Ok(config)
}

pub fn load(path: &Path) -> Result<Config, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read the config {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("config {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_devices_parse() {
        let c = parse(r#"
            [[device]]
            pci = "0000:00:02.0"
            modules = ["/m/e1000.ko"]
            ifname = "us0"
            cpu = 1
            poll_us = 30000
            check = "permissive"

            [[device]]
            pci = "0000:00:03.0"
            modules = ["/m/mii.ko", "/m/8139cp.ko"]
            no_iommu = true
        "#).unwrap();
        assert_eq!((c.devices[0].no_iommu, c.devices[1].no_iommu), (false, true));
        assert_eq!(c.devices.len(), 2);
        assert_eq!(c.devices[0].ifname.as_deref(), Some("us0"));
        assert_eq!(c.devices[1].modules, ["/m/mii.ko", "/m/8139cp.ko"]);
        assert_eq!(c.devices[1].ifname, None);
        assert_eq!((c.devices[0].cpu, c.devices[1].cpu), (Some(1), None));
        assert_eq!((c.devices[0].poll_us, c.devices[1].poll_us), (Some(30_000), None));
        assert_eq!((c.devices[0].check, c.devices[1].check), (Some(GateMode::Permissive), None));
        assert!(parse("[[device]]\npci = \"a\"\nmodules = [\"x\"]\ncheck = \"strict\"\n").is_err());
    }

    #[test]
    fn misspelt_keys_duplicates_and_missing_fields_are_refused() {
        let e = parse("[[device]]\npci = \"0000:00:02.0\"\nmodule = [\"/m/e1000.ko\"]\n").unwrap_err();
        assert!(e.contains("module"), "{e}");
        let twice = "[[device]]\npci = \"a\"\nmodules = [\"x\"]\n[[device]]\npci = \"a\"\nmodules = [\"y\"]\n";
        assert_eq!(parse(twice).unwrap_err(), "device a is listed twice");
        assert!(parse("[[device]]\nmodules = [\"x\"]\n").is_err());
        assert!(parse("").unwrap().devices.is_empty());
    }

    #[test]
    fn the_recovery_policy_is_read_and_checked() {
        let c = parse("[recovery]\non_exhausted = \"retry\"\nretry_max_s = 30\nhook = \"/bin/true\"\n").unwrap();
        assert_eq!(c.recovery, RecoveryConfig {
            on_exhausted: Some(OnExhausted::Retry),
            retry_max_s: Some(30),
            hook: Some("/bin/true".into()),
        });
        assert_eq!(parse("").unwrap().recovery, RecoveryConfig::default());
        assert!(parse("[recovery]\non_exhausted = \"never\"\n").is_err());
        assert!(parse("[recovery]\nhok = \"/bin/true\"\n").unwrap_err().contains("hok"));
    }
}
