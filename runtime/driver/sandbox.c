// SPDX-License-Identifier: GPL-2.0
/*
 * The driver process's sandbox (docs/design.md §0; its limits in §13):
 * once it holds its device -- the fds the host gave it, its I/O ports
 * granted -- and has linked its modules, and before the first instruction
 * of the kernel world runs, the process gives up root and installs a
 * seccomp filter. A module that takes the process over then has what the
 * host gave it (the device, the arena, the rings, its queue of the TAP)
 * and nothing of the machine's:
 *
 * - its own user and group, given by the host (one per device), no
 *   supplementary groups, no capabilities: it cannot signal or trace the
 *   daemon or another driver, write sysfs, or reconfigure an interface
 *   through netlink;
 * - its queue of the TAP moves frames only: the TAP's own ioctls (carrier,
 *   MAC address, offloads, steering, detaching the queue) and the socket
 *   ioctls tun also answers on that fd fail with EPERM, whoever the
 *   process is;
 * - no new sockets but unix ones, no bpf().
 *
 * A denied call returns EPERM rather than killing the process: the runtime
 * has no use for any of them, and a driver that tries one is reported by
 * what fails next, not by a silent death.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <seccomp.h>

#include "driver.h"

/* tun's ioctls are _IO*('T', 200..): TUNSETNOCSUM is the first. */
#define TUN_IOCTL_TYPE	0x5400
#define TUN_IOCTL_FIRST	200
/* The socket ioctls (SIOC*, 0x89xx): tun answers SIOC[GS]IFHWADDR on a queue's fd. */
#define SOCK_IOCTL_TYPE	0x8900

/*
 * Interrupt threads run at nice -10 (ddekit.c); without root that needs
 * RLIMIT_NICE >= 20 - (-10).
 */
#define INTERRUPT_NICE_LIMIT 30

static struct {
	bool wanted, keep_root;
	uid_t uid;
	gid_t gid;
} sandbox;

void sandbox_prepare(uid_t uid, gid_t gid, bool keep_root)
{
	sandbox.wanted = true;
	sandbox.uid = uid;
	sandbox.gid = gid;
	sandbox.keep_root = keep_root;
}

static int deny(scmp_filter_ctx ctx, int syscall, unsigned int n, const struct scmp_arg_cmp *cmp)
{
	return seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), syscall, n, cmp);
}

static int load_filter(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int err = 0;

	if (!ctx)
		return -ENOMEM;
	/*
	 * The process is one thread still (sandbox_enter checked; threads start
	 * with the kernel world), and those to come inherit the filter.
	 * (Synchronising threads would need seccomp(2), which Valgrind does not
	 * know; prctl will do.)
	 */
	for (unsigned int nr = TUN_IOCTL_FIRST; !err && nr <= 0xff; nr++) {
		struct scmp_arg_cmp tun = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffff, TUN_IOCTL_TYPE | nr);

		err = deny(ctx, SCMP_SYS(ioctl), 1, &tun);
	}
	if (!err) {
		struct scmp_arg_cmp sock = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xff00, SOCK_IOCTL_TYPE);

		err = deny(ctx, SCMP_SYS(ioctl), 1, &sock);
	}
	if (!err) {
		struct scmp_arg_cmp not_unix = SCMP_A0(SCMP_CMP_NE, AF_UNIX);

		err = deny(ctx, SCMP_SYS(socket), 1, &not_unix);
	}
	if (!err)
		err = deny(ctx, SCMP_SYS(bpf), 0, NULL);
	if (!err)
		err = seccomp_load(ctx);
	seccomp_release(ctx);
	return err;
}

static int enter(const char **why)
{
	struct rlimit nice = { INTERRUPT_NICE_LIMIT, INTERRUPT_NICE_LIMIT };
	pid_t host = getppid();

	/* Without CAP_SYS_RESOURCE (a container) they run at nice 0: ddekit.c says so. */
	setrlimit(RLIMIT_NICE, &nice);
	if (!sandbox.keep_root) {
		*why = "setgroups";
		if (setgroups(0, NULL))
			return -errno;
		*why = "setresgid";
		if (setresgid(sandbox.gid, sandbox.gid, sandbox.gid))
			return -errno;
		*why = "setresuid";
		if (setresuid(sandbox.uid, sandbox.uid, sandbox.uid))
			return -errno;
		/* Changing credentials cleared the death signal the host asked for. */
		*why = "PR_SET_PDEATHSIG";
		if (prctl(PR_SET_PDEATHSIG, SIGKILL))
			return -errno;
		if (getppid() != host)
			_exit(1);	/* the host died meanwhile */
	}
	*why = "the seccomp filter";
	return load_filter();
}

/* The process's threads, from /proc/self/task; -errno if it cannot say. */
static int count_threads(void)
{
	DIR *tasks = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!tasks)
		return -errno;
	while ((e = readdir(tasks)))
		n += e->d_name[0] != '.';
	closedir(tasks);
	return n;
}

void sandbox_enter(void)
{
	const char *why;
	int err, threads;

	if (!sandbox.wanted)
		return;
	/* load_filter's prctl binds this thread and those it starts later, no other. */
	threads = count_threads();
	if (threads < 0)
		die("cannot count the process's threads before the sandbox: %s", strerror(-threads));
	if (threads != 1)
		die("cannot enter the sandbox: the process has %d threads, and the filter would bind one",
		    threads);
	err = enter(&why);
	if (err)
		die("cannot enter the sandbox (%s): %s", why, strerror(-err));
}
