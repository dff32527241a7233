// SPDX-License-Identifier: GPL-2.0
//! The host's structs and the driver's `runtime/ddekit/protocol.h` agree on
//! every size, offset and constant: a C program compiled against the header
//! prints what the C compiler thinks, and this test compares it with Rust's
//! `offset_of!`/`size_of`.

use std::path::PathBuf;
use std::process::Command;

use understudy_protocol::*;

fn c_struct_name(rust: &str) -> String {
    let mut out = String::from("us");
    for c in rust.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    match out.as_str() {
        "us_ring_header" => "us_ring".into(),
        _ => out,
    }
}

fn constants() -> Vec<(&'static str, u64)> {
    vec![
        ("US_PROTOCOL_VERSION", PROTOCOL_VERSION.into()),
        ("US_ARENA_SIZE", ARENA_SIZE),
        ("US_ARENA_IOVA", ARENA_IOVA),
        ("US_POOL_BUFFERS", POOL_BUFFERS.into()),
        ("US_BUFFER_SIZE", BUFFER_SIZE.into()),
        ("US_RING_SIZE", RING_SIZE.into()),
        ("US_RING_TX", RING_TX as u64),
        ("US_RING_TX_DONE", RING_TX_DONE as u64),
        ("US_RING_RX_FILL", RING_RX_FILL as u64),
        ("US_RING_RX", RING_RX as u64),
        ("US_RING_COUNT", RING_COUNT as u64),
        ("US_TX_CSUM", TX_CSUM.into()),
        ("US_TX_GSO_TCPV4", TX_GSO_TCPV4.into()),
        ("US_TX_GSO_TCPV6", TX_GSO_TCPV6.into()),
        ("US_TX_GSO_ECN", TX_GSO_ECN.into()),
        ("US_TX_DONE_DROPPED", TX_DONE_DROPPED.into()),
        ("US_RX_CSUM_VALID", RX_CSUM_VALID.into()),
        ("US_TX_TAILROOM", TX_TAILROOM.into()),
        ("US_TX_MAX_FRAME", TX_MAX_FRAME.into()),
        ("us_tx_span(1514, 2048)", tx_span(1514, 2048).into()),
        ("us_tx_span(1537, 2048)", tx_span(1537, 2048).into()),
        ("us_tx_span(US_TX_MAX_FRAME, 2048)", tx_span(TX_MAX_FRAME, 2048).into()),
        ("US_OFFLOAD_CSUM", OFFLOAD_CSUM.into()),
        ("US_OFFLOAD_TSO4", OFFLOAD_TSO4.into()),
        ("US_OFFLOAD_TSO6", OFFLOAD_TSO6.into()),
        ("US_OFFLOAD_TSO_ECN", OFFLOAD_TSO_ECN.into()),
        ("US_OFFLOAD_RX_CSUM", OFFLOAD_RX_CSUM.into()),
        ("US_RING_ENTRIES_OFFSET", RING_ENTRIES_OFFSET as u64),
        ("US_PAGE_SIZE", PAGE_SIZE),
        ("us_ring_stride(US_RING_SIZE)", ring_stride(RING_SIZE)),
        ("us_ring_stride(100)", ring_stride(100)),
        ("US_MSG_HELLO", MSG_HELLO.into()),
        ("US_MSG_PROBE", MSG_PROBE.into()),
        ("US_MSG_OPEN", MSG_OPEN.into()),
        ("US_MSG_STOP", MSG_STOP.into()),
        ("US_MSG_SET_MTU", MSG_SET_MTU.into()),
        ("US_MSG_SET_MAC", MSG_SET_MAC.into()),
        ("US_MSG_SET_RX_MODE", MSG_SET_RX_MODE.into()),
        ("US_MSG_SET_FEATURES", MSG_SET_FEATURES.into()),
        ("US_MSG_ETHTOOL", MSG_ETHTOOL.into()),
        ("US_MSG_PING", MSG_PING.into()),
        ("US_MSG_SPAWN", MSG_SPAWN.into()),
        ("US_MSG_LOAD", MSG_LOAD.into()),
        ("US_MSG_REPLY", MSG_REPLY.into()),
        ("US_MSG_REGISTERED", MSG_REGISTERED.into()),
        ("US_MSG_CARRIER", MSG_CARRIER.into()),
        ("US_MSG_TX_QUEUE", MSG_TX_QUEUE.into()),
        ("US_MSG_LOG", MSG_LOG.into()),
        ("US_MSG_WARN", MSG_WARN.into()),
        ("US_MSG_MAX", MSG_MAX as u64),
        ("US_MAX_MODULES", MAX_MODULES as u64),
        ("US_PATH_MAX", PATH_MAX as u64),
        ("US_PCI_ADDR_MAX", PCI_ADDR_MAX as u64),
        ("US_NAME_MAX", NAME_MAX as u64),
        ("US_TEXT_MAX", TEXT_MAX as u64),
        ("US_MAX_MC", MAX_MC as u64),
        ("US_ETHTOOL_DATA_MAX", ETHTOOL_DATA_MAX as u64),
        ("US_REPLY_DATA_MAX", REPLY_DATA_MAX as u64),
        ("US_RX_MODE_PROMISC", RX_MODE_PROMISC.into()),
        ("US_RX_MODE_ALLMULTI", RX_MODE_ALLMULTI.into()),
        ("US_ETHTOOL_DRVINFO", ETHTOOL_DRVINFO.into()),
        ("US_ETHTOOL_LINK", ETHTOOL_LINK.into()),
        ("US_ETHTOOL_STATS", ETHTOOL_STATS.into()),
        ("US_ETHTOOL_STATS_PER_REPLY", ETHTOOL_STATS_PER_REPLY as u64),
    ]
}

#[test]
fn rust_and_c_agree_on_every_size_offset_and_constant() {
    let header_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../runtime/ddekit");
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (src, exe) = (tmp.join("protocol_layout.c"), tmp.join("protocol_layout"));

    let mut c = String::from("#include <stddef.h>\n#include <stdio.h>\n#include \"protocol.h\"\nint main(void) {\n");
    let mut expected = String::new();
    for (name, field, offset, size) in layout_table() {
        let cs = c_struct_name(name);
        if field.is_empty() {
            c += &format!("printf(\"{cs} %zu\\n\", sizeof(struct {cs}));\n");
            expected += &format!("{cs} {size}\n");
        } else {
            let cf = field.trim_end_matches('_');
            c += &format!(
                "printf(\"{cs}.{cf} %zu %zu\\n\", offsetof(struct {cs}, {cf}), sizeof(((struct {cs} *)0)->{cf}));\n"
            );
            expected += &format!("{cs}.{cf} {offset} {size}\n");
        }
    }
    for (name, value) in constants() {
        c += &format!("printf(\"{name} %llu\\n\", (unsigned long long)({name}));\n");
        expected += &format!("{name} {value}\n");
    }
    c += "return 0;\n}\n";
    std::fs::write(&src, c).unwrap();

    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Werror", "-I"])
        .arg(&header_dir)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?}: {e}"));
    assert!(status.success(), "protocol.h does not compile: see {}", src.display());
    let out = Command::new(&exe).output().unwrap();
    let actual = String::from_utf8(out.stdout).unwrap();
    for (want, got) in expected.lines().zip(actual.lines()) {
        assert_eq!(got, want, "runtime/ddekit/protocol.h (left) and host/protocol (right) disagree");
    }
    assert_eq!(expected.lines().count(), actual.lines().count());
}
