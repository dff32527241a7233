// SPDX-License-Identifier: GPL-2.0
/*
 * Timekeeping: the kernel's clocks read from the host's (the monotonic one
 * is ddekit_now_ns(), which jiffies follow too; the wall clock and its
 * relatives are the host's CLOCK_REALTIME, CLOCK_BOOTTIME and CLOCK_TAI),
 * time conversions, and the timecounter a driver keeps over its device's
 * free-running cycle counter (pure arithmetic on the driver's cyclecounter).
 *
 * Stands in for Linux's kernel/time/timekeeping.c, time.c and timecounter.c.
 */
#include <linux/module.h>
#include <linux/ktime.h>
#include <linux/timekeeping.h>
#include <linux/timecounter.h>
#include <linux/math64.h>
#include <linux/sched/clock.h>
#include <asm/tsc.h>

#include "internal.h"

struct timespec64 ns_to_timespec64(s64 nsec)
{
	struct timespec64 ts = { 0, 0 };
	u32 rem;

	if (nsec > 0) {
		ts.tv_sec = div_u64_rem(nsec, NSEC_PER_SEC, &rem);
		ts.tv_nsec = rem;
	} else if (nsec < 0) {
		/* Round the seconds down: tv_nsec stays in [0, NSEC_PER_SEC). */
		ts.tv_sec = -(s64)div_u64_rem(-(nsec + 1), NSEC_PER_SEC, &rem) - 1;
		ts.tv_nsec = NSEC_PER_SEC - 1 - rem;
	}
	return ts;
}
EXPORT_SYMBOL(ns_to_timespec64);

/* The scheduler's clock: the monotonic one, in ns (drivers time short intervals with it). */
unsigned long long sched_clock(void)
{
	return ddekit_now_ns();
}
EXPORT_SYMBOL_GPL(sched_clock);

ktime_t ktime_get(void)
{
	return ns_to_ktime(ddekit_now_ns());
}
EXPORT_SYMBOL_GPL(ktime_get);

/* The monotonic clock plus one of the timekeeper's offsets (ktime_get_real() and co.). */
ktime_t ktime_get_with_offset(enum tk_offsets offs)
{
	switch (offs) {
	case TK_OFFS_REAL:
		return ns_to_ktime(ddekit_clock_ns(DDEKIT_CLOCK_REALTIME));
	case TK_OFFS_BOOT:
		return ns_to_ktime(ddekit_clock_ns(DDEKIT_CLOCK_BOOTTIME));
	case TK_OFFS_TAI:
		return ns_to_ktime(ddekit_clock_ns(DDEKIT_CLOCK_TAI));
	default:
		us_panic("ktime_get_with_offset: no offset %d", offs);
	}
}
EXPORT_SYMBOL_GPL(ktime_get_with_offset);

void ktime_get_real_ts64(struct timespec64 *ts)
{
	*ts = ns_to_timespec64(ddekit_clock_ns(DDEKIT_CLOCK_REALTIME));
}
EXPORT_SYMBOL(ktime_get_real_ts64);

/*
 * A device's clock correlated with the system's: the device's capture
 * names the system clocksource its counter value belongs to, and the
 * kernel refuses (-ENODEV) unless that is the timekeeper's current one.
 * A driver process has no timekeeper clocksource to match (its time is
 * the host's, read through clock_gettime()), so it always refuses, before
 * asking the device for a capture whose system half could not be used.
 */
int get_device_system_crosststamp(int (*get_time_fn)(ktime_t *device_time,
						     struct system_counterval_t *sys_counterval,
						     void *ctx),
				  void *ctx, struct system_time_snapshot *history_begin,
				  struct system_device_crosststamp *xtstamp)
{
	return -ENODEV;
}
EXPORT_SYMBOL_GPL(get_device_system_crosststamp);

/*
 * The TSC value for an Always Running Timer value. The kernel defines
 * the conversion only when the CPU has ART (X86_FEATURE_ART), and callers
 * check that first; the runtime's boot_cpu_data never claims it
 * (cpuinfo.c), so nothing should get here.
 */
struct system_counterval_t convert_art_to_tsc(u64 art)
{
	us_unreachable();
}
EXPORT_SYMBOL(convert_art_to_tsc);

/* ---- timecounter (the kernel's kernel/time/timecounter.c interface) ------ */

void timecounter_init(struct timecounter *tc, const struct cyclecounter *cc, u64 start_tstamp)
{
	tc->cc = cc;
	tc->cycle_last = cc->read(cc);
	tc->nsec = start_tstamp;
	tc->mask = (1ULL << cc->shift) - 1;	/* the fraction bits kept between reads */
	tc->frac = 0;
}
EXPORT_SYMBOL_GPL(timecounter_init);

/* Nanoseconds since the last read; advances cycle_last and the kept fraction. */
static u64 elapsed_ns(struct timecounter *tc)
{
	u64 now = tc->cc->read(tc->cc);
	u64 cycles = (now - tc->cycle_last) & tc->cc->mask;

	tc->cycle_last = now;
	return cyclecounter_cyc2ns(tc->cc, cycles, tc->mask, &tc->frac);
}

u64 timecounter_read(struct timecounter *tc)
{
	tc->nsec += elapsed_ns(tc);
	return tc->nsec;
}
EXPORT_SYMBOL_GPL(timecounter_read);

/*
 * The time of a cycle count captured near the last read: after it when it
 * is less than half the counter's range ahead, otherwise before it.
 */
u64 timecounter_cyc2time(const struct timecounter *tc, u64 cycle_tstamp)
{
	const struct cyclecounter *cc = tc->cc;
	u64 ahead = (cycle_tstamp - tc->cycle_last) & cc->mask;
	u64 frac = tc->frac;

	if (ahead <= cc->mask / 2)
		return tc->nsec + cyclecounter_cyc2ns(cc, ahead, tc->mask, &frac);
	/* Behind: subtract, with the fraction carried from the last read taken off. */
	return tc->nsec - ((((tc->cycle_last - cycle_tstamp) & cc->mask) * cc->mult - frac)
			   >> cc->shift);
}
EXPORT_SYMBOL_GPL(timecounter_cyc2time);
