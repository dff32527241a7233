// SPDX-License-Identifier: GPL-2.0
/*
 * Unit test of the block rings' driver side (runtime/ddekit/block.c): this
 * program is the host (it produces on blk_submit, kicks, consumes blk_done
 * and waits on the notify eventfd as docs/protocol.md's ring rules say) and
 * stands in for the kernel half (the submit callback, which completes the
 * requests later, from another thread and out of order, as interrupts do).
 *
 *	test-blk-rings
 *
 * Checks that each completion echoes its request's fields with the status
 * the "kernel" gave, that slots are reused across more requests than the
 * ring holds, that the host is signalled when it waits, and that entries
 * the host cannot have meant end the driver. One line per check; exit 1
 * if any failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <understudy/protocol.h>

#include "ddekit.h"
#include "setup.h"

#define RING_SIZE	8
#define BUFFER_SIZE	512
#define POOL_BUFFERS	64

static uint8_t pool[POOL_BUFFERS * BUFFER_SIZE];
static int failures;

/* ---- what block.c needs of the rest of ddekit ------------------------------ */

void ddekit_arena(void **va, unsigned long long *iova, unsigned long *size, unsigned long *pool_size)
{
	*va = pool;
	*iova = 0x10000000;
	*size = sizeof(pool) * 2;
	*pool_size = sizeof(pool);
}

void ddekit_panic(const char *why)
{
	printf("panic: %s\n", why);
	fflush(stdout);
	_exit(70);
}

void ddekit_event(const char *line)
{
	printf("%s\n", line);
}

int ddekit_send_message(uint16_t type, uint32_t seq, const void *body, size_t len,
			const void *tail, size_t tail_len)
{
	return 0;
}

struct thread_start {
	void (*fn)(void *);
	void *arg;
};

static void *start(void *p)
{
	struct thread_start s = *(struct thread_start *)p;

	free(p);
	s.fn(s.arg);
	return NULL;
}

int ddekit_thread_create(void (*fn)(void *), void *arg, const char *name)
{
	struct thread_start *s = malloc(sizeof(*s));
	pthread_t t;

	*s = (struct thread_start){ fn, arg };
	return pthread_create(&t, NULL, start, s);
}

/* ---- the "kernel half": completes what it got, later, last first ----------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t got = PTHREAD_COND_INITIALIZER;
static struct ddekit_blk_request pending[RING_SIZE * 4];
static unsigned int n_pending;

static void submit(const struct ddekit_blk_request *reqs, unsigned int n)
{
	pthread_mutex_lock(&lock);
	for (unsigned int i = 0; i < n; i++)
		pending[n_pending++] = reqs[i];
	pthread_cond_broadcast(&got);
	pthread_mutex_unlock(&lock);
}

/* Completes the pending requests in reverse order once `want` have come (a thread). */
static void *complete_all(void *arg)
{
	unsigned int want = (uintptr_t)arg;

	pthread_mutex_lock(&lock);
	while (n_pending < want)
		pthread_cond_wait(&got, &lock);
	while (n_pending) {
		struct ddekit_blk_request r = pending[--n_pending];

		pthread_mutex_unlock(&lock);
		if (r.op == DDEKIT_BLK_OP_READ)
			memset(r.data, (int)(r.sector & 0xff), r.len);
		/* The status the kernel half would give: odd sectors fail with -EIO. */
		ddekit_blk_done(r.cookie, r.sector & 1 ? -EIO : 0);
		pthread_mutex_lock(&lock);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* ---- the host ------------------------------------------------------------------ */

static struct us_ring *submit_ring, *done_ring;
static int kick_fd, notify_fd;

static struct us_blk_entry *entries(struct us_ring *r)
{
	return (struct us_blk_entry *)((uint8_t *)r + US_RING_ENTRIES_OFFSET);
}

static void check(bool ok, const char *what)
{
	printf("%s %s\n", ok ? "ok" : "FAIL", what);
	failures += !ok;
}

static void host_submit(const struct us_blk_entry *e)
{
	uint32_t head = submit_ring->head;
	uint64_t one = 1;

	entries(submit_ring)[us_ring_slot(head, RING_SIZE)] = *e;
	__atomic_store_n(&submit_ring->head, head + 1, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&submit_ring->consumer_waiting, __ATOMIC_RELAXED)) {
		submit_ring->consumer_waiting = 0;
		if (write(kick_fd, &one, sizeof(one)) != sizeof(one))
			exit(2);
	}
}

/* The next completion, waiting on the notify eventfd as the ring rules say. */
static struct us_blk_entry host_done(bool *waited)
{
	for (;;) {
		uint32_t tail = done_ring->tail;
		struct pollfd p = { .fd = notify_fd, .events = POLLIN };
		uint64_t count;

		if (__atomic_load_n(&done_ring->head, __ATOMIC_ACQUIRE) != tail) {
			struct us_blk_entry e = entries(done_ring)[us_ring_slot(tail, RING_SIZE)];

			__atomic_store_n(&done_ring->tail, tail + 1, __ATOMIC_RELEASE);
			return e;
		}
		__atomic_store_n(&done_ring->consumer_waiting, 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(&done_ring->head, __ATOMIC_ACQUIRE) != tail)
			continue;
		if (poll(&p, 1, 5000) != 1) {
			check(false, "a completion came within 5 s");
			exit(1);
		}
		if (read(notify_fd, &count, sizeof(count)) != sizeof(count))
			exit(2);
		*waited = true;
	}
}

static struct us_blk_entry request(uint64_t tag)
{
	return (struct us_blk_entry){
		.tag = tag, .sector = 100 + tag, .len = 3 * BUFFER_SIZE,
		.buf = (uint32_t)(tag * 3 % (POOL_BUFFERS - 3)),
		.op = tag % 3 == 0 ? US_BLK_OP_READ : US_BLK_OP_WRITE,
		.flags = tag % 2 ? US_BLK_FUA : 0, .queue = (uint16_t)(tag % 2),
	};
}

/* Maps a fresh pair of block rings for the host's side. */
static int host_rings(void)
{
	size_t size = us_blk_rings_size(RING_SIZE);
	int rings_fd = memfd_create("blk-rings", 0);
	void *va;

	kick_fd = eventfd(0, 0);
	notify_fd = eventfd(0, 0);
	if (rings_fd < 0 || ftruncate(rings_fd, size) || kick_fd < 0 || notify_fd < 0)
		exit(2);
	va = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, rings_fd, 0);
	if (va == MAP_FAILED)
		exit(2);
	submit_ring = (struct us_ring *)((uint8_t *)va + US_BLK_RING_SUBMIT * us_blk_ring_stride(RING_SIZE));
	done_ring = (struct us_ring *)((uint8_t *)va + US_BLK_RING_DONE * us_blk_ring_stride(RING_SIZE));
	return rings_fd;
}

/*
 * A driver of its own (a child, before the parent maps any rings) whose
 * host sends e: it must end with the panic status.
 */
static void check_refused(struct us_blk_entry e, const char *what)
{
	pid_t pid = fork();
	int status;

	if (!pid) {
		int fd = host_rings();

		if (ddekit_setup_blk_rings(fd, us_blk_rings_size(RING_SIZE), RING_SIZE, kick_fd,
					   notify_fd, POOL_BUFFERS, BUFFER_SIZE) ||
		    ddekit_start_blk(submit))
			_exit(2);
		host_submit(&e);
		sleep(5);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	check(WIFEXITED(status) && WEXITSTATUS(status) == 70, what);
}

int main(void)
{
	size_t size = us_blk_rings_size(RING_SIZE);
	bool all_echo = true, waited = false, all_read = true;
	int rings_fd;

	setvbuf(stdout, NULL, _IOLBF, 0);
	check_refused((struct us_blk_entry){ .tag = 99, .len = 2 * BUFFER_SIZE, .buf = POOL_BUFFERS - 1,
					     .op = US_BLK_OP_WRITE }, "an entry past the pool ends the driver");
	check_refused((struct us_blk_entry){ .tag = 99, .op = 7 }, "an unknown operation ends the driver");
	check_refused((struct us_blk_entry){ .tag = 99, .len = 512, .op = US_BLK_OP_FLUSH },
		      "a flush with data ends the driver");
	check_refused((struct us_blk_entry){ .tag = 99, .len = 512, .op = US_BLK_OP_READ, .status = -5 },
		      "a request with a status ends the driver");
	rings_fd = host_rings();
	check(ddekit_setup_blk_rings(rings_fd, size - 1, RING_SIZE, kick_fd, notify_fd,
				     POOL_BUFFERS, BUFFER_SIZE) == -EINVAL, "a rings memfd too small is refused");
	check(ddekit_setup_blk_rings(rings_fd, size, RING_SIZE, kick_fd, notify_fd,
				     POOL_BUFFERS, BUFFER_SIZE) == 0, "the block rings map");
	check(ddekit_start_blk(submit) == 0, "the submit thread starts");

	/* Three rounds of a full ring: slots are reused, completions come last first. */
	for (uint64_t round = 0; round < 3; round++) {
		pthread_t t;

		for (uint64_t i = 0; i < RING_SIZE; i++) {
			struct us_blk_entry e = request(round * RING_SIZE + i);

			host_submit(&e);
		}
		pthread_create(&t, NULL, complete_all, (void *)(uintptr_t)RING_SIZE);
		for (unsigned int i = 0; i < RING_SIZE; i++) {
			struct us_blk_entry d = host_done(&waited), want = request(d.tag);

			want.status = d.sector & 1 ? -EIO : 0;
			all_echo &= d.tag >= round * RING_SIZE && d.tag < (round + 1) * RING_SIZE &&
				    !memcmp(&d, &want, sizeof(d));
			if (d.op == US_BLK_OP_READ)
				all_read &= pool[d.buf * BUFFER_SIZE] == (d.sector & 0xff) &&
					    pool[d.buf * BUFFER_SIZE + d.len - 1] == (d.sector & 0xff);
		}
		pthread_join(t, NULL);
	}
	check(all_echo, "every completion is its request's fields with the kernel's status");
	check(all_read, "a read's data is in its pool buffers when it completes");
	check(waited, "the host waiting on blk_done is signalled");
	return failures ? 1 : 0;
}
