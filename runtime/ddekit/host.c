// SPDX-License-Identifier: GPL-2.0
/*
 * The driver's side of the host connection (docs/protocol.md): messages on
 * the control socket, and the two sDDF-style rings in shared memory with
 * their kick/notify eventfds.
 *
 * Everything the kernel half reports (registration, carrier, TX queue
 * state, log records) becomes an event line on stdout, for people and
 * tests, and, once a control socket is set up, a protocol message.
 *
 * Data path: a TX thread sends what the tx ring holds, each pool buffer
 * handed to the kernel half (zero copy; when the driver frees the skb the
 * buffer goes back on tx_done), then what the driver's queue of the host's
 * TAP holds (tap.c). Received frames go to that queue too, written from
 * where the NIC put them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <understudy/protocol.h>

#include "arena.h"
#include "host.h"
#include "log.h"
#include "ring.h"
#include "setup.h"
#include "thread.h"

/*
 * The kernel half cannot include <understudy/protocol.h> (Kbuild compiles it
 * without <stdint.h>), so host.h gives it names of its own for the
 * protocol constants it uses; each must be the protocol's value.
 */
#define SAME_AS_PROTOCOL(name, value) \
	_Static_assert(DDEKIT_##name == US_##name, "DDEKIT_" #name " is not US_" #name);
DDEKIT_PROTOCOL_CONSTANTS(SAME_AS_PROTOCOL)

static int control_fd = -1;

static struct {
	bool ready;
	struct ddekit_ring tx, tx_done;
	int kick_fd;
	uint8_t *pool;
	uint32_t pool_buffers, buffer_size;
	pthread_mutex_t tx_done_lock;	/* tx_done has producers on any thread */
} rings = { .tx_done_lock = PTHREAD_MUTEX_INITIALIZER };

int ddekit_setup_control(int fd)
{
	control_fd = fd;
	return 0;
}

int ddekit_send_message(uint16_t type, uint32_t seq, const void *body, size_t len,
			const void *tail, size_t tail_len)
{
	uint8_t msg[US_MSG_MAX];
	struct us_msg_header h = { .type = type, .flags = 0, .seq = seq };
	size_t total = sizeof(h) + len + tail_len;

	if (control_fd < 0)
		return 0;
	if (total > sizeof(msg))
		return -EMSGSIZE;
	memcpy(msg, &h, sizeof(h));
	memcpy(msg + sizeof(h), body, len);
	if (tail_len)
		memcpy(msg + sizeof(h) + len, tail, tail_len);
	return send(control_fd, msg, total, MSG_NOSIGNAL) == (ssize_t)total ? 0 : -errno;
}

/* ---- taps ------------------------------------------------------------------ */

static void copy_str(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%s", src ? src : "");
}

void ddekit_net_registered(const char *name, const char *driver, const char *version,
			   const unsigned char *perm_addr, const unsigned char *dev_addr,
			   unsigned int mtu, unsigned int min_mtu, unsigned int max_mtu,
			   unsigned long long features, unsigned long long hw_features,
			   unsigned int offloads, unsigned int n_tx_queues,
			   unsigned int n_rx_queues, int carrier)
{
	struct us_registered r = {
		.mtu = mtu, .min_mtu = min_mtu, .max_mtu = max_mtu,
		.features = features, .hw_features = hw_features, .offloads = offloads,
		.n_tx_queues = n_tx_queues, .n_rx_queues = n_rx_queues,
	};
	const unsigned char *m = dev_addr, *p = perm_addr;
	char line[512];

	memcpy(r.perm_addr, perm_addr, 6);
	memcpy(r.dev_addr, dev_addr, 6);
	copy_str(r.driver, sizeof(r.driver), driver);
	copy_str(r.version, sizeof(r.version), version);
	snprintf(line, sizeof(line),
		 "REGISTERED name=%s driver=%s version=%s "
		 "mac=%02x:%02x:%02x:%02x:%02x:%02x perm=%02x:%02x:%02x:%02x:%02x:%02x "
		 "mtu=%u min_mtu=%u max_mtu=%u features=%#llx hw_features=%#llx "
		 "offloads=%#x txqs=%u rxqs=%u carrier=%d",
		 name, r.driver, r.version[0] ? r.version : "-",
		 m[0], m[1], m[2], m[3], m[4], m[5], p[0], p[1], p[2], p[3], p[4], p[5],
		 mtu, min_mtu, max_mtu, features, hw_features, offloads, n_tx_queues,
		 n_rx_queues, carrier);
	ddekit_event(line);
	ddekit_send_message(US_MSG_REGISTERED, 0, &r, sizeof(r), NULL, 0);
	/* The host learns the carrier state a driver starts with, too. */
	if (control_fd >= 0)
		ddekit_send_message(US_MSG_CARRIER, 0, &(struct us_carrier){ .on = !!carrier },
				    sizeof(struct us_carrier), NULL, 0);
}

void ddekit_net_carrier(const char *name, int on)
{
	struct us_carrier c = { .on = !!on };
	char line[64];

	snprintf(line, sizeof(line), "CARRIER name=%s on=%d", name, c.on);
	ddekit_event(line);
	ddekit_send_message(US_MSG_CARRIER, 0, &c, sizeof(c), NULL, 0);
}

void ddekit_host_log(int level, const char *text, unsigned long len)
{
	struct us_log log = { .level = level };

	if (len > US_TEXT_MAX)
		len = US_TEXT_MAX;
	ddekit_send_message(US_MSG_LOG, 0, &log, sizeof(log), text, len);
}

void ddekit_host_warn(const char *file, unsigned int line, const char *text)
{
	struct us_warn w = { .line = line };

	copy_str(w.file, sizeof(w.file), file);
	ddekit_send_message(US_MSG_WARN, 0, &w, sizeof(w), text, strnlen(text, US_TEXT_MAX));
}

/* ---- rings ----------------------------------------------------------------- */

int ddekit_setup_rings(int rings_fd, uint64_t rings_size, uint32_t ring_size, int kick_fd,
		       int notify_fd, uint32_t pool_buffers, uint32_t buffer_size)
{
	void *va, *arena;
	unsigned long long iova;
	unsigned long arena_size, pool_size;
	uint64_t stride = us_ring_stride(ring_size);

	ddekit_arena(&arena, &iova, &arena_size, &pool_size);
	int err;

	if (!ring_size || (ring_size & (ring_size - 1)) || rings_size < us_rings_size(ring_size) ||
	    (uint64_t)pool_buffers * buffer_size != pool_size || !arena)
		return -EINVAL;
	va = mmap(NULL, rings_size, PROT_READ | PROT_WRITE, MAP_SHARED, rings_fd, 0);
	if (va == MAP_FAILED)
		return -errno;
	err = ddekit_setup_tap_state((struct us_tap_state *)((uint8_t *)va + us_tap_state_offset(ring_size)),
				     ring_size, notify_fd);
	if (err)
		return err;
	rings.tx = (struct ddekit_ring){
		.shared = (struct us_ring *)((uint8_t *)va + US_RING_TX * stride),
		.entry_size = sizeof(struct us_ring_entry),
		.size = ring_size,
	};
	/* The host lends at most ring_size buffers, so tx_done never fills. */
	rings.tx_done = (struct ddekit_ring){
		.shared = (struct us_ring *)((uint8_t *)va + US_RING_TX_DONE * stride),
		.entry_size = sizeof(struct us_ring_entry),
		.size = ring_size,
		.signal_fd = notify_fd,
		.full = "tx_done is full: the host lent more than ring_size buffers",
	};
	rings.kick_fd = kick_fd;
	rings.pool = arena;
	rings.pool_buffers = pool_buffers;
	rings.buffer_size = buffer_size;
	rings.ready = true;
	return 0;
}

/*
 * The interrupt lines the TX thread serves (host.h), and the eventfd that
 * makes it wait again: written when a line is handed to it and when its
 * stopped queue wakes.
 */
#define TX_MAX_IRQS	8
static int tx_rewait_fd = -1;
static unsigned int (*serve_interrupts)(int *eventfds, unsigned int max);
static __thread bool on_tx_thread;

int ddekit_tx_serves_interrupts(void)
{
	return tx_rewait_fd >= 0;
}

int ddekit_on_tx_thread(void)
{
	return on_tx_thread;
}

void ddekit_tx_rewait(void)
{
	uint64_t one = 1;

	if (tx_rewait_fd >= 0 && write(tx_rewait_fd, &one, sizeof(one)) != sizeof(one))
		ddekit_panic("cannot wake the TX thread (rewait eventfd)");
}

static void rewaited(void)
{
	uint64_t count;

	if (read(tx_rewait_fd, &count, sizeof(count)) < 0 && errno != EAGAIN && errno != EINTR)
		ddekit_panic("cannot read the TX thread's rewait eventfd");
}

/* Adds eventfds to a poll set, readable = one came. */
static unsigned int add_readable(struct pollfd *fds, const int *eventfds, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		fds[i] = (struct pollfd){ .fd = eventfds[i], .events = POLLIN };
	return n;
}

/* Polls the lines' eventfds and the rewait one; returns whether any was readable. */
static bool poll_interrupts(const int *eventfds, unsigned int n, int timeout)
{
	struct pollfd fds[1 + TX_MAX_IRQS] = { { .fd = tx_rewait_fd, .events = POLLIN } };
	int ready;

	if (n > TX_MAX_IRQS)
		ddekit_panic("the TX thread serves too many interrupt lines");
	ready = poll(fds, 1 + add_readable(fds + 1, eventfds, n), timeout);
	if (ready < 0 && errno != EINTR)
		ddekit_panic("cannot wait for interrupts (poll)");
	if (fds[0].revents)
		rewaited();
	return ready > 0;
}

void ddekit_tx_wait_interrupts(const int *eventfds, unsigned int n)
{
	poll_interrupts(eventfds, n, -1);
}

/*
 * Blocks until there is something to do: the host kicks (an entry on r,
 * or its gate opened), the TAP has a frame, a record of a held frame is
 * free again, or an interrupt line the thread serves fired. The tx ring's
 * part is sDDF's wait protocol. Returns whether to serve the lines: one
 * fired, or the set of lines changed.
 */
static bool wait_for_frames(const struct ddekit_ring *tx, const int *irq_fds, unsigned int n_irq)
{
	struct pollfd fds[3 + US_MAX_QUEUES + TX_MAX_IRQS] = {
		{ .fd = rings.kick_fd, .events = POLLIN }, { .fd = tx_rewait_fd, .events = POLLIN } };
	int tap_fds[1 + US_MAX_QUEUES], n, first_irq;
	bool fired = false;
	uint64_t count;

	if (!ddekit_ring_may_sleep(tx))
		return false;
	n = ddekit_tap_wait_fds(tap_fds);
	n = 2 + add_readable(fds + 2, tap_fds, n);
	first_irq = n;
	n += add_readable(fds + n, irq_fds, n_irq);
	if (poll(fds, n, -1) < 0 && errno != EINTR)
		ddekit_panic("cannot wait for frames (poll)");
	if (fds[0].revents && read(rings.kick_fd, &count, sizeof(count)) < 0 && errno != EINTR)
		ddekit_panic("cannot wait for the host (kick eventfd)");
	if (fds[1].revents)
		rewaited();
	if (fds[2].revents)
		ddekit_tap_woken();
	for (int i = first_irq; i < n; i++)
		fired |= fds[i].revents != 0;
	return fired || fds[1].revents;
}

void ddekit_net_tx_done(unsigned long cookie, int dropped)
{
	uint8_t *buffer = (uint8_t *)cookie;

	if (!rings.ready || buffer < rings.pool ||
	    buffer >= rings.pool + (uint64_t)rings.pool_buffers * rings.buffer_size)
		ddekit_panic("tx_done of a buffer the host did not lend");
	pthread_mutex_lock(&rings.tx_done_lock);
	ddekit_ring_produce(&rings.tx_done, &(struct us_ring_entry){
		.buf = (buffer - rings.pool) / rings.buffer_size,
		.flags = dropped ? US_TX_DONE_DROPPED : 0,
	});
	pthread_mutex_unlock(&rings.tx_done_lock);
}

static void (*xmit_buffers)(struct ddekit_tx_frame *frames, unsigned int n);
static unsigned int (*xmit_tap)(void);

/*
 * The host's frames up to a batch, handed to the kernel half in one call:
 * one CPU entry and one doorbell for the batch instead of one each per
 * frame. Returns how many there were.
 */
static unsigned int send_host_frames(const struct ddekit_ring *tx)
{
	struct ddekit_tx_frame batch[DDEKIT_TX_BATCH];
	struct us_ring_entry e;
	unsigned int n = 0;

	while (n < DDEKIT_TX_BATCH && ddekit_ring_consume(tx, &e)) {
		uint32_t span = us_tx_span(e.len, rings.buffer_size);

		if (e.len > US_TX_MAX_FRAME || e.buf >= rings.pool_buffers ||
		    span > rings.pool_buffers - e.buf || e.queue >= US_MAX_QUEUES)
			ddekit_panic("the host sent a bad tx entry");
		batch[n++] = (struct ddekit_tx_frame){
			.buffer = rings.pool + (uint64_t)e.buf * rings.buffer_size,
			.len = e.len,
			.room = span * rings.buffer_size,
			.flags = e.flags,
			.gso_size = e.gso_size,
			.csum_start = e.csum_start,
			.csum_offset = e.csum_offset,
			.queue = e.queue,
		};
	}
	if (!n)
		return 0;
	xmit_buffers(batch, n);
	for (unsigned int i = 0; i < n; i++)
		if (batch[i].status)
			ddekit_net_tx_done((unsigned long)batch[i].buffer, 1);
	return n;
}

/*
 * Each round: the interrupts that came, then the host's frames (a
 * predecessor's go before the TAP's new ones), then a batch from the TAP
 * (us_net_xmit_tap reads and sends it). It sleeps when neither had
 * anything. After a round that sent, a poll that does not block looks for
 * interrupts (a reply's usually arrives while the thread is still in its
 * doorbell); the runtime's CPU is taken to serve them only when one came.
 * With a poll window (tx_poll.c) it also does so instead of sleeping while
 * the traffic is sparse.
 * A line handed to the thread while it sends is seen when it next waits:
 * at the latest when its queue stops (us_irq_wait_serving).
 */
static void tx_thread(void *unused)
{
	const struct ddekit_ring *tx = &rings.tx;
	int irq_fds[TX_MAX_IRQS];
	unsigned int n_irq = 0;
	bool serve = true;

	on_tx_thread = true;
	for (;;) {
		unsigned int sent;

		if (serve)
			n_irq = serve_interrupts(irq_fds, TX_MAX_IRQS);
		sent = send_host_frames(tx);
		if (!sent)
			sent = xmit_tap();
		if (ddekit_tx_poll(sent + serve))
			/* Also sees a changed set of lines, which a thread that
			 * does not sleep would otherwise not take up. */
			serve = poll_interrupts(irq_fds, n_irq, 0);
		else if (sent)
			serve = n_irq && poll_interrupts(irq_fds, n_irq, 0);
		else
			serve = wait_for_frames(tx, irq_fds, n_irq);
	}
}

int ddekit_start_tx(void (*xmit)(struct ddekit_tx_frame *frames, unsigned int n),
		    unsigned int (*from_tap)(void),
		    unsigned int (*interrupts)(int *eventfds, unsigned int max))
{
	int err;

	if (!rings.ready)
		return -EINVAL;
	xmit_buffers = xmit;
	xmit_tap = from_tap;
	serve_interrupts = interrupts;
	tx_rewait_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (tx_rewait_fd < 0)
		return -errno;
	err = ddekit_thread_create(tx_thread, NULL, "understudy-tx");
	if (err) {
		close(tx_rewait_fd);
		tx_rewait_fd = -1;
	}
	return err;
}
