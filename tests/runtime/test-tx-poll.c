// SPDX-License-Identifier: GPL-2.0
/*
 * Unit test of the TX thread's poll policy (runtime/ddekit/tx_poll.c) on a
 * clock the test moves: whether the thread looks again or sleeps after a
 * round, for sparse and dense traffic, inside and past the window, with
 * windows longer and shorter than the 10 ms over which the rate is read.
 *
 *	test-tx-poll
 *
 * Prints one line per check and exits 1 if any failed.
 */
#include <stdbool.h>
#include <stdio.h>

#include "ddekit.h"
#include "setup.h"

#define US	1000ULL
#define MS	(1000 * US)

static unsigned long long now;
static int failures;

/* The clock tx_poll.c reads: the test's. */
unsigned long long ddekit_now_ns(void)
{
	return now;
}

static void check(bool ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	failures += !ok;
}

/* A round at `at` that moved `events`: whether the thread polls on. */
static bool round_at(unsigned long long at, unsigned int events)
{
	now = at;
	return ddekit_tx_poll(events);
}

int main(void)
{
	bool all;
	int polled;

	ddekit_setup_tx_poll(0);
	check(!round_at(1 * MS, 1) && !round_at(1 * MS + 1, 0), "without a window it never polls");

	/* A ping every 20 ms (request, then its reply's interrupt) with 30 ms. */
	ddekit_setup_tx_poll(30 * MS);
	all = true;
	for (unsigned long long t = 100 * MS; t < 400 * MS; t += 20 * MS) {
		all &= round_at(t, 1) && round_at(t + 1 * MS, 1);
		all &= round_at(t + 19 * MS, 0);	/* still polling when the next comes */
	}
	check(all, "pings 20 ms apart find it polling");
	check(round_at(400 * MS, 0) && !round_at(400 * MS + 30 * MS, 0),
	      "it stops a window after the last event");

	/*
	 * Dense: five frames a millisecond for 200 ms. The first period's
	 * first 30 read as sparse (a rate needs a period to be read); from
	 * then on every gap is slept.
	 */
	polled = 0;
	for (unsigned long long t = 1000 * MS; t < 1200 * MS; t += 200 * US)
		polled += round_at(t, 1);
	check(polled == 30, "dense traffic: past its first 30 events it sleeps in every gap");

	/* Batches: a round every 2 ms sending 16 frames is dense too. */
	ddekit_setup_tx_poll(30 * MS);
	polled = 0;
	for (unsigned long long t = 2000 * MS; t < 2200 * MS; t += 2 * MS)
		polled += round_at(t, 16);
	check(polled == 1, "a round's frames count, not the round");

	/* After dense traffic has stopped, sparse traffic polls again. */
	check(round_at(2400 * MS, 1) && round_at(2410 * MS, 0), "sparse again after a quiet period");

	/* A window shorter than the period the rate is read over. */
	ddekit_setup_tx_poll(50 * US);
	check(round_at(3000 * MS, 1) && round_at(3000 * MS + 40 * US, 0), "a 50 µs window polls 50 µs");
	check(!round_at(3000 * MS + 60 * US, 0), "and not after");
	return failures ? 1 : 0;
}
