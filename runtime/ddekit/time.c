// SPDX-License-Identifier: GPL-2.0
/*
 * The host's clocks, which stand in for the kernel's clocksources.
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h).
 */
#define _GNU_SOURCE
#include <time.h>

#include "time.h"

unsigned long long ddekit_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

unsigned long long ddekit_clock_ns(enum ddekit_clock clock)
{
	static const clockid_t ids[] = {
		[DDEKIT_CLOCK_REALTIME] = CLOCK_REALTIME,
		[DDEKIT_CLOCK_BOOTTIME] = CLOCK_BOOTTIME,
		[DDEKIT_CLOCK_TAI] = CLOCK_TAI,
	};
	struct timespec ts;

	clock_gettime(ids[clock], &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

void ddekit_spin_ns(unsigned long long ns)
{
	unsigned long long end = ddekit_now_ns() + ns;

	while (ddekit_now_ns() < end)
		__builtin_ia32_pause();
}
