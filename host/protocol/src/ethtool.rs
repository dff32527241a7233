// SPDX-License-Identifier: GPL-2.0
//! The data of `ETHTOOL` replies, validated: a driver's answer is untrusted
//! input like everything else it sends.

use std::mem::size_of;

use crate::{boolean, c_string, EthtoolDrvinfo, EthtoolLink, EthtoolStat, EthtoolStats, ProtocolError, Wire, ETHTOOL_STATS_PER_REPLY};

/// `ETHTOOL_DRVINFO`: who drives the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInfo {
    pub driver: String,
    pub version: String,
    pub fw_version: String,
    pub bus_info: String,
}

/// `ETHTOOL_LINK`: the link as the driver's get_link_ksettings/get_link see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSettings {
    /// Mb/s; `None` when the driver does not know (no link).
    pub speed: Option<u32>,
    /// `None` unknown.
    pub full_duplex: Option<bool>,
    pub autoneg: bool,
    /// `PORT_*` of the kernel ABI (0 twisted pair, 3 fibre, ...).
    pub port: u8,
    pub link: bool,
}

/// One page of `ETHTOOL_STATS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsPage {
    pub total: u32,
    pub stats: Vec<(String, u64)>,
}

fn exact<T: Wire>(what: &'static str, data: &[u8]) -> Result<T, ProtocolError> {
    if data.len() != size_of::<T>() {
        return Err(ProtocolError::OutOfRange { field: what, value: data.len() as u64 });
    }
    Ok(T::from_prefix(data).expect("length checked"))
}

pub fn parse_driver_info(data: &[u8]) -> Result<DriverInfo, ProtocolError> {
    let d: EthtoolDrvinfo = exact("ethtool drvinfo length", data)?;
    Ok(DriverInfo {
        driver: c_string("drvinfo.driver", &d.driver)?,
        version: c_string("drvinfo.version", &d.version)?,
        fw_version: c_string("drvinfo.fw_version", &d.fw_version)?,
        bus_info: c_string("drvinfo.bus_info", &d.bus_info)?,
    })
}

pub fn parse_link(data: &[u8]) -> Result<LinkSettings, ProtocolError> {
    let l: EthtoolLink = exact("ethtool link length", data)?;
    let speed = l.speed;
    Ok(LinkSettings {
        speed: (speed != u32::MAX).then_some(speed),
        full_duplex: match l.duplex {
            0xff => None,
            d => Some(boolean("link.duplex", d)?),
        },
        autoneg: boolean("link.autoneg", l.autoneg)?,
        port: l.port,
        link: boolean("link.link", l.link)?,
    })
}

/// One reply to `ETHTOOL_STATS` with `first`: it must hold the statistics
/// from `first` on, a full page unless it reaches `total`.
pub fn parse_stats_page(first: u32, data: &[u8]) -> Result<StatsPage, ProtocolError> {
    let head = EthtoolStats::from_prefix(data)
        .ok_or(ProtocolError::OutOfRange { field: "ethtool stats length", value: data.len() as u64 })?;
    let (total, n) = (head.total, head.n as usize);
    let expected = (total.saturating_sub(first) as usize).min(ETHTOOL_STATS_PER_REPLY);
    if n != expected {
        return Err(ProtocolError::OutOfRange { field: "ethtool stats.n", value: n as u64 });
    }
    let body = &data[size_of::<EthtoolStats>()..];
    if body.len() != n * size_of::<EthtoolStat>() {
        return Err(ProtocolError::OutOfRange { field: "ethtool stats length", value: data.len() as u64 });
    }
    let stats = body
        .chunks_exact(size_of::<EthtoolStat>())
        .map(|c| {
            let s = EthtoolStat::from_prefix(c).expect("chunk size");
            Ok((c_string("stat.name", &s.name)?, s.value))
        })
        .collect::<Result<_, ProtocolError>>()?;
    Ok(StatsPage { total, stats })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NAME_MAX;

    fn stats_bytes(total: u32, names: &[&str]) -> Vec<u8> {
        let mut out = EthtoolStats { total, n: names.len() as u32 }.as_bytes().to_vec();
        for (i, name) in names.iter().enumerate() {
            let mut s = EthtoolStat { value: i as u64 * 10, ..Default::default() };
            s.name[..name.len()].copy_from_slice(name.as_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        out
    }

    #[test]
    fn a_stats_page_must_be_full_unless_it_is_the_last() {
        let names: Vec<String> = (0..ETHTOOL_STATS_PER_REPLY).map(|i| format!("rx_{i}")).collect();
        let full: Vec<&str> = names.iter().map(String::as_str).collect();
        let page = parse_stats_page(0, &stats_bytes(20, &full)).unwrap();
        assert_eq!(page.total, 20);
        assert_eq!(page.stats[1], ("rx_1".to_string(), 10));
        let last = parse_stats_page(12, &stats_bytes(20, &full[..8])).unwrap();
        assert_eq!(last.stats.len(), 8);
        assert!(parse_stats_page(0, &stats_bytes(20, &full[..3])).is_err(), "short page before the end");
        assert!(parse_stats_page(12, &stats_bytes(20, &full[..9])).is_err(), "more than total");
        assert!(parse_stats_page(0, &stats_bytes(0, &[])).unwrap().stats.is_empty());
        let mut unterminated = stats_bytes(1, &["x"]);
        unterminated[8..8 + NAME_MAX].fill(b'a');
        assert!(parse_stats_page(0, &unterminated).is_err());
    }

    #[test]
    fn link_settings_decode_unknowns_and_refuse_bad_flags() {
        let l = EthtoolLink { speed: u32::MAX, duplex: 0xff, autoneg: 1, port: 0, link: 0 };
        let s = parse_link(l.as_bytes()).unwrap();
        assert_eq!((s.speed, s.full_duplex, s.autoneg, s.link), (None, None, true, false));
        let l = EthtoolLink { speed: 1000, duplex: 1, autoneg: 1, port: 0, link: 1 };
        assert_eq!(parse_link(l.as_bytes()).unwrap().speed, Some(1000));
        let l = EthtoolLink { link: 2, ..l };
        assert!(parse_link(l.as_bytes()).is_err());
        assert!(parse_link(&[0; 3]).is_err());
    }

    #[test]
    fn driver_info_strings_must_be_terminated() {
        let mut d = EthtoolDrvinfo::default();
        d.driver[..5].copy_from_slice(b"e1000");
        d.bus_info[..12].copy_from_slice(b"0000:00:02.0");
        let info = parse_driver_info(d.as_bytes()).unwrap();
        assert_eq!((info.driver.as_str(), info.bus_info.as_str()), ("e1000", "0000:00:02.0"));
        d.version = [b'v'; NAME_MAX];
        assert!(parse_driver_info(d.as_bytes()).is_err());
    }
}
