// SPDX-License-Identifier: GPL-2.0
//! The requests the host sends a driver process, and their encoding on the
//! wire (docs/protocol.md, "Control messages").

use crate::*;

/// A request the host sends; each is answered by a `REPLY` with its `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Hello(Hello),
    Probe { pci_address: String, modules: Vec<String> },
    Open,
    Stop,
    SetMtu(u32),
    SetMac([u8; 6]),
    SetRxMode { flags: u32, multicast: Vec<[u8; 6]> },
    SetFeatures(u64),
    /// `ethtool -L combined N`: the queue pairs the driver runs, 1 to `MAX_QUEUES`.
    SetChannels(u32),
    /// An `ETHTOOL_*` command; `first` is the first statistic wanted (0 otherwise).
    Ethtool { cmd: u32, first: u32 },
    Ping,
    /// To a post-probe template: fork a driver process. Its control socket
    /// travels with the message (SCM_RIGHTS); the reply's data is its pid.
    Spawn,
    /// Before `HELLO`: load and check `modules` (dependencies first) for the
    /// device `ids`, running nothing. The reply's data is UTF-8 text: the
    /// kernel half used, or every reason for a refusal, one per line.
    Load { modules: Vec<String>, ids: PciIds },
}

impl PartialEq for PciIds {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}
impl Eq for PciIds {}

impl PartialEq for Hello {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}
impl Eq for Hello {}

/// Copies `s` into a fixed NUL-terminated field; `None` if it does not fit.
fn fill_c_string(dst: &mut [u8], s: &str) -> Option<()> {
    let b = s.as_bytes();
    if b.len() >= dst.len() || b.contains(&0) {
        return None;
    }
    dst[..b.len()].copy_from_slice(b);
    Some(())
}

/// `PROBE`'s and `LOAD`'s module list: 1 to `MAX_MODULES` paths; returns how many.
fn fill_modules(slots: &mut [[u8; PATH_MAX]; MAX_MODULES], modules: &[String]) -> Result<u32, EncodeError> {
    if modules.is_empty() || modules.len() > MAX_MODULES {
        return Err(EncodeError(format!("1 to {MAX_MODULES} modules, not {}", modules.len())));
    }
    for (slot, path) in slots.iter_mut().zip(modules) {
        fill_c_string(slot, path)
            .ok_or_else(|| EncodeError(format!("module path {path:?} is longer than {} bytes", PATH_MAX - 1)))?;
    }
    Ok(modules.len() as u32)
}

/// A request that cannot be expressed on the wire (the host's own input check).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EncodeError(pub String);

impl Request {
    pub fn type_(&self) -> u16 {
        match self {
            Request::Hello(_) => MSG_HELLO,
            Request::Probe { .. } => MSG_PROBE,
            Request::Open => MSG_OPEN,
            Request::Stop => MSG_STOP,
            Request::SetMtu(_) => MSG_SET_MTU,
            Request::SetMac(_) => MSG_SET_MAC,
            Request::SetRxMode { .. } => MSG_SET_RX_MODE,
            Request::SetFeatures(_) => MSG_SET_FEATURES,
            Request::SetChannels(_) => MSG_SET_CHANNELS,
            Request::Ethtool { .. } => MSG_ETHTOOL,
            Request::Ping => MSG_PING,
            Request::Spawn => MSG_SPAWN,
            Request::Load { .. } => MSG_LOAD,
        }
    }

    /// The message type's name in docs/protocol.md, for log lines.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Hello(_) => "HELLO",
            Request::Probe { .. } => "PROBE",
            Request::Open => "OPEN",
            Request::Stop => "STOP",
            Request::SetMtu(_) => "SET_MTU",
            Request::SetMac(_) => "SET_MAC",
            Request::SetRxMode { .. } => "SET_RX_MODE",
            Request::SetFeatures(_) => "SET_FEATURES",
            Request::SetChannels(_) => "SET_CHANNELS",
            Request::Ethtool { .. } => "ETHTOOL",
            Request::Ping => "PING",
            Request::Spawn => "SPAWN",
            Request::Load { .. } => "LOAD",
        }
    }

    /// The request with what it asks for, for log lines.
    pub fn describe(&self) -> String {
        match self {
            Request::SetMtu(mtu) => format!("SET_MTU {mtu}"),
            Request::SetMac(mac) => format!("SET_MAC {}", format_mac(mac)),
            Request::SetChannels(n) => format!("SET_CHANNELS combined {n}"),
            Request::SetRxMode { flags, multicast } => format!(
                "SET_RX_MODE{}{} with {} multicast address(es)",
                if flags & RX_MODE_PROMISC != 0 { " promisc" } else { "" },
                if flags & RX_MODE_ALLMULTI != 0 { " allmulti" } else { "" },
                multicast.len()
            ),
            other => other.name().to_string(),
        }
    }

    pub fn encode(&self, seq: u32) -> Result<Vec<u8>, EncodeError> {
        let mut out = MsgHeader { type_: self.type_(), flags: 0, seq }.as_bytes().to_vec();
        match self {
            Request::Hello(h) => out.extend_from_slice(h.as_bytes()),
            Request::Probe { pci_address, modules } => {
                let mut p = Probe::default();
                p.n_modules = fill_modules(&mut p.modules, modules)?;
                fill_c_string(&mut p.pci_address, pci_address)
                    .ok_or_else(|| EncodeError(format!("PCI address {pci_address:?} is too long")))?;
                out.extend_from_slice(p.as_bytes());
            }
            Request::Load { modules, ids } => {
                let mut l = Load { ids: *ids, ..Default::default() };
                l.n_modules = fill_modules(&mut l.modules, modules)?;
                out.extend_from_slice(l.as_bytes());
            }
            Request::Open | Request::Stop | Request::Ping | Request::Spawn => {}
            Request::SetMtu(mtu) => out.extend_from_slice(SetMtu { mtu: *mtu }.as_bytes()),
            Request::SetMac(mac) => out.extend_from_slice(SetMac { mac: *mac }.as_bytes()),
            Request::SetRxMode { flags, multicast } => {
                if multicast.len() > MAX_MC {
                    return Err(EncodeError(format!("{} multicast addresses, at most {MAX_MC}", multicast.len())));
                }
                out.extend_from_slice(SetRxMode { flags: *flags, n_mc: multicast.len() as u16 }.as_bytes());
                multicast.iter().for_each(|mac| out.extend_from_slice(mac));
            }
            Request::SetFeatures(f) => out.extend_from_slice(SetFeatures { features: *f }.as_bytes()),
            Request::SetChannels(n) => {
                check_queue_count(*n).map_err(EncodeError)?;
                out.extend_from_slice(SetChannels { combined: *n }.as_bytes());
            }
            Request::Ethtool { cmd, first } => out.extend_from_slice(Ethtool { cmd: *cmd, first: *first }.as_bytes()),
        }
        Ok(out)
    }
}

/// A MAC address as `ip link` prints it.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn requests_encode_to_their_c_sizes() {
        assert_eq!(Request::Open.encode(1).unwrap().len(), 8);
        assert_eq!(Request::SetMtu(9000).encode(1).unwrap().len(), 12);
        let p = Request::Probe { pci_address: "0000:00:02.0".into(), modules: vec!["/x/e1000.ko".into()] };
        assert_eq!(p.encode(1).unwrap().len(), 8 + size_of::<Probe>());
        let m = Request::SetRxMode { flags: RX_MODE_PROMISC, multicast: vec![[1, 0, 0x5e, 0, 0, 1]] };
        assert_eq!(m.encode(1).unwrap().len(), 8 + 6 + 6);
        assert_eq!(Request::Ethtool { cmd: ETHTOOL_STATS, first: 12 }.encode(1).unwrap().len(), 16);
        assert!(Request::Probe { pci_address: "0".repeat(16), modules: vec!["a".into()] }.encode(1).is_err());
    }

    fn e1000_ids() -> PciIds {
        PciIds { vendor: 0x8086, device: 0x100e, subvendor: 0x1af4, subdevice: 0x1100, class: 0x02_0000 }
    }

    #[test]
    fn load_encodes_its_modules_and_ids_where_the_c_struct_has_them() {
        let req = Request::Load { modules: vec!["/m/mii.ko".into(), "/m/8139cp.ko".into()], ids: e1000_ids() };
        assert_eq!(req.name(), "LOAD");
        let m = req.encode(7).unwrap();
        assert_eq!(m.len(), size_of::<MsgHeader>() + size_of::<Load>());
        let header = MsgHeader::from_prefix(&m).unwrap();
        assert_eq!((header.type_, header.seq), (MSG_LOAD, 7));
        let l = Load::from_prefix(&m[size_of::<MsgHeader>()..]).unwrap();
        let (n, modules, ids) = (l.n_modules, l.modules, l.ids);
        assert_eq!(n, 2);
        assert_eq!(&modules[1][..13], b"/m/8139cp.ko\0");
        assert_eq!(modules[2], [0; PATH_MAX]);
        assert_eq!(ids, e1000_ids());
    }

    #[test]
    fn load_refuses_what_the_wire_cannot_carry() {
        let load = |modules: Vec<String>| Request::Load { modules, ids: e1000_ids() }.encode(1);
        assert!(load(vec![]).is_err());
        assert!(load(vec!["a".into(); MAX_MODULES + 1]).is_err());
        assert!(load(vec!["x".repeat(PATH_MAX)]).is_err());
        assert!(load(vec!["a\0b".into()]).is_err());
        assert!(load(vec!["x".repeat(PATH_MAX - 1)]).is_ok());
    }
}
