// SPDX-License-Identifier: GPL-2.0
//! Where a device's data path runs (`understudy run --cpu N`): the driver
//! process on CPU N, the daemon's thread for the device on the other CPUs
//! the daemon may use.
//!
//! Why: the runtime runs kernel code on one CPU at a time (its CPU lock), so
//! a driver process is one CPU's worth of work, and its transmit thread,
//! which also pays for the device's doorbell writes, is the slowest stage of
//! sending. Left to the scheduler, the daemon's thread is woken onto the
//! transmit thread's CPU and the two take turns on it while another CPU
//! idles (docs/performance.md §5). The threads of the
//! driver process inherit its CPU, and a template's forks the template's;
//! the one thread that runs no kernel code, the writer of small received
//! frames, moves itself to the other CPUs (runtime/ddekit/rx_writer.c). The
//! device's interrupts follow the driver (interrupts.rs).
//! With `--poll-us` the driver's TX thread may spend its CPU polling while
//! the traffic is sparse (runtime/ddekit/tx_poll.c): only a CPU given to
//! the driver, so the option goes with `--cpu`.
//! A checked driver's checker (docs/checking.md) gets a CPU of its own
//! where there is one: it keeps up with the driver only beside it.

use std::io;

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use understudy_api::MAX_POLL_US;

/// The CPU sets of one device's driver process and daemon thread.
#[derive(Clone, Copy)]
pub struct Placement {
    pub cpu: u32,
    driver: CpuSet,
    /// `None` when N is the daemon's only CPU: its thread stays there.
    daemon: Option<CpuSet>,
    /// The TX thread's poll window in microseconds (`--poll-us`), if any.
    pub poll_us: Option<u32>,
}

impl std::fmt::Debug for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Placement(cpu {}, poll_us {:?})", self.cpu, self.poll_us)
    }
}

impl Placement {
    /// The placement for CPU `cpu`, which must be one the daemon may run on.
    pub fn on(cpu: u32) -> Result<Self, String> {
        let allowed = sched_getaffinity(Pid::from_raw(0))
            .map_err(|e| format!("cannot read the daemon's CPU affinity: {e}"))?;
        Self::within(cpu, &allowed)
    }

    fn within(cpu: u32, allowed: &CpuSet) -> Result<Self, String> {
        let cpu_index = cpu as usize;
        if !cpus(allowed).any(|c| c == cpu_index) {
            return Err(format!("CPU {cpu} is not one the daemon may run on (allowed: {})", cpu_list(allowed)));
        }
        let driver = set_of([cpu_index]);
        let daemon = set_of(cpus(allowed).filter(|&c| c != cpu_index));
        let daemon = cpus(&daemon).next().is_some().then_some(daemon);
        Ok(Placement { cpu, driver, daemon, poll_us: None })
    }

    /// The same placement with the TX thread polling for up to `poll_us`
    /// (1 µs to 1 s: longer would only keep the CPU busy) after its last work.
    pub fn polling(self, poll_us: Option<u32>) -> Result<Self, String> {
        match poll_us {
            Some(us) if !(1..=MAX_POLL_US).contains(&us) =>
                Err(format!("--poll-us {us}: the window is 1 to {MAX_POLL_US} microseconds")),
            _ => Ok(Placement { poll_us, ..self }),
        }
    }

    /// Moves the calling thread (the device's) off the driver's CPU.
    pub fn place_daemon_thread(&self) -> io::Result<()> {
        match &self.daemon {
            Some(set) => Ok(sched_setaffinity(Pid::from_raw(0), set)?),
            None => Ok(()),
        }
    }

    /// The CPU for the driver's checker: the first other CPU the daemon may
    /// use (which the device's thread shares), or `None` when the driver's
    /// is the only one.
    pub fn checker_cpu(&self) -> Option<u32> {
        self.daemon.as_ref().and_then(|set| cpus(set).next()).map(|c| c as u32)
    }

    /// Binds the calling process to the driver's CPU: called between fork
    /// and exec, so it only makes the (async-signal-safe) system call.
    pub fn place_driver_process(&self) -> io::Result<()> {
        Ok(sched_setaffinity(Pid::from_raw(0), &self.driver)?)
    }
}

/// The CPUs in `set`.
fn cpus(set: &CpuSet) -> impl Iterator<Item = usize> + '_ {
    (0..CpuSet::count()).filter(move |&c| set.is_set(c).unwrap_or(false))
}

/// The set of `cpus`, each below CpuSet::count().
fn set_of(cpus: impl IntoIterator<Item = usize>) -> CpuSet {
    let mut set = CpuSet::new();
    for c in cpus {
        set.set(c).unwrap_or_else(|_| panic!("CPU {c} outside a cpu_set_t"));
    }
    set
}

/// "0-1,3", as /proc's Cpus_allowed_list writes a set.
fn cpu_list(set: &CpuSet) -> String {
    let cpus: Vec<usize> = cpus(set).collect();
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        while i + 1 < cpus.len() && cpus[i + 1] == cpus[i] + 1 {
            i += 1;
        }
        ranges.push(if cpus[i] == start { start.to_string() } else { format!("{start}-{}", cpus[i]) });
        i += 1;
    }
    ranges.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_thread_gets_every_other_allowed_cpu() {
        let p = Placement::within(1, &set_of([0, 1, 2, 5])).unwrap();
        assert_eq!(cpu_list(&p.driver), "1");
        assert_eq!(cpu_list(&p.daemon.unwrap()), "0,2,5");
    }

    #[test]
    fn the_checker_gets_a_cpu_other_than_the_drivers_if_there_is_one() {
        assert_eq!(Placement::within(0, &set_of([0, 1, 2])).unwrap().checker_cpu(), Some(1));
        assert_eq!(Placement::within(1, &set_of([0, 1])).unwrap().checker_cpu(), Some(0));
        assert_eq!(Placement::within(3, &set_of([3])).unwrap().checker_cpu(), None);
    }

    #[test]
    fn the_only_cpu_is_shared() {
        let p = Placement::within(3, &set_of([3])).unwrap();
        assert!(p.daemon.is_none());
    }

    #[test]
    fn a_cpu_outside_the_daemons_affinity_is_refused_with_the_allowed_list() {
        let err = Placement::within(2, &set_of([0, 1])).unwrap_err();
        assert_eq!(err, "CPU 2 is not one the daemon may run on (allowed: 0-1)");
        assert!(Placement::within(100_000, &set_of([0])).is_err());
    }

    #[test]
    fn a_poll_window_is_one_microsecond_to_a_second() {
        let p = Placement::within(1, &set_of([0, 1])).unwrap();
        assert_eq!(p.polling(None).unwrap().poll_us, None);
        assert_eq!(p.polling(Some(30_000)).unwrap().poll_us, Some(30_000));
        assert_eq!(p.polling(Some(0)).unwrap_err(), "--poll-us 0: the window is 1 to 1000000 microseconds");
        assert!(p.polling(Some(MAX_POLL_US + 1)).is_err());
    }
}
