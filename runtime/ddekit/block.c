// SPDX-License-Identifier: GPL-2.0
/*
 * The block class's side of the host connection (docs/protocol.md, "Block
 * devices"): the two block rings in the rings memfd, the submit thread
 * that hands blk_submit's requests to the kernel half in batches, each
 * completion published on blk_done, and DISK.
 *
 * A request the host lends is kept in a slot until its completion: the
 * completion echoes the request's own fields (the host checks every one)
 * with the status the kernel half gave. The host never has more than
 * ring_size requests out, so ring_size slots suffice and blk_done never
 * fills (its "lending limit").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <understudy/protocol.h>

#include "arena.h"
#include "block.h"
#include "log.h"
#include "ring.h"
#include "setup.h"
#include "thread.h"

/* block.h repeats the protocol's constants for the kernel half: each must be the protocol's. */
#define SAME_AS_PROTOCOL(name, value) \
	_Static_assert(DDEKIT_##name == US_##name, "DDEKIT_" #name " is not US_" #name);
DDEKIT_BLK_CONSTANTS(SAME_AS_PROTOCOL)
_Static_assert(sizeof(((struct ddekit_disk *)0)->serial) == US_SERIAL_MAX, "serial size");
_Static_assert(sizeof(((struct ddekit_disk *)0)->wwid) == US_WWID_MAX, "wwid size");
_Static_assert(sizeof(((struct ddekit_disk *)0)->driver) == US_NAME_MAX, "driver size");

/* The most requests handed to the kernel half in one CPU entry. */
#define BLK_BATCH 32

static struct {
	bool ready;
	struct ddekit_ring submit, done;
	uint32_t ring_size;
	int kick_fd;
	uint8_t *pool;
	uint32_t pool_buffers, buffer_size;
	/* The requests lent to the driver, by slot; free slots form a stack. */
	struct us_blk_entry *held;
	uint32_t *free_slots, n_free;
	pthread_mutex_t lock;	/* slots and blk_done: completions come on any thread */
} blk = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* ddekit_panic() with a formatted reason (libc-side only: never called from kernel code). */
static __attribute__((noreturn, format(printf, 1, 2))) void broken(const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	ddekit_panic(why);
}

static void (*done_observer)(unsigned long cookie, int status);
static void (*disk_observer)(const struct ddekit_disk *disk);

void ddekit_setup_blk_observer(void (*done)(unsigned long cookie, int status),
			       void (*disk)(const struct ddekit_disk *disk))
{
	done_observer = done;
	disk_observer = disk;
}

int ddekit_setup_blk_rings(int rings_fd, uint64_t rings_size, uint32_t ring_size, int kick_fd,
			   int notify_fd, uint32_t pool_buffers, uint32_t buffer_size)
{
	unsigned long long iova;
	unsigned long arena_size, pool_size;
	void *va, *arena;

	ddekit_arena(&arena, &iova, &arena_size, &pool_size);
	if (!ring_size || (ring_size & (ring_size - 1)) || rings_size < us_blk_rings_size(ring_size) ||
	    (uint64_t)pool_buffers * buffer_size != pool_size || !arena || !buffer_size)
		return -EINVAL;
	va = mmap(NULL, rings_size, PROT_READ | PROT_WRITE, MAP_SHARED, rings_fd, 0);
	if (va == MAP_FAILED)
		return -errno;
	blk.held = calloc(ring_size, sizeof(*blk.held));
	blk.free_slots = calloc(ring_size, sizeof(*blk.free_slots));
	if (!blk.held || !blk.free_slots)
		return -ENOMEM;
	for (uint32_t i = 0; i < ring_size; i++)
		blk.free_slots[i] = ring_size - 1 - i;
	blk.n_free = ring_size;
	blk.submit = (struct ddekit_ring){
		.shared = (struct us_ring *)((uint8_t *)va + US_BLK_RING_SUBMIT * us_blk_ring_stride(ring_size)),
		.entry_size = sizeof(struct us_blk_entry),
		.size = ring_size,
	};
	blk.done = (struct ddekit_ring){
		.shared = (struct us_ring *)((uint8_t *)va + US_BLK_RING_DONE * us_blk_ring_stride(ring_size)),
		.entry_size = sizeof(struct us_blk_entry),
		.size = ring_size,
		.signal_fd = notify_fd,
		.full = "blk_done is full: the host lent more than ring_size requests",
	};
	blk.ring_size = ring_size;
	blk.kick_fd = kick_fd;
	blk.pool = arena;
	blk.pool_buffers = pool_buffers;
	blk.buffer_size = buffer_size;
	blk.ready = true;
	return 0;
}

void ddekit_blk_done(unsigned long cookie, int status)
{
	struct us_blk_entry e;

	if (!blk.ready) {
		if (!done_observer)
			ddekit_panic("a block completion without the host or an observer");
		done_observer(cookie, status);
		return;
	}
	if (status > 0 || status <= -4096)
		broken("a block completion with status %d", status);
	pthread_mutex_lock(&blk.lock);
	if (cookie >= blk.ring_size || blk.held[cookie].status != 1)
		broken("a completion of block request slot %lu, which is not lent", cookie);
	e = blk.held[cookie];
	e.status = status;
	blk.held[cookie].status = 0;
	blk.free_slots[blk.n_free++] = cookie;
	ddekit_ring_produce(&blk.done, &e);
	pthread_mutex_unlock(&blk.lock);
}

/* An entry the host cannot have meant: the two sides disagree, as a bad tx entry says. */
static void check_entry(const struct us_blk_entry *e)
{
	uint32_t span = us_blk_span(e->len, blk.buffer_size);
	bool data = e->op == US_BLK_OP_READ || e->op == US_BLK_OP_WRITE;

	if (e->op > US_BLK_OP_WRITE_ZEROES || e->flags & ~US_BLK_FUA || e->status ||
	    e->queue >= US_MAX_QUEUES || (e->op == US_BLK_OP_FLUSH && e->len))
		broken("the host sent a bad block entry (op %u, flags %#x, queue %u)", e->op, e->flags, e->queue);
	if (data && (!e->len || e->buf >= blk.pool_buffers || span > blk.pool_buffers - e->buf))
		broken("the host sent a block entry outside the pool (buf %u, len %u)", e->buf, e->len);
}

/* Blocks until the host kicks with blk_submit empty (sDDF's wait protocol). */
static void wait_for_requests(void)
{
	struct pollfd fd = { .fd = blk.kick_fd, .events = POLLIN };
	uint64_t count;

	if (!ddekit_ring_may_sleep(&blk.submit))
		return;
	if (poll(&fd, 1, -1) < 0 && errno != EINTR)
		ddekit_panic("cannot wait for the host (poll)");
	if (fd.revents && read(blk.kick_fd, &count, sizeof(count)) < 0 && errno != EINTR)
		ddekit_panic("cannot wait for the host (kick eventfd)");
}

static void (*submit_requests)(const struct ddekit_blk_request *reqs, unsigned int n);

static void blk_thread(void *unused)
{
	for (;;) {
		struct ddekit_blk_request batch[BLK_BATCH];
		struct us_blk_entry e;
		unsigned int n = 0;

		while (n < BLK_BATCH && ddekit_ring_consume(&blk.submit, &e)) {
			uint32_t slot;

			check_entry(&e);
			pthread_mutex_lock(&blk.lock);
			if (!blk.n_free)
				ddekit_panic("the host lent more than ring_size block requests");
			slot = blk.free_slots[--blk.n_free];
			blk.held[slot] = e;
			blk.held[slot].status = 1;	/* lent (status is 0 on the ring) */
			pthread_mutex_unlock(&blk.lock);
			batch[n++] = (struct ddekit_blk_request){
				.cookie = slot,
				.data = e.len && (e.op == US_BLK_OP_READ || e.op == US_BLK_OP_WRITE)
					? blk.pool + (uint64_t)e.buf * blk.buffer_size : NULL,
				.sector = e.sector, .len = e.len,
				.op = e.op, .flags = e.flags, .queue = e.queue,
			};
		}
		if (n)
			submit_requests(batch, n);
		else
			wait_for_requests();
	}
}

int ddekit_start_blk(void (*submit)(const struct ddekit_blk_request *reqs, unsigned int n))
{
	if (!blk.ready)
		return -EINVAL;
	submit_requests = submit;
	return ddekit_thread_create(blk_thread, NULL, "understudy-blk");
}

void ddekit_blk_disk(const struct ddekit_disk *d)
{
	struct us_disk m = {
		.capacity = d->capacity,
		.logical_block_size = d->logical_block_size,
		.physical_block_size = d->physical_block_size,
		.max_sectors = d->max_sectors,
		.max_discard_sectors = d->max_discard_sectors,
		.max_write_zeroes_sectors = d->max_write_zeroes_sectors,
		.features = d->features,
		.n_queues = d->n_queues,
		.queue_depth = d->queue_depth,
	};
	char line[512];

	snprintf(m.driver, sizeof(m.driver), "%s", d->driver);
	snprintf(m.disk_name, sizeof(m.disk_name), "%s", d->disk_name);
	snprintf(m.serial, sizeof(m.serial), "%s", d->serial);
	snprintf(m.wwid, sizeof(m.wwid), "%s", d->wwid);
	snprintf(line, sizeof(line),
		 "DISK name=%s driver=%s capacity=%llu lbs=%u pbs=%u max_sectors=%u "
		 "max_discard=%u max_write_zeroes=%u features=%#x queues=%u depth=%u "
		 "serial=%s wwid=%s",
		 m.disk_name, m.driver, (unsigned long long)d->capacity, d->logical_block_size,
		 d->physical_block_size, d->max_sectors, d->max_discard_sectors,
		 d->max_write_zeroes_sectors, d->features, d->n_queues, d->queue_depth,
		 m.serial[0] ? m.serial : "-", m.wwid[0] ? m.wwid : "-");
	ddekit_event(line);
	ddekit_send_message(US_MSG_DISK, 0, &m, sizeof(m), NULL, 0);
	if (disk_observer)
		disk_observer(d);
}
