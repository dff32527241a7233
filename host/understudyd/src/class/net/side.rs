// SPDX-License-Identifier: GPL-2.0
//! What the supervisor of a network device holds for its class: the net
//! shadow, the frames' path, the interface, and the `understudy ethtool`
//! queries. Every `self.net` in supervisor/ is a place where the
//! class-neutral supervisor reaches into the network class.

use std::collections::VecDeque;

use understudy_api::EthtoolQueries;

use super::datapath::Datapath;
use super::ethtool::{Answer, EthtoolJob};
use super::interface::Interface;
use super::shadow::NetShadow;

pub struct NetSide {
    /// The driver's net_device, from REGISTERED until the driver dies.
    pub shadow: Option<NetShadow>,
    // Declared in teardown order: the interface goes last.
    pub datapath: Datapath,
    pub interface: Interface,
    /// The query the driver is answering, and those that wait for it.
    pub ethtool: Option<EthtoolJob>,
    pub ethtool_queue: VecDeque<(EthtoolQueries, Answer)>,
}

impl NetSide {
    pub fn new(datapath: Datapath, interface: Interface) -> NetSide {
        NetSide { shadow: None, datapath, interface, ethtool: None, ethtool_queue: VecDeque::new() }
    }
}
