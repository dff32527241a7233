// SPDX-License-Identifier: GPL-2.0
/*
 * labagent: the lab guest's PID 1 after the init script.
 *
 * It runs commands for the host over a serial port and streams their output
 * back, so that `python3 -m lab boot -- CMD` and the tests' lab.Guest share one
 * channel.  It is a static binary living in the initramfs, not on the 9p host
 * root: the root can then be unmounted before a live migration (QEMU refuses to
 * migrate while a 9p export is mounted) without pulling the agent's text away.
 *
 * Wire format (both directions), little endian:
 *	u16 magic 0x5553 ("US"), u8 type, u8 flags, u32 id, u32 len, payload[len]
 * Host -> guest:
 *	EXEC  payload: u32 argc, u32 envc, argc+envc+1 NUL-terminated strings
 *	      (argv..., env..., cwd); flags bit 0: run in the initramfs, not the
 *	      chroot of the host root.  Replies: OUT/ERR chunks, then EXIT.
 *	KILL  payload: i32 signal, sent to the command's process group.
 *	READ  payload: path.  Reply: FILE (whole content) or FAIL.
 *	WRITE payload: path NUL data.  Reply: EXIT with status 0, or FAIL.
 *	PING  Reply: PONG.   POWEROFF: sync and power off.
 * Guest -> host: READY (id 0), OUT, ERR, EXIT (i32 status: exit code, or
 * 128+signal), FILE, FAIL (text), PONG.
 *
 * The agent repeats READY every half second until the first frame from the
 * host arrives, and the host says nothing before READY: bytes sent while the
 * port was still a cooked tty would have been echoed or mangled.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

enum {
	MSG_EXEC = 1, MSG_KILL, MSG_READ, MSG_WRITE, MSG_PING, MSG_POWEROFF,
	MSG_READY = 16, MSG_OUT, MSG_ERR, MSG_EXIT, MSG_FILE, MSG_FAIL, MSG_PONG,
};
#define MAGIC 0x5553
#define EXEC_IN_INITRAMFS 1
#define MAX_PAYLOAD (64u << 20)
#define MAX_CMDS 64

struct __attribute__((packed)) header {
	uint16_t magic;
	uint8_t type;
	uint8_t flags;
	uint32_t id;
	uint32_t len;
};

struct command {
	uint32_t id;
	pid_t pid;		/* 0: slot free */
	int out, err;		/* -1 once closed */
	int status;		/* -1 until reaped */
};

static int port;
static int heard_from_host;
static struct command cmds[MAX_CMDS];
static int child_pipe[2];	/* SIGCHLD self-pipe */

static void write_all(const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(port, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(120);	/* the host is gone: nothing left to serve */
		p += n;
		len -= n;
	}
}

static void send_msg(uint8_t type, uint32_t id, const void *data, uint32_t len)
{
	struct header h = { MAGIC, type, 0, id, len };

	write_all(&h, sizeof(h));
	if (len)
		write_all(data, len);
}

static void send_fail(uint32_t id, const char *what, int err)
{
	char msg[512];
	int n = snprintf(msg, sizeof(msg), "%s: %s", what, strerror(err));

	send_msg(MSG_FAIL, id, msg, n);
}

static struct command *find_cmd(uint32_t id)
{
	for (int i = 0; i < MAX_CMDS; i++)
		if (cmds[i].pid && cmds[i].id == id)
			return &cmds[i];
	return NULL;
}

static void maybe_finish(struct command *c)
{
	if (c->status < 0 || c->out >= 0 || c->err >= 0)
		return;
	send_msg(MSG_EXIT, c->id, &c->status, sizeof(c->status));
	c->pid = 0;
}

/* Splits the EXEC payload into argv/env/cwd; returns 0 on a well-formed one. */
static int parse_exec(char *p, uint32_t len, char ***argv, char ***envp, char **cwd)
{
	uint32_t argc, envc;
	char *end = p + len, **vec;

	if (len < 8)
		return -1;
	memcpy(&argc, p, 4);
	memcpy(&envc, p + 4, 4);
	if (argc == 0 || argc > 4096 || envc > 4096)
		return -1;
	vec = calloc(argc + envc + 3, sizeof(*vec));
	if (!vec)
		return -1;
	p += 8;
	for (uint32_t i = 0; i < argc + envc + 1; i++) {
		char *nul = memchr(p, 0, end - p);

		if (!nul) {
			free(vec);
			return -1;
		}
		/* argv is NULL-terminated at argc, env after it at argc+1. */
		vec[i < argc ? i : i + 1] = p;
		p = nul + 1;
	}
	*argv = vec;
	*envp = vec + argc + 1;
	*cwd = vec[argc + envc + 1];
	vec[argc + envc + 1] = NULL;
	return 0;
}

static void do_exec(uint32_t id, uint8_t flags, char *payload, uint32_t len)
{
	char **argv, **envp, *cwd;
	int out[2], err[2];
	struct command *slot = NULL;
	pid_t pid;

	for (int i = 0; i < MAX_CMDS && !slot; i++)
		if (!cmds[i].pid)
			slot = &cmds[i];
	if (!slot) {
		send_fail(id, "too many commands running", EBUSY);
		return;
	}
	if (parse_exec(payload, len, &argv, &envp, &cwd)) {
		send_fail(id, "malformed EXEC", EINVAL);
		return;
	}
	if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
		send_fail(id, "pipe", errno);
		free(argv);
		return;
	}
	pid = fork();
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);

		setsid();
		dup2(devnull, 0);
		dup2(out[1], 1);
		dup2(err[1], 2);
		signal(SIGPIPE, SIG_DFL);
		if (!(flags & EXEC_IN_INITRAMFS) && chroot("/host")) {
			perror("labagent: chroot /host");
			_exit(127);
		}
		if (chdir(cwd) && chdir("/")) {
			perror("labagent: chdir");
			_exit(127);
		}
		environ = envp;
		execvp(argv[0], argv);
		fprintf(stderr, "labagent: %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	free(argv);
	close(out[1]);
	close(err[1]);
	if (pid < 0) {
		send_fail(id, "fork", errno);
		close(out[0]);
		close(err[0]);
		return;
	}
	*slot = (struct command){ .id = id, .pid = pid, .out = out[0],
				  .err = err[0], .status = -1 };
}

static void do_read(uint32_t id, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	ssize_t n;

	if (fd < 0 || !buf) {
		send_fail(id, path, errno);
		goto out;
	}
	/* /proc and /sys files report size 0: read until EOF. */
	while ((n = read(fd, buf + len, cap - len)) > 0) {
		len += n;
		if (len == cap) {
			char *bigger = cap < MAX_PAYLOAD ? realloc(buf, cap * 2) : NULL;

			if (!bigger) {
				send_fail(id, path, EFBIG);
				goto out;
			}
			buf = bigger;
			cap *= 2;
		}
	}
	if (n < 0)
		send_fail(id, path, errno);
	else
		send_msg(MSG_FILE, id, buf, len);
out:
	if (fd >= 0)
		close(fd);
	free(buf);
}

static void do_write(uint32_t id, char *payload, uint32_t len)
{
	char *nul = memchr(payload, 0, len);
	int fd, status = 0;
	size_t dlen;

	if (!nul) {
		send_fail(id, "malformed WRITE", EINVAL);
		return;
	}
	dlen = payload + len - (nul + 1);
	fd = open(payload, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, nul + 1, dlen) != (ssize_t)dlen) {
		send_fail(id, payload, errno);
		if (fd >= 0)
			close(fd);
		return;
	}
	close(fd);
	send_msg(MSG_EXIT, id, &status, sizeof(status));
}

static void handle(struct header *h, char *payload)
{
	struct command *c;
	int32_t sig;

	switch (h->type) {
	case MSG_EXEC:
		do_exec(h->id, h->flags, payload, h->len);
		break;
	case MSG_KILL:
		c = find_cmd(h->id);
		if (c && h->len == 4) {
			memcpy(&sig, payload, 4);
			kill(-c->pid, sig);
		}
		break;
	case MSG_READ: {
		char *path = strndup(payload, h->len);

		if (path)
			do_read(h->id, path);
		free(path);
		break;
	}
	case MSG_WRITE:
		do_write(h->id, payload, h->len);
		break;
	case MSG_PING:
		send_msg(MSG_PONG, h->id, NULL, 0);
		break;
	case MSG_POWEROFF:
		sync();
		reboot(RB_POWER_OFF);
		break;
	default:
		send_fail(h->id, "unknown message type", EINVAL);
	}
}

/* Reassembles frames from the port; resynchronises on the magic after garbage. */
static void read_port(void)
{
	static char *buf;
	static size_t have, cap;
	ssize_t n;

	if (!buf) {
		cap = 1 << 16;
		buf = malloc(cap);
	}
	n = read(port, buf + have, cap - have);
	if (n <= 0)
		return;
	have += n;
	for (;;) {
		struct header h;

		if (have < sizeof(h))
			return;
		memcpy(&h, buf, sizeof(h));
		if (h.magic != MAGIC || h.type < MSG_EXEC || h.type > MSG_POWEROFF ||
		    h.len > MAX_PAYLOAD) {
			memmove(buf, buf + 1, --have);
			continue;
		}
		if (have < sizeof(h) + h.len) {
			if (cap < sizeof(h) + h.len) {
				cap = sizeof(h) + h.len;
				buf = realloc(buf, cap);
			}
			return;
		}
		heard_from_host = 1;
		handle(&h, buf + sizeof(h));
		have -= sizeof(h) + h.len;
		memmove(buf, buf + sizeof(h) + h.len, have);
	}
}

static void on_sigchld(int sig)
{
	int saved = errno;

	(void)sig;
	if (write(child_pipe[1], "c", 1) < 0) {
		/* pipe full: a wakeup is already pending */
	}
	errno = saved;
}

static void reap(void)
{
	char drain[64];
	int status;
	pid_t pid;

	while (read(child_pipe[0], drain, sizeof(drain)) > 0)
		;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (int i = 0; i < MAX_CMDS; i++) {
			struct command *c = &cmds[i];

			if (c->pid != pid)
				continue;
			c->status = WIFEXITED(status) ? WEXITSTATUS(status)
						      : 128 + WTERMSIG(status);
			maybe_finish(c);
		}
	}
}

static void forward(struct command *c, int *fd, uint8_t type)
{
	char buf[16384];
	ssize_t n = read(*fd, buf, sizeof(buf));

	if (n > 0) {
		send_msg(type, c->id, buf, n);
		return;
	}
	if (n < 0 && errno == EINTR)
		return;
	close(*fd);
	*fd = -1;
	maybe_finish(c);
}

int main(int argc, char **argv)
{
	struct termios tio;
	struct sigaction sa = { .sa_handler = on_sigchld,
				.sa_flags = SA_RESTART | SA_NOCLDSTOP };

	if (argc != 2) {
		fprintf(stderr, "usage: labagent SERIAL-DEVICE\n");
		return 2;
	}
	port = open(argv[1], O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (port < 0) {
		perror(argv[1]);
		return 1;
	}
	if (tcgetattr(port, &tio) == 0) {
		cfmakeraw(&tio);
		cfsetspeed(&tio, B115200);
		tcsetattr(port, TCSANOW, &tio);
		tcflush(port, TCIFLUSH);
	}
	if (pipe2(child_pipe, O_CLOEXEC | O_NONBLOCK))
		return 1;
	sigaction(SIGCHLD, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		struct pollfd pfd[2 + 2 * MAX_CMDS];
		struct command *owner[2 + 2 * MAX_CMDS];
		int n = 0;

		pfd[n++] = (struct pollfd){ .fd = port, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = child_pipe[0], .events = POLLIN };
		for (int i = 0; i < MAX_CMDS; i++) {
			if (!cmds[i].pid)
				continue;
			if (cmds[i].out >= 0) {
				owner[n] = &cmds[i];
				pfd[n++] = (struct pollfd){ .fd = cmds[i].out, .events = POLLIN };
			}
			if (cmds[i].err >= 0) {
				owner[n] = &cmds[i];
				pfd[n++] = (struct pollfd){ .fd = cmds[i].err, .events = POLLIN };
			}
		}
		if (!heard_from_host)
			send_msg(MSG_READY, 0, NULL, 0);
		if (poll(pfd, n, heard_from_host ? -1 : 500) < 0)
			continue;
		if (pfd[0].revents)
			read_port();
		if (pfd[1].revents)
			reap();
		for (int i = 2; i < n; i++) {
			struct command *c = owner[i];

			if (!pfd[i].revents || !c->pid)
				continue;
			if (pfd[i].fd == c->out)
				forward(c, &c->out, MSG_OUT);
			else if (pfd[i].fd == c->err)
				forward(c, &c->err, MSG_ERR);
		}
	}
}
