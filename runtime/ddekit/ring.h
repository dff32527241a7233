/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The driver's ends of the shared-memory rings (docs/protocol.md, "Rings"):
 * one producer, one consumer, sDDF's wait protocol. The net rings carry
 * struct us_ring_entry and the block rings struct us_blk_entry; the
 * operations do not depend on the entry, so they are written once, here,
 * generic over its size. The host's ends are host/shm/src/ring.rs.
 *
 * A broken ring (the other end published more than the ring holds, or
 * filled a ring whose lending limit says it cannot fill) is the two sides
 * disagreeing: the process panics rather than guess.
 */
#ifndef DDEKIT_RING_H
#define DDEKIT_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <understudy/protocol.h>

#include "log.h"

struct ddekit_ring {
	struct us_ring *shared;	/* the header in the rings memfd; entries follow it */
	size_t entry_size;
	uint32_t size;		/* entries; a power of two */
	int signal_fd;		/* producer ends: the eventfd that wakes a waiting consumer */
	const char *full;	/* producer ends: the panic when the ring fills */
};

static inline uint8_t *ddekit_ring_entry(const struct ddekit_ring *r, uint32_t counter)
{
	return (uint8_t *)r->shared + US_RING_ENTRIES_OFFSET + us_ring_slot(counter, r->size) * r->entry_size;
}

/* Publishes one entry; signals the consumer only if it said it waits. */
static inline void ddekit_ring_produce(const struct ddekit_ring *r, const void *entry)
{
	struct us_ring *s = r->shared;
	uint32_t head = __atomic_load_n(&s->head, __ATOMIC_RELAXED);
	uint64_t one = 1;

	if (us_ring_used(head, __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE)) >= r->size)
		ddekit_panic(r->full);
	memcpy(ddekit_ring_entry(r, head), entry, r->entry_size);
	__atomic_store_n(&s->head, head + 1, __ATOMIC_RELEASE);
	/* Order the head store before reading the flag (the consumer re-checks). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&s->consumer_waiting, __ATOMIC_RELAXED)) {
		__atomic_store_n(&s->consumer_waiting, 0, __ATOMIC_RELAXED);
		if (write(r->signal_fd, &one, sizeof(one)) != sizeof(one))
			ddekit_panic("cannot signal the host (notify eventfd)");
	}
}

/* Takes the next entry, if there is one. */
static inline bool ddekit_ring_consume(const struct ddekit_ring *r, void *entry)
{
	struct us_ring *s = r->shared;
	uint32_t tail = __atomic_load_n(&s->tail, __ATOMIC_RELAXED);
	uint32_t head = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE);

	if (head == tail)
		return false;
	if (us_ring_used(head, tail) > r->size)
		ddekit_panic("the host's ring indices are inconsistent");
	memcpy(entry, ddekit_ring_entry(r, tail), r->entry_size);
	__atomic_store_n(&s->tail, tail + 1, __ATOMIC_RELEASE);
	return true;
}

/*
 * The consumer's half of going to sleep: says it waits, then looks again.
 * Returns whether it may sleep (the ring is still empty); otherwise an
 * entry came between its last look and the flag, and it must not.
 */
static inline bool ddekit_ring_may_sleep(const struct ddekit_ring *r)
{
	struct us_ring *s = r->shared;

	__atomic_store_n(&s->consumer_waiting, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return __atomic_load_n(&s->head, __ATOMIC_ACQUIRE) == __atomic_load_n(&s->tail, __ATOMIC_RELAXED);
}

#endif
