// SPDX-License-Identifier: GPL-2.0
/*
 * The stand-alone run's block actions (main.c's --blk-write, --blk-read,
 * --blk-flush): requests made here go down the same path as the host's
 * ring entries (the kernel half's us_blk_submit), each action's data in
 * the stand-alone pool, and each action prints one event line once every
 * request of it has completed.
 *
 * An action of COUNT sectors is cut into requests of at most the disk's
 * max_sectors, all submitted in one batch, so several are in flight at
 * once. A write's data is a pattern of 32-bit little-endian words, word k
 * being seed * 2654435761 + k (mod 2^32), which a test recomputes; a
 * read prints the CRC-32 (zlib's) of what it read.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ddekit/ddekit.h"
#include "../ddekit/setup.h"
#include "driver.h"

#define MAX_ACTIONS	16
#define MAX_BATCH	64	/* requests of one action */

enum { ACT_READ, ACT_WRITE, ACT_FLUSH };

static struct action {
	int kind;
	unsigned long long sector;
	unsigned int count, seed;
} actions[MAX_ACTIONS];
static unsigned int n_actions;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static bool have_disk;
static struct ddekit_disk disk;
static unsigned int outstanding;
static int first_error;

static void on_done(unsigned long cookie, int status)
{
	pthread_mutex_lock(&lock);
	if (status && !first_error)
		first_error = status;
	outstanding--;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

static void on_disk(const struct ddekit_disk *d)
{
	pthread_mutex_lock(&lock);
	disk = *d;
	have_disk = true;
	pthread_mutex_unlock(&lock);
}

void blk_actions_setup(void)
{
	ddekit_setup_blk_observer(on_done, on_disk);
}

bool blk_actions_wanted(void)
{
	return n_actions > 0;
}

/* --blk-write SECTOR,COUNT,SEED, --blk-read SECTOR,COUNT, --blk-flush */
void blk_action_add(const char *option, const char *arg)
{
	struct action a = { 0 };
	char end;

	if (n_actions == MAX_ACTIONS)
		die("at most %d block actions", MAX_ACTIONS);
	if (!strcmp(option, "blk-write")) {
		a.kind = ACT_WRITE;
		if (sscanf(arg, "%llu,%u,%u%c", &a.sector, &a.count, &a.seed, &end) != 3 || !a.count)
			die("--blk-write wants SECTOR,COUNT,SEED, not %s", arg);
	} else if (!strcmp(option, "blk-read")) {
		a.kind = ACT_READ;
		if (sscanf(arg, "%llu,%u%c", &a.sector, &a.count, &end) != 2 || !a.count)
			die("--blk-read wants SECTOR,COUNT, not %s", arg);
	} else {
		a.kind = ACT_FLUSH;
	}
	actions[n_actions++] = a;
}

static uint32_t crc32(const uint8_t *p, size_t n)
{
	static uint32_t table[256];
	uint32_t c = 0xffffffff;

	if (!table[1])
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t v = i;

			for (int k = 0; k < 8; k++)
				v = v & 1 ? 0xedb88320 ^ (v >> 1) : v >> 1;
			table[i] = v;
		}
	while (n--)
		c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffff;
}

/* Submits reqs and waits for all their completions; the first error, or 0. */
static int run_batch(struct ddekit_blk_request *reqs, unsigned int n)
{
	int err;

	pthread_mutex_lock(&lock);
	outstanding = n;
	first_error = 0;
	pthread_mutex_unlock(&lock);
	kernel.blk_submit(reqs, n);
	pthread_mutex_lock(&lock);
	while (outstanding)
		pthread_cond_wait(&changed, &lock);
	err = first_error;
	pthread_mutex_unlock(&lock);
	return err;
}

static int run_action(const struct action *a, uint8_t *pool, unsigned long pool_size)
{
	struct ddekit_blk_request reqs[MAX_BATCH];
	uint64_t bytes = (uint64_t)a->count << 9;
	unsigned int per_request = disk.max_sectors, n = 0;
	int err;

	if (a->kind == ACT_FLUSH) {
		reqs[0] = (struct ddekit_blk_request){ .op = DDEKIT_BLK_OP_FLUSH };
		err = run_batch(reqs, 1);
		printf("BLK_FLUSH status=%d\n", err);
		return err;
	}
	if (bytes > pool_size || !per_request ||
	    (a->count + per_request - 1) / per_request > MAX_BATCH) {
		printf("BLK_%s sector=%llu count=%u status=-22 why=too_large\n",
		       a->kind == ACT_WRITE ? "WRITE" : "READ", a->sector, a->count);
		return -22;
	}
	if (a->kind == ACT_WRITE)
		for (uint64_t k = 0; k < bytes / 4; k++) {
			uint32_t w = (uint32_t)(a->seed * 2654435761u + (uint32_t)k);

			memcpy(pool + 4 * k, &w, 4);
		}
	else
		memset(pool, 0xa5, bytes);	/* what a read that did not happen leaves */
	for (unsigned int done = 0; done < a->count; done += per_request) {
		unsigned int count = a->count - done < per_request ? a->count - done : per_request;

		reqs[n] = (struct ddekit_blk_request){
			.cookie = n, .data = pool + ((uint64_t)done << 9),
			.sector = a->sector + done, .len = count << 9,
			.op = a->kind == ACT_WRITE ? DDEKIT_BLK_OP_WRITE : DDEKIT_BLK_OP_READ,
		};
		n++;
	}
	err = run_batch(reqs, n);
	if (a->kind == ACT_WRITE)
		printf("BLK_WRITE sector=%llu count=%u seed=%u requests=%u status=%d\n",
		       a->sector, a->count, a->seed, n, err);
	else
		printf("BLK_READ sector=%llu count=%u requests=%u crc32=%08x status=%d\n",
		       a->sector, a->count, n, crc32(pool, bytes), err);
	return err;
}

/* Runs the actions in order; false if there is no disk or one failed. */
bool blk_actions_run(void)
{
	unsigned long long iova;
	unsigned long size, pool_size;
	void *arena;
	bool ok = true;

	ddekit_arena(&arena, &iova, &size, &pool_size);
	pthread_mutex_lock(&lock);
	ok = have_disk;
	pthread_mutex_unlock(&lock);
	if (!ok) {
		printf("BLK_NO_DISK\n");
		return false;
	}
	for (unsigned int i = 0; i < n_actions; i++)
		if (run_action(&actions[i], arena, pool_size))
			ok = false;
	fflush(stdout);
	return ok;
}
