// SPDX-License-Identifier: GPL-2.0
//! One `understudy ethtool` query: the ETHTOOL requests it takes (statistics
//! come page by page) and the report they add up to.

use std::sync::mpsc::Sender;

use understudy_api::{DriverInfo, EthtoolQueries, EthtoolReport, LinkSettings, Statistic};
use understudy_protocol::ethtool::{parse_driver_info, parse_link, parse_stats_page};
use understudy_protocol::{ProtocolError, Request, ETHTOOL_DRVINFO, ETHTOOL_LINK, ETHTOOL_STATS};

pub type Answer = Sender<Result<EthtoolReport, String>>;

/// Where a job stands after one of its replies.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// Send this request too (the next page of statistics).
    Next(Request),
    Waiting,
    Done,
}

pub struct EthtoolJob {
    report: EthtoolReport,
    stats: Vec<Statistic>,
    outstanding: usize,
    answer: Answer,
}

impl EthtoolJob {
    /// The job and the requests that start it.
    pub fn start(device: String, ifname: String, queries: EthtoolQueries, answer: Answer) -> (Self, Vec<Request>) {
        let mut requests = Vec::new();
        for (wanted, cmd) in [(queries.driver_info, ETHTOOL_DRVINFO), (queries.link, ETHTOOL_LINK), (queries.stats, ETHTOOL_STATS)] {
            if wanted {
                requests.push(Request::Ethtool { cmd, first: 0 });
            }
        }
        let report = EthtoolReport { device, ifname, driver_info: None, link: None, stats: None };
        (EthtoolJob { report, stats: Vec::new(), outstanding: requests.len(), answer }, requests)
    }

    /// The driver answered `request` (one of this job's) with `status` and
    /// `data`. A refusal fails the job (the driver lives on); malformed data
    /// is the driver's protocol violation.
    pub fn answered(&mut self, request: &Request, status: i32, data: &[u8]) -> Result<Result<Progress, String>, ProtocolError> {
        let &Request::Ethtool { cmd, first } = request else { return Ok(Ok(Progress::Waiting)) };
        self.outstanding -= 1;
        let what = match cmd {
            ETHTOOL_DRVINFO => "driver info",
            ETHTOOL_LINK => "link settings",
            _ => "statistics",
        };
        if status < 0 {
            return Ok(Err(format!("the driver refused the {what} query: {}", std::io::Error::from_raw_os_error(-status))));
        }
        match cmd {
            ETHTOOL_DRVINFO => {
                let d = parse_driver_info(data)?;
                self.report.driver_info =
                    Some(DriverInfo { driver: d.driver, version: d.version, fw_version: d.fw_version, bus_info: d.bus_info });
            }
            ETHTOOL_LINK => {
                let l = parse_link(data)?;
                self.report.link = Some(LinkSettings {
                    speed: l.speed,
                    duplex: l.full_duplex.map(|full| if full { "full" } else { "half" }.to_string()),
                    autoneg: l.autoneg,
                    port: l.port,
                    link: l.link,
                });
            }
            _ => {
                let page = parse_stats_page(first, data)?;
                let got = page.stats.len();
                self.stats.extend(page.stats.into_iter().map(|(name, value)| Statistic { name, value }));
                if got > 0 && (self.stats.len() as u32) < page.total {
                    self.outstanding += 1;
                    return Ok(Ok(Progress::Next(Request::Ethtool { cmd: ETHTOOL_STATS, first: self.stats.len() as u32 })));
                }
                self.report.stats = Some(std::mem::take(&mut self.stats));
            }
        }
        Ok(Ok(if self.outstanding == 0 { Progress::Done } else { Progress::Waiting }))
    }

    pub fn finish(self) {
        let _ = self.answer.send(Ok(self.report));
    }

    pub fn fail(self, why: String) {
        let _ = self.answer.send(Err(why));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use understudy_protocol::{EthtoolStat, EthtoolStats, Wire, ETHTOOL_STATS_PER_REPLY};

    fn page(total: u32, first: u32) -> Vec<u8> {
        let n = (total - first).min(ETHTOOL_STATS_PER_REPLY as u32);
        let mut out = EthtoolStats { total, n }.as_bytes().to_vec();
        for i in first..first + n {
            let mut s = EthtoolStat { value: i.into(), ..Default::default() };
            let name = format!("stat_{i}");
            s.name[..name.len()].copy_from_slice(name.as_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        out
    }

    #[test]
    fn statistics_are_gathered_page_by_page() {
        let (tx, rx) = std::sync::mpsc::channel();
        let queries = EthtoolQueries { driver_info: false, link: false, stats: true };
        let (mut job, requests) = EthtoolJob::start("0000:00:02.0".into(), "us0".into(), queries, tx);
        assert_eq!(requests, vec![Request::Ethtool { cmd: ETHTOOL_STATS, first: 0 }]);
        let next = job.answered(&requests[0], 0, &page(20, 0)).unwrap().unwrap();
        let Progress::Next(second) = next else { panic!("{next:?}") };
        assert_eq!(second, Request::Ethtool { cmd: ETHTOOL_STATS, first: 12 });
        assert_eq!(job.answered(&second, 0, &page(20, 12)).unwrap(), Ok(Progress::Done));
        job.finish();
        let stats = rx.recv().unwrap().unwrap().stats.unwrap();
        assert_eq!(stats.len(), 20);
        assert_eq!(stats[19], Statistic { name: "stat_19".into(), value: 19 });
    }

    #[test]
    fn a_refusal_fails_the_job_and_bad_data_is_a_violation() {
        let (tx, _rx) = std::sync::mpsc::channel();
        let queries = EthtoolQueries { driver_info: true, link: true, stats: false };
        let (mut job, requests) = EthtoolJob::start("d".into(), "us0".into(), queries, tx);
        assert_eq!(requests.len(), 2);
        let refused = job.answered(&requests[1], -95, &[]).unwrap();
        assert_eq!(refused, Err("the driver refused the link settings query: Operation not supported (os error 95)".into()));
        assert!(job.answered(&requests[0], 0, &[1, 2, 3]).is_err());
    }
}
