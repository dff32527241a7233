// SPDX-License-Identifier: GPL-2.0
/*
 * The loaded module chain: the kernel half and the driver's modules in one
 * loader context, the kernel half's entry points among its exports, and
 * what runs the chain -- parameters, the modules' inits and exits, the
 * per-cpu block. Which half to load is halves.c's choice.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../ddekit/ddekit.h"
#include "../ddekit/setup.h"
#include "../check/check.h"
#include "../loader/loader.h"
#include "driver.h"

#define STACK_CANARY_OFFSET	40

struct ko_context *modules_ctx;
bool checked;
struct kernel_api kernel;

/* A ddekit function implemented here: it needs the loader. */
void ddekit_symbolize(unsigned long addr, char *buf, unsigned long len)
{
	const struct ko_module *m = modules_ctx ? ko_module_containing(modules_ctx, addr) : NULL;

	if (m)
		snprintf(buf, len, "%s+%#lx", m->name, addr - (unsigned long)m->image.addr);
	else
		snprintf(buf, len, "%#lx", addr);
}

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
	modules_ctx = ko_context_create(&kopts, message, sizeof(message));
	if (!modules_ctx)
		die("%s", message);
	ok = ko_load_file(modules_ctx, h->ko);
	for (int i = 0; ok && i < n_modules; i++)
		ok = (checked ? ko_load_file_checked : ko_load_file)(modules_ctx, modules[i]);
	if (ok)
		return 0;

	err = ko_last_error(modules_ctx);
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
	ko_context_destroy(modules_ctx);
	modules_ctx = NULL;
	ko_crc_table_destroy(crcs);
	return -ENOEXEC;
}

static void *kernel_export(const char *name)
{
	const struct ko_export *e = ko_find_export(modules_ctx, name);

	if (!e || e->value.percpu)
		die("the runtime module does not export %s", name);
	return (void *)e->value.value;
}

static void find_kernel_api(void)
{
#define BIND_KERNEL_API(name, type, parameters) \
	kernel.name = kernel_export(US_KERNEL_API_SYMBOL_NAME(name));
	US_KERNEL_API(BIND_KERNEL_API)
#undef BIND_KERNEL_API
}

static void setup_percpu(void)
{
	struct ko_percpu_layout layout;
	void *block;

	ko_percpu_layout(modules_ctx, &layout);
	if (layout.align < 64)
		layout.align = 64;
	block = aligned_alloc(layout.align, (layout.size + layout.align - 1) & ~(layout.align - 1));
	if (!block)
		die("no memory for the per-cpu block");
	ko_percpu_init_block(modules_ctx, block);
	/* GCC's stack protector reads its canary from %gs:40. */
	*(uint64_t *)((char *)block + STACK_CANARY_OFFSET) = 0x5eed5eed0badcafeULL ^ (uint64_t)time(NULL);
	if (ddekit_setup_percpu(block))
		die("arch_prctl(ARCH_SET_GS): %s", strerror(errno));
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
	m = ko_find_module(modules_ctx, module);
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
	char release[64];
	int n_halves, i, err;

	for (i = 0; i < n_modules; i++)
		if (access(modules[i], R_OK)) {
			problems_add(why, "%s: %s", modules[i], strerror(errno));
			return errno == ENOENT ? -ENOENT : -ENOEXEC;
		}
	n_halves = choose_halves(runtime, symvers, modules[0], release, sizeof(release), halves,
				 why);
	if (n_halves < 0)
		return n_halves;
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
	printf("LOADED modules=%zu %s\n", ko_module_count(modules_ctx), used);
	for (size_t m = 0; m < ko_module_count(modules_ctx); m++)
		debugger_register_module(ko_module_at(modules_ctx, m));
	for (size_t m = 1; checked && m < ko_module_count(modules_ctx); m++) {
		char message[PATH_MAX + 128];

		if (check_add_module(ko_module_at(modules_ctx, m), message, sizeof(message))) {
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

	for (size_t i = 1; i < ko_module_count(modules_ctx); i++) {	/* 0: the kernel half */
		const struct ko_module *m = ko_module_at(modules_ctx, i);
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
	sandbox_enter();
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
	for (size_t i = 1; i < ko_module_count(modules_ctx); i++) {
		const struct ko_module *m = ko_module_at(modules_ctx, i);
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

bool remove_modules(void)
{
	bool all = true;

	for (size_t i = ko_module_count(modules_ctx) - 1; i >= 1; i--) {
		const struct ko_module *m = ko_module_at(modules_ctx, i);
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
