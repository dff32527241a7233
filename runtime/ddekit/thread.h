/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ddekit's threads (thread.c): the threads kernel code runs on.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_THREAD_H
#define UNDERSTUDY_DDEKIT_THREAD_H

/* Starts fn(arg) on a new thread whose GS base is the per-cpu block. */
int ddekit_thread_create(void (*fn)(void *), void *arg, const char *name);
/*
 * The same, for a thread that can be ended and joined (*handle): the
 * threads a post-probe template stops before it forks (driver/template.c).
 */
int ddekit_thread_start(void (*fn)(void *), void *arg, const char *name,
			unsigned long *handle);
/*
 * The calling thread runs what interrupt and softirq context run in the
 * kernel (the IRQ handler, NAPI polls, timers): it gets a larger share of
 * the CPU than the application threads it competes with.
 */
void ddekit_thread_runs_interrupts(void);
/* Waits up to timeout_ns for the thread to return; 0 or -errno. */
int ddekit_thread_join(unsigned long handle, unsigned long long timeout_ns);
/* One pointer of thread-local storage for the kernel half (its task). */
void *ddekit_thread_data(void);
void ddekit_thread_set_data(void *data);

#endif /* UNDERSTUDY_DDEKIT_THREAD_H */
