// SPDX-License-Identifier: GPL-2.0
//! A recording of a trace (`understudy-checker --record FILE`): the region's
//! header and site table as the driver process wrote them, then every
//! event in the order it was checked. `examples/replay.rs` plays one back
//! through the checkers off-line, to time and profile them on a real
//! driver's trace rather than a synthetic one.
//!
//! The file: RECORD_MAGIC, the length of the prefix (u64, little-endian),
//! the prefix (the region's bytes from 0 to the site table's end), then
//! 32-byte events, as `us_trace_event` lays them out, to the end.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::mem::{offset_of, size_of};
use std::path::Path;

use crate::region::Region;
use crate::trace::{TraceEvent, TraceHeader, TraceSite, TRACE_REGION_SIZE};

const RECORD_MAGIC: &[u8; 8] = b"USTRACE1";

pub struct Recorder {
    out: BufWriter<File>,
}

impl Recorder {
    /// Starts a recording of `region`, whose header the checker has validated.
    pub fn create(path: &Path, region: &Region) -> std::io::Result<Recorder> {
        let header: TraceHeader = region.read(0);
        let prefix = (header.sites_offset as usize + header.nsites as usize * size_of::<TraceSite>())
            .max(size_of::<TraceHeader>());
        let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
        out.write_all(RECORD_MAGIC)?;
        out.write_all(&(prefix as u64).to_le_bytes())?;
        for offset in 0..prefix {
            out.write_all(&[region.read::<u8>(offset)])?;
        }
        Ok(Recorder { out })
    }

    pub fn event(&mut self, e: &TraceEvent) -> std::io::Result<()> {
        self.out.write_all(&e.kind_flags.to_le_bytes())?;
        self.out.write_all(&e.site.to_le_bytes())?;
        for word in [e.addr, e.arg0, e.arg1] {
            self.out.write_all(&word.to_le_bytes())?;
        }
        Ok(())
    }

    pub fn finish(mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// A recording read back: a fresh region with the recorded header and
/// sites (its counters at zero, as a new driver process leaves them) and the
/// events to play into it.
pub fn replay(path: &Path) -> std::io::Result<(Region, Vec<TraceEvent>)> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {what}", path.display()));
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    if bytes.len() < 16 || &bytes[..8] != RECORD_MAGIC {
        return Err(bad("not a recording of understudy-checker --record"));
    }
    let prefix = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    if prefix < size_of::<TraceHeader>() || prefix > TRACE_REGION_SIZE as usize || bytes.len() < 16 + prefix {
        return Err(bad("its prefix does not fit"));
    }
    let region = Region::anonymous(TRACE_REGION_SIZE as usize);
    for (offset, &b) in bytes[16..16 + prefix].iter().enumerate() {
        region.write(offset, b);
    }
    for counter in [offset_of!(TraceHeader, head), offset_of!(TraceHeader, approved), offset_of!(TraceHeader, verdict_at)] {
        region.write(counter, 0u64);
    }
    for flag in [offset_of!(TraceHeader, checker_waiting), offset_of!(TraceHeader, checker_pid),
                 offset_of!(TraceHeader, producer_waiting)] {
        region.write(flag, 0u32);
    }
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap());
    let events = bytes[16 + prefix..].chunks_exact(size_of::<TraceEvent>()).map(|e| TraceEvent {
        kind_flags: u32::from_le_bytes(e[0..4].try_into().unwrap()),
        site: u32::from_le_bytes(e[4..8].try_into().unwrap()),
        addr: word(&e[8..16]), arg0: word(&e[16..24]), arg1: word(&e[24..32]),
    }).collect();
    Ok((region, events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{TRACE_MAGIC, EV_ACCESS};

    #[test]
    fn a_recording_plays_back_what_was_recorded() {
        let region = Region::anonymous(TRACE_REGION_SIZE as usize);
        region.write(offset_of!(TraceHeader, magic), TRACE_MAGIC);
        region.write(offset_of!(TraceHeader, head), 99u64);
        let path = std::env::temp_dir().join(format!("understudy-record-{}", std::process::id()));
        let mut r = Recorder::create(&path, &region).unwrap();
        let e = TraceEvent { kind_flags: EV_ACCESS as u32, site: 7, addr: 0x1000, arg0: 1, arg1: 2 };
        r.event(&e).unwrap();
        r.finish().unwrap();
        let (again, events) = replay(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(again.read::<u32>(offset_of!(TraceHeader, magic)), TRACE_MAGIC);
        assert_eq!(again.read::<u64>(offset_of!(TraceHeader, head)), 0);
        let fields = |e: &TraceEvent| (e.kind_flags, e.site, e.addr, e.arg0, e.arg1);
        assert_eq!(events.iter().map(fields).collect::<Vec<_>>(), vec![fields(&e)]);
    }
}
