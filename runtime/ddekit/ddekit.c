// SPDX-License-Identifier: GPL-2.0
/*
 * ddekit: the libc half of the driver-process runtime. Kernel code calls in
 * here for everything the Linux kernel would get from hardware or from the
 * scheduler: time, the CPU lock, threads, memory, and the PCI function
 * behind VFIO or uio_pci_generic (config space, BARs, port I/O, interrupts:
 * device.c; DMA addresses: bus.c).
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h). No kernel-internal
 * header is included here (vfio.c has the uapi <linux/vfio.h>).
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <understudy/protocol.h>

#include "ddekit.h"
#include "setup.h"

static struct {
	void *va;
	uint64_t iova;
	size_t size;
	size_t pool_size;
} arena;

static void *percpu_block;
static int log_level = 7;
static void (*rx_handler)(const void *frame, unsigned int len);
static void (*event_observer)(const char *line);

static pthread_mutex_t cpu_lock = PTHREAD_MUTEX_INITIALIZER;
/*
 * Each waiting thread sleeps on its own condition, linked in a ring while it
 * waits (under cpu_lock): a wakeup for one thread does not make the others
 * run, find nothing and take the lock to sleep again.
 */
struct cpu_waiter {
	pthread_cond_t cond;
	struct cpu_waiter *next, *prev;	/* NULL while not waiting */
	bool ready;
};
static struct cpu_waiter cpu_waiters = { .next = &cpu_waiters, .prev = &cpu_waiters };
static __thread struct cpu_waiter self_waiter;
/* For the heartbeat (ddekit_cpu_await_progress): who has the CPU, and how often it changed hands. */
static bool cpu_held;
static unsigned long cpu_entries;
static void (*cpu_observer)(void);	/* the checker's trace: who holds the CPU now */
/* Progress of a thread that waits with the CPU held for someone else (the checker). */
static unsigned long long (*waiting_progress)(void);
static __thread void *thread_data;

/* ---- logging ------------------------------------------------------------ */

void ddekit_setup_loglevel(int level)
{
	log_level = level;
}

void ddekit_log(int level, const char *text, unsigned long len)
{
	while (len && text[len - 1] == '\n')
		len--;
	ddekit_host_log(level, text, len);
	if (level > log_level)
		return;
	fprintf(stderr, "<%d>%.*s\n", level, (int)len, text);
}

void ddekit_setup_event_observer(void (*observer)(const char *line))
{
	event_observer = observer;
}

void ddekit_event(const char *line)
{
	printf("%s\n", line);
	fflush(stdout);
	if (event_observer)
		event_observer(line);
}

void ddekit_panic(const char *why)
{
	fprintf(stderr, "understudy-driver: kernel panic: %s\n", why);
	printf("PANIC %s\n", why);
	fflush(stdout);
	_exit(US_EXIT_PANIC);
}

/* ---- time --------------------------------------------------------------- */

unsigned long long ddekit_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

unsigned long long ddekit_clock_ns(enum ddekit_clock clock)
{
	static const clockid_t ids[] = {
		[DDEKIT_CLOCK_REALTIME] = CLOCK_REALTIME,
		[DDEKIT_CLOCK_BOOTTIME] = CLOCK_BOOTTIME,
		[DDEKIT_CLOCK_TAI] = CLOCK_TAI,
	};
	struct timespec ts;

	clock_gettime(ids[clock], &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

void ddekit_spin_ns(unsigned long long ns)
{
	unsigned long long end = ddekit_now_ns() + ns;

	while (ddekit_now_ns() < end)
		__builtin_ia32_pause();
}

/* ---- randomness --------------------------------------------------------- */

void ddekit_random(void *buf, unsigned long len)
{
	for (unsigned long done = 0; done < len;) {
		ssize_t n = getrandom((char *)buf + done, len - done, 0);

		if (n < 0 && errno != EINTR)
			ddekit_panic("getrandom failed");
		if (n > 0)
			done += n;
	}
}

/* ---- the CPU lock ------------------------------------------------------- */

void *ddekit_cpu_waiter(void)
{
	struct cpu_waiter *me = &self_waiter;
	pthread_condattr_t attr;

	if (!me->ready) {
		pthread_condattr_init(&attr);
		pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
		pthread_cond_init(&me->cond, &attr);
		pthread_condattr_destroy(&attr);
		me->ready = true;
	}
	return me;
}

static void cpu_taken(void)
{
	__atomic_add_fetch(&cpu_entries, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&cpu_held, true, __ATOMIC_RELEASE);
	if (cpu_observer)
		cpu_observer();
}

void ddekit_setup_cpu_observer(void (*observer)(void))
{
	cpu_observer = observer;
}

void ddekit_cpu_lock(void)
{
	pthread_mutex_lock(&cpu_lock);
	cpu_taken();
}

void ddekit_cpu_unlock(void)
{
	__atomic_store_n(&cpu_held, false, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&cpu_lock);
}

void ddekit_cpu_wait(unsigned long long deadline_ns)
{
	struct cpu_waiter *me = ddekit_cpu_waiter();
	struct timespec ts;

	me->next = &cpu_waiters;
	me->prev = cpu_waiters.prev;
	cpu_waiters.prev->next = me;
	cpu_waiters.prev = me;
	__atomic_store_n(&cpu_held, false, __ATOMIC_RELEASE);
	if (!deadline_ns) {
		pthread_cond_wait(&me->cond, &cpu_lock);
	} else {
		ts.tv_sec = deadline_ns / 1000000000ULL;
		ts.tv_nsec = deadline_ns % 1000000000ULL;
		pthread_cond_timedwait(&me->cond, &cpu_lock, &ts);
	}
	me->prev->next = me->next;
	me->next->prev = me->prev;
	me->next = me->prev = NULL;
	cpu_taken();
}

/*
 * Returns once the CPU is free or has changed hands since the call, without
 * taking it (a waiter would queue behind busy TX and IRQ threads and miss
 * a heartbeat deadline for nothing). Code spinning with the CPU held, e.g.
 * a driver looping in its transmit or interrupt handler, keeps it from
 * returning: that is how the host's PING deadline sees the hang.
 */
void ddekit_cpu_await_progress(void)
{
	unsigned long start = __atomic_load_n(&cpu_entries, __ATOMIC_RELAXED);
	unsigned long long waited = waiting_progress ? waiting_progress() : 0;
	const struct timespec tick = { 0, 500000 };

	while (__atomic_load_n(&cpu_held, __ATOMIC_ACQUIRE) &&
	       __atomic_load_n(&cpu_entries, __ATOMIC_RELAXED) == start &&
	       (!waiting_progress || waiting_progress() == waited))
		nanosleep(&tick, NULL);
}

void ddekit_setup_waiting_progress(unsigned long long (*progress)(void))
{
	waiting_progress = progress;
}

unsigned long ddekit_cpu_entries(void)
{
	return __atomic_load_n(&cpu_entries, __ATOMIC_RELAXED);
}

void ddekit_cpu_wake_all(void)
{
	for (struct cpu_waiter *w = cpu_waiters.next; w != &cpu_waiters; w = w->next)
		pthread_cond_signal(&w->cond);
}

void ddekit_cpu_wake(void *waiter)
{
	struct cpu_waiter *w = waiter;

	if (w->next)
		pthread_cond_signal(&w->cond);
}

int ddekit_setup_percpu(void *block)
{
	percpu_block = block;
	return syscall(SYS_arch_prctl, ARCH_SET_GS, block);
}

void *ddekit_percpu_block(void)
{
	return percpu_block;
}

/* ---- threads ------------------------------------------------------------ */

struct thread_start {
	void (*fn)(void *);
	void *arg;
};

static void *thread_trampoline(void *p)
{
	struct thread_start start = *(struct thread_start *)p;

	free(p);
	if (syscall(SYS_arch_prctl, ARCH_SET_GS, percpu_block))
		ddekit_panic("arch_prctl(ARCH_SET_GS) failed in a new thread");
	start.fn(start.arg);
	return NULL;
}

static int start_thread(void (*fn)(void *), void *arg, const char *name, pthread_t *thread)
{
	struct thread_start *start = malloc(sizeof(*start));
	int err;

	if (!start)
		return -ENOMEM;
	start->fn = fn;
	start->arg = arg;
	err = pthread_create(thread, NULL, thread_trampoline, start);
	if (err) {
		free(start);
		return -err;
	}
	pthread_setname_np(*thread, name);
	return 0;
}

int ddekit_thread_create(void (*fn)(void *), void *arg, const char *name)
{
	pthread_t thread;
	int err = start_thread(fn, arg, name, &thread);

	if (!err)
		pthread_detach(thread);
	return err;
}

int ddekit_thread_start(void (*fn)(void *), void *arg, const char *name,
			unsigned long *handle)
{
	pthread_t thread;
	int err = start_thread(fn, arg, name, &thread);

	if (!err)
		*handle = thread;
	return err;
}

/*
 * The nice value of the IRQ and softirq threads. In the kernel, interrupts
 * and softirqs preempt any task; here they are threads, and a NAPI poll
 * that waits behind an application thread for a CPU leaves the NIC's ring
 * full. Only these: transmission runs in the sender's context in the kernel,
 * at the sender's priority, and a TX thread (or a daemon) that preempts the
 * sending application at every frame takes the frames one at a time. e1000
 * in the lab, A/B: host -> guest +12 %, guest -> host unchanged; with the TX
 * thread and the daemon raised as well, guest -> host lost a quarter
 * (docs/notes/bench-net-history.md, "What limits receive: the CPU each
 * megabyte costs"). A weight, not SCHED_FIFO: a driver spinning in one
 * of these threads must not take a CPU from everything else.
 */
#define INTERRUPT_THREAD_NICE (-10)

void ddekit_thread_runs_interrupts(void)
{
	static bool warned;
	char text[128];

	if (!setpriority(PRIO_PROCESS, syscall(SYS_gettid), INTERRUPT_THREAD_NICE) || warned)
		return;
	warned = true;
	snprintf(text, sizeof(text), "understudy-driver: cannot raise the priority of interrupt threads "
		 "(nice %d): %s", INTERRUPT_THREAD_NICE, strerror(errno));
	ddekit_log(4 /* KERN_WARNING */, text, strlen(text));
}

int ddekit_thread_join(unsigned long handle, unsigned long long timeout_ns)
{
	struct timespec ts;
	unsigned long long deadline;

	clock_gettime(CLOCK_REALTIME, &ts);
	deadline = ts.tv_sec * 1000000000ULL + ts.tv_nsec + timeout_ns;
	ts.tv_sec = deadline / 1000000000ULL;
	ts.tv_nsec = deadline % 1000000000ULL;
	return -pthread_timedjoin_np((pthread_t)handle, NULL, &ts);
}

void *ddekit_thread_data(void)
{
	return thread_data;
}

void ddekit_thread_set_data(void *data)
{
	thread_data = data;
}

/* ---- memory ------------------------------------------------------------- */

int ddekit_setup_arena(int arena_fd, uint64_t iova, size_t size, size_t pool_size)
{
	void *va;

	if (pool_size >= size || !ddekit_dma_chunks_fit(size))
		return -EINVAL;
	if (arena_fd >= 0)
		va = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, arena_fd, 0);
	else
		va = mmap(NULL, size, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED)
		return -errno;
	arena.va = va;
	arena.iova = arena_fd >= 0 ? iova : 0;
	arena.size = size;
	arena.pool_size = pool_size;
	return 0;
}

void ddekit_arena(void **va, unsigned long long *iova, unsigned long *size,
		  unsigned long *pool_size)
{
	*va = arena.va;
	*iova = arena.iova;
	*size = arena.size;
	*pool_size = arena.pool_size;
}

void *ddekit_zalloc(unsigned long size)
{
	return calloc(1, size);
}

/* x86-64's base page: the granule of mprotect and of the guard pages. */
#define VMALLOC_PAGE 4096UL

struct vmalloc_area {
	char *start;
	size_t len;		/* page-aligned; a guard page on each side */
	struct vmalloc_area *next;
};

static struct vmalloc_area *vmalloc_areas;
static pthread_mutex_t vmalloc_lock = PTHREAD_MUTEX_INITIALIZER;

void *ddekit_vmalloc(unsigned long size)
{
	const size_t page = VMALLOC_PAGE;
	size_t len = (size + page - 1) & ~(page - 1);
	struct vmalloc_area *area;
	char *guarded;

	if (!size || len < size || len + 2 * page < len)
		return NULL;
	area = malloc(sizeof(*area));
	if (!area)
		return NULL;
	guarded = mmap(NULL, len + 2 * page, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (guarded == MAP_FAILED) {
		free(area);
		return NULL;
	}
	if (mprotect(guarded + page, len, PROT_READ | PROT_WRITE)) {
		munmap(guarded, len + 2 * page);
		free(area);
		return NULL;
	}
	area->start = guarded + page;
	area->len = len;
	pthread_mutex_lock(&vmalloc_lock);
	area->next = vmalloc_areas;
	vmalloc_areas = area;
	pthread_mutex_unlock(&vmalloc_lock);
	return area->start;
}

static struct vmalloc_area **find_vmalloc_area(const char *p)
{
	struct vmalloc_area **link;

	for (link = &vmalloc_areas; *link; link = &(*link)->next)
		if (p >= (*link)->start && p < (*link)->start + (*link)->len)
			return link;
	return NULL;
}

unsigned long ddekit_vfree(const void *addr)
{
	const size_t page = VMALLOC_PAGE;
	struct vmalloc_area **link, *area = NULL;
	size_t len = 0;

	pthread_mutex_lock(&vmalloc_lock);
	link = find_vmalloc_area(addr);
	if (link && (*link)->start == addr) {
		area = *link;
		*link = area->next;
	}
	pthread_mutex_unlock(&vmalloc_lock);
	if (area) {
		len = area->len;
		/*
		 * Under the checker the area stays reserved, without its pages:
		 * an address it saw freed is never handed out again by mmap to
		 * memory it does not know (docs/checking.md, "The trace").
		 */
		if (ddekit_checking)
			mmap(area->start - page, len + 2 * page, PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
		else
			munmap(area->start - page, len + 2 * page);
		free(area);
	}
	return len;
}

int ddekit_is_vmalloc(const void *addr)
{
	int found;

	pthread_mutex_lock(&vmalloc_lock);
	found = find_vmalloc_area(addr) != NULL;
	pthread_mutex_unlock(&vmalloc_lock);
	return found;
}

long ddekit_file_size(const char *path)
{
	struct stat st;

	if (stat(path, &st))
		return -errno;
	return S_ISREG(st.st_mode) ? st.st_size : -EINVAL;
}

long ddekit_read_file(const char *path, void *buf, unsigned long len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	unsigned long done = 0;

	if (fd < 0)
		return -errno;
	while (done < len) {
		ssize_t n = read(fd, (char *)buf + done, len - done);

		if (n <= 0)
			break;
		done += n;
	}
	close(fd);
	return done;
}

/* ---- network taps ------------------------------------------------------- */

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
