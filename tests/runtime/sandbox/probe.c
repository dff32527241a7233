// SPDX-License-Identifier: GPL-2.0
/*
 * Enters the driver process's sandbox (runtime/driver/sandbox.c) holding a
 * queue of a TAP, as a driver process does, then tries what the sandbox
 * must refuse and what a driver needs (and, by printing, threads and
 * files: libc's own calls). One "name=result" line each: 0, or
 * the errno's name. Run as root: probe UID.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../../runtime/driver/driver.h"

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static void *thread_body(void *arg)
{
	return arg;
}

/* A thread as the kernel world starts its own: clone3, robust lists, rseq. */
static int start_thread(void)
{
	pthread_t t;
	int err = pthread_create(&t, NULL, thread_body, NULL);

	if (err) {
		errno = err;
		return -1;
	}
	return pthread_join(t, NULL);
}

static void report(const char *what, long ret)
{
	printf("%s=%s\n", what, ret < 0 ? strerrorname_np(errno) : "0");
}

int main(int argc, char **argv)
{
	struct ifreq ifr = { .ifr_flags = IFF_TAP | IFF_NO_PI };
	unsigned char frame[60] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0xb5 };
	struct sockaddr_un elsewhere = { .sun_family = AF_UNIX, .sun_path = "/dev/log" };
	int tap, sock, host[2], one = 1;

	if (argc != 2)
		die("usage: probe UID");
	strcpy(ifr.ifr_name, "ussbx%d");
	tap = open("/dev/net/tun", O_RDWR);
	if (tap < 0 || ioctl(tap, TUNSETIFF, &ifr))
		die("cannot create a TAP: %s", strerror(errno));
	sock = socket(AF_INET, SOCK_DGRAM, 0);
	ifr.ifr_flags = IFF_UP;
	if (sock < 0 || ioctl(sock, SIOCSIFFLAGS, &ifr))
		die("cannot bring %s up: %s", ifr.ifr_name, strerror(errno));
	close(sock);
	/* The host's socket, as the driver process is given it. */
	if (socketpair(AF_UNIX, SOCK_DGRAM, 0, host))
		die("cannot make a socket pair: %s", strerror(errno));

	sandbox_prepare(atoi(argv[1]), atoi(argv[1]), false);
	sandbox_enter();

	printf("uid=%u\n", getuid());
	report("tap_write", write(tap, frame, sizeof(frame)));
	report("thread", start_thread());
	report("tunsetcarrier", ioctl(tap, TUNSETCARRIER, &one));
	report("tunsetoffload", ioctl(tap, TUNSETOFFLOAD, 0));
	ifr.ifr_flags = IFF_DETACH_QUEUE;
	report("tunsetqueue", ioctl(tap, TUNSETQUEUE, &ifr));
	report("tungetiff", ioctl(tap, TUNGETIFF, &ifr));
	report("siocsifhwaddr", ioctl(tap, SIOCSIFHWADDR, &ifr));
	report("socket_netlink", socket(AF_NETLINK, SOCK_RAW, 0));
	report("socket_inet", socket(AF_INET, SOCK_DGRAM, 0));
	report("socket_unix", socket(AF_UNIX, SOCK_SEQPACKET, 0));
	report("send_to_host", send(host[0], "hi", 2, 0));
	report("sendto_elsewhere", sendto(host[0], "hi", 2, 0, (struct sockaddr *)&elsewhere, sizeof(elsewhere)));
	report("bpf", syscall(SYS_bpf, 0, NULL, 0));
	report("kill_init", kill(1, 0));
	/* Outside the allowed calls: as if the kernel had none of them. */
	report("execve", syscall(SYS_execve, "/bin/true", argv, NULL));
	report("ptrace", syscall(SYS_ptrace, 0, 0, NULL, NULL));
	report("io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL));
	report("userfaultfd", syscall(SYS_userfaultfd, 0));
	report("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
	report("mount", syscall(SYS_mount, "none", "/mnt", "tmpfs", 0, NULL));
	report("clone3", syscall(SYS_clone3, NULL, 0));
	report("unshare", syscall(SYS_unshare, CLONE_NEWUSER));
	/* Allowed, but not to make a namespace. */
	report("clone_newuser", syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0));
	report("open_tun", open("/dev/net/tun", O_RDWR));
	return 0;
}
