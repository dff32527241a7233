// SPDX-License-Identifier: GPL-2.0
//! The TAP's link-layer multicast list, read from /proc/net/dev_mcast.
//!
//! The kernel announces no change of a device's multicast list: `ip maddr
//! add`, IGMP and MLD joins go through dev_mc_add() to the device's
//! ndo_set_rx_mode, which for a TUN/TAP does nothing, and no rtnetlink message
//! is sent (RTM_GETLINK does not carry the list either). /proc/net/dev_mcast
//! is the one place that lists exactly what ndo_set_rx_mode would see, so the
//! supervisor re-reads it on every link change and on a short period.

use std::io;

pub const DEV_MCAST: &str = "/proc/net/dev_mcast";

/// The addresses of interface `ifindex` in the text of /proc/net/dev_mcast
/// ("index name users global_use address" per line), in the kernel's order.
pub fn multicast_list(dev_mcast: &str, ifindex: i32) -> Vec<[u8; 6]> {
    dev_mcast
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let index: i32 = fields.next()?.parse().ok()?;
            let hex = fields.nth(3)?;
            (index == ifindex).then(|| parse_hex_mac(hex)).flatten()
        })
        .collect()
}

fn parse_hex_mac(hex: &str) -> Option<[u8; 6]> {
    if hex.len() != 12 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (i, b) in mac.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(mac)
}

pub fn read_multicast_list(ifindex: i32) -> io::Result<Vec<[u8; 6]>> {
    Ok(multicast_list(&std::fs::read_to_string(DEV_MCAST)?, ifindex))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_interfaces_own_addresses_are_listed() {
        let text = "1    lo              1     0     01005e000001\n\
                    7    us0             1     0     333300000001\n\
                    7    us0             2     1     01005e7f0001\n\
                    7    us0             1     0     zz\n\
                    17   us1             1     0     333300000002\n";
        assert_eq!(multicast_list(text, 7), vec![[0x33, 0x33, 0, 0, 0, 1], [1, 0, 0x5e, 0x7f, 0, 1]]);
        assert!(multicast_list(text, 9).is_empty());
    }

    #[test]
    fn this_machines_list_parses() {
        // Whatever is there, reading it works (the file exists on every Linux).
        read_multicast_list(1).unwrap();
    }
}
