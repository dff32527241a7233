// SPDX-License-Identifier: GPL-2.0
//! The network class: a NIC driver behind a TAP interface (docs/design.md
//! §0, §5, §7). Its shadow (shadow.rs) records the driver's net_device and
//! every setting it accepted, and is the class's `Log`; its data path
//! (datapath.rs) holds the frames in flight, the class's `InFlight`. The
//! interface applications see (interface.rs) is a TAP (tap.rs), watched
//! through rtnetlink (netlink.rs) and /proc/net/dev_mcast (multicast.rs),
//! its frames spread over the driver's queues by a steering program
//! (steering.rs); after a move the interface announces its MAC
//! (announce.rs); `understudy ethtool` queries are ethtool.rs.
//!
//! While a successor starts the shadow impersonates the driver: the TAP
//! keeps its carrier, and frames the stack sends wait in the TAP's own
//! transmit queue (txqueuelen frames, tun's ring): the daemon does not let
//! a driver read the TAP until the fresh driver is open again. When that
//! queue is full the kernel drops the newest frame (tail drop), as a NIC's
//! full ring does; TCP retransmits it.

pub mod announce;
pub mod datapath;
pub mod ethtool;
pub mod interface;
pub mod multicast;
pub mod netlink;
pub mod shadow;
pub mod side;
pub mod steering;
pub mod tap;
