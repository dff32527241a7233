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
 *		[--trace-fd N --gate triage|permissive|stringent]
 *
 * the host's LOAD (live update), HELLO and PROBE name the modules, the
 * geometry and the PCI address, and later requests open, configure and query the device.
 *
 * Stand-alone, for tests and bring-up, the command line chooses instead:
 *
 *	understudy-driver [--runtime KO] [--module KO]... [--symvers FILE]
 *		[--device-fd N --pci-address DDDD:BB:SS.F]
 *		[--arena-fd N --arena-iova X --arena-size X --pool-size X]
 *		[--param MODULE.NAME=VALUE]... [--open] [--wait-carrier SECONDS]
 *		[--arp SRC_IP,DST_IP] [--remove] [--loglevel N]
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
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
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
#include "../check/check.h"
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
static bool checked;		/* --trace-fd: the modules run rewritten under the checker */

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

/*
 * Imports no module exports: the kernel half's ddekit functions, and a
 * checked module's probe stubs (runtime/check/stubs.S).
 */
static int resolve_ddekit(void *arg, const char *name, struct ko_symbol *out)
{
	void *addr;

	if (strncmp(name, "ddekit_", 7) && (!checked || strncmp(name, "__understudy_trace_", 19)))
		return -1;
	addr = dlsym(RTLD_DEFAULT, name);
	if (!addr)
		return -1;
	out->value = (uint64_t)addr;
	out->percpu = false;
	return 0;
}

void problems_add(struct problems *p, const char *fmt, ...)
{
	va_list ap;
	char *line;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&line, fmt, ap);
	va_end(ap);
	if (n < 0)
		die("out of memory");
	for (int i = 0; i < n; i++)	/* one line each, whatever a path holds */
		if ((unsigned char)line[i] < 0x20)
			line[i] = '?';
	p->text = realloc(p->text, p->len + n + 2);
	if (!p->text)
		die("out of memory");
	memcpy(p->text + p->len, line, n);
	p->len += n;
	p->text[p->len++] = '\n';
	p->text[p->len] = '\0';
	p->count++;
	free(line);
}

void problems_clear(struct problems *p)
{
	free(p->text);
	*p = (struct problems){ 0 };
}

/* A kernel half: its module and its ABI's CRCs (runtime/README.md, "One kernel half per ABI"). */
struct half {
	char ko[PATH_MAX];
	char symvers[PATH_MAX];
	char vermagic[256];
	char release[64];	/* vermagic's first word, e.g. 6.1.0-50-amd64 */
};

/*
 * A module's vermagic= string, which the loader compares with the kernel
 * half's (after the release, as Linux does for modules with CRCs).
 */
static int read_vermagic(const char *path, char *vermagic, size_t len, struct problems *why)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL, *hit = NULL;
	long size;

	if (!f) {
		problems_add(why, "%s: %s", path, strerror(errno));
		return errno == ENOENT ? -ENOENT : -ENOEXEC;
	}
	if (!fseek(f, 0, SEEK_END) && (size = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) &&
	    (buf = malloc(size + 1)) && fread(buf, 1, size, f) == (size_t)size) {
		buf[size] = '\0';
		hit = memmem(buf, size, "vermagic=", 9);
	}
	fclose(f);
	if (hit)
		snprintf(vermagic, len, "%s", hit + 9);
	else
		problems_add(why, "%s: no vermagic= (not a kernel module?)", path);
	free(buf);
	return hit ? 0 : -ENOEXEC;
}

static int half_at(struct half *h, const char *ko, const char *symvers, struct problems *why)
{
	int err;

	snprintf(h->ko, sizeof(h->ko), "%s", ko);
	snprintf(h->symvers, sizeof(h->symvers), "%s", symvers);
	err = read_vermagic(ko, h->vermagic, sizeof(h->vermagic), why);
	snprintf(h->release, sizeof(h->release), "%.*s", (int)strcspn(h->vermagic, " "),
		 h->vermagic);
	return err;
}

/* "6.1.0-50-amd64": base "6.1.0", number 50, flavour "amd64"; false if not that shape. */
static bool parse_release(const char *release, char *base, int *number, char *flavour)
{
	return sscanf(release, "%31[0-9.]-%d-%31s", base, number, flavour) == 3;
}

/*
 * How far a half's ABI is from a module's: the difference of their ABI
 * numbers, or -1 if they are not of the same kernel version and flavour.
 */
static int abi_distance(const char *half, const char *module)
{
	char base[2][32], flavour[2][32];
	int number[2];

	if (!parse_release(half, base[0], &number[0], flavour[0]) ||
	    !parse_release(module, base[1], &number[1], flavour[1]) ||
	    strcmp(base[0], base[1]) || strcmp(flavour[0], flavour[1]))
		return -1;
	return abs(number[0] - number[1]);
}

static const char *module_release;	/* for compare_halves */

static int compare_halves(const void *a, const void *b)
{
	const struct half *x = a, *y = b;
	int dx = abi_distance(x->release, module_release);
	int dy = abi_distance(y->release, module_release);

	return dx != dy ? dx - dy : strcmp(x->release, y->release);
}

#define MAX_HALVES 32

/*
 * The halves to try for a module of ABI release, nearest first, from
 * build/abi/<abi>/ next to this executable: its own ABI's alone if there is
 * one; otherwise every half of the same kernel version and flavour, since
 * with MODVERSIONS Linux lets the CRCs decide, not the release.
 */
static int find_halves(const char *release, struct half *halves, struct problems *why)
{
	char dir[PATH_MAX], ko[PATH_MAX + 128], symvers[PATH_MAX + 128];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 8);
	struct dirent *e;
	DIR *d;
	int count = 0;

	if (n < 0)
		die("readlink /proc/self/exe: %s", strerror(errno));
	dir[n] = '\0';
	strcpy(strrchr(dir, '/') + 1, "abi");
	d = opendir(dir);
	while (d && (e = readdir(d)) && count < MAX_HALVES) {
		struct problems ignored = { 0 };

		if (e->d_name[0] == '.')
			continue;
		snprintf(ko, sizeof(ko), "%s/%.64s/understudy-kernel.ko", dir, e->d_name);
		snprintf(symvers, sizeof(symvers), "%s/%.64s/Module.symvers", dir, e->d_name);
		if (!half_at(&halves[count], ko, symvers, &ignored) && !access(symvers, R_OK) &&
		    abi_distance(halves[count].release, release) >= 0)
			count++;
		problems_clear(&ignored);
	}
	if (d)
		closedir(d);
	for (int i = 0; i < count; i++)
		if (!strcmp(halves[i].release, release)) {
			halves[0] = halves[i];
			return 1;
		}
	problems_add(why, "ABI %s has no kernel half in %s (one is built for each ABI with "
		     "linux-headers, lab/lab.toml [live_update]); %s", release, dir,
		     count ? "tried the others whose CRCs might match, nearest first:"
			   : "there is no other half of its kernel version to try");
	module_release = release;
	qsort(halves, count, sizeof(*halves), compare_halves);
	return count;
}

/*
 * Loads the half and the modules into a fresh context; on failure leaves
 * none, with a summary line in *why and the loader's whole problem list in
 * *detail (after a line naming the half, if label).
 */
static int try_half(const struct half *h, const char *const *modules, int n_modules,
		    bool label, struct problems *why, struct problems *detail)
{
	static struct ko_options kopts = { .resolve = resolve_ddekit };
	const struct ko_error *err;
	struct ko_crc_table *crcs;
	char message[256], names[160] = "";
	size_t used = 0;
	bool ok;

	crcs = ko_crc_table_load_symvers(h->symvers, message, sizeof(message));
	kopts.crcs = crcs;
	if (!crcs) {
		problems_add(why, "tried %s: %s", h->release, message);
		return -ENOEXEC;
	}
	kopts.vermagic = h->vermagic;
	ctx = ko_context_create(&kopts, message, sizeof(message));
	if (!ctx)
		die("%s", message);
	ok = ko_load_file(ctx, h->ko);
	for (int i = 0; ok && i < n_modules; i++)
		ok = (checked ? ko_load_file_checked : ko_load_file)(ctx, modules[i]);
	if (ok)
		return 0;

	err = ko_last_error(ctx);
	if (label && err->n_problems)
		problems_add(detail, "on %s:", h->release);
	for (size_t i = 0; i < err->n_problems; i++) {
		const struct ko_problem *pr = &err->problems[i];

		if (i < 3)	/* the first few on the summary line, all of them below it */
			used += snprintf(names + used, sizeof(names) - used, "%s%.40s",
					 i ? ", " : " (", pr->symbol);
		problems_add(detail, "%s: %s (%s)",
			     pr->kind == KO_PROBLEM_MISSING ? "missing" : "crc-mismatch",
			     pr->symbol, pr->detail);
	}
	problems_add(why, "tried %s: %s%s%s", h->release, err->message, names,
		     err->n_problems > 3 ? ", ...)" : err->n_problems ? ")" : "");
	ko_context_destroy(ctx);
	ctx = NULL;
	ko_crc_table_destroy(crcs);
	return -ENOEXEC;
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

int load_modules(const char *runtime, const char *symvers, const char *const *modules,
		 int n_modules, char *used, size_t used_len, struct problems *why)
{
	struct half halves[MAX_HALVES];
	struct problems detail = { 0 };
	char vermagic[256], release[64], dir[PATH_MAX], next_to[PATH_MAX + 16];
	int n_halves = 1, i, err;

	for (i = 0; i < n_modules; i++)
		if (access(modules[i], R_OK)) {
			problems_add(why, "%s: %s", modules[i], strerror(errno));
			return errno == ENOENT ? -ENOENT : -ENOEXEC;
		}
	err = read_vermagic(modules[0], vermagic, sizeof(vermagic), why);
	if (err)
		return err;
	snprintf(release, sizeof(release), "%.*s", (int)strcspn(vermagic, " "), vermagic);
	if (runtime) {
		/* A half is a directory: its ABI's Module.symvers lies next to it. */
		if (!symvers && realpath(runtime, dir)) {
			snprintf(next_to, sizeof(next_to), "%.*s/Module.symvers",
				 (int)(strrchr(dir, '/') - dir), dir);
			symvers = next_to;
		}
		err = half_at(&halves[0], runtime, symvers ? symvers : "", why);
		if (err)
			return err;
	} else {
		n_halves = find_halves(release, halves, why);
	}
	err = -ENOEXEC;
	for (i = 0; i < n_halves && err; i++)
		err = try_half(&halves[i], modules, n_modules, n_halves > 1, why, &detail);
	if (err) {
		/* Each half's summary first, then every problem: a reply cut short keeps the summaries. */
		for (char *line = detail.text; line && *line; line = strchr(line, '\n') + 1)
			problems_add(why, "%.*s", (int)strcspn(line, "\n"), line);
		problems_clear(&detail);
		return err;
	}
	problems_clear(&detail);
	snprintf(used, used_len, "abi=%s half=%s", halves[i - 1].release, halves[i - 1].ko);
	if (strcmp(halves[i - 1].release, release))
		snprintf(used + strlen(used), used_len - strlen(used), " module_abi=%s", release);
	problems_clear(why);	/* the halves tried before */
	printf("LOADED modules=%zu %s\n", ko_module_count(ctx), used);
	for (size_t m = 0; m < ko_module_count(ctx); m++)
		debugger_register_module(ko_module_at(ctx, m));
	for (size_t m = 1; checked && m < ko_module_count(ctx); m++) {
		char message[PATH_MAX + 128];

		if (check_add_module(ko_module_at(ctx, m), message, sizeof(message))) {
			problems_add(why, "%s", message);
			return -ENOEXEC;
		}
	}
	return 0;
}

/* struct pci_device_id (include/linux/mod_devicetable.h), as a module's table holds it. */
struct pci_device_id {
	uint32_t vendor, device, subvendor, subdevice;
	uint32_t class, class_mask;
	uint64_t driver_data;
	uint32_t override_only;	/* for driver_override binding; pci_match_id ignores it */
};

_Static_assert(sizeof(struct pci_device_id) == 40, "struct pci_device_id of 6.1");

#define PCI_ANY_ID (~0u)

static bool any_or(uint32_t id, uint16_t value)
{
	return id == PCI_ANY_ID || id == value;
}

int pci_table_match(uint16_t vendor, uint16_t device, uint16_t subvendor, uint16_t subdevice,
		    uint32_t class, struct problems *why)
{
	char tables[256] = "";
	size_t len = 0;

	for (size_t i = 1; i < ko_module_count(ctx); i++) {	/* 0: the kernel half */
		const struct ko_module *m = ko_module_at(ctx, i);
		const struct pci_device_id *id;
		uint64_t addr, size;
		size_t n = 0;

		if (ko_module_find_symbol(m, "__mod_pci__", "_device_table", &addr, &size)) {
			len += snprintf(tables + len, sizeof(tables) - len, "%s%.32s: no PCI table",
					len ? "; " : "", m->name);
			continue;
		}
		/* Zero-terminated as the PCI core reads it (pci_match_id), and within its symbol. */
		for (id = (const void *)addr; (n + 1) * sizeof(*id) <= size &&
		     (id->vendor || id->subvendor || id->class_mask); id++, n++)
			if (any_or(id->vendor, vendor) && any_or(id->device, device) &&
			    any_or(id->subvendor, subvendor) && any_or(id->subdevice, subdevice) &&
			    !((id->class ^ class) & id->class_mask))
				return 0;
		len += snprintf(tables + len, sizeof(tables) - len, "%s%.32s: %zu entries",
				len ? "; " : "", m->name, n);
		if (len >= sizeof(tables))
			len = sizeof(tables) - 1;
	}
	problems_add(why, "device %04x:%04x (subsystem %04x:%04x, class %06x) matches no module's "
		     "PCI table (%s)", vendor, device, subvendor, subdevice, class, tables);
	return -ENODEV;
}

int run_modules(const char *const *params, int n_params, int *init_status)
{
	ddekit_setup_event_observer(watch_events);
	find_kernel_api();
	setup_percpu();
	if (checked) {
		void *arena;
		unsigned long long iova;
		unsigned long size, pool_size;

		ddekit_arena(&arena, &iova, &size, &pool_size);
		check_start(ddekit_percpu_block(), arena, iova, size);
	}
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

int start_runtime(const char *runtime, const char *symvers, const char *const *modules,
		  int n_modules, const char *const *params, int n_params, int *init_status)
{
	struct problems why = { 0 };
	char used[PATH_MAX + 128];
	int err = load_modules(runtime, symvers, modules, n_modules, used, sizeof(used), &why);

	if (err) {
		fprintf(stderr, "understudy-driver: cannot load %s:\n", modules[0]);
		for (char *line = why.text; line && *line; line = strchr(line, '\n') + 1)
			fprintf(stderr, "  %.*s\n", (int)strcspn(line, "\n"), line);
		printf("LOAD_FAILED module=%s result=%d problems=%u\n", modules[0], err, why.count);
		problems_clear(&why);
		return err;
	}
	return run_modules(params, n_params, init_status);
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

/*
 * rmmod of the chain, last module first, as delete_module() would: a
 * module with an init but no exit cannot be unloaded (-EBUSY). A PCI
 * driver's exit unregisters it, which removes the device: its remove, then
 * its managed resources (UNBOUND). Returns whether every module went.
 */
static bool remove_modules(void)
{
	bool all = true;

	for (size_t i = ko_module_count(ctx) - 1; i >= 1; i--) {
		const struct ko_module *m = ko_module_at(ctx, i);
		int ret = 0;

		if (m->exit) {
			kernel.cpu_enter();
			((void (*)(void))m->exit)();
			kernel.cpu_leave();
		} else if (m->init) {
			ret = -EBUSY;
			all = false;
		}
		printf("EXIT module=%s result=%d\n", m->name, ret);
	}
	return all;
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

int main(int argc, char **argv)
{
	enum { OPT_RUNTIME = 256, OPT_MODULE, OPT_SYMVERS, OPT_DEVICE_FD, OPT_PCI, OPT_ARENA_FD,
	       OPT_ARENA_IOVA, OPT_ARENA_SIZE, OPT_POOL_SIZE, OPT_CONTROL_FD, OPT_RINGS_FD,
	       OPT_KICK_FD, OPT_NOTIFY_FD, OPT_OPEN, OPT_WAIT_CARRIER, OPT_ARP, OPT_LOGLEVEL,
	       OPT_PARAM, OPT_TRACE_FD, OPT_GATE, OPT_REMOVE };
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
		{ "remove", no_argument, NULL, OPT_REMOVE },
		{ "loglevel", required_argument, NULL, OPT_LOGLEVEL },
		{ "param", required_argument, NULL, OPT_PARAM },
		{ "trace-fd", required_argument, NULL, OPT_TRACE_FD },
		{ "gate", required_argument, NULL, OPT_GATE },
		{ 0 }
	};
	const char *runtime = NULL, *symvers = NULL, *modules[MAX_MODULES], *params[MAX_PARAMS], *pci_address = NULL;
	int n_modules = 0, n_params = 0, device_fd = -1, arena_fd = -1, control_fd = -1, rings_fd = -1;
	int kick_fd = -1, notify_fd = -1, opt, status = 0, init_status, trace_fd = -1, gate = -1;
	unsigned long long arena_iova = DEFAULT_ARENA_IOVA, arena_size = DEFAULT_ARENA_SIZE;
	unsigned long long pool_size = DEFAULT_POOL_SIZE;
	double wait_carrier = 0;
	bool open_dev = false, arp = false, remove = false;

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
		if (device_fd < 0 || arena_fd < 0 || rings_fd < 0 || kick_fd < 0 || notify_fd < 0)
			die("--control-fd needs --device-fd, --arena-fd, --rings-fd, --kick-fd, --notify-fd");
		if (n_modules || n_params || open_dev || arp || remove || wait_carrier > 0 || pci_address)
			die("with --control-fd the host chooses modules and actions");
		return control_loop(control_fd, device_fd, arena_fd, rings_fd, kick_fd, notify_fd,
				    runtime, symvers);
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

		print_stats("before_arp");
		answered = arp_probe(5.0);
		printf("ARP_WAIT answered=%d\n", answered);
		if (!answered)
			status = 1;
	}
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
