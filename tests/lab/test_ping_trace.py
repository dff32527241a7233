"""ping_trace's reading of a trace, on a hand-written one (no guest)."""
import pytest

from lab.experiments import ping_trace

TX = 301          # the driver's TX thread
PING = 500

# One ping through understudy as the guest's tracer prints it; the peer's ARP
# request arrives with the reply, and the TX thread answers it on us0 while
# it writes the frames to the TAP.
TRACE = f"""\
            ping-{PING}     [000] d..2.  100.000000: net_dev_queue: dev=us0 skbaddr=00000001 len=98
          <idle>-0       [001] d..2.  100.000100: sched_wakeup: comm=understudy-tx pid={TX} prio=120 target_cpu=001
          <idle>-0       [001] d..2.  100.000200: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=understudy-tx next_pid={TX} next_prio=120
   understudy-tx-{TX}     [001] d.h1.  100.000500: irq_handler_entry: irq=22 name=vfio-intx(0000:01:00.0)
   understudy-tx-{TX}     [001] d.h1.  100.000550: irq_handler_exit: irq=22 ret=handled
   understudy-tx-{TX}     [001] .....  100.000700: sys_enter: NR 20 (5, 7ffd0000, 2, 0, 0, 0)
   understudy-tx-{TX}     [001] ..s1.  100.000800: net_dev_queue: dev=us0 skbaddr=00000002 len=42
   understudy-tx-{TX}     [001] ..s1.  100.000900: netif_receive_skb: dev=us0 skbaddr=00000003 len=84
          <idle>-0       [000] d..2.  100.001000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=ping next_pid={PING} next_prio=120
"""


def test_a_frame_the_driver_sends_on_us0_does_not_make_its_thread_ping():
    events = ping_trace.parse(TRACE)
    assert len(events) == 9
    found = ping_trace.pings(events)
    assert found == [(0, 7)]
    roles = ping_trace.with_ping(events, found, {TX: "understudy-driver:understudy-tx"})
    assert roles == {TX: "understudy-driver:understudy-tx", PING: "ping"}
    hops = ping_trace.hops(events, *found[0], roles)
    assert hops == pytest.approx({
        "request on us0 -> driver tx thread runs": 0.2, "driver tx thread runs -> reply's interrupt": 0.3,
        "reply's interrupt -> driver writes the reply": 0.2, "driver writes the reply -> reply on us0": 0.2,
        "reply on us0 -> ping runs": 0.1})


# The same ping through a TX thread that polls: it never sleeps, so no switch
# marks when it takes the request; its read of the TAP returning the frame does
# (only system calls that did something are traced).
POLLING = f"""\
            ping-{PING}     [000] d..2.  200.000000: net_dev_queue: dev=us0 skbaddr=00000001 len=98
   understudy-tx-{TX}     [001] .....  200.000050: sys_exit: NR 19 = -11
   understudy-tx-{TX}     [001] .....  200.000150: sys_exit: NR 19 = 110
   understudy-tx-{TX}     [001] d.h1.  200.000400: irq_handler_entry: irq=22 name=vfio-intx(0000:01:00.0)
   understudy-tx-{TX}     [001] d.h1.  200.000450: irq_handler_exit: irq=22 ret=handled
   understudy-tx-{TX}     [001] .....  200.000600: sys_enter: NR 20 (5, 7ffd0000, 2, 0, 0, 0)
   understudy-tx-{TX}     [001] ..s1.  200.000700: netif_receive_skb: dev=us0 skbaddr=00000003 len=84
          <idle>-0       [000] d..2.  200.000800: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=ping next_pid={PING} next_prio=120
"""


def test_a_polling_tx_thread_takes_the_request_when_its_read_returns_it():
    events = ping_trace.parse(POLLING)
    found = ping_trace.pings(events)
    roles = ping_trace.with_ping(events, found, {TX: "understudy-driver:understudy-tx"})
    assert ping_trace.hops(events, *found[0], roles) is None, "no wake-up to find"
    assert ping_trace.hops(events, *found[0], roles, polling=True) == pytest.approx({
        "request on us0 -> driver tx thread reads it": 0.15, "driver tx thread reads it -> reply's interrupt": 0.25,
        "reply's interrupt -> driver writes the reply": 0.2, "driver writes the reply -> reply on us0": 0.1,
        "reply on us0 -> ping runs": 0.1})
