// SPDX-License-Identifier: GPL-2.0
/*
 * The driver's queues of the host's TAP (docs/protocol.md, "Sending" and
 * "Receiving"): the stack's frames are read from them, received frames are
 * written to them, neither through the host. The host's steering spreads
 * flows over the queues; a frame read from queue q goes to the device's
 * transmit queue q (modulo those the driver runs, xmit.c), and a frame the
 * device received on queue q is written to TAP queue q (modulo those there
 * are), so that a flow keeps one queue each way.
 *
 * Each frame read is recorded in the TAP's state in shared memory, where it
 * lies in the arena and what it asks of the driver, until the driver is
 * done with it: if this process dies, the host gives those frames to its
 * successor. A frame is read only while the host's gate is open (a
 * successor replays and sends its predecessor's frames first) and a record
 * is free. The TX thread (host.c) waits on the queues and on a_record_freed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <linux/virtio_net.h>

#include <understudy/protocol.h>

#include "arena.h"
#include "host.h"
#include "log.h"
#include "memory.h"
#include "rx_writer.h"
#include "setup.h"
#include "tap.h"

/*
 * A TAP frame's block is 2 KiB or 128 KiB (xmit.c) and aligned to its size
 * (mem.c), so its arena offset shifted by this much names it alone.
 */
#define BLOCK_SHIFT 11

static int tap_fds[US_MAX_QUEUES];
static unsigned int n_tap_fds;

static struct {
	struct us_tap_state *state;	/* NULL without a host */
	int notify_fd;
	uint8_t *arena;
	unsigned long arena_size;
	uint16_t *record_of_block;	/* arena block -> its frame's record + 1 */
	uint32_t *free_records;		/* a stack of record indices */
	uint32_t n_free;
	uint64_t next_seq;
	int a_record_freed;		/* eventfd: the TX thread waits for a record */
	bool tx_waits;
	pthread_mutex_t lock;		/* frames are done on any thread */
} held = { .next_seq = 1, .a_record_freed = -1, .lock = PTHREAD_MUTEX_INITIALIZER };

int ddekit_setup_tap(const int *fds, unsigned int n)
{
	if (n > US_MAX_QUEUES)
		return -EINVAL;
	memcpy(tap_fds, fds, n * sizeof(*fds));
	n_tap_fds = n;
	return 0;
}

unsigned int ddekit_tap_queues(void)
{
	return n_tap_fds;
}

int ddekit_setup_tap_state(struct us_tap_state *state, uint32_t ring_size, int notify_fd)
{
	void *arena;
	unsigned long long iova;
	unsigned long pool_size;

	ddekit_arena(&arena, &iova, &held.arena_size, &pool_size);
	if (ring_size > UINT16_MAX)
		return -EINVAL;
	held.record_of_block = ddekit_zalloc((held.arena_size >> BLOCK_SHIFT) * sizeof(uint16_t));
	held.free_records = ddekit_zalloc(ring_size * sizeof(uint32_t));
	if (!held.record_of_block || !held.free_records)
		return -ENOMEM;
	for (uint32_t i = 0; i < ring_size; i++)
		held.free_records[i] = ring_size - 1 - i;
	held.n_free = ring_size;
	held.notify_fd = notify_fd;
	held.arena = arena;
	held.state = state;
	return 0;
}

/*
 * Whether a frame may be read now: the gate is open and a record is free.
 * The TX thread's alone: it opens its eventfd here, in the process that
 * serves (a template's children would share one opened before the fork).
 */
static bool may_read(void)
{
	bool may;

	if (held.a_record_freed < 0 && held.state) {
		held.a_record_freed = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (held.a_record_freed < 0)
			ddekit_panic("cannot open the TX thread's eventfd");
	}
	if (!n_tap_fds || !held.state || !__atomic_load_n(&held.state->gate, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&held.lock);
	may = held.n_free > 0;
	held.tx_waits = !may;
	pthread_mutex_unlock(&held.lock);
	return may;
}

int ddekit_tap_wait_fds(int *fds)
{
	bool may = may_read();

	fds[0] = held.a_record_freed;
	for (unsigned int q = 0; q < n_tap_fds; q++)
		fds[1 + q] = may ? tap_fds[q] : -1;
	return 1 + n_tap_fds;
}

void ddekit_tap_woken(void)
{
	uint64_t count;

	if (held.a_record_freed >= 0 && read(held.a_record_freed, &count, sizeof(count)) < 0 &&
	    errno != EAGAIN)
		ddekit_panic("cannot read the TX thread's eventfd");
}

/* A virtio_net_hdr's offloads as the protocol's tx flags; false for a GSO type it lacks. */
static bool tx_offloads(const struct virtio_net_hdr *h, struct ddekit_tx_frame *f)
{
	f->flags = h->flags & VIRTIO_NET_HDR_F_NEEDS_CSUM ? DDEKIT_TX_CSUM : 0;
	switch (h->gso_type & ~VIRTIO_NET_HDR_GSO_ECN) {
	case VIRTIO_NET_HDR_GSO_NONE:
		break;
	case VIRTIO_NET_HDR_GSO_TCPV4:
		f->flags |= DDEKIT_TX_GSO_TCPV4;
		break;
	case VIRTIO_NET_HDR_GSO_TCPV6:
		f->flags |= DDEKIT_TX_GSO_TCPV6;
		break;
	default:
		return false;
	}
	if (h->gso_type & VIRTIO_NET_HDR_GSO_ECN)
		f->flags |= DDEKIT_TX_GSO_ECN;
	f->gso_size = h->gso_size;
	f->csum_start = h->csum_start;
	f->csum_offset = h->csum_offset;
	return true;
}

int ddekit_tap_read(unsigned int queue, void *buffer, unsigned int size, struct ddekit_tx_frame *f)
{
	if (queue >= n_tap_fds)
		return 0;
	for (;;) {
		struct virtio_net_hdr h;
		struct iovec iov[2] = { { &h, sizeof(h) }, { buffer, size } };
		ssize_t n;

		if (!may_read())
			return 0;
		n = readv(tap_fds[queue], iov, 2);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (n < 0) {
			char why[96];

			snprintf(why, sizeof(why), "cannot read the TAP: %s", strerror(errno));
			ddekit_panic(why);
		}
		/* The stack never sends these; one is dropped, not sent. */
		if ((size_t)n < sizeof(h) + 14 || !tx_offloads(&h, f)) {
			char line[96];
			int len = snprintf(line, sizeof(line),
					   "understudy: dropped a frame from the TAP (%zd bytes, GSO type %u)\n",
					   n, h.gso_type);

			ddekit_log(4, line, len);
			continue;
		}
		f->len = n - sizeof(h);
		f->queue = queue;
		return f->len;
	}
}

/* Where a TAP frame's block is in the arena; the host's records count from its start. */
static unsigned long arena_offset(const void *block)
{
	unsigned long offset = (const uint8_t *)block - held.arena;

	if ((const uint8_t *)block < held.arena || offset >= held.arena_size)
		ddekit_panic("a TAP frame outside the arena");
	return offset;
}

void ddekit_tap_hold(const struct ddekit_tx_frame *f)
{
	unsigned long offset = arena_offset(f->buffer);
	struct us_held *h;
	uint32_t i;

	pthread_mutex_lock(&held.lock);
	if (!held.n_free)
		ddekit_panic("a TAP frame read without a free record");
	i = held.free_records[--held.n_free];
	held.record_of_block[offset >> BLOCK_SHIFT] = i + 1;
	h = &held.state->held[i];
	h->offset = offset;
	h->len = f->len;
	h->flags = f->flags;
	h->gso_size = f->gso_size;
	h->csum_start = f->csum_start;
	h->csum_offset = f->csum_offset;
	h->queue = f->queue;
	__atomic_store_n(&h->seq, held.next_seq++, __ATOMIC_RELEASE);
	__atomic_add_fetch(&held.state->taken, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&held.lock);
}

/* With the lock: the record of the frame in `block`, which no longer names it. */
static uint32_t take_record(const void *block, const char *why_not)
{
	unsigned long offset = arena_offset(block);
	uint16_t record = held.record_of_block[offset >> BLOCK_SHIFT];

	if (!record)
		ddekit_panic(why_not);
	held.record_of_block[offset >> BLOCK_SHIFT] = 0;
	return record - 1;
}

/* The frame's copy at `to` is whole before this: the record names a good copy throughout. */
void ddekit_tap_moved(const void *from, const void *to)
{
	unsigned long new = arena_offset(to);
	uint32_t record;

	pthread_mutex_lock(&held.lock);
	record = take_record(from, "moved a TAP frame that has no record");
	held.record_of_block[new >> BLOCK_SHIFT] = record + 1;
	__atomic_store_n(&held.state->held[record].offset, new, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&held.lock);
}

/*
 * When the last frame went out: the host times a successor's outage from
 * it (it reads the counts only on its timers). The coarse clock is read
 * from the vDSO's page, no system call and no TSC, at the kernel tick's
 * resolution.
 */
static void note_sent(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
	__atomic_store_n(&held.state->last_sent_ns, (uint64_t)now.tv_sec * 1000000000u + now.tv_nsec,
			 __ATOMIC_RELAXED);
}

void ddekit_tap_done(const void *buffer, int dropped)
{
	uint64_t one = 1;
	uint32_t record;
	bool wake_tx;

	pthread_mutex_lock(&held.lock);
	record = take_record(buffer, "done with a TAP frame that has no record");
	__atomic_store_n(&held.state->held[record].seq, 0, __ATOMIC_RELEASE);
	held.free_records[held.n_free++] = record;
	if (!dropped)
		note_sent();
	__atomic_add_fetch(dropped ? &held.state->dropped : &held.state->sent, 1, __ATOMIC_RELEASE);
	wake_tx = held.tx_waits;
	held.tx_waits = false;
	pthread_mutex_unlock(&held.lock);
	if (wake_tx && write(held.a_record_freed, &one, sizeof(one)) != sizeof(one))
		ddekit_panic("cannot wake the TX thread");
	/* Order the count before reading the flag (the host re-reads the counts). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&held.state->host_waiting, 0, __ATOMIC_RELAXED) &&
	    write(held.notify_fd, &one, sizeof(one)) != sizeof(one))
		ddekit_panic("cannot signal the host (notify eventfd)");
}

_Static_assert(sizeof(struct ddekit_rx_meta) == sizeof(struct virtio_net_hdr),
	       "ddekit_rx_meta is the TAP's virtio_net_hdr");

/*
 * One frame to the host's stack: the TAP runs it there in this thread, as a
 * NIC's poll runs the kernel's stack. The stack may refuse it (the interface
 * is down: EIO; no memory), which drops it, as a NIC drops a frame the stack
 * has no room for; any other error means a header this process built wrong.
 */
void ddekit_tap_writev(unsigned int queue, const struct iovec *iov, unsigned int n)
{
	if (writev(tap_fds[queue % n_tap_fds], iov, n) < 0 && errno != EIO && errno != ENOMEM &&
	    errno != ENOBUFS && errno != EAGAIN) {
		char why[96];

		snprintf(why, sizeof(why), "the TAP refused a received frame: %s", strerror(errno));
		ddekit_panic(why);
	}
}
