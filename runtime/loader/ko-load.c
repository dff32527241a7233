// SPDX-License-Identifier: GPL-2.0
/*
 * ko-load: load kernel modules with the understudy loader and report what
 * happened. Used by tests and by people checking whether a module would load.
 *
 *	ko-load [--symvers FILE] [--vermagic STR] [--resolve-all-dummy]
 *		[--percpu NAME,...] [--checked] [--json] MODULE.ko [MORE.ko ...]
 *
 * Modules load in order; later ones link against earlier ones' exports. This
 * tool has no kernel runtime, so without --resolve-all-dummy every import
 * that no earlier module exports is reported missing. --resolve-all-dummy is
 * a test mode: such imports get distinct addresses in a PROT_NONE guard
 * region (the names given with --percpu get per-cpu offsets instead), which
 * is enough to place and relocate a module but never to run it.
 *
 * --checked loads every module as the checker runs it: rewritten with a
 * probe before each memory access (docs/checking.md); the report gives the
 * number of probes ("check_sites").
 *
 * Exit status: 0 all loaded, 1 a module failed to load (reason on stderr, or
 * in the JSON), 2 bad usage or setup.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "loader.h"

#define DUMMY_REGION_SIZE	(16UL << 20)
#define DUMMY_STRIDE		16
#define DUMMY_PERCPU_SIZE	64

struct dummy_resolver {
	struct ko_context *ctx;
	char *percpu_names;		/* ",name,name," for strstr */
	uint64_t region;		/* PROT_NONE, below 2 GiB */
	size_t used;
	size_t count;
	size_t percpu_count;
};

static int dummy_resolve(void *arg, const char *name, struct ko_symbol *out)
{
	struct dummy_resolver *d = arg;
	struct ko_symbol *value;
	ENTRY item = { .key = (char *)name }, *found;
	char needle[512];

	found = hsearch(item, FIND);
	if (found) {
		*out = *(struct ko_symbol *)found->data;
		return 0;
	}
	value = calloc(1, sizeof(*value));
	item.key = strdup(name);
	if (!value || !item.key)
		return -1;
	snprintf(needle, sizeof(needle), ",%s,", name);
	if (d->percpu_names && strstr(d->percpu_names, needle)) {
		value->percpu = true;
		ko_percpu_alloc(d->ctx, DUMMY_PERCPU_SIZE, DUMMY_PERCPU_SIZE, &value->value);
		d->percpu_count++;
	} else {
		if (!d->region) {
			void *p = ko_alloc_low(d->ctx, DUMMY_REGION_SIZE, PROT_NONE);

			if (!p)
				return -1;
			d->region = (uint64_t)p;
		}
		if (d->used + DUMMY_STRIDE > DUMMY_REGION_SIZE)
			return -1;
		value->value = d->region + d->used;
		d->used += DUMMY_STRIDE;
	}
	d->count++;
	item.data = value;
	if (!hsearch(item, ENTER))
		return -1;
	*out = *value;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Output */

static void json_string(const char *s)
{
	putchar('"');
	for (; s && *s; s++) {
		unsigned char c = *s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static const char *crc_status_name(enum ko_crc_status s)
{
	switch (s) {
	case KO_CRC_MATCH:	return "match";
	case KO_CRC_MISMATCH:	return "mismatch";
	case KO_CRC_UNKNOWN:	return "unknown";
	default:		return "unversioned";
	}
}

struct special_count {
	const char *name;
	size_t count;
};

static size_t special_counts(const struct ko_module *m, struct special_count out[])
{
	size_t n = 0;

	out[n++] = (struct special_count){ "mcount_loc", m->mcount_sites.count };
	out[n++] = (struct special_count){ "retpoline_sites", m->retpoline_sites.count };
	out[n++] = (struct special_count){ "return_sites", m->return_sites.count };
	out[n++] = (struct special_count){ "static_call_sites", m->static_calls.count };
	out[n++] = (struct special_count){ "jump_table", m->jump_entries.count };
	out[n++] = (struct special_count){ "altinstructions", m->alternatives.count };
	out[n++] = (struct special_count){ "parainstructions", m->paravirt_sites.count };
	out[n++] = (struct special_count){ "ex_table", m->extable.count };
	out[n++] = (struct special_count){ "bug_table", m->bugs.count };
	out[n++] = (struct special_count){ "params", m->params.count };
	return n;
}

static bool is_dummy(const struct dummy_resolver *d, const struct ko_import *imp)
{
	return d && !imp->provider && !imp->value.percpu && d->region &&
	       imp->value.value >= d->region &&
	       imp->value.value < d->region + DUMMY_REGION_SIZE;
}

static void json_module(const struct ko_module *m, const struct dummy_resolver *d)
{
	struct special_count special[16];
	size_t nspecial = special_counts(m, special);
	const char *sep = "";

	printf("{\"name\": ");
	json_string(m->name);
	printf(", \"path\": ");
	json_string(m->path);
	printf(", \"vermagic\": ");
	json_string(m->vermagic);
	printf(", \"license\": ");
	json_string(m->license);
	printf(", \"depends\": ");
	json_string(m->depends);
	printf(", \"signature_appended\": %s", m->signature_appended ? "true" : "false");
	printf(", \"image\": [%" PRIu64 ", %" PRIu64 "], \"text\": [%" PRIu64 ", %" PRIu64
	       "], \"rodata\": [%" PRIu64 ", %" PRIu64 "], \"data\": [%" PRIu64 ", %" PRIu64 "]",
	       m->image.addr, m->image.size, m->text.addr, m->text.size,
	       m->rodata.addr, m->rodata.size, m->data.addr, m->data.size);
	printf(", \"percpu\": [%" PRIu64 ", %" PRIu64 "]", m->percpu.addr, m->percpu.size);
	printf(", \"this_module\": %" PRIu64 ", \"init\": %" PRIu64 ", \"exit\": %" PRIu64,
	       m->this_module, m->init, m->exit);

	printf(", \"sections\": [");
	for (size_t i = 0; i < m->sections.count; i++) {
		const struct ko_section *s = &m->sections.entries[i];

		printf("%s{\"name\": ", i ? ", " : "");
		json_string(s->name);
		printf(", \"addr\": %" PRIu64 ", \"size\": %" PRIu64 ", \"flags\": %u}",
		       s->addr, s->size, s->flags);
	}
	printf("], \"relocations\": {");
	for (unsigned int t = 0; t < KO_NR_RELOC_TYPES; t++) {
		if (!m->relocs[t])
			continue;
		printf("%s\"%s\": %lu", sep, ko_reloc_type_name(t), m->relocs[t]);
		sep = ", ";
	}
	printf("}, \"check_sites\": %zu, \"imports\": [", m->check_sites.count);
	for (size_t i = 0; i < m->imports.count; i++) {
		const struct ko_import *imp = &m->imports.entries[i];

		printf("%s{\"name\": ", i ? ", " : "");
		json_string(imp->name);
		printf(", \"value\": %" PRIu64 ", \"percpu\": %s, \"resolved\": %s, \"weak\": %s, \"dummy\": %s, \"provider\": ",
		       imp->value.value, imp->value.percpu ? "true" : "false",
		       imp->resolved ? "true" : "false", imp->weak ? "true" : "false",
		       is_dummy(d, imp) ? "true" : "false");
		json_string(imp->provider ? imp->provider->name : "");
		printf(", \"crc\": \"%s\"}", crc_status_name(imp->crc_status));
	}
	printf("], \"exports\": [");
	for (size_t i = 0; i < m->exports.count; i++) {
		const struct ko_export *e = &m->exports.entries[i];

		printf("%s{\"name\": ", i ? ", " : "");
		json_string(e->name);
		printf(", \"value\": %" PRIu64 ", \"percpu\": %s, \"gpl_only\": %s, \"crc\": %" PRIu32 ", \"namespace\": ",
		       e->value.value, e->value.percpu ? "true" : "false",
		       e->gpl_only ? "true" : "false", e->crc);
		json_string(e->namespace);
		printf("}");
	}
	printf("], \"special\": {");
	for (size_t i = 0; i < nspecial; i++)
		printf("%s\"%s\": %zu", i ? ", " : "", special[i].name, special[i].count);
	printf("}, \"mcount_patched\": %s}", m->mcount_patched ? "true" : "false");
}

static void text_module(const struct ko_module *m, const struct dummy_resolver *d,
			bool vermagic_checked, bool crcs_checked)
{
	struct special_count special[16];
	size_t nspecial = special_counts(m, special);
	size_t from_modules = 0, dummies = 0, percpu = 0, weak_missing = 0;
	size_t crc[4] = { 0 };
	unsigned long total = 0;

	printf("%s: %s\n", m->name, m->path);
	printf("  vermagic   %s(%s)\n", m->vermagic,
	       vermagic_checked ? "checked" : "not checked");
	printf("  license    %s; depends \"%s\"; signature %s\n",
	       m->license ? m->license : "(none)", m->depends,
	       m->signature_appended ? "appended (not verified)" : "none");
	printf("  image      0x%" PRIx64 " +0x%" PRIx64 ": text +0x%" PRIx64
	       " R-X, rodata +0x%" PRIx64 " R--, data +0x%" PRIx64 " RW-\n",
	       m->image.addr, m->image.size, m->text.size, m->rodata.size, m->data.size);
	for (size_t i = 0; i < m->sections.count; i++) {
		const struct ko_section *s = &m->sections.entries[i];

		printf("    %-28s 0x%08" PRIx64 " %8" PRIu64 " %s%s\n", s->name, s->addr,
		       s->size, s->flags & KO_SEC_EXEC ? "R-X" :
		       s->flags & KO_SEC_WRITE ? "RW-" : "R--",
		       s->flags & KO_SEC_PERCPU ? " per-cpu template" : "");
	}
	if (m->percpu.size)
		printf("  per-cpu    %%gs:0x%" PRIx64 " +0x%" PRIx64 "\n",
		       m->percpu.addr, m->percpu.size);
	printf("  entry      struct module at 0x%" PRIx64 " (%" PRIu64 " bytes), init 0x%"
	       PRIx64 ", exit 0x%" PRIx64 "\n", m->this_module, m->this_module_size,
	       m->init, m->exit);

	printf("  relocs    ");
	for (unsigned int t = 0; t < KO_NR_RELOC_TYPES; t++) {
		if (m->relocs[t])
			printf(" %s=%lu", ko_reloc_type_name(t), m->relocs[t]);
		total += m->relocs[t];
	}
	printf(" (%lu applied)\n", total);
	if (m->check_sites.count)
		printf("  checked    %zu probes\n", m->check_sites.count);

	for (size_t i = 0; i < m->imports.count; i++) {
		const struct ko_import *imp = &m->imports.entries[i];

		from_modules += imp->provider != NULL;
		dummies += is_dummy(d, imp);
		percpu += imp->value.percpu;
		weak_missing += !imp->resolved;
		crc[imp->crc_status]++;
	}
	printf("  imports    %zu: %zu from modules, %zu from the runtime, %zu DUMMY (test mode), %zu per-cpu, %zu weak unresolved\n",
	       m->imports.count, from_modules,
	       m->imports.count - from_modules - dummies - weak_missing,
	       dummies, percpu, weak_missing);
	printf("  CRCs       %zu match, %zu mismatch, %zu unknown, %zu unversioned%s\n",
	       crc[KO_CRC_MATCH], crc[KO_CRC_MISMATCH], crc[KO_CRC_UNKNOWN],
	       crc[KO_CRC_UNVERSIONED], crcs_checked ? "" : " (no --symvers)");
	printf("  exports    %zu\n", m->exports.count);
	printf("  special   ");
	for (size_t i = 0; i < nspecial; i++)
		printf(" %s=%zu", special[i].name, special[i].count);
	printf("%s\n", m->mcount_patched ? " (__fentry__ calls patched to NOPs)" : "");
}

static void report_error(const struct ko_error *e, bool json)
{
	if (json) {
		printf("\"error\": {\"status\": \"%s\", \"message\": ", ko_status_name(e->status));
		json_string(e->message);
		printf(", \"problems\": [");
		for (size_t i = 0; i < e->n_problems; i++) {
			printf("%s{\"kind\": \"%s\", \"symbol\": ", i ? ", " : "",
			       e->problems[i].kind == KO_PROBLEM_MISSING ? "missing" : "crc");
			json_string(e->problems[i].symbol);
			printf(", \"detail\": ");
			json_string(e->problems[i].detail);
			printf("}");
		}
		printf("]}, ");
	}
	fprintf(stderr, "ko-load: %s\n", e->message);
	for (size_t i = 0; i < e->n_problems; i++)
		fprintf(stderr, "  %s %s: %s\n",
			e->problems[i].kind == KO_PROBLEM_MISSING ? "missing" : "crc mismatch",
			e->problems[i].symbol, e->problems[i].detail);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: ko-load [--symvers FILE] [--vermagic STR] [--resolve-all-dummy]\n"
		"               [--percpu NAME,...] [--checked] [--json] MODULE.ko [MORE.ko ...]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "symvers", required_argument, NULL, 's' },
		{ "vermagic", required_argument, NULL, 'v' },
		{ "resolve-all-dummy", no_argument, NULL, 'd' },
		{ "percpu", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "checked", no_argument, NULL, 'c' },
		{ NULL, 0, NULL, 0 },
	};
	struct dummy_resolver dummy = { 0 };
	struct ko_options opts = { 0 };
	struct ko_crc_table *crcs = NULL;
	struct ko_percpu_layout layout;
	const char *symvers = NULL;
	bool json = false, use_dummy = false, checked = false;
	struct ko_context *ctx;
	char err[512];
	int c, status = 0;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's': symvers = optarg; break;
		case 'v': opts.vermagic = optarg; break;
		case 'd': use_dummy = true; break;
		case 'j': json = true; break;
		case 'c': checked = true; break;
		case 'p':
			if (asprintf(&dummy.percpu_names, ",%s,", optarg) < 0)
				return 2;
			break;
		default: usage();
		}
	}
	if (optind == argc)
		usage();

	if (symvers) {
		crcs = ko_crc_table_load_symvers(symvers, err, sizeof(err));
		if (!crcs) {
			fprintf(stderr, "ko-load: %s\n", err);
			return 2;
		}
		opts.crcs = crcs;
	}
	if (use_dummy) {
		if (!hcreate(1 << 16))
			return 2;
		opts.resolve = dummy_resolve;
		opts.resolve_arg = &dummy;
	}
	ctx = ko_context_create(&opts, err, sizeof(err));
	if (!ctx) {
		fprintf(stderr, "ko-load: %s\n", err);
		return 2;
	}
	dummy.ctx = ctx;

	if (use_dummy && !json)
		printf("TEST MODE (--resolve-all-dummy): imports no module exports resolve to a PROT_NONE guard region%s; these modules cannot run\n",
		       dummy.percpu_names ? " or to dummy per-cpu offsets" : "");
	if (json)
		printf("{\"test_mode_dummy_resolution\": %s, \"vermagic_checked\": %s, \"symvers_entries\": %zu, ",
		       use_dummy ? "true" : "false", opts.vermagic ? "true" : "false",
		       crcs ? ko_crc_table_size(crcs) : 0);

	for (int i = optind; i < argc; i++) {
		if (!(checked ? ko_load_file_checked : ko_load_file)(ctx, argv[i])) {
			report_error(ko_last_error(ctx), json);
			status = 1;
			break;
		}
		if (!json)
			text_module(ko_module_at(ctx, ko_module_count(ctx) - 1),
				    use_dummy ? &dummy : NULL, opts.vermagic, crcs);
	}

	ko_percpu_layout(ctx, &layout);
	if (json) {
		printf("\"ok\": %s, \"percpu_layout\": {\"size\": %zu, \"align\": %zu}, \"modules\": [",
		       status ? "false" : "true", layout.size, layout.align);
		for (size_t i = 0; i < ko_module_count(ctx); i++) {
			printf("%s", i ? ", " : "");
			json_module(ko_module_at(ctx, i), use_dummy ? &dummy : NULL);
		}
		printf("]}\n");
	} else {
		printf("per-cpu block: %zu bytes, aligned to %zu\n", layout.size, layout.align);
		if (use_dummy)
			printf("TEST MODE: %zu distinct dummy symbols (%zu per-cpu)\n",
			       dummy.count, dummy.percpu_count);
	}
	ko_context_destroy(ctx);
	ko_crc_table_destroy(crcs);
	free(dummy.percpu_names);
	return status;
}
