// SPDX-License-Identifier: GPL-2.0
/*
 * What one thread hand-off costs in the lab guest: two threads pass a token
 * back and forth through a pair of eventfds, as understudy's daemon and
 * driver process do for every batch of frames (docs/performance.md §8).
 * The caller pauses between round trips so that the peer is asleep each
 * time, as it is between pings. Prints one JSON line per thread placement:
 * both threads on different CPUs, on the same CPU, and left to the scheduler.
 *
 *   cc -O2 -pthread -o /tmp/eventfd-pingpong lab/experiments/eventfd_pingpong.c
 *   python3 -m lab boot --devices '' -- /tmp/eventfd-pingpong
 */
#define _GNU_SOURCE
#include <err.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define ROUND_TRIPS	2000
#define PAUSE_US	200

struct placement {
	const char *name;
	int caller_cpu, peer_cpu;	/* -1: wherever the scheduler puts it */
};

static int to_peer, to_caller;

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000ull + t.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		err(1, "sched_setaffinity(%d)", cpu);
}

static void pass(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) != sizeof(one))
		err(1, "eventfd write");
}

static void await(int fd)
{
	uint64_t count;

	if (read(fd, &count, sizeof(count)) != sizeof(count))
		err(1, "eventfd read");
}

static void *peer(void *arg)
{
	pin(*(int *)arg);
	for (int i = 0; i < ROUND_TRIPS; i++) {
		await(to_peer);
		pass(to_caller);
	}
	return NULL;
}

static int by_value(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static void measure(const struct placement *p)
{
	static uint64_t round_trip[ROUND_TRIPS];
	int peer_cpu = p->peer_cpu;
	pthread_t thread;

	pin(p->caller_cpu);
	if (pthread_create(&thread, NULL, peer, &peer_cpu))
		errx(1, "pthread_create failed");
	for (int i = 0; i < ROUND_TRIPS; i++) {
		uint64_t start = now_ns();

		pass(to_peer);
		await(to_caller);
		round_trip[i] = now_ns() - start;
		usleep(PAUSE_US);
	}
	pthread_join(thread, NULL);
	qsort(round_trip, ROUND_TRIPS, sizeof(round_trip[0]), by_value);
	printf("{\"placement\": \"%s\", \"round_trips\": %d, \"median_us\": %.1f, "
	       "\"p90_us\": %.1f, \"p99_us\": %.1f}\n", p->name, ROUND_TRIPS,
	       round_trip[ROUND_TRIPS / 2] / 1e3, round_trip[ROUND_TRIPS * 9 / 10] / 1e3,
	       round_trip[ROUND_TRIPS * 99 / 100] / 1e3);
}

int main(void)
{
	static const struct placement placements[] = {
		{ "different CPUs", 0, 1 },
		{ "same CPU", 0, 0 },
		{ "scheduler's choice", -1, -1 },
	};
	cpu_set_t all;

	to_peer = eventfd(0, 0);
	to_caller = eventfd(0, 0);
	if (to_peer < 0 || to_caller < 0)
		err(1, "eventfd");
	CPU_ZERO(&all);
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		CPU_SET(cpu, &all);
	for (size_t i = 0; i < sizeof(placements) / sizeof(placements[0]); i++) {
		sched_setaffinity(0, sizeof(all), &all);
		measure(&placements[i]);
	}
	return 0;
}
