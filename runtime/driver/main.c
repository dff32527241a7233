// SPDX-License-Identifier: GPL-2.0
/*
 * understudy-driver: one driver process. Loads the runtime's kernel half
 * (understudy-kernel.ko) and then an unmodified driver module chain with
 * libloader, gives them the VFIO device and the DMA arena it inherited
 * (docs/protocol.md), runs the modules' init (which probes the device),
 * and turns BUG/WARN (ud2) and exception-table faults into what the kernel
 * would do.
 *
 * Under the host daemon (docs/protocol.md; control.c):
 *
 *	understudy-driver --control-fd N --device-fd N --arena-fd N --rings-fd N
 *		--kick-fd N --notify-fd N [--runtime KO] [--symvers FILE]
 *
 * the host's HELLO and PROBE name the geometry, the PCI address and the
 * modules, and later requests open, configure and query the device.
 *
 * Stand-alone, for tests and bring-up, the command line chooses instead:
 *
 *	understudy-driver [--runtime KO] [--module KO]... [--symvers FILE]
 *		[--device-fd N --pci-address DDDD:BB:SS.F]
 *		[--arena-fd N --arena-iova X --arena-size X --pool-size X]
 *		[--param MODULE.NAME=VALUE]... [--open] [--wait-carrier SECONDS]
 *		[--arp SRC_IP,DST_IP] [--loglevel N]
 *
 * --runtime defaults to understudy-kernel.ko next to this executable.
 * Output: one event per line on stdout (PROBE, REGISTERED, CARRIER, ...),
 * kernel log records on stderr (and, under the host, as messages).
 *
 * Exit status: 0 done (or the host closed the control socket), 1 an action
 * failed, 2 bad usage, load failure or protocol violation, 70 kernel panic
 * (BUG, corruption).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "../ddekit/ddekit.h"
#include "../ddekit/setup.h"
#include "../loader/loader.h"
#include "driver.h"

#define DEFAULT_ARENA_IOVA	0x10000000ULL
#define DEFAULT_ARENA_SIZE	(64ULL << 20)
#define DEFAULT_POOL_SIZE	(8ULL << 20)
#define SELFTEST_ARENA_SIZE	(32ULL << 20)
#define MAX_MODULES		8
#define MAX_PARAMS		16
#define STACK_CANARY_OFFSET	40
#define EX_TYPE_MASK		0xff
#define EX_TYPE_DEFAULT		1
#define BUGFLAG_DONE_BIT	(1 << 2)

static struct ko_context *ctx;
static const char *symvers = DEFAULT_SYMVERS;

static void watch_events(const char *line);

struct kernel_api kernel;

/* What main waits for, set from event lines and received frames. */
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t state_changed = PTHREAD_COND_INITIALIZER;
static bool carrier_on;
static bool registered;
static bool arp_answered;
static uint8_t mac[6];
static struct in_addr arp_src, arp_dst;

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("understudy-driver: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

/* ---- ddekit functions implemented here (they need the loader) --------- */

void ddekit_symbolize(unsigned long addr, char *buf, unsigned long len)
{
	const struct ko_module *m = ctx ? ko_module_containing(ctx, addr) : NULL;

	if (m)
		snprintf(buf, len, "%s+%#lx", m->name, addr - (unsigned long)m->image.addr);
	else
		snprintf(buf, len, "%#lx", addr);
}

/* ---- faults: ud2 (BUG/WARN) and exception-table fixups ------------------ */

static void write_str(const char *s)
{
	if (write(STDERR_FILENO, s, strlen(s)) < 0)
		_exit(70);
}

static void on_sigill(int sig, siginfo_t *info, void *uctx)
{
	ucontext_t *uc = uctx;
	uint64_t rip = uc->uc_mcontext.gregs[REG_RIP];
	const struct ko_bug_entry *bug = ko_find_bug(ctx, rip);
	const uint8_t *insn = (const uint8_t *)rip;
	char line[512], where[64];

	ddekit_symbolize(rip, where, sizeof(where));
	if (!bug || insn[0] != 0x0f || insn[1] != 0x0b) {
		snprintf(line, sizeof(line), "PANIC illegal instruction at %s\n", where);
		write_str(line + 6);
		printf("%s", line);
		fflush(stdout);
		_exit(70);
	}
	if (bug->flags & KO_BUG_WARNING) {
		uint16_t *flags = (uint16_t *)bug->flags_addr;
		bool silent = (bug->flags & KO_BUG_ONCE) && (*flags & BUGFLAG_DONE_BIT);

		if (bug->flags & KO_BUG_ONCE)
			*flags |= BUGFLAG_DONE_BIT;
		if (!silent) {
			snprintf(line, sizeof(line), "WARN file=%s line=%u at=%s",
				 bug->file ? bug->file : "?", bug->line, where);
			ddekit_event(line);
			ddekit_host_warn(bug->file ? bug->file : "?", bug->line, line);
		}
		uc->uc_mcontext.gregs[REG_RIP] = rip + 2;
		return;
	}
	snprintf(line, sizeof(line), "BUG at %s:%u (%s)", bug->file ? bug->file : "?",
		 bug->line, where);
	ddekit_panic(line);
}

static void on_sigsegv(int sig, siginfo_t *info, void *uctx)
{
	ucontext_t *uc = uctx;
	uint64_t rip = uc->uc_mcontext.gregs[REG_RIP];
	const struct ko_extable_entry *ex = ctx ? ko_find_exception(ctx, rip) : NULL;
	char line[256], where[64];

	if (ex && (ex->data & EX_TYPE_MASK) == EX_TYPE_DEFAULT) {
		uc->uc_mcontext.gregs[REG_RIP] = ex->fixup;
		return;
	}
	ddekit_symbolize(rip, where, sizeof(where));
	snprintf(line, sizeof(line), "page fault at address %p, rip %s%s", info->si_addr,
		 where, ex ? " (exception-table type not handled)" : "");
	ddekit_panic(line);
}

static void install_fault_handlers(void)
{
	struct sigaction sa = { .sa_flags = SA_SIGINFO | SA_NODEFER };

	sigemptyset(&sa.sa_mask);
	sa.sa_sigaction = on_sigill;
	sigaction(SIGILL, &sa, NULL);
	sa.sa_sigaction = on_sigsegv;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
}

/* ---- loading ------------------------------------------------------------ */

/* Imports of the kernel half that no module exports: the ddekit functions. */
static int resolve_ddekit(void *arg, const char *name, struct ko_symbol *out)
{
	void *addr;

	if (strncmp(name, "ddekit_", 7))
		return -1;
	addr = dlsym(RTLD_DEFAULT, name);
	if (!addr)
		return -1;
	out->value = (uint64_t)addr;
	out->percpu = false;
	return 0;
}

/* The vermagic string of a module file, which every later module must match. */
static char *read_vermagic(const char *path)
{
	static char vermagic[256];
	FILE *f = fopen(path, "rb");
	char *buf, *hit;
	long size;

	if (!f)
		die("%s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	rewind(f);
	buf = malloc(size + 1);
	if (!buf || fread(buf, 1, size, f) != (size_t)size)
		die("%s: cannot read", path);
	buf[size] = '\0';
	fclose(f);
	hit = memmem(buf, size, "vermagic=", 9);
	if (!hit)
		die("%s: no vermagic", path);
	snprintf(vermagic, sizeof(vermagic), "%s", hit + 9);
	free(buf);
	return vermagic;
}

static const struct ko_module *load(const char *path)
{
	const struct ko_module *m = ko_load_file(ctx, path);
	const struct ko_error *err;

	if (m) {
		debugger_register_module(m);
		return m;
	}
	err = ko_last_error(ctx);
	fprintf(stderr, "understudy-driver: %s\n", err->message);
	for (size_t i = 0; i < err->n_problems; i++)
		fprintf(stderr, "  %s %s%s%s\n",
			err->problems[i].kind == KO_PROBLEM_MISSING ? "missing" : "crc-mismatch",
			err->problems[i].symbol, err->problems[i].detail[0] ? ": " : "",
			err->problems[i].detail);
	printf("LOAD_FAILED module=%s status=%s problems=%zu\n", path,
	       ko_status_name(err->status), err->n_problems);
	return NULL;
}

static void *kernel_export(const char *name)
{
	const struct ko_export *e = ko_find_export(ctx, name);

	if (!e || e->value.percpu)
		die("the runtime module does not export %s", name);
	return (void *)e->value.value;
}

static void find_kernel_api(void)
{
	kernel.boot = kernel_export("us_boot");
	kernel.cpu_enter = kernel_export("us_cpu_enter");
	kernel.cpu_leave = kernel_export("us_cpu_leave");
	kernel.net_open = kernel_export("us_net_open");
	kernel.net_stop = kernel_export("us_net_stop");
	kernel.net_xmit = kernel_export("us_net_xmit");
	kernel.net_xmit_buffers = kernel_export("us_net_xmit_buffers");
	kernel.net_set_mtu = kernel_export("us_net_set_mtu");
	kernel.net_set_mac = kernel_export("us_net_set_mac");
	kernel.net_set_rx_mode = kernel_export("us_net_set_rx_mode");
	kernel.net_set_features = kernel_export("us_net_set_features");
	kernel.net_drvinfo = kernel_export("us_net_drvinfo");
	kernel.net_link = kernel_export("us_net_link");
	kernel.net_stats = kernel_export("us_net_stats");
	kernel.param_set = kernel_export("us_param_set");
	kernel.irq_count = kernel_export("us_irq_count");
	kernel.rx_frames = kernel_export("us_rx_frames");
	kernel.skb_live = kernel_export("us_skb_live");
	kernel.template_park = kernel_export("us_template_park");
	kernel.template_resume = kernel_export("us_template_resume");
	kernel.template_used_memory = kernel_export("us_template_used_memory");
}

static void setup_percpu(void)
{
	struct ko_percpu_layout layout;
	void *block;

	ko_percpu_layout(ctx, &layout);
	if (layout.align < 64)
		layout.align = 64;
	block = aligned_alloc(layout.align, (layout.size + layout.align - 1) & ~(layout.align - 1));
	if (!block)
		die("no memory for the per-cpu block");
	ko_percpu_init_block(ctx, block);
	/* GCC's stack protector reads its canary from %gs:40. */
	*(uint64_t *)((char *)block + STACK_CANARY_OFFSET) = 0x5eed5eed0badcafeULL ^ (uint64_t)time(NULL);
	if (ddekit_setup_percpu(block))
		die("arch_prctl(ARCH_SET_GS): %s", strerror(errno));
}

bool netdev_registered(void)
{
	bool r;

	pthread_mutex_lock(&state_lock);
	r = registered;
	pthread_mutex_unlock(&state_lock);
	return r;
}

/* "module.name=value": through the parameter's kernel_param_ops. */
static int set_param(const char *setting)
{
	const char *dot = strchr(setting, '.'), *eq = strchr(setting, '=');
	char module[64];
	const struct ko_module *m;

	if (!dot || !eq || eq < dot || (size_t)(dot - setting) >= sizeof(module))
		return -EINVAL;
	snprintf(module, sizeof(module), "%.*s", (int)(dot - setting), setting);
	m = ko_find_module(ctx, module);
	for (size_t i = 0; m && i < m->params.count; i++) {
		const struct ko_param *p = &m->params.entries[i];

		if (strlen(p->name) == (size_t)(eq - dot - 1) && !strncmp(p->name, dot + 1, eq - dot - 1))
			return kernel.param_set((const void *)p->kernel_param, eq + 1);
	}
	return -ENOENT;
}

int start_runtime(const char *runtime, const char *const *modules, int n_modules,
		  const char *const *params, int n_params, int *init_status)
{
	static struct ko_options kopts = { .resolve = resolve_ddekit };
	struct ko_crc_table *crcs;
	char err[256];

	ddekit_setup_event_observer(watch_events);
	crcs = ko_crc_table_load_symvers(symvers, err, sizeof(err));
	if (!crcs)
		die("%s", err);
	kopts.crcs = crcs;
	kopts.vermagic = read_vermagic(runtime);
	ctx = ko_context_create(&kopts, err, sizeof(err));
	if (!ctx)
		die("%s", err);
	if (!load(runtime))
		return -ENOEXEC;
	for (int i = 0; i < n_modules; i++)
		if (!load(modules[i]))
			return -ENOEXEC;
	printf("LOADED modules=%zu\n", ko_module_count(ctx));

	find_kernel_api();
	setup_percpu();
	if (kernel.boot())
		die("the kernel half failed to boot");
	for (int i = 0; i < n_params; i++) {
		int err = set_param(params[i]);

		if (err) {
			printf("PARAM_FAILED setting=%s result=%d\n", params[i], err);
			return err;
		}
	}

	*init_status = 0;
	for (size_t i = 1; i < ko_module_count(ctx); i++) {
		const struct ko_module *m = ko_module_at(ctx, i);
		int ret = 0;

		if (m->init) {
			kernel.cpu_enter();
			ret = ((int (*)(void))m->init)();
			kernel.cpu_leave();
		}
		printf("INIT module=%s result=%d\n", m->name, ret);
		if (ret && !*init_status)
			*init_status = ret;
	}
	return 0;
}

/* ---- network tests driven from the command line ------------------------- */

static void watch_events(const char *line)
{
	unsigned int m[6];
	const char *p;

	pthread_mutex_lock(&state_lock);
	if (!strncmp(line, "CARRIER ", 8))
		carrier_on = strstr(line, " on=1") != NULL;
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

/* Counters of the kernel half, read while holding the CPU. */
static void print_stats(const char *when)
{
	unsigned long irqs, rx;
	long skbs;

	kernel.cpu_enter();
	irqs = kernel.irq_count();
	rx = kernel.rx_frames();
	skbs = kernel.skb_live();
	kernel.cpu_leave();
	printf("STATS when=%s irqs=%lu rx_frames=%lu skbs_live=%ld\n", when, irqs, rx, skbs);
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

/* The kernel half next to this executable: runtime/build/understudy-kernel.ko. */
static const char *default_runtime(void)
{
	static char path[4096];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 32);
	char *slash;

	if (n < 0)
		die("readlink /proc/self/exe: %s", strerror(errno));
	path[n] = '\0';
	slash = strrchr(path, '/');
	strcpy(slash + 1, "understudy-kernel.ko");
	return path;
}

int main(int argc, char **argv)
{
	enum { OPT_RUNTIME = 256, OPT_MODULE, OPT_SYMVERS, OPT_DEVICE_FD, OPT_PCI, OPT_ARENA_FD,
	       OPT_ARENA_IOVA, OPT_ARENA_SIZE, OPT_POOL_SIZE, OPT_CONTROL_FD, OPT_RINGS_FD,
	       OPT_KICK_FD, OPT_NOTIFY_FD, OPT_OPEN, OPT_WAIT_CARRIER, OPT_ARP, OPT_LOGLEVEL,
	       OPT_PARAM };
	static const struct option options[] = {
		{ "runtime", required_argument, NULL, OPT_RUNTIME },
		{ "module", required_argument, NULL, OPT_MODULE },
		{ "symvers", required_argument, NULL, OPT_SYMVERS },
		{ "device-fd", required_argument, NULL, OPT_DEVICE_FD },
		{ "pci-address", required_argument, NULL, OPT_PCI },
		{ "arena-fd", required_argument, NULL, OPT_ARENA_FD },
		{ "arena-iova", required_argument, NULL, OPT_ARENA_IOVA },
		{ "arena-size", required_argument, NULL, OPT_ARENA_SIZE },
		{ "pool-size", required_argument, NULL, OPT_POOL_SIZE },
		{ "control-fd", required_argument, NULL, OPT_CONTROL_FD },
		{ "rings-fd", required_argument, NULL, OPT_RINGS_FD },
		{ "kick-fd", required_argument, NULL, OPT_KICK_FD },
		{ "notify-fd", required_argument, NULL, OPT_NOTIFY_FD },
		{ "open", no_argument, NULL, OPT_OPEN },
		{ "wait-carrier", required_argument, NULL, OPT_WAIT_CARRIER },
		{ "arp", required_argument, NULL, OPT_ARP },
		{ "loglevel", required_argument, NULL, OPT_LOGLEVEL },
		{ "param", required_argument, NULL, OPT_PARAM },
		{ 0 }
	};
	const char *runtime = NULL, *modules[MAX_MODULES], *params[MAX_PARAMS], *pci_address = NULL;
	int n_modules = 0, n_params = 0, device_fd = -1, arena_fd = -1, control_fd = -1, rings_fd = -1;
	int kick_fd = -1, notify_fd = -1, opt, status = 0, init_status;
	unsigned long long arena_iova = DEFAULT_ARENA_IOVA, arena_size = DEFAULT_ARENA_SIZE;
	unsigned long long pool_size = DEFAULT_POOL_SIZE;
	double wait_carrier = 0;
	bool open_dev = false, arp = false;

	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
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
		case OPT_PCI: pci_address = optarg; break;
		case OPT_ARENA_FD: arena_fd = number(optarg, "--arena-fd"); break;
		case OPT_ARENA_IOVA: arena_iova = number(optarg, "--arena-iova"); break;
		case OPT_ARENA_SIZE: arena_size = number(optarg, "--arena-size"); break;
		case OPT_POOL_SIZE: pool_size = number(optarg, "--pool-size"); break;
		case OPT_CONTROL_FD: control_fd = number(optarg, "--control-fd"); break;
		case OPT_RINGS_FD: rings_fd = number(optarg, "--rings-fd"); break;
		case OPT_KICK_FD: kick_fd = number(optarg, "--kick-fd"); break;
		case OPT_NOTIFY_FD: notify_fd = number(optarg, "--notify-fd"); break;
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
		case OPT_LOGLEVEL: ddekit_setup_loglevel(number(optarg, "--loglevel")); break;
		default:
			die("usage: see the comment at the top of runtime/driver/main.c");
		}
	}
	if (optind != argc)
		die("unexpected argument %s", argv[optind]);
	if (!runtime)
		runtime = default_runtime();

	setvbuf(stdout, NULL, _IOLBF, 0);
	install_fault_handlers();
	if (control_fd >= 0) {
		if (device_fd < 0 || arena_fd < 0 || rings_fd < 0 || kick_fd < 0 || notify_fd < 0)
			die("--control-fd needs --device-fd, --arena-fd, --rings-fd, --kick-fd, --notify-fd");
		if (n_modules || n_params || open_dev || arp || wait_carrier > 0 || pci_address)
			die("with --control-fd the host chooses modules and actions");
		return control_loop(control_fd, device_fd, arena_fd, rings_fd, kick_fd, notify_fd,
				    runtime);
	}

	if ((device_fd >= 0) != (pci_address != NULL))
		die("--device-fd and --pci-address go together");
	if (device_fd < 0)
		pool_size = 0, arena_size = arena_fd < 0 ? SELFTEST_ARENA_SIZE : arena_size;
	if (device_fd >= 0 && ddekit_setup_device(device_fd, pci_address))
		die("VFIO device fd %d unusable", device_fd);
	if (ddekit_setup_arena(arena_fd, arena_iova, arena_size, pool_size))
		die("cannot map the DMA arena (fd %d, %llu bytes)", arena_fd, arena_size);
	ddekit_setup_rx(on_rx);
	if (start_runtime(runtime, modules, n_modules, params, n_params, &init_status))
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

		print_stats("before_arp");
		answered = arp_probe(5.0);
		printf("ARP_WAIT answered=%d\n", answered);
		if (!answered)
			status = 1;
	}
	print_stats("end");
	printf("DONE status=%d\n", status);
	fflush(stdout);
	/* Kernel threads are still running; end the process without unwinding them. */
	_exit(status);
}
