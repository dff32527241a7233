// SPDX-License-Identifier: GPL-2.0
/*
 * The driver process's sandbox (docs/design.md §0; its limits in §13):
 * once it holds its device -- the fds the host gave it, its I/O ports
 * granted -- and has linked its modules, and before the first instruction
 * of the kernel world runs, the process gives up root and installs its
 * seccomp filters. A module that takes the process over then has what the
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
 * - no new sockets: it sends on the one the host gave it, and to no
 *   other address; no new namespaces;
 * - no system call outside the list below, which is what the runtime,
 *   libc and Valgrind (a wrapper the host may run the process under) make
 *   once the kernel world runs: no execve, ptrace, mount, bpf, io_uring,
 *   userfaultfd, perf_event_open, keyctl... -- the kernel's own surface a
 *   module that took the process over could attack.
 *
 * Two filters, and the kernel takes the more restrictive answer of the
 * two: one refuses, with EPERM, what a driver must not do with calls it
 * may make (the TAP's ioctls, a clone into new namespaces); the
 * other allows the list and fails anything else with ENOSYS, as a kernel
 * without the call would, so that libc falls back where it can. It goes
 * last, since it does not allow loading a filter. A denied call returns an
 * error rather than killing the process: the runtime has no use for any
 * of them, and a driver that tries one is reported by what fails next,
 * not by a silent death.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <seccomp.h>

#include "driver.h"

/* tun's ioctls are _IO*('T', 200..): TUNSETNOCSUM is the first. */
#define TUN_IOCTL_TYPE	0x5400
#define TUN_IOCTL_FIRST	200
/* The socket ioctls (SIOC*, 0x89xx): tun answers SIOC[GS]IFHWADDR on a queue's fd. */
#define SOCK_IOCTL_TYPE	0x8900

/*
 * Interrupt threads run at nice -10 (ddekit/thread.c); without root that needs
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

/*
 * What the process may call at all, grouped by use: fds, memory, threads
 * and signals; time; the files it still opens (firmware, the perf map);
 * the host's socket (send, and recvmsg for fds); template.c's clone; and
 * Valgrind's own (rt_sigtimedwait, pipes, getrlimit...). Old calls that
 * have an *at or a p* successor are listed with it, for whichever libc
 * uses.
 */
static const int allowed[] = {
	/* fds: the device, the TAP, eventfds, rings, files */
	SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
	SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(preadv), SCMP_SYS(pwritev),
	SCMP_SYS(lseek), SCMP_SYS(close), SCMP_SYS(dup), SCMP_SYS(dup2), SCMP_SYS(dup3),
	SCMP_SYS(fcntl), SCMP_SYS(ioctl), SCMP_SYS(poll), SCMP_SYS(ppoll),
	SCMP_SYS(select), SCMP_SYS(pselect6), SCMP_SYS(epoll_create1),
	SCMP_SYS(epoll_ctl), SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait),
	SCMP_SYS(eventfd2), SCMP_SYS(pipe), SCMP_SYS(pipe2), SCMP_SYS(fsync),
	SCMP_SYS(fdatasync),
	/* files: firmware, /proc/self, the perf map */
	SCMP_SYS(openat), SCMP_SYS(open), SCMP_SYS(stat), SCMP_SYS(fstat),
	SCMP_SYS(lstat), SCMP_SYS(newfstatat), SCMP_SYS(statx), SCMP_SYS(access),
	SCMP_SYS(faccessat), SCMP_SYS(faccessat2), SCMP_SYS(readlink),
	SCMP_SYS(readlinkat), SCMP_SYS(getdents64), SCMP_SYS(getcwd),
	SCMP_SYS(link), SCMP_SYS(linkat), SCMP_SYS(unlink), SCMP_SYS(unlinkat),
	/* memory */
	SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mprotect), SCMP_SYS(mremap),
	SCMP_SYS(madvise), SCMP_SYS(brk), SCMP_SYS(mincore),
	/* threads (clone3 left out: see namespaces), scheduling, the CPU-local block */
	SCMP_SYS(clone), SCMP_SYS(set_robust_list),
	SCMP_SYS(set_tid_address), SCMP_SYS(rseq), SCMP_SYS(futex),
	SCMP_SYS(exit), SCMP_SYS(exit_group), SCMP_SYS(arch_prctl), SCMP_SYS(prctl),
	SCMP_SYS(sched_yield), SCMP_SYS(sched_getaffinity), SCMP_SYS(sched_setaffinity),
	SCMP_SYS(sched_getparam), SCMP_SYS(sched_getscheduler),
	SCMP_SYS(setpriority), SCMP_SYS(getpriority),
	SCMP_SYS(getrlimit), SCMP_SYS(prlimit64), SCMP_SYS(getrusage),
	/* who it is */
	SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(getppid), SCMP_SYS(getuid),
	SCMP_SYS(geteuid), SCMP_SYS(getgid), SCMP_SYS(getegid), SCMP_SYS(getresuid),
	SCMP_SYS(getresgid), SCMP_SYS(getgroups), SCMP_SYS(uname), SCMP_SYS(sysinfo),
	/* signals: fault handlers, abort, Valgrind's own */
	SCMP_SYS(rt_sigaction), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigreturn),
	SCMP_SYS(rt_sigtimedwait), SCMP_SYS(rt_sigsuspend), SCMP_SYS(sigaltstack),
	SCMP_SYS(tgkill), SCMP_SYS(tkill), SCMP_SYS(kill), SCMP_SYS(restart_syscall),
	/* time */
	SCMP_SYS(clock_gettime), SCMP_SYS(clock_getres), SCMP_SYS(gettimeofday),
	SCMP_SYS(time), SCMP_SYS(nanosleep), SCMP_SYS(clock_nanosleep),
	/* the host's socket: fds come with recvmsg (sendto below) */
	SCMP_SYS(recvmsg),
	SCMP_SYS(getrandom),
};

static int allow_list(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(ENOSYS));
	int err;

	if (!ctx)
		return -ENOMEM;
	/* A binary search rather than a chain: every frame's readv and writev pass it. */
	err = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	for (size_t i = 0; !err && i < sizeof(allowed) / sizeof(allowed[0]); i++)
		err = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allowed[i], 0);
	/* send() on the host's socket, which has its peer: no address of another. */
	if (!err)
		err = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(sendto), 1,
				       SCMP_A4(SCMP_CMP_EQ, 0));
	if (!err)
		err = seccomp_load(ctx);
	seccomp_release(ctx);
	return err;
}

/*
 * clone's flags that make a namespace: a user namespace would give the
 * process capabilities within it, and much of the kernel to reach with
 * them. (clone3, whose flags a filter cannot read, is not allowed at all:
 * libc falls back to clone.)
 */
static const unsigned long namespaces[] = {
	CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC,
	CLONE_NEWUTS, CLONE_NEWCGROUP,
};

static int deny(scmp_filter_ctx ctx, int syscall, unsigned int n, const struct scmp_arg_cmp *cmp)
{
	return seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), syscall, n, cmp);
}

static int deny_list(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int err = 0;

	if (!ctx)
		return -ENOMEM;
	for (unsigned int nr = TUN_IOCTL_FIRST; !err && nr <= 0xff; nr++) {
		struct scmp_arg_cmp tun = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffff, TUN_IOCTL_TYPE | nr);

		err = deny(ctx, SCMP_SYS(ioctl), 1, &tun);
	}
	if (!err) {
		struct scmp_arg_cmp sock = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xff00, SOCK_IOCTL_TYPE);

		err = deny(ctx, SCMP_SYS(ioctl), 1, &sock);
	}
	for (size_t i = 0; !err && i < sizeof(namespaces) / sizeof(namespaces[0]); i++) {
		struct scmp_arg_cmp new_namespace =
			SCMP_A0(SCMP_CMP_MASKED_EQ, namespaces[i], namespaces[i]);

		err = deny(ctx, SCMP_SYS(clone), 1, &new_namespace);
	}
	if (!err)
		err = seccomp_load(ctx);
	seccomp_release(ctx);
	return err;
}

static int enter(const char **why)
{
	struct rlimit nice = { INTERRUPT_NICE_LIMIT, INTERRUPT_NICE_LIMIT };
	pid_t host = getppid();
	int err;

	/* Without CAP_SYS_RESOURCE (a container) they run at nice 0: ddekit/thread.c says so. */
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
	/*
	 * The process is one thread still (sandbox_enter checked; threads start
	 * with the kernel world), and those to come inherit the filters.
	 * (Synchronising threads would need seccomp(2), which Valgrind does not
	 * know; prctl will do.)
	 */
	*why = "the seccomp filter of refused uses";
	err = deny_list();
	if (err)
		return err;
	*why = "the seccomp filter of allowed calls";
	return allow_list();
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
	/* The filters' prctl binds this thread and those it starts later, no other. */
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
