// SPDX-License-Identifier: GPL-2.0
/*
 * Received frames go to the host's stack from here (ddekit_net_rx, which
 * writes them to the TAP through tap.c; without a host, to main's test
 * harness, ddekit_setup_rx). Small ones -- the ACKs of the flows
 * the host sends through this device -- are written by a thread of their
 * own, which runs on the CPUs the process may use other than the runtime's
 * (docs/performance.md §5).
 *
 * Why: a TAP write runs the host's stack in the writing thread. For an ACK
 * that is the sending TCP's work (it frees acknowledged data and pushes
 * more), which in the kernel runs on the CPU of the NIC's interrupt, beside
 * the sender. Written from the NET_RX round, it takes the runtime's one
 * CPU, which a sending device keeps busy with its transmit work. Large
 * frames (received data) are still written inline: a hand-off per frame
 * cost receiving more than the overlap won. So is each NET_RX round's first
 * small frame when nothing is queued: a lone one (a ping's reply) would
 * only wait for a wake-up.
 *
 * The queue is single-producer (whoever holds the runtime's CPU: NET_RX
 * runs there), single-consumer (the writer), of copies: an ACK is a few
 * dozen bytes. The writer is woken only when it said it sleeps. A frame
 * written inline first waits until the writer has written every frame
 * queued before it, so that frames reach the stack in the order received.
 * Frames still queued when the process dies are lost, as frames a NIC had
 * not yet handed up are.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"
#include "rx_writer.h"
#include "setup.h"
#include "tap.h"
#include "thread.h"

/* The TAP header and a frame of up to an IPv6 TCP ACK with options. */
#define SMALL_FRAME 160
#define SLOTS 256

struct slot {
	unsigned int queue;
	unsigned int len;
	uint8_t bytes[SMALL_FRAME];
};

static struct {
	struct slot slot[SLOTS];
	uint32_t head;			/* written by the producer */
	uint32_t tail;			/* written by the writer */
	bool writer_sleeps;
	/*
	 * Started at the first frame it takes: a template (driver/template.c)
	 * receives nothing and stays one thread, as its fork needs.
	 */
	bool started;
	bool unavailable;		/* no other CPU, or the thread would not start */
	int wake_fd;
	unsigned int small_this_round;	/* under the runtime's CPU */
} q = { .wake_fd = -1 };

static cpu_set_t writer_cpus;

static void writer(void *unused)
{
	uint64_t n;

	sched_setaffinity(0, sizeof(writer_cpus), &writer_cpus);
	for (;;) {
		uint32_t tail = __atomic_load_n(&q.tail, __ATOMIC_RELAXED);

		if (tail != __atomic_load_n(&q.head, __ATOMIC_ACQUIRE)) {
			const struct slot *s = &q.slot[tail % SLOTS];
			struct iovec iov = { (void *)s->bytes, s->len };

			ddekit_tap_writev(s->queue, &iov, 1);
			__atomic_store_n(&q.tail, tail + 1, __ATOMIC_RELEASE);
			continue;
		}
		__atomic_store_n(&q.writer_sleeps, true, __ATOMIC_SEQ_CST);
		if (tail != __atomic_load_n(&q.head, __ATOMIC_SEQ_CST)) {
			__atomic_store_n(&q.writer_sleeps, false, __ATOMIC_RELAXED);
			continue;
		}
		if (read(q.wake_fd, &n, sizeof(n)) < 0 && errno != EINTR)
			ddekit_panic("the received-frame writer lost its eventfd");
	}
}

/*
 * The CPUs the process may use but the runtime's (all of them when the
 * process is not bound to some): the writer's, so that it takes no time
 * from the runtime's CPU.
 */
static bool find_writer_cpus(void)
{
	cpu_set_t mine;
	int cpus = get_nprocs_conf();
	bool bound;

	if (sched_getaffinity(0, sizeof(mine), &mine))
		return false;
	bound = CPU_COUNT(&mine) < cpus;
	CPU_ZERO(&writer_cpus);
	for (int c = 0; c < cpus && c < CPU_SETSIZE; c++)
		if (!bound || !CPU_ISSET(c, &mine))
			CPU_SET(c, &writer_cpus);
	return CPU_COUNT(&writer_cpus) > 0;
}

/* Under the runtime's CPU, as every use of the queue's producer side. */
static bool writer_running(void)
{
	if (q.started)
		return true;
	if (q.unavailable)
		return false;
	q.wake_fd = eventfd(0, EFD_CLOEXEC);
	if (q.wake_fd < 0 || !find_writer_cpus() || ddekit_thread_create(writer, NULL, "understudy-rxw")) {
		q.unavailable = true;
		return false;
	}
	q.started = true;
	return true;
}

/* A small frame queued for the writer (false: write it yourself, after writer_drain()). */
static bool writer_take(unsigned int queue, const struct iovec *iov, unsigned int n, size_t len)
{
	uint32_t head = q.head;
	uint32_t queued = head - __atomic_load_n(&q.tail, __ATOMIC_ACQUIRE);
	struct slot *s;
	size_t at = 0;

	if (len > SMALL_FRAME || queued == SLOTS)
		return false;
	/* A round's first, with nothing queued before it, is written at once. */
	if (q.small_this_round++ == 0 && !queued)
		return false;
	if (!writer_running())
		return false;
	s = &q.slot[head % SLOTS];
	s->queue = queue;
	s->len = len;
	for (unsigned int i = 0; i < n; i++) {
		memcpy(s->bytes + at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	__atomic_store_n(&q.head, head + 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&q.writer_sleeps, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&q.writer_sleeps, false, __ATOMIC_RELAXED);
		if (write(q.wake_fd, &(uint64_t){ 1 }, sizeof(uint64_t)) < 0)
			ddekit_panic("the received-frame writer's eventfd is gone");
	}
	return true;
}

void ddekit_net_rx_round_end(void)
{
	q.small_this_round = 0;
}

static void writer_drain(void)
{
	while (__atomic_load_n(&q.tail, __ATOMIC_ACQUIRE) != q.head)
		sched_yield();
}

/*
 * One received frame to the host's stack, on TAP queue `queue`: a small one
 * through the writer, any other written here, once every frame queued
 * before it is written. false: there is no TAP.
 */
static bool ddekit_tap_rx(unsigned int queue, const struct ddekit_rx_meta *meta,
			  const struct ddekit_rx_part *parts, unsigned int n)
{
	struct iovec iov[1 + DDEKIT_RX_MAX_PARTS];
	size_t len = sizeof(*meta);

	if (!ddekit_tap_queues())
		return false;
	if (n > DDEKIT_RX_MAX_PARTS)
		ddekit_panic("a received frame of more parts than the TAP write takes");
	iov[0] = (struct iovec){ (void *)meta, sizeof(*meta) };
	for (unsigned int i = 0; i < n; i++) {
		iov[1 + i] = (struct iovec){ (void *)parts[i].base, parts[i].len };
		len += parts[i].len;
	}
	if (writer_take(queue, iov, 1 + n, len))
		return true;
	writer_drain();
	ddekit_tap_writev(queue, iov, 1 + n);
	return true;
}

static void (*rx_handler)(const void *frame, unsigned int len);

void ddekit_setup_rx(void (*handler)(const void *frame, unsigned int len))
{
	rx_handler = handler;
}

void ddekit_net_rx(unsigned int queue, const struct ddekit_rx_meta *meta,
		   const struct ddekit_rx_part *parts, unsigned int n)
{
	static uint8_t frame[64 * 1024 + 64];
	size_t len = 0;

	if (ddekit_tap_rx(queue, meta, parts, n) || !rx_handler)
		return;
	for (unsigned int i = 0; i < n && len + parts[i].len <= sizeof(frame); i++) {
		memcpy(frame + len, parts[i].base, parts[i].len);
		len += parts[i].len;
	}
	rx_handler(frame, len);
}
