/* SPDX-License-Identifier: GPL-2.0 */
/* Shared by the self-tests' files; selftest.c says how they run and report. */
#ifndef UNDERSTUDY_SELFTEST_H
#define UNDERSTUDY_SELFTEST_H

#include <linux/compiler.h>

/* The runtime's entry points and ddekit functions the tests reach directly. */
void us_cpu_enter(void);
void us_cpu_leave(void);
long us_skb_live(void);
unsigned long us_mem_in_use(void);
unsigned long us_rx_frames(void);
void ddekit_event(const char *line);
int ddekit_thread_create(void (*fn)(void *), void *arg, const char *name);
void *ddekit_percpu_block(void);
void ddekit_spin_ns(unsigned long long ns);
unsigned long ddekit_cpu_entries(void);
/* The driver core's detach (runtime/kernel/devres.c), for a device of the tests' own. */
struct device;
int devres_release_all(struct device *dev);

/* Fails the current test, saying where and why. */
void report(const char *fmt, ...) __printf(1, 2);

/* Fails the current test (and returns from it) unless cond holds. */
#define CHECK(cond) do {						\
	if (!(cond)) {							\
		report("line%d:%s", __LINE__, #cond);			\
		return;							\
	}								\
} while (0)

/* devres.c */
void test_devres(void);
/* platform.c */
void test_time(void);
void test_platform(void);

#endif /* UNDERSTUDY_SELFTEST_H */
