// SPDX-License-Identifier: GPL-2.0
/*
 * The trace producer and the gate (docs/checking.md, "The trace" and "The
 * gate"). Every event -- from a probe's stub or from the kernel half's
 * interposition points -- is written while the CPU lock is held, so the
 * ring has a single producer and its order is the order the driver ran in.
 *
 * Waiting is on futexes in the region, in both directions, and only when
 * asked (the sDDF rule): the checker sets checker_waiting before it sleeps
 * on `head`, the producer sets producer_waiting before it sleeps on
 * `approved`. The fast path does not fence between publishing `head` and
 * reading checker_waiting, so a wake-up can be missed there; the checker's
 * sleep is bounded, and the producer, before it sleeps itself (a full ring,
 * a stringent write), fences and wakes a checker that sleeps.
 *
 * Fail closed: the producer never writes past room the checker has freed,
 * and a device write waits for approval in stringent mode. A checker that
 * dies or hangs leaves the driver waiting with the CPU held; the daemon,
 * which watches the checker and the region's counters, then ends both
 * (docs/checking.md, "Failing closed").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <understudy/protocol.h>

#include "../ddekit/ddekit.h"
#include "../ddekit/setup.h"
#include "../loader/loader.h"
#include "check.h"
#include "layout.h"

/* stubs.S's view of the region (layout.h). */
_Static_assert(offsetof(struct us_trace_header, head) == STUB_HDR_HEAD, "head");
_Static_assert(offsetof(struct us_trace_header, approved) == STUB_HDR_APPROVED, "approved");
_Static_assert(offsetof(struct us_trace_header, verdict_at) == STUB_HDR_VERDICT_AT, "verdict_at");
_Static_assert(offsetof(struct us_trace_header, checker_waiting) == STUB_HDR_CHECKER_WAITING,
	       "checker_waiting");
_Static_assert(US_TRACE_RING_ENTRIES == STUB_RING_ENTRIES, "ring entries");
_Static_assert(sizeof(struct us_trace_event) == 1 << STUB_EVENT_SHIFT, "event size");
_Static_assert(US_EV_ACCESS == STUB_EV_ACCESS && US_EV_PORT == STUB_EV_PORT &&
	       US_EVF_PERCPU == STUB_EVF_PERCPU, "kinds");
_Static_assert(US_EV_FRAME == STUB_EV_FRAME && US_EV_RETURN == STUB_EV_RETURN &&
	       US_EV_ESCAPE == STUB_EV_ESCAPE, "stack kinds");

#define RING_MASK	(US_TRACE_RING_ENTRIES - 1)
#define MAX_DEVICE_RANGES 6	/* BARs */

/* Read by stubs.S. */
struct us_trace_header *us_trace_hdr;
struct us_trace_event *us_trace_slots;
uint64_t us_trace_head;			/* = hdr->head; the producer's own copy */
uint64_t us_trace_device_lo = UINT64_MAX;	/* the hull of device memory */
uint64_t us_trace_device_span;
int us_trace_gate_waits;		/* stringent: every device write waits for approval */

int ddekit_checking;

static enum us_gate_mode gate_mode;
static struct us_trace_site *sites;
static uint32_t nsites;
static struct { uint64_t lo, size; } device_ranges[MAX_DEVICE_RANGES];
static unsigned int ndevice_ranges;
static __thread int thread_context = US_CTX_PROCESS;
static __thread unsigned long thread_handler;

int check_gate_mode(const char *name)
{
	if (!strcmp(name, "triage"))
		return US_GATE_TRIAGE;
	if (!strcmp(name, "permissive"))
		return US_GATE_PERMISSIVE;
	if (!strcmp(name, "stringent"))
		return US_GATE_STRINGENT;
	return -1;
}

int check_setup(int trace_fd, enum us_gate_mode mode, char *err, size_t errlen)
{
	void *region = mmap(NULL, US_TRACE_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
			    trace_fd, 0);
	struct us_trace_header *h = region;

	if (region == MAP_FAILED) {
		snprintf(err, errlen, "cannot map the trace region (fd %d): %s", trace_fd,
			 strerror(errno));
		return -1;
	}
	close(trace_fd);
	h->magic = US_TRACE_MAGIC;
	h->version = US_TRACE_VERSION;
	h->ring_entries = US_TRACE_RING_ENTRIES;
	h->gate_mode = mode;
	h->ring_offset = US_TRACE_RING_OFFSET;
	h->sites_offset = US_TRACE_SITES_OFFSET;
	us_trace_hdr = h;
	us_trace_slots = (struct us_trace_event *)((char *)region + US_TRACE_RING_OFFSET);
	sites = (struct us_trace_site *)((char *)region + US_TRACE_SITES_OFFSET);
	gate_mode = mode;
	us_trace_gate_waits = mode == US_GATE_STRINGENT;
	return 0;
}

int check_add_module(const struct ko_module *m, char *err, size_t errlen)
{
	struct us_trace_module *tm;

	if (us_trace_hdr->nmodules == US_TRACE_MAX_MODULES ||
	    m->check_sites.count > US_TRACE_MAX_SITES - nsites) {
		snprintf(err, errlen, "%s: more modules or probes than the trace region holds (%u, %u)",
			 m->path, US_TRACE_MAX_MODULES, US_TRACE_MAX_SITES);
		return -1;
	}
	tm = &us_trace_hdr->modules[us_trace_hdr->nmodules];
	snprintf(tm->path, sizeof(tm->path), "%s", m->path);
	tm->text = m->image.addr;
	tm->text_size = m->image.size;
	for (size_t i = 0; i < m->check_sites.count; i++) {
		const struct ko_check_site *s = &m->check_sites.entries[i];
		struct us_trace_site *out = &sites[nsites++];

		out->ret = (uint32_t)s->ret;	/* the low window is below 2 GiB */
		out->offset = s->offset;
		out->module = us_trace_hdr->nmodules;
		out->section = s->section;
		out->size = s->size;
		out->flags = s->flags;
	}
	us_trace_hdr->nmodules++;
	return 0;
}

static int compare_sites(const void *a, const void *b)
{
	const struct us_trace_site *x = a, *y = b;

	return x->ret < y->ret ? -1 : x->ret > y->ret;
}

static const struct us_trace_site *site_of(uint64_t ret)
{
	size_t lo = 0, hi = nsites;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (sites[mid].ret < ret)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < nsites && sites[lo].ret == ret ? &sites[lo] : NULL;
}

static void cpu_taken(void);

/*
 * For the heartbeat: what the checker approved while the driver waited for
 * it. A driver that does not wait gets no credit for the checker's work: a
 * driver spinning with the CPU held stays a hang.
 */
static unsigned long long approved_while_waiting(void)
{
	if (!__atomic_load_n(&us_trace_hdr->producer_waiting, __ATOMIC_ACQUIRE))
		return 0;
	return __atomic_load_n(&us_trace_hdr->approved, __ATOMIC_ACQUIRE);
}

void check_start(void *percpu_block, void *arena, uint64_t arena_iova, uint64_t arena_size)
{
	struct us_trace_header *h = us_trace_hdr;

	qsort(sites, nsites, sizeof(*sites), compare_sites);
	h->nsites = nsites;
	h->percpu_base = (uint64_t)percpu_block;
	h->arena = (uint64_t)arena;
	h->arena_iova = arena_iova;
	h->arena_size = arena_size;
	__atomic_store_n(&h->ready, 1, __ATOMIC_RELEASE);
	ddekit_setup_cpu_observer(cpu_taken);
	ddekit_setup_waiting_progress(approved_while_waiting);
	ddekit_checking = 1;
}

void check_device_memory(void *addr, size_t size)
{
	uint64_t lo = (uint64_t)addr, hi = lo + size, hull_hi;

	if (!us_trace_hdr || ndevice_ranges == MAX_DEVICE_RANGES)
		return;
	device_ranges[ndevice_ranges].lo = lo;
	device_ranges[ndevice_ranges++].size = size;
	hull_hi = us_trace_device_span ? us_trace_device_lo + us_trace_device_span : 0;
	if (lo < us_trace_device_lo)
		us_trace_device_lo = lo;
	if (hi > hull_hi)
		hull_hi = hi;
	us_trace_device_span = hull_hi - us_trace_device_lo;
}

static long futex(uint32_t *word, int op, uint32_t value, const struct timespec *timeout)
{
	return syscall(SYS_futex, word, op, value, timeout, NULL, 0);
}

/* A counter's low half is its futex word (little-endian). */
static uint32_t *futex_word(uint64_t *counter)
{
	return (uint32_t *)counter;
}

static uint64_t verdict(void)
{
	return __atomic_load_n(&us_trace_hdr->verdict_at, __ATOMIC_ACQUIRE);
}

/* The driver is condemned: it ends before its next device write reaches the device. */
static void stop(uint64_t ret)
{
	const struct us_trace_site *s = site_of(ret);
	char where[96], line[320], original[64] = "";

	ddekit_symbolize(ret, where, sizeof(where));
	if (s)
		snprintf(original, sizeof(original), " (section %u +0x%x of the module's file)",
			 s->section, s->offset);
	snprintf(line, sizeof(line),
		 "CHECK-STOP the checker's verdict at event %" PRIu64 ": stopped before the device write at %s%s",
		 verdict() - 1, where, original);
	ddekit_event(line);
	_exit(US_EXIT_VERDICT);
}

/* stubs.S and put(): the checker sleeps on `head`. */
void us_trace_wake_checker(void)
{
	__atomic_store_n(&us_trace_hdr->checker_waiting, 0, __ATOMIC_RELAXED);
	futex(futex_word(&us_trace_hdr->head), FUTEX_WAKE, 1, NULL);
}

/*
 * Sleeps until the checker has approved `target` events or found a fatal
 * one. The CPU stays held: nothing else of the driver may run meanwhile,
 * which is the point in stringent mode and harmless when the ring is full.
 */
static void wait_approved(uint64_t target)
{
	struct us_trace_header *h = us_trace_hdr;
	const struct timespec tick = { 0, 20 * 1000 * 1000 };

	for (;;) {
		uint64_t seen = __atomic_load_n(&h->approved, __ATOMIC_ACQUIRE);

		if (seen >= target || verdict())
			break;
		__atomic_store_n(&h->producer_waiting, 1, __ATOMIC_SEQ_CST);
		/* the fast path's wake-up may have been missed: never sleep on a sleeping checker */
		if (__atomic_load_n(&h->checker_waiting, __ATOMIC_SEQ_CST))
			us_trace_wake_checker();
		seen = __atomic_load_n(&h->approved, __ATOMIC_SEQ_CST);
		if (seen >= target || verdict())
			break;
		futex(futex_word(&h->approved), FUTEX_WAIT, (uint32_t)seen, &tick);
	}
	__atomic_store_n(&h->producer_waiting, 0, __ATOMIC_RELAXED);
}

/* stubs.S and put(): the ring is full. A condemned driver stops here. */
void us_trace_wait_room(void)
{
	/* half the ring: fewer, longer sleeps */
	wait_approved(us_trace_head - US_TRACE_RING_ENTRIES / 2);
	if (verdict() && gate_mode != US_GATE_TRIAGE)
		stop(0);
}

static void put(uint32_t kind_flags, uint64_t site, uint64_t addr, uint64_t arg0, uint64_t arg1)
{
	struct us_trace_event *e;

	if (us_trace_head - __atomic_load_n(&us_trace_hdr->approved, __ATOMIC_ACQUIRE) >=
	    US_TRACE_RING_ENTRIES - 1)
		us_trace_wait_room();
	e = &us_trace_slots[us_trace_head & RING_MASK];
	e->kind_flags = kind_flags;
	e->site = (uint32_t)site;
	e->addr = addr;
	e->arg0 = arg0;
	e->arg1 = arg1;
	__atomic_store_n(&us_trace_hdr->head, ++us_trace_head, __ATOMIC_RELEASE);
	if (__atomic_load_n(&us_trace_hdr->checker_waiting, __ATOMIC_RELAXED))
		us_trace_wake_checker();
}

/* A device write leaves only as the mode allows (docs/checking.md, "The gate"). */
static void gate(uint64_t ret)
{
	if (gate_mode == US_GATE_TRIAGE)
		return;
	if (gate_mode == US_GATE_STRINGENT)
		wait_approved(us_trace_head);
	if (verdict())
		stop(ret);
}

static bool is_write(uint64_t ret)
{
	const struct us_trace_site *s = site_of(ret);

	/* a probe the table does not know is treated as the worse case */
	return !s || (s->flags & US_SITE_WRITE);
}

static bool in_device_memory(uint64_t addr)
{
	for (unsigned int i = 0; i < ndevice_ranges; i++)
		if (addr - device_ranges[i].lo < device_ranges[i].size)
			return true;
	return false;
}

/* stubs.S: an access inside the hull of device memory, already traced. */
void us_check_device_access(uint64_t addr, uint64_t ret)
{
	if (in_device_memory(addr) && is_write(ret))
		gate(ret);
}

/* stubs.S: an out, already traced, when the gate may hold it (us_trace_gate_waits, a verdict). */
void us_check_device_write(uint64_t port, uint64_t ret)
{
	(void)port;
	gate(ret);
}

/* stubs.S: a rep string instruction; rep outs writes to a port. */
void us_check_string(uint64_t rdi, uint64_t rsi, uint64_t rcx, uint64_t rflags, uint64_t ret)
{
	bool backward = rflags & (1u << 10);	/* DF */
	const struct us_trace_site *s = site_of(ret);
	bool to_port = s && (s->flags & US_SITE_PORT) && (s->flags & US_SITE_WRITE);

	put(US_EV_STRING | (backward ? US_EVF_DF : 0) << 16, ret, rdi, rsi, rcx);
	if (to_port || (in_device_memory(rdi) && is_write(ret)))
		gate(ret);
}

static bool in_checked_module(uint64_t addr)
{
	for (uint32_t i = 0; i < us_trace_hdr->nmodules; i++) {
		const struct us_trace_module *m = &us_trace_hdr->modules[i];

		if (addr - m->text < m->text_size)
			return true;
	}
	return false;
}

void ddekit_trace(unsigned int kind, unsigned long site, unsigned long addr,
		  unsigned long arg0, unsigned long arg1)
{
	if (!ddekit_checking)
		return;
	/*
	 * The runtime's memcpy and memset serve the runtime too: only those the
	 * driver called are its accesses (the runtime's own writes into what it
	 * allocated are defined already, below).
	 */
	if ((kind == US_EV_COPY || kind == US_EV_FILL) && !in_checked_module(site))
		return;
	put(kind, site, addr, arg0, arg1);
}

/*
 * CONTEXT: what runs on the CPU now, each time it changes -- a thread takes
 * the CPU, or enters or leaves a handler. The same context again (the TX
 * thread taking the CPU batch after batch) is not repeated.
 */
static void trace_context(void)
{
	static struct { int kind; pid_t tid; unsigned long handler; } last = { -1, 0, 0 };
	pid_t tid;

	/* Every time a thread takes the CPU: no system call unless checked. */
	if (!ddekit_checking)
		return;
	tid = gettid();
	if (last.kind == thread_context && last.tid == tid && last.handler == thread_handler)
		return;
	last.kind = thread_context;
	last.tid = tid;
	last.handler = thread_handler;
	put(US_EV_CONTEXT, 0, thread_context, tid, thread_handler);
}

static void cpu_taken(void)
{
	trace_context();
}

int ddekit_trace_context(int kind, unsigned long handler)
{
	int previous = thread_context;

	thread_context = kind;
	thread_handler = handler;
	trace_context();
	return previous;
}

void ddekit_check_gate(unsigned long site)
{
	if (ddekit_checking)
		gate(site);
}
