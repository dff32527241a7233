// SPDX-License-Identifier: GPL-2.0
//! A device's status as `understudy status` shows it: kept up to date by
//! the device's thread (supervisor/ and its class's side), read by the
//! server whenever a client asks.

use std::sync::{Arc, Mutex};

use understudy_api::DeviceStatus;

#[derive(Clone)]
pub struct SharedStatus(Arc<Mutex<DeviceStatus>>);

impl SharedStatus {
    pub fn new(status: DeviceStatus) -> Self {
        SharedStatus(Arc::new(Mutex::new(status)))
    }

    /// Reads or changes the status under its lock. A thread that panicked
    /// holding it left a status that is still the best there is.
    pub fn update<T>(&self, f: impl FnOnce(&mut DeviceStatus) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
