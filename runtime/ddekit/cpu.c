// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel "CPU" (docs/design.md §6): the one lock a thread holds while
 * it runs kernel code, its waiters, the count the heartbeat watches, and
 * the per-cpu block every thread's GS base points to.
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h).
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"
#include "setup.h"

void *percpu_block;	/* setup.h: thread.c installs it in the threads it starts */

static pthread_mutex_t cpu_lock = PTHREAD_MUTEX_INITIALIZER;
/*
 * Each waiting thread sleeps on its own condition, linked in a ring while it
 * waits (under cpu_lock): a wakeup for one thread does not make the others
 * run, find nothing and take the lock to sleep again.
 */
struct cpu_waiter {
	pthread_cond_t cond;
	struct cpu_waiter *next, *prev;	/* NULL while not waiting */
	bool ready;
};
static struct cpu_waiter cpu_waiters = { .next = &cpu_waiters, .prev = &cpu_waiters };
static __thread struct cpu_waiter self_waiter;
/* For the heartbeat (ddekit_cpu_await_progress): who has the CPU, and how often it changed hands. */
static bool cpu_held;
static unsigned long cpu_entries;
static void (*cpu_observer)(void);	/* the checker's trace: who holds the CPU now */
/* Progress of a thread that waits with the CPU held for someone else (the checker). */
static unsigned long long (*waiting_progress)(void);

void *ddekit_cpu_waiter(void)
{
	struct cpu_waiter *me = &self_waiter;
	pthread_condattr_t attr;

	if (!me->ready) {
		pthread_condattr_init(&attr);
		pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
		pthread_cond_init(&me->cond, &attr);
		pthread_condattr_destroy(&attr);
		me->ready = true;
	}
	return me;
}

static void cpu_taken(void)
{
	__atomic_add_fetch(&cpu_entries, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&cpu_held, true, __ATOMIC_RELEASE);
	if (cpu_observer)
		cpu_observer();
}

void ddekit_setup_cpu_observer(void (*observer)(void))
{
	cpu_observer = observer;
}

void ddekit_cpu_lock(void)
{
	pthread_mutex_lock(&cpu_lock);
	cpu_taken();
}

void ddekit_cpu_unlock(void)
{
	__atomic_store_n(&cpu_held, false, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&cpu_lock);
}

void ddekit_cpu_wait(unsigned long long deadline_ns)
{
	struct cpu_waiter *me = ddekit_cpu_waiter();
	struct timespec ts;

	me->next = &cpu_waiters;
	me->prev = cpu_waiters.prev;
	cpu_waiters.prev->next = me;
	cpu_waiters.prev = me;
	__atomic_store_n(&cpu_held, false, __ATOMIC_RELEASE);
	if (!deadline_ns) {
		pthread_cond_wait(&me->cond, &cpu_lock);
	} else {
		ts.tv_sec = deadline_ns / 1000000000ULL;
		ts.tv_nsec = deadline_ns % 1000000000ULL;
		pthread_cond_timedwait(&me->cond, &cpu_lock, &ts);
	}
	me->prev->next = me->next;
	me->next->prev = me->prev;
	me->next = me->prev = NULL;
	cpu_taken();
}

/*
 * Returns once the CPU is free or has changed hands since the call, without
 * taking it (a waiter would queue behind busy TX and IRQ threads and miss
 * a heartbeat deadline for nothing). Code spinning with the CPU held, e.g.
 * a driver looping in its transmit or interrupt handler, keeps it from
 * returning: that is how the host's PING deadline sees the hang.
 */
void ddekit_cpu_await_progress(void)
{
	unsigned long start = __atomic_load_n(&cpu_entries, __ATOMIC_RELAXED);
	unsigned long long waited = waiting_progress ? waiting_progress() : 0;
	const struct timespec tick = { 0, 500000 };

	while (__atomic_load_n(&cpu_held, __ATOMIC_ACQUIRE) &&
	       __atomic_load_n(&cpu_entries, __ATOMIC_RELAXED) == start &&
	       (!waiting_progress || waiting_progress() == waited))
		nanosleep(&tick, NULL);
}

void ddekit_setup_waiting_progress(unsigned long long (*progress)(void))
{
	waiting_progress = progress;
}

unsigned long ddekit_cpu_entries(void)
{
	return __atomic_load_n(&cpu_entries, __ATOMIC_RELAXED);
}

void ddekit_cpu_wake_all(void)
{
	for (struct cpu_waiter *w = cpu_waiters.next; w != &cpu_waiters; w = w->next)
		pthread_cond_signal(&w->cond);
}

void ddekit_cpu_wake(void *waiter)
{
	struct cpu_waiter *w = waiter;

	if (w->next)
		pthread_cond_signal(&w->cond);
}

int ddekit_setup_percpu(void *block)
{
	percpu_block = block;
	return syscall(SYS_arch_prctl, ARCH_SET_GS, block);
}

void *ddekit_percpu_block(void)
{
	return percpu_block;
}
