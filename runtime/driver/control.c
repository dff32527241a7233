// SPDX-License-Identifier: GPL-2.0
/*
 * The driver's request loop on the control socket (docs/protocol.md):
 * LOAD (before HELLO, for a live update) loads and checks the modules
 * without running them, HELLO maps the arena and rings, PROBE loads the
 * modules (unless LOAD did) and probes, and
 * SPAWN makes the process a post-probe template and forks a driver from it
 * (template.c), the rest turn into the kernel half's net_device
 * operations. Every request gets a REPLY with its seq. A message of unknown type, wrong size or with
 * out-of-range fields ends the process (exit status 2): the host never
 * sends one, so it means the two sides disagree.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <understudy/protocol.h>

#include "../ddekit/ddekit.h"
#include "../ddekit/setup.h"
#include "driver.h"

struct session {
	int control_fd, arena_fd, rings_fd, kick_fd, notify_fd;
	const char *runtime, *symvers;
	bool hello, probed, tx_started;
	/* LOAD was sent; its modules are loaded (and PROBE runs them) if it succeeded. */
	bool load_sent, loaded;
	struct us_load load;
	struct us_hello geometry;
};

static __attribute__((noreturn, format(printf, 1, 2))) void violation(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("understudy-driver: protocol violation: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	printf("PROTOCOL_ERROR\n");
	exit(2);
}

static void reply(uint32_t seq, int32_t status, const void *data, uint32_t len)
{
	struct us_reply r = { .status = status, .data_len = len };

	if (ddekit_send_message(US_MSG_REPLY, seq, &r, sizeof(r), data, len))
		violation("cannot send a reply: the host went away");
}

static bool terminated(const char *s, size_t size)
{
	return memchr(s, '\0', size) != NULL;
}

static int hello(struct session *s, const struct us_hello *h)
{
	uint64_t pool = (uint64_t)h->pool_buffers * h->buffer_size;
	int err;

	if (s->hello)
		violation("a second HELLO");
	if (h->version != US_PROTOCOL_VERSION || h->reserved ||
	    (h->device_class != US_CLASS_NET && h->device_class != US_CLASS_BLOCK))
		return -EPROTONOSUPPORT;
	if (pool != h->pool_size || pool >= h->arena_size || h->arena_size & (US_PAGE_SIZE - 1) ||
	    pool & (US_PAGE_SIZE - 1) || h->arena_iova + h->arena_size > (1ULL << 32))
		return -EINVAL;
	err = ddekit_setup_arena(s->arena_fd, h->arena_iova, h->arena_size, h->pool_size);
	/* The class decides what the rings memfd holds (docs/protocol.md, "Block devices"). */
	if (!err && h->device_class == US_CLASS_BLOCK)
		err = ddekit_setup_blk_rings(s->rings_fd, h->rings_size, h->ring_size, s->kick_fd,
					     s->notify_fd, h->pool_buffers, h->buffer_size);
	else if (!err)
		err = ddekit_setup_rings(s->rings_fd, h->rings_size, h->ring_size, s->kick_fd,
					 s->notify_fd, h->pool_buffers, h->buffer_size);
	if (err)
		return err;
	s->geometry = *h;
	s->hello = true;
	return 0;
}

/* PROBE's or LOAD's module list: 1 .. US_MAX_MODULES NUL-terminated paths. */
static void module_list(const char *what, uint32_t n, const char (*paths)[US_PATH_MAX],
			const char **modules)
{
	if (!n || n > US_MAX_MODULES)
		violation("%s with %u modules", what, n);
	for (uint32_t i = 0; i < n; i++) {
		if (!terminated(paths[i], US_PATH_MAX))
			violation("%s with an unterminated module path", what);
		modules[i] = paths[i];
	}
}

/*
 * Sends text lines (struct problems) as a reply's data, cut to fit one
 * message at a line's end, with a last line counting those left out.
 */
static void reply_lines(uint32_t seq, int32_t status, const struct problems *p)
{
	/* Room kept for the last line, "(4294967295 more lines left out)". */
	const size_t tail = 40;
	char out[US_REPLY_DATA_MAX];
	const char *line = p->text;
	unsigned int kept = 0;
	size_t len = 0;

	for (; line && *line; kept++) {
		size_t n = strcspn(line, "\n") + 1;

		if (len + n + (kept + 1 < p->count ? tail : 0) > sizeof(out))
			break;
		memcpy(out + len, line, n);
		len += n;
		line += n;
	}
	if (kept < p->count)
		len += snprintf(out + len, sizeof(out) - len, "(%u more lines left out)\n",
				p->count - kept);
	reply(seq, status, out, len);
}

/* Loads and checks; touches neither the device nor the arena (docs/protocol.md, "LOAD"). */
static void load(struct session *s, uint32_t seq, const struct us_load *l)
{
	const char *modules[US_MAX_MODULES];
	struct problems why = { 0 };
	char used[US_REPLY_DATA_MAX];
	int err;

	if (s->load_sent || s->hello)
		violation("LOAD %s", s->load_sent ? "twice" : "after HELLO");
	module_list("LOAD", l->n_modules, l->modules, modules);
	s->load_sent = true;
	err = load_modules(s->runtime, s->symvers, modules, l->n_modules, used, sizeof(used), &why);
	if (!err)
		err = pci_table_match(l->ids.vendor, l->ids.device, l->ids.subvendor,
				      l->ids.subdevice, l->ids.class, &why);
	if (err) {
		reply_lines(seq, err, &why);
		problems_clear(&why);
		return;
	}
	s->loaded = true;
	s->load = *l;
	reply(seq, 0, used, strlen(used));
}

/*
 * A block driver serves the host's requests from its probe on: there is no
 * OPEN. The submit thread starts once the disk is added; a process with
 * it is no template (SPAWN: -EBUSY, as after an OPEN).
 */
static int start_block(struct session *s, int init_status)
{
	int err;

	if (!disk_registered())
		return init_status ? init_status : -ENODEV;
	err = ddekit_start_blk(kernel.blk_submit);
	if (err)
		return err;
	s->tx_started = true;
	return 0;
}

static int probe(struct session *s, const struct us_probe *p)
{
	const char *modules[US_MAX_MODULES];
	int init_status, err;

	if (!s->hello || s->probed)
		violation("PROBE %s", s->probed ? "twice" : "before HELLO");
	if (!terminated(p->pci_address, sizeof(p->pci_address)))
		violation("PROBE with a bad PCI address");
	module_list("PROBE", p->n_modules, p->modules, modules);
	if (s->load_sent && (!s->loaded || p->n_modules != s->load.n_modules ||
			     memcmp(p->modules, s->load.modules, sizeof(p->modules))))
		violation("PROBE after %s", s->loaded ? "a LOAD of other modules" : "a refused LOAD");
	s->probed = true;
	ddekit_name_device(p->pci_address);
	if (s->loaded)
		err = run_modules(NULL, 0, &init_status);
	else
		err = start_runtime(s->runtime, s->symvers, modules, p->n_modules, NULL, 0,
				    &init_status);
	if (err)
		return err;
	if (s->geometry.device_class == US_CLASS_BLOCK)
		return start_block(s, init_status);
	return netdev_registered() ? 0 : init_status ? init_status : -ENODEV;
}

/*
 * The TX thread starts with the first OPEN, not at probe: a template must
 * be a single thread, and the host sends frames only to an open device.
 * It starts before the driver's open, so that an INTx line requested there
 * is served by it (runtime/kernel/irq.c).
 */
static int open_device(struct session *s)
{
	int err;

	if (!s->tx_started) {
		err = ddekit_start_tx(kernel.net_xmit_buffers, kernel.net_xmit_tap, kernel.irq_serve);
		if (err)
			return err;
		s->tx_started = true;
	}
	return kernel.net_open();
}

/* Replies in the template; in the fork, becomes the driver on child_control. */
static void spawn(struct session *s, uint32_t seq, int child_control)
{
	int pid;
	uint32_t data;

	if (ddekit_checking) {	/* a fork would share the template's trace region */
		close(child_control);
		reply(seq, -EOPNOTSUPP, NULL, 0);
		return;
	}
	pid = template_spawn(s->control_fd, child_control);

	if (pid == 0) {
		s->control_fd = child_control;
		return;
	}
	if (pid < 0) {
		close(child_control);
		reply(seq, pid, NULL, 0);
		return;
	}
	data = pid;
	reply(seq, 0, &data, sizeof(data));
}

static int ethtool(const struct us_ethtool *req, uint8_t *data, uint32_t *len)
{
	int ret;

	switch (req->cmd) {
	case US_ETHTOOL_DRVINFO: {
		struct us_ethtool_drvinfo *info = (void *)data;

		memset(info, 0, sizeof(*info));
		ret = kernel.net_drvinfo(info->driver, info->version, info->fw_version,
					 info->bus_info, US_NAME_MAX);
		*len = sizeof(*info);
		return ret;
	}
	case US_ETHTOOL_LINK: {
		struct us_ethtool_link link;
		uint32_t speed;

		ret = kernel.net_link(&speed, &link.duplex, &link.autoneg, &link.port, &link.link);
		link.speed = speed;
		memcpy(data, &link, sizeof(link));
		*len = sizeof(link);
		return ret;
	}
	case US_ETHTOOL_STATS: {
		struct us_ethtool_stats head = { 0 };
		char names[US_ETHTOOL_STATS_PER_REPLY][US_KERNEL_API_STAT_NAME_LEN];
		unsigned long long values[US_ETHTOOL_STATS_PER_REPLY];
		uint32_t total = 0;
		int n;

		n = kernel.net_stats(req->first, US_ETHTOOL_STATS_PER_REPLY, &total, names, values);
		if (n < 0)
			return n;
		head.total = total;
		head.n = n;
		memcpy(data, &head, sizeof(head));
		for (int i = 0; i < n; i++) {
			struct us_ethtool_stat stat = { .value = values[i] };

			snprintf(stat.name, sizeof(stat.name), "%s", names[i]);
			memcpy(data + sizeof(head) + i * sizeof(stat), &stat, sizeof(stat));
		}
		*len = sizeof(head) + n * sizeof(struct us_ethtool_stat);
		return 0;
	}
	}
	violation("ETHTOOL command %u", req->cmd);
}

/* Body sizes of the requests with a fixed size. */
static size_t body_size(uint16_t type)
{
	switch (type) {
	case US_MSG_LOAD: return sizeof(struct us_load);
	case US_MSG_HELLO: return sizeof(struct us_hello);
	case US_MSG_PROBE: return sizeof(struct us_probe);
	case US_MSG_OPEN: case US_MSG_STOP: case US_MSG_PING: case US_MSG_SPAWN: return 0;
	case US_MSG_SET_MTU: return sizeof(struct us_set_mtu);
	case US_MSG_SET_MAC: return sizeof(struct us_set_mac);
	case US_MSG_SET_FEATURES: return sizeof(struct us_set_features);
	case US_MSG_SET_CHANNELS: return sizeof(struct us_set_channels);
	case US_MSG_ETHTOOL: return sizeof(struct us_ethtool);
	}
	violation("unknown message type %u", type);
}

/* received_fd: a descriptor that came with the message, -1 if none. */
static void handle(struct session *s, const uint8_t *msg, size_t n, int received_fd)
{
	struct us_msg_header h;
	const uint8_t *body = msg + sizeof(h);
	size_t len = n - sizeof(h);
	uint8_t data[US_ETHTOOL_DATA_MAX];
	uint32_t data_len = 0;
	int ret;

	if (n < sizeof(h))
		violation("a message of %zu bytes", n);
	memcpy(&h, msg, sizeof(h));
	if (h.flags)
		violation("reserved flags %#x", h.flags);
	if ((h.type == US_MSG_SPAWN) != (received_fd >= 0))
		violation("type %u %s a file descriptor", h.type, received_fd >= 0 ? "with" : "without");
	if (template_taken() && h.type != US_MSG_SPAWN && h.type != US_MSG_PING)
		violation("type %u to a template, which only spawns drivers", h.type);
	if (h.type == US_MSG_SET_RX_MODE) {
		struct us_set_rx_mode m;

		if (len < sizeof(m))
			violation("SET_RX_MODE of %zu bytes", len);
		memcpy(&m, body, sizeof(m));
		if (m.n_mc > US_MAX_MC || len != sizeof(m) + 6u * m.n_mc ||
		    m.flags & ~(US_RX_MODE_PROMISC | US_RX_MODE_ALLMULTI))
			violation("SET_RX_MODE with %u addresses in %zu bytes", m.n_mc, len);
		reply(h.seq, s->probed ? kernel.net_set_rx_mode(m.flags, m.n_mc, body + sizeof(m))
				       : -ENODEV, NULL, 0);
		return;
	}
	if (len != body_size(h.type))
		violation("type %u with a %zu-byte body", h.type, len);
	if (h.type == US_MSG_LOAD) {
		static struct us_load l;

		memcpy(&l, body, sizeof(l));
		load(s, h.seq, &l);
		return;
	}
	if (h.type != US_MSG_HELLO && h.type != US_MSG_PROBE && h.type != US_MSG_PING &&
	    !s->probed) {
		if (received_fd >= 0)
			close(received_fd);
		reply(h.seq, -ENODEV, NULL, 0);
		return;
	}
	if (h.type == US_MSG_SPAWN) {
		if (s->tx_started) {	/* opened once: not the state a fresh driver starts from */
			close(received_fd);
			reply(h.seq, -EBUSY, NULL, 0);
			return;
		}
		spawn(s, h.seq, received_fd);
		return;
	}
	switch (h.type) {
	case US_MSG_HELLO: {
		struct us_hello hl;

		memcpy(&hl, body, sizeof(hl));
		ret = hello(s, &hl);
		break;
	}
	case US_MSG_PROBE: {
		static struct us_probe p;

		memcpy(&p, body, sizeof(p));
		ret = probe(s, &p);
		break;
	}
	case US_MSG_OPEN:
		ret = open_device(s);
		break;
	case US_MSG_STOP:
		ret = kernel.net_stop();
		break;
	case US_MSG_SET_MTU: {
		struct us_set_mtu m;

		memcpy(&m, body, sizeof(m));
		ret = kernel.net_set_mtu(m.mtu);
		break;
	}
	case US_MSG_SET_MAC: {
		struct us_set_mac m;

		memcpy(&m, body, sizeof(m));
		ret = kernel.net_set_mac(m.mac);
		break;
	}
	case US_MSG_SET_FEATURES: {
		struct us_set_features f;

		memcpy(&f, body, sizeof(f));
		ret = kernel.net_set_features(f.features);
		break;
	}
	case US_MSG_SET_CHANNELS: {
		struct us_set_channels c;

		memcpy(&c, body, sizeof(c));
		ret = c.combined && c.combined <= US_MAX_QUEUES ? kernel.net_set_channels(c.combined)
								 : -EINVAL;
		break;
	}
	case US_MSG_ETHTOOL: {
		struct us_ethtool e;

		memcpy(&e, body, sizeof(e));
		ret = ethtool(&e, data, &data_len);
		if (ret)
			data_len = 0;
		break;
	}
	default:	/* PING */
		/*
		 * The answer also proves the kernel half makes progress: a
		 * driver spinning with the one CPU held (docs/design.md §6),
		 * e.g. in its transmit or interrupt code, keeps this from
		 * returning, and the host's PING deadline declares it hung.
		 */
		ddekit_cpu_await_progress();
		ret = 0;
		break;
	}
	reply(h.seq, ret, data, data_len);
}

/*
 * One message and the descriptor that came with it (-1 if none); more than
 * one descriptor, or a truncated message or control part, is a violation.
 */
static ssize_t receive(int fd, uint8_t *msg, size_t size, int *received_fd)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} control;
	struct iovec iov = { .iov_base = msg, .iov_len = size };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = control.buf, .msg_controllen = sizeof(control.buf),
	};
	struct cmsghdr *c;
	ssize_t n;

	*received_fd = -1;
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return n;
	c = CMSG_FIRSTHDR(&mh);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
	    c->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(received_fd, CMSG_DATA(c), sizeof(int));
	else if (c)
		violation("a control message that is not one file descriptor");
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		violation("a message over %u bytes or with more than one descriptor", US_MSG_MAX);
	return n;
}

int control_loop(int control_fd, int arena_fd, int rings_fd, int kick_fd, int notify_fd,
		 const char *runtime, const char *symvers)
{
	struct session s = {
		.control_fd = control_fd, .arena_fd = arena_fd,
		.rings_fd = rings_fd, .kick_fd = kick_fd, .notify_fd = notify_fd,
		.runtime = runtime, .symvers = symvers,
	};
	static uint8_t msg[US_MSG_MAX];

	ddekit_setup_control(control_fd);
	for (;;) {
		int received_fd;
		ssize_t n = receive(s.control_fd, msg, sizeof(msg), &received_fd);

		if (n == 0) {
			printf("HOST_CLOSED\n");
			fflush(stdout);
			_exit(0);	/* kernel threads still run: no unwinding */
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			violation("control socket: %s", strerror(errno));
		}
		handle(&s, msg, n, received_fd);
	}
}
