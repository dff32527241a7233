// SPDX-License-Identifier: GPL-2.0
/*
 * When the TX thread looks again instead of sleeping (understudy run
 * --poll-us; docs/performance.md §8).
 *
 * Why: a frame that finds the TX thread asleep waits for it to be woken,
 * and a reply that finds the application asleep waits again. Those two
 * hand-offs between address spaces are most of what a round trip through
 * understudy costs more than one through the in-kernel driver, whose
 * sender runs the driver itself. A thread that is still running when the
 * next request or interrupt comes takes it at once.
 *
 * The policy: after a round that sent a frame or served an interrupt, the
 * thread keeps polling (the rings, the TAP and the lines' eventfds, none
 * blocking) for up to the window, then sleeps -- but only while the
 * traffic is sparse: at most one event (a frame sent, a round of
 * interrupts served) a millisecond on average, in the current period of
 * measurement and in the one before. A period is the window, or 10 ms if
 * the window is shorter (a rate needs a few events to be read). Dense
 * traffic keeps the thread busy by itself, so there polling would only
 * burn the gaps between rounds, which the in-kernel driver's CPU spends
 * halted: a TX thread that polled regardless cost a fifth more CPU per
 * byte sent. Frames, not rounds, are counted because under load a round
 * sends a batch. Sparse traffic (a request and its reply now and then: a
 * ping is two or three events) is where the hand-offs show.
 *
 * What it costs: a CPU kept busy while requests come closer together than
 * the window, and for one window after the last. The window is the run's
 * choice; without --poll-us the thread never polls.
 */
#include <stdbool.h>
#include <stdint.h>

#include "setup.h"
#include "time.h"

#define NS_PER_MS		1000000ULL
#define MIN_PERIOD_NS		(10 * NS_PER_MS)

static struct {
	uint64_t window_ns;	/* 0: never poll */
	uint64_t period_ns;	/* the traffic's rate is measured over */
	uint64_t last_work_ns;
	uint64_t period_end_ns;	/* of the period the events are counted in */
	uint64_t events, events_before;
} poll_state;

void ddekit_setup_tx_poll(unsigned long long window_ns)
{
	poll_state.window_ns = window_ns;
	poll_state.period_ns = window_ns > MIN_PERIOD_NS ? window_ns : MIN_PERIOD_NS;
	poll_state.period_end_ns = 0;
	poll_state.events = poll_state.events_before = 0;
}

/* At most one event a millisecond of the period, on average. */
static bool sparse(uint64_t events)
{
	return events * NS_PER_MS <= poll_state.period_ns;
}

bool ddekit_tx_poll(unsigned int events)
{
	uint64_t now;

	if (!poll_state.window_ns)
		return false;
	now = ddekit_now_ns();
	if (now >= poll_state.period_end_ns) {
		bool adjacent = now - poll_state.period_end_ns < poll_state.period_ns;

		poll_state.events_before = adjacent ? poll_state.events : 0;
		poll_state.events = 0;
		poll_state.period_end_ns = now + poll_state.period_ns;
	}
	if (events) {
		poll_state.events += events;
		poll_state.last_work_ns = now;
	}
	return now - poll_state.last_work_ns < poll_state.window_ns &&
	       sparse(poll_state.events) && sparse(poll_state.events_before);
}
