// SPDX-License-Identifier: GPL-2.0
//! Every path of the handover, without a device: frames are plain numbers.

use super::*;
use understudy_protocol::RegisteredInfo;

use crate::class::net::shadow::{NetShadow, PassiveLog, RxMode, TapConfig};

const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
const CSUM_TSO: u64 = (1 << 1) | (1 << 16);

fn e1000(features: u64) -> RegisteredInfo {
    RegisteredInfo {
        perm_addr: MAC, dev_addr: MAC, mtu: 1500, min_mtu: 46, max_mtu: 16110, features, hw_features: features,
        n_tx_queues: 1, n_rx_queues: 1, driver: "e1000".into(), version: "".into(), offloads: 0,
    }
}

fn module(name: &str) -> Vec<ModuleInfo> {
    vec![ModuleInfo { path: format!("/lib/modules/{name}/e1000.ko"), sha256: name.into() }]
}

const E1000_AT: &str = "0000:00:03.0";

/// `module(name)` on the e1000 at `E1000_AT`.
fn on_e1000(name: &str) -> Driver {
    Driver { device: E1000_AT.parse().unwrap(), modules: module(name) }
}

fn loaded(half: &str) -> Event<PassiveLog, u32> {
    Event::Loaded(Ok(Loaded { kernel_half: half.into(), registration: None }))
}

/// The log of an open e1000 with MTU 1400: replayed as SET_MTU, OPEN, SET_RX_MODE.
fn open_log() -> PassiveLog {
    let mut shadow = NetShadow::registered(e1000(CSUM_TSO));
    let tap = TapConfig { up: true, mtu: 1400, mac: MAC, rx: RxMode::default(), queues: 1 };
    while let Some(crate::class::net::shadow::Action::Send(_)) = shadow.next(&tap) {
        shadow.answered(0);
    }
    shadow.set_carrier(true);
    shadow.log().clone()
}

fn ms(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

/// Feeds the successor through registration and the whole replay, accepting
/// every request; returns the actions after the last answer.
fn register_and_replay(h: &mut Handover<PassiveLog, u32>, info: RegisteredInfo, t: Instant) -> Vec<Action<PassiveLog, u32>> {
    let mut actions = h.on(Event::Registered(info.clone()), t);
    assert_eq!(actions.remove(0), Action::Adopt(info));
    let mut sent = Vec::new();
    while let [Action::Send(request)] = actions.as_slice() {
        sent.push(request.clone());
        actions = h.on(Event::ReplayAnswered { status: 0 }, t);
    }
    assert_eq!(sent, vec![Request::SetMtu(1400), Request::Open, Request::SetRxMode { flags: 0, multicast: vec![] }]);
    actions
}

#[test]
fn a_restart_replays_the_log_waits_for_the_link_then_gives_the_frames_back() {
    let t0 = Instant::now();
    let reason = Reason::Death { cause: "killed by signal 9".into() };
    let (mut h, actions) = Handover::restart(reason, open_log(), on_e1000("55"), vec![7, 8], t0, 3.0, ms(t0, 10));
    assert_eq!(actions, vec![Action::Start(on_e1000("55"))]);
    assert!(!h.serving() && h.holds_configuration());
    assert_eq!(h.on(Event::Started(StartKind::Template), ms(t0, 11)), vec![]);
    let actions = register_and_replay(&mut h, e1000(CSUM_TSO), ms(t0, 40));
    assert_eq!(actions, vec![Action::WaitForReady]);
    assert_eq!(h.phase, Phase::AwaitingReady);
    assert!(!h.holds_configuration(), "the TAP's own changes go to the driver while its link comes up");
    assert_eq!(h.on(Event::Ready(false), ms(t0, 50)), vec![]);
    assert_eq!(h.on(Event::Ready(true), ms(t0, 2040)), vec![Action::Resubmit(vec![7, 8]), Action::Done(Outcome::Committed)]);
    let r = h.record();
    assert_eq!((r.reason, &r.outcome, r.start), (HandoverReason::Death, &HandoverOutcome::Recovered, StartKind::Template));
    assert_eq!((r.stop_ms, r.device_stop_ms, r.start_ms, r.replay_ms, r.link_ms), (10.0, 3.0, Some(30.0), Some(0.0), Some(2000.0)));
    assert_eq!((r.serving_ms, r.tx_resubmitted), (Some(2040.0), 2));
}

#[test]
fn a_successor_whose_carrier_came_first_gets_its_frames_at_once_and_a_silent_link_is_given_up_on() {
    let t0 = Instant::now();
    let (mut h, _) = Handover::restart(Reason::Requested, open_log(), on_e1000("55"), vec![1], t0, 1.0, t0);
    let mut actions = h.on(Event::Registered(e1000(CSUM_TSO)), t0);
    h.on(Event::Ready(true), t0);
    while let Some(Action::Send(_)) = actions.last() {
        actions = h.on(Event::ReplayAnswered { status: 0 }, t0);
    }
    assert_eq!(actions, vec![Action::Resubmit(vec![1]), Action::Done(Outcome::Committed)]);
    assert_eq!(h.record().reason, HandoverReason::Requested);

    let (mut h, _) = Handover::restart(Reason::Requested, open_log(), on_e1000("55"), vec![], t0, 1.0, t0);
    assert_eq!(register_and_replay(&mut h, e1000(CSUM_TSO), t0), vec![Action::WaitForReady]);
    assert_eq!(h.on(Event::ReadyWaitOver, ms(t0, 10_000)), vec![Action::Resubmit(vec![]), Action::Done(Outcome::Committed)]);
}

#[test]
fn a_recovery_that_cannot_take_the_place_ends_the_successor_for_good() {
    let t0 = Instant::now();
    let (mut h, _) = Handover::restart(Reason::Requested, open_log(), on_e1000("55"), vec![4], t0, 1.0, t0);
    let other = RegisteredInfo { perm_addr: [2, 0, 0, 0, 0, 1], ..e1000(CSUM_TSO) };
    let actions = h.on(Event::Registered(other), t0);
    assert!(matches!(actions.as_slice(), [Action::EndSuccessor(why)] if why.contains("permanent 02:00:00:00:00:01")));
    let actions = h.on(Event::SuccessorFailed { cause: "ended by the daemon".into(), uncompleted: vec![5] }, t0);
    let [Action::Done(Outcome::Failed { replaceable, uncompleted, log, .. })] = actions.as_slice() else { panic!("{actions:?}") };
    assert!(!replaceable);
    assert_eq!(uncompleted, &vec![4, 5], "the predecessor's frames first");
    assert_eq!(log, &open_log());
}

#[test]
fn a_recovery_whose_successor_dies_hands_the_death_back_with_the_log() {
    let t0 = Instant::now();
    let (mut h, _) = Handover::<PassiveLog, u32>::restart(Reason::Death { cause: "hung".into() }, open_log(), on_e1000("55"), vec![], t0, 1.0, t0);
    h.on(Event::Registered(e1000(CSUM_TSO)), t0);
    let actions = h.on(Event::SuccessorFailed { cause: "killed by signal 11".into(), uncompleted: vec![] }, t0);
    assert!(matches!(actions.as_slice(), [Action::Done(Outcome::Failed { replaceable: true, why, .. })] if why.contains("signal 11")));
    assert!(matches!(h.record().outcome, HandoverOutcome::Failed(_)));
}

#[test]
fn an_update_loads_while_the_predecessor_serves_then_switches_and_commits_after_probation() {
    let t0 = Instant::now();
    let (mut h, actions) = Handover::<PassiveLog, u32>::update(module("53"), false, open_log(), on_e1000("50"), t0);
    assert_eq!(actions, vec![Action::Load(on_e1000("53"))]);
    assert!(h.serving() && h.predecessor_serves() && !h.holds_configuration());
    assert_eq!(h.on(loaded("6.1.0-53"), ms(t0, 300)), vec![Action::StopPredecessor]);
    assert!(!h.serving(), "from here the TAP's frames wait");
    assert_eq!(h.on(Event::Quiesced { uncompleted: vec![9], device_stop_ms: 2.0 }, ms(t0, 305)),
               vec![Action::Start(on_e1000("53"))]);
    h.on(Event::Started(StartKind::Probe), ms(t0, 306));
    assert_eq!(register_and_replay(&mut h, e1000(CSUM_TSO), ms(t0, 805)), vec![Action::WaitForReady]);
    assert_eq!(h.on(Event::Ready(true), ms(t0, 900)), vec![Action::Resubmit(vec![9]), Action::StartProbation(PROBATION)]);
    assert!(h.serving() && !h.predecessor_serves());
    assert_eq!(h.record().outcome, HandoverOutcome::UnderWay);
    assert_eq!(h.on(Event::ProbationOver, ms(t0, 5900)), vec![Action::Done(Outcome::Committed)]);
    let r = h.record();
    assert_eq!((&r.outcome, r.kernel_half.as_deref()), (&HandoverOutcome::Updated, Some("6.1.0-53")));
    assert_eq!((r.load_ms, r.stop_ms, r.start_ms, r.link_ms), (Some(300.0), 5.0, Some(500.0), Some(95.0)));
    assert_eq!((r.from_modules.clone(), r.to_modules.clone()), (Some(module("50")), Some(module("53"))));
    assert_eq!((r.from_device.clone(), r.to_device.clone()), (None, None), "an update stays on its device");
}

#[test]
fn an_update_refused_at_load_never_stops_the_predecessor() {
    let t0 = Instant::now();
    let (mut h, _) = Handover::<PassiveLog, u32>::update(module("48"), false, open_log(), on_e1000("50"), t0);
    let actions = h.on(Event::Loaded(Err("crc-mismatch: register_netdev".into())), ms(t0, 50));
    assert_eq!(actions, vec![Action::Done(Outcome::Refused { why: "crc-mismatch: register_netdev".into() })]);
    assert!(!actions.iter().any(|a| matches!(a, Action::StopPredecessor | Action::Start(_))));
    assert_eq!(h.record().outcome.to_string(), "refused: crc-mismatch: register_netdev");
}

#[test]
fn an_update_that_offers_less_rolls_back_to_the_predecessors_modules_with_the_same_log_and_frames() {
    let t0 = Instant::now();
    let (mut h, _) = Handover::<PassiveLog, u32>::update(module("nocsum"), false, open_log(), on_e1000("55"), t0);
    h.on(loaded("6.1.0-55"), t0);
    h.on(Event::Quiesced { uncompleted: vec![1, 2], device_stop_ms: 1.0 }, t0);
    let actions = h.on(Event::Registered(e1000(1 << 16)), ms(t0, 400));
    assert!(matches!(actions.as_slice(), [Action::EndSuccessor(why)] if why.contains("tx-checksum-ipv4")), "{actions:?}");
    let actions = h.on(Event::SuccessorFailed { cause: "ended by the daemon".into(), uncompleted: vec![3] }, ms(t0, 410));
    assert_eq!(actions, vec![Action::Start(on_e1000("55"))]);
    // The predecessor's version registers as before and is held to the whole log.
    assert_eq!(register_and_replay(&mut h, e1000(CSUM_TSO), ms(t0, 500)), vec![Action::WaitForReady]);
    let actions = h.on(Event::Ready(true), ms(t0, 600));
    let [Action::Resubmit(frames), Action::Done(Outcome::RolledBack { why })] = actions.as_slice() else { panic!("{actions:?}") };
    assert_eq!(frames, &vec![1, 2, 3]);
    assert!(why.contains("tx-checksum-ipv4"), "{why}");
    assert!(matches!(h.record().outcome, HandoverOutcome::RolledBack(_)));
    assert_eq!(h.record().rolled_back_at_ms, Some(410.0));
}

#[test]
fn an_update_told_to_allow_feature_loss_goes_on_with_fewer_features() {
    let t0 = Instant::now();
    let (mut h, _) = Handover::<PassiveLog, u32>::update(module("nocsum"), true, open_log(), on_e1000("55"), t0);
    h.on(loaded("6.1.0-55"), t0);
    h.on(Event::Quiesced { uncompleted: vec![], device_stop_ms: 1.0 }, t0);
    assert_eq!(register_and_replay(&mut h, e1000(1 << 16), t0), vec![Action::WaitForReady]);
}

#[test]
fn a_crash_on_probation_rolls_back_and_a_failed_rollback_is_a_failure_with_the_log() {
    let t0 = Instant::now();
    let (mut h, _) = Handover::<PassiveLog, u32>::update(module("53"), false, open_log(), on_e1000("50"), t0);
    h.on(loaded("6.1.0-53"), t0);
    h.on(Event::Quiesced { uncompleted: vec![], device_stop_ms: 1.0 }, t0);
    register_and_replay(&mut h, e1000(CSUM_TSO), t0);
    h.on(Event::Ready(true), t0);
    assert_eq!(h.phase, Phase::Probation);
    let actions = h.on(Event::SuccessorFailed { cause: "killed by signal 11".into(), uncompleted: vec![6] }, ms(t0, 1000));
    assert_eq!(actions, vec![Action::Start(on_e1000("50"))]);
    assert_eq!(h.on(Event::ProbationOver, ms(t0, 5000)), vec![], "the window of the failed version is over");
    let actions = h.on(Event::SuccessorFailed { cause: "killed by signal 9".into(), uncompleted: vec![] }, ms(t0, 1100));
    let [Action::Done(Outcome::Failed { why, uncompleted, replaceable: true, .. })] = actions.as_slice() else { panic!("{actions:?}") };
    assert!(why.contains("signal 11") && why.contains("rolling back failed too: killed by signal 9"), "{why}");
    assert_eq!(uncompleted, &vec![6]);
}

#[test]
fn a_refused_replay_is_named_and_rolls_an_update_back() {
    let t0 = Instant::now();
    let (mut h, _) = Handover::<PassiveLog, u32>::update(module("53"), false, open_log(), on_e1000("50"), t0);
    h.on(loaded("6.1.0-53"), t0);
    h.on(Event::Quiesced { uncompleted: vec![], device_stop_ms: 1.0 }, t0);
    h.on(Event::Registered(e1000(CSUM_TSO)), t0);
    let actions = h.on(Event::ReplayAnswered { status: -22 }, t0);
    assert!(matches!(actions.as_slice(), [Action::EndSuccessor(why)] if why.starts_with("it refused SET_MTU 1400")), "{actions:?}");
    let actions = h.on(Event::SuccessorFailed { cause: "ended".into(), uncompleted: vec![] }, t0);
    assert_eq!(actions, vec![Action::Start(on_e1000("50"))]);
}

const RTL_AT: &str = "0000:00:04.0";
const RTL_MAC: [u8; 6] = [0x52, 0x54, 0, 0xab, 0xcd, 0xef];

fn to_rtl() -> Driver {
    Driver { device: RTL_AT.parse().unwrap(), modules: vec![ModuleInfo { path: "/m/8139cp.ko".into(), sha256: "cp".into() }] }
}

/// What 8139cp registers: its own MAC, fewer NETIF features than e1000, the offloads given.
fn rtl(offloads: u32) -> RegisteredInfo {
    RegisteredInfo { perm_addr: RTL_MAC, dev_addr: RTL_MAC, max_mtu: 4096, features: 1 << 16, offloads,
                     driver: "8139cp".into(), ..e1000(0) }
}

/// The log of an open e1000 whose interface advertises checksum offload.
fn advertising_csum() -> PassiveLog {
    let mut log = open_log();
    log.registered.offloads = understudy_protocol::OFFLOAD_CSUM;
    log
}

fn probed(info: RegisteredInfo) -> Event<PassiveLog, u32> {
    Event::Loaded(Ok(Loaded { kernel_half: "6.1.0-55".into(), registration: Some(info) }))
}

#[test]
fn a_move_probes_its_destination_first_then_switches_sets_the_mac_announces_and_commits_after_probation() {
    use understudy_protocol::OFFLOAD_CSUM;
    let t0 = Instant::now();
    let (mut h, actions) = Handover::<PassiveLog, u32>::migrate(to_rtl(), advertising_csum(), on_e1000("55"), t0);
    assert_eq!(actions, vec![Action::Load(to_rtl())]);
    assert!(h.serving() && h.predecessor_serves(), "the old driver serves while the destination is probed");
    assert_eq!(h.on(probed(rtl(OFFLOAD_CSUM)), ms(t0, 400)), vec![Action::StopPredecessor]);
    assert_eq!(h.on(Event::Quiesced { uncompleted: vec![5], device_stop_ms: 2.0 }, ms(t0, 410)), vec![Action::Start(to_rtl())]);
    let mut actions = h.on(Event::Registered(rtl(OFFLOAD_CSUM)), ms(t0, 600));
    assert_eq!(actions.remove(0), Action::Adopt(rtl(OFFLOAD_CSUM)));
    let mut sent = Vec::new();
    while let [Action::Send(request)] = actions.as_slice() {
        sent.push(request.clone());
        actions = h.on(Event::ReplayAnswered { status: 0 }, ms(t0, 610));
    }
    assert_eq!(sent, vec![Request::SetMtu(1400), Request::SetMac(MAC), Request::Open,
                          Request::SetRxMode { flags: 0, multicast: vec![] }], "the interface keeps its MAC");
    assert_eq!(actions, vec![Action::WaitForReady]);
    assert_eq!(h.on(Event::Ready(true), ms(t0, 700)),
               vec![Action::Resubmit(vec![5]), Action::Announce, Action::StartProbation(PROBATION)]);
    h.announced(2);
    assert_eq!(h.on(Event::ProbationOver, ms(t0, 5700)), vec![Action::Done(Outcome::Committed)]);
    let r = h.record();
    assert_eq!((r.reason, &r.outcome, r.announced), (HandoverReason::Migrate, &HandoverOutcome::Moved, 2));
    assert_eq!((r.from_device.as_deref(), r.to_device.as_deref()), (Some(E1000_AT), Some(RTL_AT)));
    assert_eq!((r.from_modules.clone(), r.to_modules.clone()), (Some(module("55")), Some(to_rtl().modules)));
    assert_eq!((r.load_ms, r.stop_ms, r.link_ms), (Some(400.0), 10.0, Some(90.0)));
}

#[test]
fn a_move_is_refused_before_anything_stops_if_the_destination_lacks_an_advertised_offload() {
    let t0 = Instant::now();
    let (mut h, _) = Handover::<PassiveLog, u32>::migrate(to_rtl(), advertising_csum(), on_e1000("55"), t0);
    let actions = h.on(probed(rtl(0)), t0);
    let [Action::Done(Outcome::Refused { why })] = actions.as_slice() else { panic!("{actions:?}") };
    assert!(why.contains("lacks offloads the interface advertises: tx-checksum"), "{why}");

    let (mut h, _) = Handover::<PassiveLog, u32>::migrate(to_rtl(), advertising_csum(), on_e1000("55"), t0);
    let actions = h.on(Event::Loaded(Ok(Loaded { kernel_half: "6.1.0-55".into(), registration: None })), t0);
    assert!(matches!(actions.as_slice(), [Action::Done(Outcome::Refused { why })] if why.contains("no net_device")));
    assert!(matches!(h.record().outcome, HandoverOutcome::Refused(_)));
}

#[test]
fn a_move_whose_successor_fails_goes_back_to_the_old_device_and_announces_it_there() {
    use understudy_protocol::OFFLOAD_CSUM;
    let t0 = Instant::now();
    let (mut h, _) = Handover::<PassiveLog, u32>::migrate(to_rtl(), advertising_csum(), on_e1000("55"), t0);
    h.on(probed(rtl(OFFLOAD_CSUM)), t0);
    h.on(Event::Quiesced { uncompleted: vec![1], device_stop_ms: 1.0 }, t0);
    let actions = h.on(Event::SuccessorFailed { cause: "killed by signal 11".into(), uncompleted: vec![2] }, ms(t0, 300));
    assert_eq!(actions, vec![Action::Start(on_e1000("55"))]);
    // The old device is held to the whole log again, its own MAC included.
    let actions = register_and_replay(&mut h, e1000(CSUM_TSO), ms(t0, 500));
    assert_eq!(actions, vec![Action::WaitForReady]);
    let actions = h.on(Event::Ready(true), ms(t0, 600));
    let [Action::Resubmit(frames), Action::Announce, Action::Done(Outcome::RolledBack { why })] = actions.as_slice()
    else { panic!("{actions:?}") };
    assert_eq!(frames, &vec![1, 2]);
    assert!(why.contains("signal 11"), "{why}");
}

#[test]
fn a_failover_starts_on_the_standby_at_once_and_has_nothing_to_roll_back_to() {
    use understudy_protocol::OFFLOAD_CSUM;
    let t0 = Instant::now();
    let cause = "its device is being removed".to_string();
    let (mut h, actions) = Handover::<PassiveLog, u32>::failover(to_rtl(), cause.clone(), advertising_csum(), on_e1000("55"),
                                                     vec![3], t0, 2.0, ms(t0, 5));
    assert_eq!(actions, vec![Action::Start(to_rtl())]);
    assert!(!h.serving() && h.holds_configuration());
    let mut actions = h.on(Event::Registered(rtl(OFFLOAD_CSUM)), ms(t0, 300));
    assert_eq!(actions.remove(0), Action::Adopt(rtl(OFFLOAD_CSUM)));
    while let [Action::Send(_)] = actions.as_slice() {
        actions = h.on(Event::ReplayAnswered { status: 0 }, ms(t0, 310));
    }
    assert_eq!(actions, vec![Action::WaitForReady]);
    assert_eq!(h.on(Event::ReadyWaitOver, ms(t0, 400)),
               vec![Action::Resubmit(vec![3]), Action::Announce, Action::Done(Outcome::Committed)]);
    let r = h.record();
    assert_eq!((r.reason, &r.outcome), (HandoverReason::Failover, &HandoverOutcome::Moved));
    assert_eq!(r.cause, format!("{cause}: failing over to {RTL_AT}"));
    assert_eq!((r.from_device.as_deref(), r.to_device.as_deref()), (Some(E1000_AT), Some(RTL_AT)));

    let (mut h, _) = Handover::<PassiveLog, u32>::failover(to_rtl(), cause, advertising_csum(), on_e1000("55"), vec![], t0, 2.0, t0);
    let actions = h.on(Event::SuccessorFailed { cause: "killed by signal 11".into(), uncompleted: vec![4] }, t0);
    assert!(matches!(actions.as_slice(), [Action::Done(Outcome::Failed { replaceable: true, .. })]), "{actions:?}");
}

#[test]
fn a_parked_interface_waits_for_a_device_then_goes_on_as_a_failover() {
    use understudy_protocol::OFFLOAD_CSUM;
    let t0 = Instant::now();
    let cause = "its device is being removed".to_string();
    let (mut h, actions) = Handover::<PassiveLog, u32>::park(cause, advertising_csum(), on_e1000("55"), vec![8], t0, 1.0, ms(t0, 5));
    assert_eq!(actions, vec![Action::Park]);
    assert!(h.parked() && !h.serving());
    assert_eq!(h.on(Event::Ready(true), ms(t0, 100)), vec![], "nothing drives it");
    assert_eq!(h.record().outcome, HandoverOutcome::UnderWay);
    assert_eq!((h.record().from_device.as_deref(), h.record().to_device.as_deref()), (Some(E1000_AT), None));
    assert_eq!(h.on(Event::Attach(to_rtl()), ms(t0, 9005)), vec![Action::Start(to_rtl())]);
    assert!(!h.parked());
    let mut actions = h.on(Event::Registered(rtl(OFFLOAD_CSUM)), ms(t0, 9300));
    actions.remove(0);
    while let [Action::Send(_)] = actions.as_slice() {
        actions = h.on(Event::ReplayAnswered { status: 0 }, ms(t0, 9310));
    }
    assert_eq!(actions, vec![Action::WaitForReady]);
    assert_eq!(h.on(Event::Ready(true), ms(t0, 9400)),
               vec![Action::Resubmit(vec![8]), Action::Announce, Action::Done(Outcome::Committed)]);
    let r = h.record();
    assert_eq!((r.reason, &r.outcome, r.parked_ms), (HandoverReason::Failover, &HandoverOutcome::Moved, Some(9000.0)));
    assert_eq!((r.to_device.as_deref(), r.to_modules.clone()), (Some(RTL_AT), Some(to_rtl().modules)));
}
