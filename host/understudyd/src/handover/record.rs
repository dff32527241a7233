// SPDX-License-Identifier: GPL-2.0
//! The records of handovers that `status` shows (`HandoverRecord`): how
//! long each phase took, the first frame through the successor, and the
//! newest records kept.

use std::time::{Duration, Instant};

use understudy_api::{HandoverRecord, RECOVERIES_KEPT};

/// A handover whose successor serves but has not passed a frame yet: when
/// one passes, the record gets its first frame and the downtime (from the
/// predecessor's last frame). An idle interface may never pass one.
pub struct FirstFrameWatch {
    began: Instant,
    last_packet: Option<Instant>,
}

impl FirstFrameWatch {
    pub fn new(began: Instant, last_packet: Option<Instant>) -> Self {
        FirstFrameWatch { began, last_packet }
    }

    pub fn frame_passed(self, record: &mut HandoverRecord, now: Instant) {
        record.first_packet_ms = Some(round_ms(now.duration_since(self.began)));
        record.downtime_ms = self.last_packet.map(|t| round_ms(now.duration_since(t)));
    }
}

/// Appends a restart's record to `status`'s list, dropping the oldest
/// beyond `RECOVERIES_KEPT`.
pub fn keep_record(records: &mut Vec<HandoverRecord>, record: HandoverRecord) {
    if records.len() >= RECOVERIES_KEPT {
        records.drain(..=records.len() - RECOVERIES_KEPT);
    }
    records.push(record);
}

/// A phase's milliseconds for a log line, "-" if it did not happen.
pub fn ms_or_dash(ms: Option<f64>) -> String {
    ms.map_or("-".to_string(), |v| format!("{v:.1}"))
}

pub fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_keeps_the_newest_records_only() {
        let record = |n: usize| HandoverRecord { cause: format!("death {n}"), ..HandoverRecord::default() };
        let mut records = Vec::new();
        for n in 0..RECOVERIES_KEPT + 5 {
            keep_record(&mut records, record(n));
        }
        assert_eq!(records.len(), RECOVERIES_KEPT);
        assert_eq!(records[0].cause, "death 5");
        assert_eq!(records.last().unwrap().cause, format!("death {}", RECOVERIES_KEPT + 4));
    }
}
