// SPDX-License-Identifier: GPL-2.0
//! The trace region as the checker sees it: shared memory that an untrusted
//! process writes. Nothing read from it is used before it is checked, and
//! nothing is read through a Rust reference to a struct in it: the driver
//! can change any byte at any time, so every read is a volatile copy and
//! the shared counters are atomics.

use std::fs::File;
use std::mem::{offset_of, size_of};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use memmap2::MmapMut;
use thiserror::Error;

use crate::trace::*;

/// Why a region is refused: each message names the field and the value.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RegionError {
    #[error("the region is {0} bytes, smaller than its header")]
    TooSmall(usize),
    #[error("magic is {0:#x}, not US_TRACE_MAGIC {TRACE_MAGIC:#x}: this is not a trace region")]
    Magic(u32),
    #[error("version is {0}, this checker speaks version {TRACE_VERSION}")]
    Version(u32),
    #[error("gate_mode is {0}, not triage (0), permissive (1) or stringent (2)")]
    GateMode(u32),
    #[error("ring_entries is {0}, not a power of two")]
    RingEntries(u32),
    #[error("the ring ({entries} events at offset {offset:#x}) does not fit the {size}-byte region after the header")]
    RingPlace { offset: u64, entries: u32, size: usize },
    #[error("nsites is {0}, more than US_TRACE_MAX_SITES {TRACE_MAX_SITES}")]
    TooManySites(u32),
    #[error("the site table ({nsites} sites at offset {offset:#x}) does not fit the region after the header")]
    SitesPlace { offset: u64, nsites: u32 },
    #[error("the site table and the ring overlap")]
    Overlap,
    #[error("site {index} (ret {ret:#x}) is not after site {} (ret {prev:#x}): the table must be sorted by ret", index - 1)]
    SitesUnsorted { index: usize, ret: u32, prev: u32 },
    #[error("site {index} names module {module}, but there are {nmodules}")]
    SiteModule { index: usize, module: u16, nmodules: u32 },
    #[error("nmodules is {0}, more than US_TRACE_MAX_MODULES {TRACE_MAX_MODULES}")]
    TooManyModules(u32),
    #[error("module {0}'s path is not NUL-terminated within {MODULE_PATH_MAX} bytes")]
    PathUnterminated(usize),
    #[error("module {0}'s path is empty or not UTF-8")]
    PathInvalid(usize),
    #[error("module {index}'s image ({text:#x} + {size:#x}) wraps around the address space")]
    ModuleImage { index: usize, text: u64, size: u64 },
    #[error("the DMA arena ({arena:#x} + {size:#x}, iova {iova:#x}) wraps around the address space")]
    Arena { arena: u64, iova: u64, size: u64 },
    #[error("the checker's line is not zero (approved {approved}, verdict_at {verdict_at}, checker_pid {pid}): another checker used this region; give each checker a fresh one")]
    CheckerLine { approved: u64, verdict_at: u64, pid: u32 },
}

/// How the gate treats the driver's device writes (`enum us_gate_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateMode {
    /// Writes flow; findings are only reported: nothing is fatal.
    Triage,
    /// Writes flow; a verdict stops the next one.
    Permissive,
    /// Each device write waits until everything before it is approved.
    Stringent,
}

/// A module of the table, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    pub path: String,
    /// The loaded image, for the runtime's own call sites.
    pub text: u64,
    pub text_size: u64,
}

/// What the driver declared before `ready`, checked and copied out of the
/// region so that it cannot change under the checker.
#[derive(Clone, Debug)]
pub struct Config {
    pub gate_mode: GateMode,
    pub ring_offset: u64,
    pub ring_entries: u32,
    pub percpu_base: u64,
    pub arena: u64,
    pub arena_iova: u64,
    pub arena_size: u64,
    pub modules: Vec<Module>,
    pub sites: Vec<TraceSite>,
}

pub struct Region {
    base: NonNull<u8>,
    len: usize,
    /// The mapping or the buffer `base` points into, kept alive.
    _backing: Box<dyn Send>,
}

// SAFETY: the memory is shared with another process anyway; every access
// goes through volatile copies or atomics.
unsafe impl Send for Region {}

impl Region {
    /// Maps the region the daemon passed: shared, read-write, its whole size.
    pub fn map(file: &File) -> std::io::Result<Region> {
        // SAFETY: the file is a memfd shared with the driver process; we
        // never form references into it (see the module's comment).
        let mut map = unsafe { MmapMut::map_mut(file)? };
        let (base, len) = (NonNull::new(map.as_mut_ptr()).expect("mmap returns non-null"), map.len());
        Ok(Region { base, len, _backing: Box::new(map) })
    }

    /// A zero-filled region in this process's memory, for playing both sides
    /// in tests.
    pub fn anonymous(len: usize) -> Region {
        let mut words = vec![0u64; len.div_ceil(8)].into_boxed_slice();
        let base = NonNull::new(words.as_mut_ptr().cast::<u8>()).unwrap();
        Region { base, len, _backing: Box::new(words) }
    }

    fn ptr(&self, offset: usize, size: usize, align: usize) -> *mut u8 {
        assert!(offset.checked_add(size).is_some_and(|end| end <= self.len) && offset % align == 0,
                "{size} bytes at {offset:#x} are outside the region or misaligned: a checker bug, offsets are validated");
        // SAFETY: in bounds, checked above.
        unsafe { self.base.as_ptr().add(offset) }
    }

    /// A copy of the `T` at `offset`.
    pub fn read<T: Copy>(&self, offset: usize) -> T {
        let p = self.ptr(offset, size_of::<T>(), std::mem::align_of::<T>());
        // SAFETY: in bounds and aligned; T is plain data (the region's structs
        // and integers), valid for any bits.
        unsafe { p.cast::<T>().read_volatile() }
    }

    /// Writes `value` at `offset`: the checker writes only its own line, a
    /// test also plays the driver.
    pub fn write<T: Copy>(&self, offset: usize, value: T) {
        let p = self.ptr(offset, size_of::<T>(), std::mem::align_of::<T>());
        // SAFETY: in bounds and aligned.
        unsafe { p.cast::<T>().write_volatile(value) }
    }

    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: in bounds and aligned; the memory lives as long as self and
        // is only ever accessed atomically or by volatile copies.
        unsafe { AtomicU64::from_ptr(self.ptr(offset, 8, 8).cast()) }
    }

    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: as in atomic_u64.
        unsafe { AtomicU32::from_ptr(self.ptr(offset, 4, 4).cast()) }
    }

    pub fn ready(&self) -> &AtomicU32 {
        self.atomic_u32(offset_of!(TraceHeader, ready))
    }

    pub fn head(&self) -> &AtomicU64 {
        self.atomic_u64(offset_of!(TraceHeader, head))
    }

    pub fn producer_waiting(&self) -> &AtomicU32 {
        self.atomic_u32(offset_of!(TraceHeader, producer_waiting))
    }

    pub fn approved(&self) -> &AtomicU64 {
        self.atomic_u64(offset_of!(TraceHeader, approved))
    }

    pub fn verdict_at(&self) -> &AtomicU64 {
        self.atomic_u64(offset_of!(TraceHeader, verdict_at))
    }

    pub fn checker_waiting(&self) -> &AtomicU32 {
        self.atomic_u32(offset_of!(TraceHeader, checker_waiting))
    }

    pub fn checker_pid(&self) -> &AtomicU32 {
        self.atomic_u32(offset_of!(TraceHeader, checker_pid))
    }

    /// The low 32 bits of a 64-bit counter, the word a futex waits on
    /// (x86_64 is little-endian).
    pub fn low_word(&self, counter: &AtomicU64) -> &AtomicU32 {
        let offset = counter.as_ptr() as usize - self.base.as_ptr() as usize;
        self.atomic_u32(offset)
    }

    /// Refuses a region whose checker line is not zero: the line is the
    /// checker's alone, and a second checker would approve what the first
    /// one has not seen. Checked before the checker writes its pid.
    pub fn claim(&self) -> Result<(), RegionError> {
        if self.len < size_of::<TraceHeader>() {
            return Err(RegionError::TooSmall(self.len));
        }
        let (approved, verdict_at) = (self.approved().load(Ordering::Acquire), self.verdict_at().load(Ordering::Acquire));
        let pid = self.checker_pid().load(Ordering::Acquire);
        if approved != 0 || verdict_at != 0 || pid != 0 {
            return Err(RegionError::CheckerLine { approved, verdict_at, pid });
        }
        self.checker_pid().store(std::process::id(), Ordering::Release);
        Ok(())
    }

    /// Waits until the driver sets `ready` (true) or `stop` returns true
    /// (false). The driver may wake the futex on `ready`; a timeout bounds the
    /// wait if it does not, so this never spins.
    pub fn wait_ready(&self, mut stop: impl FnMut() -> bool) -> bool {
        while self.ready().load(Ordering::Acquire) == 0 {
            if stop() {
                // told to stop: a driver that got ready meanwhile is still checked
                return self.ready().load(Ordering::Acquire) != 0;
            }
            futex_wait(self.ready(), 0, Duration::from_millis(100));
        }
        true
    }

    /// Checks everything the driver wrote before `ready` and copies it out.
    pub fn config(&self) -> Result<Config, RegionError> {
        if self.len < size_of::<TraceHeader>() {
            return Err(RegionError::TooSmall(self.len));
        }
        let h: TraceHeader = self.read(0);
        if h.magic != TRACE_MAGIC {
            return Err(RegionError::Magic(h.magic));
        }
        if h.version != TRACE_VERSION {
            return Err(RegionError::Version(h.version));
        }
        let gate_mode = match h.gate_mode {
            GATE_TRIAGE => GateMode::Triage,
            GATE_PERMISSIVE => GateMode::Permissive,
            GATE_STRINGENT => GateMode::Stringent,
            other => return Err(RegionError::GateMode(other)),
        };
        if !h.ring_entries.is_power_of_two() {
            return Err(RegionError::RingEntries(h.ring_entries));
        }
        let header_end = size_of::<TraceHeader>() as u64;
        let ring = self.span(h.ring_offset, h.ring_entries as u64, size_of::<TraceEvent>())
            .ok_or(RegionError::RingPlace { offset: h.ring_offset, entries: h.ring_entries, size: self.len })?;
        if h.nsites > TRACE_MAX_SITES {
            return Err(RegionError::TooManySites(h.nsites));
        }
        let sites = self.span(h.sites_offset, h.nsites as u64, size_of::<TraceSite>())
            .ok_or(RegionError::SitesPlace { offset: h.sites_offset, nsites: h.nsites })?;
        if ring.0 < header_end {
            return Err(RegionError::RingPlace { offset: h.ring_offset, entries: h.ring_entries, size: self.len });
        }
        if h.nsites > 0 && sites.0 < header_end {
            return Err(RegionError::SitesPlace { offset: h.sites_offset, nsites: h.nsites });
        }
        if h.nsites > 0 && sites.0 < ring.1 && ring.0 < sites.1 {
            return Err(RegionError::Overlap);
        }
        if h.nmodules as usize > TRACE_MAX_MODULES {
            return Err(RegionError::TooManyModules(h.nmodules));
        }
        let mut modules = Vec::new();
        for (index, m) in h.modules[..h.nmodules as usize].iter().enumerate() {
            let len = m.path.iter().position(|&b| b == 0).ok_or(RegionError::PathUnterminated(index))?;
            let path = std::str::from_utf8(&m.path[..len]).ok().filter(|p| !p.is_empty())
                .ok_or(RegionError::PathInvalid(index))?;
            if m.text.checked_add(m.text_size).is_none() {
                return Err(RegionError::ModuleImage { index, text: m.text, size: m.text_size });
            }
            modules.push(Module { path: path.to_string(), text: m.text, text_size: m.text_size });
        }
        if h.arena.checked_add(h.arena_size).is_none() || h.arena_iova.checked_add(h.arena_size).is_none() {
            return Err(RegionError::Arena { arena: h.arena, iova: h.arena_iova, size: h.arena_size });
        }
        let mut table = Vec::with_capacity(h.nsites as usize);
        for index in 0..h.nsites as usize {
            let site: TraceSite = self.read(sites.0 as usize + index * size_of::<TraceSite>());
            if let Some(prev) = table.last().map(|p: &TraceSite| p.ret).filter(|&prev| prev >= site.ret) {
                return Err(RegionError::SitesUnsorted { index, ret: site.ret, prev });
            }
            if site.module as u32 >= h.nmodules {
                return Err(RegionError::SiteModule { index, module: site.module, nmodules: h.nmodules });
            }
            table.push(site);
        }
        Ok(Config {
            gate_mode,
            ring_offset: h.ring_offset,
            ring_entries: h.ring_entries,
            percpu_base: h.percpu_base,
            arena: h.arena,
            arena_iova: h.arena_iova,
            arena_size: h.arena_size,
            modules,
            sites: table,
        })
    }

    /// [start, end) of `count` items of `size` bytes at `offset`, if they lie
    /// within the region and are aligned to `size`'s natural alignment.
    fn span(&self, offset: u64, count: u64, size: usize) -> Option<(u64, u64)> {
        let align = size.min(8) as u64;
        let end = count.checked_mul(size as u64)?.checked_add(offset)?;
        (offset % align == 0 && end <= self.len as u64).then_some((offset, end))
    }

    /// Event `index` of the ring, a copy.
    pub fn event(&self, config: &Config, index: u64) -> TraceEvent {
        let slot = index & (config.ring_entries as u64 - 1);
        self.read(config.ring_offset as usize + slot as usize * size_of::<TraceEvent>())
    }
}

/// Sleeps while `word` holds `expected`, at most `timeout`, or until woken or
/// interrupted by a signal. The region is shared between processes, so the
/// futex is not FUTEX_PRIVATE.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: word is a valid, aligned u32 for the call's duration; the result
    // (woken, timed out, EAGAIN, EINTR) needs no handling: callers re-check.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec);
    }
}

pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: word is a valid, aligned u32.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}
