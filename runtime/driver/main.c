// SPDX-License-Identifier: GPL-2.0
/*
 * understudy-driver: one driver process. Loads the runtime's kernel half
 * (understudy-kernel.ko) and then an unmodified driver module chain with
 * libloader (modules.c; halves.c chooses the half), gives them the VFIO
 * device and the DMA arena it inherited (docs/protocol.md), runs the
 * modules' init (which probes the device), and turns BUG/WARN (ud2) and
 * exception-table faults into what the kernel would do (faults.c). This
 * file is its command line, the events it waits for and the stand-alone run.
 *
 * Under the host daemon (docs/protocol.md; control.c):
 *
 *	understudy-driver --control-fd N --device-fd N --arena-fd N --rings-fd N
 *		--kick-fd N --notify-fd N [--tap-fd N]... [--runtime KO] [--symvers FILE]
 *		[--trace-fd N --gate triage|permissive|stringent] [--run-as UID:GID]
 *		[--poll-us N]
 *
 * --tap-fd once per queue of the host's TAP the driver is given (up to
 * US_MAX_QUEUES; docs/protocol.md, "Several queues"). --poll-us: the TX
 * thread polls instead of sleeping for up to N microseconds after its last
 * work while the traffic is sparse (runtime/ddekit/tx_poll.c).
 *
 * or, for a device without an IOMMU (docs/design.md §4), instead of
 * --device-fd: --uio-fds UIO,CONFIG,BAR0,...,BAR5 (uio_pci_generic's
 * files, -1 for a BAR without one) --dma-chunks-fd N (the arena's
 * physical addresses, a u64 per 2 MiB hugepage).
 *
 * the host's LOAD (live update), HELLO and PROBE name the modules, the
 * geometry and the PCI address, and later requests open, configure and query the device.
 * With --run-as the process gives up root for that user and group, under a
 * seccomp filter, before the kernel world runs (sandbox.c).
 *
 * Stand-alone, for tests and bring-up, the command line chooses instead:
 *
 *	understudy-driver [--runtime KO] [--module KO]... [--symvers FILE]
 *		[--device-fd N --pci-address DDDD:BB:SS.F]
 *		[--arena-fd N --arena-iova X --arena-size X --pool-size X]
 *		[--param MODULE.NAME=VALUE]... [--open] [--wait-carrier SECONDS]
 *		[--arp SRC_IP,DST_IP] [--remove] [--loglevel N]
 *		[--blk-write SECTOR,COUNT,SEED] [--blk-read SECTOR,COUNT] [--blk-flush]
 *
 * The --blk-* actions (blk_actions.c), in the order given, go to a block
 * driver's disk through the path the host's block ring takes.
 *
 * With --trace-fd (both modes) the driver's modules run rewritten under the
 * checker: every memory access is traced into the trace region on that fd
 * and device writes pass the gate (docs/checking.md; runtime/check/).
 *
 * Without --runtime the kernel half is the first module's ABI's, from
 * abi/<abi>/ next to this executable (runtime/README.md, "One kernel half
 * per ABI"); --symvers defaults to the Module.symvers next to --runtime.
 * Output: one event per line on stdout (PROBE, REGISTERED, CARRIER, ...),
 * kernel log records on stderr (and, under the host, as messages).
 *
 * Exit status: 0 done (or the host closed the control socket), 1 an action
 * failed, 2 bad usage, load failure or protocol violation, 3 stopped by the
 * checker's verdict before a device write, 70 kernel panic (BUG, corruption).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <understudy/protocol.h>

#include "../ddekit/ddekit.h"
#include "../ddekit/setup.h"
#include "../check/check.h"
#include "driver.h"

#define DEFAULT_ARENA_IOVA	0x10000000ULL
#define DEFAULT_ARENA_SIZE	(64ULL << 20)
#define DEFAULT_POOL_SIZE	(8ULL << 20)
#define SELFTEST_ARENA_SIZE	(32ULL << 20)
#define SELFTEST_POOL_SIZE	(4ULL << 20)
#define MAX_MODULES		8
#define MAX_PARAMS		16
#define MAX_POLL_US		1000000ULL	/* understudy run --poll-us's limit */

/* What main waits for, set from event lines and received frames. */
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t state_changed = PTHREAD_COND_INITIALIZER;
static bool carrier_on;
static bool registered;
static bool disk_added;
static bool arp_answered;
static uint8_t mac[6];
static struct in_addr arp_src, arp_dst;

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("understudy-driver: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

void watch_events(const char *line)
{
	unsigned int m[6];
	const char *p;

	pthread_mutex_lock(&state_lock);
	if (!strncmp(line, "CARRIER ", 8))
		carrier_on = strstr(line, " on=1") != NULL;
	if (!strncmp(line, "DISK ", 5))
		disk_added = true;
	if (!strncmp(line, "REGISTERED ", 11)) {
		registered = true;
		carrier_on = strstr(line, " carrier=1") != NULL;
	}
	if (!strncmp(line, "REGISTERED ", 11) && (p = strstr(line, " mac=")) &&
	    sscanf(p, " mac=%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) == 6)
		for (int i = 0; i < 6; i++)
			mac[i] = m[i];
	pthread_cond_broadcast(&state_changed);
	pthread_mutex_unlock(&state_lock);
}

bool netdev_registered(void)
{
	bool r;

	pthread_mutex_lock(&state_lock);
	r = registered;
	pthread_mutex_unlock(&state_lock);
	return r;
}

bool disk_registered(void)
{
	bool r;

	pthread_mutex_lock(&state_lock);
	r = disk_added;
	pthread_mutex_unlock(&state_lock);
	return r;
}

/* ---- network tests driven from the command line ------------------------- */

struct arp_frame {
	uint8_t dst[6], src[6];
	uint16_t ethertype;
	uint16_t htype, ptype;
	uint8_t hlen, plen;
	uint16_t oper;
	uint8_t sha[6];
	uint8_t spa[4];
	uint8_t tha[6];
	uint8_t tpa[4];
} __attribute__((packed));

static void on_rx(const void *data, unsigned int len)
{
	const struct arp_frame *arp = data;
	char line[160];

	snprintf(line, sizeof(line), "RX len=%u ethertype=%#06x", len,
		 len >= 14 ? ntohs(arp->ethertype) : 0);
	ddekit_event(line);
	if (len < sizeof(*arp) || ntohs(arp->ethertype) != 0x0806 || ntohs(arp->oper) != 2 ||
	    memcmp(arp->spa, &arp_dst, 4) || memcmp(arp->tpa, &arp_src, 4))
		return;
	snprintf(line, sizeof(line), "ARP_REPLY ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x",
		 inet_ntoa(arp_dst), arp->sha[0], arp->sha[1], arp->sha[2], arp->sha[3],
		 arp->sha[4], arp->sha[5]);
	ddekit_event(line);
	pthread_mutex_lock(&state_lock);
	arp_answered = true;
	pthread_cond_broadcast(&state_changed);
	pthread_mutex_unlock(&state_lock);
}

/* Waits until *flag is true or the deadline passes; returns *flag. */
static bool wait_for(bool *flag, const struct timespec *deadline)
{
	bool ok;

	pthread_mutex_lock(&state_lock);
	while (!*flag)
		if (pthread_cond_timedwait(&state_changed, &state_lock, deadline) == ETIMEDOUT)
			break;
	ok = *flag;
	pthread_mutex_unlock(&state_lock);
	return ok;
}

static struct timespec after(double seconds)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)seconds;
	ts.tv_nsec += (long)((seconds - (time_t)seconds) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* Sends an ARP request for arp_dst once a second until answered. */
static bool arp_probe(double timeout)
{
	struct timespec deadline = after(timeout);
	struct arp_frame req = {
		.dst = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff },
		.ethertype = htons(0x0806),
		.htype = htons(1), .ptype = htons(0x0800),
		.hlen = 6, .plen = 4, .oper = htons(1),
	};
	uint8_t frame[60] = { 0 };	/* padded to the ethernet minimum */

	memcpy(req.src, mac, 6);
	memcpy(req.sha, mac, 6);
	memcpy(req.spa, &arp_src, 4);
	memcpy(req.tpa, &arp_dst, 4);
	memcpy(frame, &req, sizeof(req));
	for (;;) {
		struct timespec retry = after(1.0);
		int ret = kernel.net_xmit(frame, sizeof(frame));

		printf("TX len=%zu result=%d\n", sizeof(frame), ret);
		fflush(stdout);
		if (retry.tv_sec > deadline.tv_sec ||
		    (retry.tv_sec == deadline.tv_sec && retry.tv_nsec > deadline.tv_nsec))
			retry = deadline;
		if (wait_for(&arp_answered, &retry))
			return true;
		if (retry.tv_sec == deadline.tv_sec && retry.tv_nsec == deadline.tv_nsec)
			return false;
	}
}

static long skbs_live(void)
{
	long skbs;

	kernel.cpu_enter();
	skbs = kernel.skb_live();
	kernel.cpu_leave();
	return skbs;
}

/* Counters of the kernel half, read while holding the CPU; returns the live sk_buffs. */
static long print_stats(const char *when)
{
	unsigned long irqs, rx;
	long skbs, blk;

	kernel.cpu_enter();
	irqs = kernel.irq_count();
	rx = kernel.rx_frames();
	skbs = kernel.skb_live();
	blk = kernel.blk_live();
	kernel.cpu_leave();
	printf("STATS when=%s irqs=%lu rx_frames=%lu skbs_live=%ld blk_live=%ld\n", when, irqs, rx,
	       skbs, blk);
	return skbs;
}

/*
 * Waits up to `seconds` for the sk_buffs alive to fall back to `before`: a
 * sent frame is freed when its NIC reports it sent, and some report late
 * (e1000e on the 82574: at the TX vector's next interrupt).
 */
static void wait_for_skbs_freed(long before, double seconds)
{
	struct timespec deadline = after(seconds), now, tick = { 0, 20 * 1000 * 1000 };

	while (skbs_live() > before) {
		clock_gettime(CLOCK_REALTIME, &now);
		if (now.tv_sec > deadline.tv_sec ||
		    (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec))
			return;
		nanosleep(&tick, NULL);
	}
}

/* ---- main --------------------------------------------------------------- */

static unsigned long long number(const char *s, const char *what)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || end == s)
		die("bad %s: %s", what, s);
	return v;
}

/* --uio-fds: DDEKIT_UIO_FDS fds separated by commas, -1 for a BAR without one. */
static void uio_fds(const char *list, int *fds)
{
	char *end;

	for (int i = 0; i < DDEKIT_UIO_FDS; i++) {
		long fd = strtol(list, &end, 10);

		if (end == list || fd < -1 || fd > INT32_MAX || (i < 2 && fd < 0) ||
		    *end != (i + 1 < DDEKIT_UIO_FDS ? ',' : '\0'))
			die("--uio-fds wants UIO,CONFIG and six BAR fds (-1: none), not %s", list);
		fds[i] = fd;
		list = end + 1;
	}
}

int main(int argc, char **argv)
{
	enum { OPT_RUNTIME = 256, OPT_MODULE, OPT_SYMVERS, OPT_DEVICE_FD, OPT_PCI, OPT_ARENA_FD,
	       OPT_ARENA_IOVA, OPT_ARENA_SIZE, OPT_POOL_SIZE, OPT_CONTROL_FD, OPT_RINGS_FD,
	       OPT_KICK_FD, OPT_NOTIFY_FD, OPT_OPEN, OPT_WAIT_CARRIER, OPT_ARP, OPT_LOGLEVEL,
	       OPT_PARAM, OPT_TRACE_FD, OPT_GATE, OPT_REMOVE, OPT_TAP_FD, OPT_UIO_FDS,
	       OPT_DMA_CHUNKS_FD, OPT_RUN_AS, OPT_POLL_US, OPT_BLK };
	static const struct option options[] = {
		{ "runtime", required_argument, NULL, OPT_RUNTIME },
		{ "module", required_argument, NULL, OPT_MODULE },
		{ "symvers", required_argument, NULL, OPT_SYMVERS },
		{ "device-fd", required_argument, NULL, OPT_DEVICE_FD },
		{ "uio-fds", required_argument, NULL, OPT_UIO_FDS },
		{ "dma-chunks-fd", required_argument, NULL, OPT_DMA_CHUNKS_FD },
		{ "pci-address", required_argument, NULL, OPT_PCI },
		{ "arena-fd", required_argument, NULL, OPT_ARENA_FD },
		{ "arena-iova", required_argument, NULL, OPT_ARENA_IOVA },
		{ "arena-size", required_argument, NULL, OPT_ARENA_SIZE },
		{ "pool-size", required_argument, NULL, OPT_POOL_SIZE },
		{ "control-fd", required_argument, NULL, OPT_CONTROL_FD },
		{ "rings-fd", required_argument, NULL, OPT_RINGS_FD },
		{ "kick-fd", required_argument, NULL, OPT_KICK_FD },
		{ "notify-fd", required_argument, NULL, OPT_NOTIFY_FD },
		{ "tap-fd", required_argument, NULL, OPT_TAP_FD },
		{ "open", no_argument, NULL, OPT_OPEN },
		{ "wait-carrier", required_argument, NULL, OPT_WAIT_CARRIER },
		{ "arp", required_argument, NULL, OPT_ARP },
		{ "remove", no_argument, NULL, OPT_REMOVE },
		{ "loglevel", required_argument, NULL, OPT_LOGLEVEL },
		{ "param", required_argument, NULL, OPT_PARAM },
		{ "trace-fd", required_argument, NULL, OPT_TRACE_FD },
		{ "gate", required_argument, NULL, OPT_GATE },
		{ "run-as", required_argument, NULL, OPT_RUN_AS },
		{ "poll-us", required_argument, NULL, OPT_POLL_US },
		{ "blk-write", required_argument, NULL, OPT_BLK },
		{ "blk-read", required_argument, NULL, OPT_BLK },
		{ "blk-flush", no_argument, NULL, OPT_BLK },
		{ 0 }
	};
	const char *runtime = NULL, *symvers = NULL, *modules[MAX_MODULES], *params[MAX_PARAMS], *pci_address = NULL;
	int n_modules = 0, n_params = 0, device_fd = -1, arena_fd = -1, control_fd = -1, rings_fd = -1;
	int kick_fd = -1, notify_fd = -1, opt, status = 0, init_status, trace_fd = -1, gate = -1;
	int tap_fds[US_MAX_QUEUES];
	unsigned int n_tap_fds = 0;
	int dma_chunks_fd = -1;
	unsigned long long poll_us = 0;
	bool sandboxed = false;
	unsigned int run_as_uid = 0, run_as_gid = 0;
	struct ddekit_device_fds device = { .vfio = -1, .uio = { -1, -1, -1, -1, -1, -1, -1, -1 } };
	unsigned long long arena_iova = DEFAULT_ARENA_IOVA, arena_size = DEFAULT_ARENA_SIZE;
	unsigned long long pool_size = DEFAULT_POOL_SIZE;
	double wait_carrier = 0;
	bool open_dev = false, arp = false, remove = false;

	int option_index;

	while ((opt = getopt_long(argc, argv, "", options, &option_index)) != -1) {
		switch (opt) {
		case OPT_BLK: blk_action_add(options[option_index].name, optarg); break;
		case OPT_RUNTIME: runtime = optarg; break;
		case OPT_MODULE:
			if (n_modules == MAX_MODULES)
				die("at most %d modules", MAX_MODULES);
			modules[n_modules++] = optarg;
			break;
		case OPT_PARAM:
			if (n_params == MAX_PARAMS)
				die("at most %d parameters", MAX_PARAMS);
			params[n_params++] = optarg;
			break;
		case OPT_SYMVERS: symvers = optarg; break;
		case OPT_DEVICE_FD: device_fd = number(optarg, "--device-fd"); break;
		case OPT_UIO_FDS: uio_fds(optarg, device.uio); break;
		case OPT_DMA_CHUNKS_FD: dma_chunks_fd = number(optarg, "--dma-chunks-fd"); break;
		case OPT_PCI: pci_address = optarg; break;
		case OPT_ARENA_FD: arena_fd = number(optarg, "--arena-fd"); break;
		case OPT_ARENA_IOVA: arena_iova = number(optarg, "--arena-iova"); break;
		case OPT_ARENA_SIZE: arena_size = number(optarg, "--arena-size"); break;
		case OPT_POOL_SIZE: pool_size = number(optarg, "--pool-size"); break;
		case OPT_CONTROL_FD: control_fd = number(optarg, "--control-fd"); break;
		case OPT_RINGS_FD: rings_fd = number(optarg, "--rings-fd"); break;
		case OPT_KICK_FD: kick_fd = number(optarg, "--kick-fd"); break;
		case OPT_NOTIFY_FD: notify_fd = number(optarg, "--notify-fd"); break;
		case OPT_TAP_FD:
			if (n_tap_fds == US_MAX_QUEUES)
				die("at most %u --tap-fd", US_MAX_QUEUES);
			tap_fds[n_tap_fds++] = number(optarg, "--tap-fd");
			break;
		case OPT_OPEN: open_dev = true; break;
		case OPT_WAIT_CARRIER: wait_carrier = strtod(optarg, NULL); break;
		case OPT_ARP: {
			char *comma = strchr(optarg, ',');

			if (!comma)
				die("--arp wants SRC_IP,DST_IP");
			*comma = '\0';
			if (!inet_aton(optarg, &arp_src) || !inet_aton(comma + 1, &arp_dst))
				die("--arp: bad address");
			arp = true;
			break;
		}
		case OPT_RUN_AS: {
			char end;

			if (sscanf(optarg, "%u:%u%c", &run_as_uid, &run_as_gid, &end) != 2 ||
			    !run_as_uid || !run_as_gid)
				die("--run-as wants UID:GID, neither 0, not %s", optarg);
			sandboxed = true;
			break;
		}
		case OPT_POLL_US:
			poll_us = number(optarg, "--poll-us");
			if (!poll_us || poll_us > MAX_POLL_US)
				die("--poll-us wants 1 to %llu microseconds, not %s", MAX_POLL_US, optarg);
			break;
		case OPT_REMOVE: remove = true; break;
		case OPT_LOGLEVEL: ddekit_setup_loglevel(number(optarg, "--loglevel")); break;
		case OPT_TRACE_FD: trace_fd = number(optarg, "--trace-fd"); break;
		case OPT_GATE:
			gate = check_gate_mode(optarg);
			if (gate < 0)
				die("--gate is triage, permissive or stringent, not %s", optarg);
			break;
		default:
			die("usage: see the comment at the top of runtime/driver/main.c");
		}
	}
	if (optind != argc)
		die("unexpected argument %s", argv[optind]);
	if (symvers && !runtime)
		die("--symvers goes with --runtime (a chosen half's CRCs are its own)");

	setvbuf(stdout, NULL, _IOLBF, 0);
	install_fault_handlers();
	if ((trace_fd >= 0) != (gate >= 0))
		die("--trace-fd and --gate go together");
	if (trace_fd >= 0) {
		char err[256];

		if (check_setup(trace_fd, gate, err, sizeof(err)))
			die("%s", err);
		ddekit_setup_device_memory_observer(check_device_memory);
		checked = true;
	}
	if (control_fd >= 0) {
		bool uio = device.uio[0] >= 0;

		if ((device_fd < 0) == !uio || arena_fd < 0 || rings_fd < 0 || kick_fd < 0 ||
		    notify_fd < 0)
			die("--control-fd needs --device-fd or --uio-fds, --arena-fd, --rings-fd, "
			    "--kick-fd, --notify-fd");
		if (uio != (dma_chunks_fd >= 0))
			die("--uio-fds and --dma-chunks-fd go together: without an IOMMU the device "
			    "sees physical addresses");
		if (n_modules || n_params || open_dev || arp || remove || wait_carrier > 0 || pci_address ||
		    blk_actions_wanted())
			die("with --control-fd the host chooses modules and actions");
		if (uio && checked)
			die("a checked driver needs the IOMMU's addresses (--trace-fd with --uio-fds)");
		if (uio && ddekit_setup_dma_chunks(dma_chunks_fd))
			die("--dma-chunks-fd %d: not a table of u64 addresses", dma_chunks_fd);
		device.vfio = device_fd;
		if (ddekit_setup_device(&device))
			die("the device's fds are unusable");
		if (sandboxed)
			sandbox_prepare(run_as_uid, run_as_gid, debugger_perf_map_wanted());
		ddekit_setup_tap(tap_fds, n_tap_fds);
		ddekit_setup_tx_poll(poll_us * 1000);
		return control_loop(control_fd, arena_fd, rings_fd, kick_fd, notify_fd, runtime, symvers);
	}
	if (device.uio[0] >= 0 || dma_chunks_fd >= 0)
		die("--uio-fds and --dma-chunks-fd are the host's (with --control-fd)");
	if (sandboxed)
		die("--run-as is the host's (with --control-fd)");
	if (poll_us)
		die("--poll-us is the host's (with --control-fd): only its driver has a TX thread");

	if ((device_fd >= 0) != (pci_address != NULL))
		die("--device-fd and --pci-address go together");
	/* Without a device only the block actions use a pool: their data's place. */
	if (device_fd < 0)
		pool_size = blk_actions_wanted() ? SELFTEST_POOL_SIZE : 0,
		arena_size = arena_fd < 0 ? SELFTEST_ARENA_SIZE : arena_size;
	device.vfio = device_fd;
	if (device_fd >= 0 && ddekit_setup_device(&device))
		die("VFIO device fd %d unusable", device_fd);
	if (pci_address)
		ddekit_name_device(pci_address);
	if (ddekit_setup_arena(arena_fd, arena_iova, arena_size, pool_size))
		die("cannot map the DMA arena (fd %d, %llu bytes)", arena_fd, arena_size);
	ddekit_setup_rx(on_rx);
	blk_actions_setup();
	if (!n_modules)
		die("at least one --module");
	if (start_runtime(runtime, symvers, modules, n_modules, params, n_params, &init_status))
		exit(2);
	if (init_status)
		status = 1;
	if (open_dev) {
		int ret = kernel.net_open();

		printf("OPEN result=%d\n", ret);
		if (ret)
			status = 1;
	}
	if (wait_carrier > 0) {
		struct timespec deadline = after(wait_carrier);
		bool up = wait_for(&carrier_on, &deadline);

		printf("CARRIER_WAIT up=%d\n", up);
		if (!up)
			status = 1;
	}
	if (arp) {
		bool answered;

		long before = print_stats("before_arp");

		answered = arp_probe(5.0);
		printf("ARP_WAIT answered=%d\n", answered);
		if (!answered)
			status = 1;
		wait_for_skbs_freed(before, 5.0);
	}
	if (blk_actions_wanted() && !blk_actions_run())
		status = 1;
	print_stats("end");
	if (remove) {
		if (!remove_modules())
			status = 1;
		print_stats("removed");
	}
	printf("DONE status=%d\n", status);
	fflush(stdout);
	/* Kernel threads are still running; end the process without unwinding them. */
	_exit(status);
}
