// SPDX-License-Identifier: GPL-2.0
/*
 * The threads kernel code runs on: each starts with the per-cpu block as
 * its GS base (cpu.c), the interrupt threads at a higher priority, and each
 * has one pointer of thread-local storage for the kernel half's task.
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h).
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "setup.h"
#include "thread.h"

static __thread void *thread_data;

struct thread_start {
	void (*fn)(void *);
	void *arg;
};

static void *thread_trampoline(void *p)
{
	struct thread_start start = *(struct thread_start *)p;

	free(p);
	if (syscall(SYS_arch_prctl, ARCH_SET_GS, percpu_block))
		ddekit_panic("arch_prctl(ARCH_SET_GS) failed in a new thread");
	start.fn(start.arg);
	return NULL;
}

static int start_thread(void (*fn)(void *), void *arg, const char *name, pthread_t *thread)
{
	struct thread_start *start = malloc(sizeof(*start));
	int err;

	if (!start)
		return -ENOMEM;
	start->fn = fn;
	start->arg = arg;
	err = pthread_create(thread, NULL, thread_trampoline, start);
	if (err) {
		free(start);
		return -err;
	}
	pthread_setname_np(*thread, name);
	return 0;
}

int ddekit_thread_create(void (*fn)(void *), void *arg, const char *name)
{
	pthread_t thread;
	int err = start_thread(fn, arg, name, &thread);

	if (!err)
		pthread_detach(thread);
	return err;
}

int ddekit_thread_start(void (*fn)(void *), void *arg, const char *name,
			unsigned long *handle)
{
	pthread_t thread;
	int err = start_thread(fn, arg, name, &thread);

	if (!err)
		*handle = thread;
	return err;
}

/*
 * The nice value of the IRQ and softirq threads. In the kernel, interrupts
 * and softirqs preempt any task; here they are threads, and a NAPI poll
 * that waits behind an application thread for a CPU leaves the NIC's ring
 * full. Only these: transmission runs in the sender's context in the kernel,
 * at the sender's priority, and a TX thread (or a daemon) that preempts the
 * sending application at every frame takes the frames one at a time. e1000
 * in the lab, A/B: host -> guest +12 %, guest -> host unchanged; with the TX
 * thread and the daemon raised as well, guest -> host lost a quarter
 * (docs/notes/bench-net-history.md, "What limits receive: the CPU each
 * megabyte costs"). A weight, not SCHED_FIFO: a driver spinning in one
 * of these threads must not take a CPU from everything else.
 */
#define INTERRUPT_THREAD_NICE (-10)

void ddekit_thread_runs_interrupts(void)
{
	static bool warned;
	char text[128];

	if (!setpriority(PRIO_PROCESS, syscall(SYS_gettid), INTERRUPT_THREAD_NICE) || warned)
		return;
	warned = true;
	snprintf(text, sizeof(text), "understudy-driver: cannot raise the priority of interrupt threads "
		 "(nice %d): %s", INTERRUPT_THREAD_NICE, strerror(errno));
	ddekit_log(4 /* KERN_WARNING */, text, strlen(text));
}

int ddekit_thread_join(unsigned long handle, unsigned long long timeout_ns)
{
	struct timespec ts;
	unsigned long long deadline;

	clock_gettime(CLOCK_REALTIME, &ts);
	deadline = ts.tv_sec * 1000000000ULL + ts.tv_nsec + timeout_ns;
	ts.tv_sec = deadline / 1000000000ULL;
	ts.tv_nsec = deadline % 1000000000ULL;
	return -pthread_timedjoin_np((pthread_t)handle, NULL, &ts);
}

void *ddekit_thread_data(void)
{
	return thread_data;
}

void ddekit_thread_set_data(void *data)
{
	thread_data = data;
}
