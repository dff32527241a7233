/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ddekit's clocks (time.c): the host's, for the kernel's timekeeping.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_TIME_H
#define UNDERSTUDY_DDEKIT_TIME_H

unsigned long long ddekit_now_ns(void);		/* CLOCK_MONOTONIC */
/* The host's other clocks, for the kernel's ktime_get_real() and its offsets. */
enum ddekit_clock { DDEKIT_CLOCK_REALTIME, DDEKIT_CLOCK_BOOTTIME, DDEKIT_CLOCK_TAI };
unsigned long long ddekit_clock_ns(enum ddekit_clock clock);
void ddekit_spin_ns(unsigned long long ns);	/* busy wait, keeps the CPU */

#endif /* UNDERSTUDY_DDEKIT_TIME_H */
