// SPDX-License-Identifier: GPL-2.0
/*
 * A post-probe template of the driver process (docs/design.md §8; the
 * kernel half's part is kernel/template.c).
 *
 * After PROBE the host sends SPAWN with a fresh control socket. The first
 * SPAWN turns this process into the template: the kernel half ends its
 * threads, and the part of the DMA arena its allocator has used is copied
 * into private memory -- the arena is shared memory, so a driver forked
 * from the template writes to the very pages the template would start the
 * next one from. Each later SPAWN puts that copy back, then forks.
 * Everything else the template holds (the modules' text and data, the
 * kernel half's bookkeeping, libc's heap) is private memory, which the
 * fork copies on write. The packet pool is the host's and is not copied.
 *
 * The fork is made the daemon's own child (CLONE_PARENT): the daemon reaps
 * it and learns how it ended exactly as for a process it started itself,
 * and its PR_SET_PDEATHSIG follows the daemon, not the template.
 *
 * The template is a single thread when it forks, so no libc lock can be
 * held by a thread the fork lacks. That is why a raw clone(2) is safe here
 * although it bypasses glibc's fork(), whose extra work is all about other
 * threads; what it leaves stale, the thread id cached in the thread control
 * block, is not read by anything this process calls (raise() asks the
 * kernel for it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../ddekit/ddekit.h"
#include "../ddekit/setup.h"
#include "driver.h"

static struct {
	bool taken;
	char *used;		/* the arena's used part ... */
	unsigned long len;
	void *copy;		/* ... as it was when the template was taken */
	pid_t daemon;
} template;

bool template_taken(void)
{
	return template.taken;
}

static int take(void)
{
	void *arena;
	unsigned long long iova;
	unsigned long size, pool_size, offset;
	int err = kernel.template_park();

	if (err)
		return err;
	ddekit_arena(&arena, &iova, &size, &pool_size);
	kernel.template_used_memory(&offset, &template.len);
	template.used = (char *)arena + offset;
	template.copy = malloc(template.len ? template.len : 1);
	if (!template.copy)
		ddekit_panic("no memory for the template's copy of the arena");
	memcpy(template.copy, template.used, template.len);
	template.daemon = getppid();
	template.taken = true;
	return 0;
}

/* In the fork: its own control socket, then the device back from its reset. */
static void become_driver(int template_control, int child_control, pid_t template_pid)
{
	int err;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != template.daemon)
		_exit(1);	/* the daemon is gone: nobody to drive the device for */
	close(template_control);
	debugger_follow_fork(template_pid);
	/* A driver, not a template: its copy of the copy is of no use. */
	template.taken = false;
	free(template.copy);
	template.copy = NULL;
	ddekit_setup_control(child_control);
	err = kernel.template_resume();
	if (err) {
		fprintf(stderr, "understudy-driver: forked from the template, the driver's resume failed: %s\n",
			strerror(-err));
		printf("RESUME_FAILED status=%d\n", err);
		fflush(stdout);
		_exit(1);	/* kernel threads run: no unwinding */
	}
}

int template_spawn(int template_control, int child_control)
{
	pid_t template_pid = getpid();
	long pid;
	int err;

	if (!template.taken) {
		err = take();
		if (err)
			return err;
	} else {
		memcpy(template.used, template.copy, template.len);
	}
	pid = syscall(SYS_clone, CLONE_PARENT, NULL, NULL, NULL, 0);
	if (pid == 0) {
		become_driver(template_control, child_control, template_pid);
		return 0;
	}
	close(child_control);
	return pid < 0 ? -errno : (int)pid;
}
