// SPDX-License-Identifier: GPL-2.0
/*
 * The context and the order of a load. Start reading here.
 */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

const char *ko_status_name(enum ko_status status)
{
	static const char *const names[] = {
		[KO_OK]			= "ok",
		[KO_ERR_IO]		= "io",
		[KO_ERR_NOMEM]		= "nomem",
		[KO_ERR_ELF]		= "elf",
		[KO_ERR_MODINFO]	= "modinfo",
		[KO_ERR_VERMAGIC]	= "vermagic",
		[KO_ERR_CRC]		= "crc",
		[KO_ERR_UNRESOLVED]	= "unresolved",
		[KO_ERR_RELOC]		= "reloc",
		[KO_ERR_SECTION]	= "section",
		[KO_ERR_CONFLICT]	= "conflict",
		[KO_ERR_REWRITE]	= "rewrite",
	};

	return (unsigned int)status < ARRAY_SIZE(names) ? names[status] : "?";
}

/* Names in messages come from untrusted files: keep them printable ASCII. */
static void make_printable(char *s)
{
	for (; *s; s++)
		if (*s < 0x20 || *s > 0x7e)
			*s = '?';
}

int ko_fail(struct ko_context *ctx, enum ko_status status, const char *fmt, ...)
{
	struct ko_error *e = &ctx->error;
	int n = snprintf(e->message, sizeof(e->message), "%s: ", ctx->loading);
	va_list ap;

	if (n < 0 || (size_t)n >= sizeof(e->message))
		n = 0;
	va_start(ap, fmt);
	vsnprintf(e->message + n, sizeof(e->message) - n, fmt, ap);
	va_end(ap);
	make_printable(e->message);
	e->status = status;
	return -1;
}

int ko_add_problem(struct ko_context *ctx, enum ko_problem_kind kind,
		   const char *symbol, const char *fmt, ...)
{
	struct ko_problem *p;
	va_list ap;

	if (ctx->error.n_problems == ctx->problems_capacity) {
		size_t capacity = ctx->problems_capacity ? 2 * ctx->problems_capacity : 64;
		struct ko_problem *bigger = realloc(ctx->problems, capacity * sizeof(*bigger));

		if (!bigger)
			return -1;
		ctx->problems = bigger;
		ctx->problems_capacity = capacity;
	}
	p = &ctx->problems[ctx->error.n_problems];
	/* A copy: the failed module's strings are freed with it. */
	p->symbol = strdup(symbol);
	if (!p->symbol)
		return -1;
	p->kind = kind;
	ctx->error.problems = ctx->problems;
	ctx->error.n_problems++;
	va_start(ap, fmt);
	vsnprintf(p->detail, sizeof(p->detail), fmt, ap);
	va_end(ap);
	make_printable(p->symbol);
	make_printable(p->detail);
	return 0;
}

static void clear_error(struct ko_context *ctx)
{
	for (size_t i = 0; i < ctx->error.n_problems; i++)
		free(ctx->problems[i].symbol);
	memset(&ctx->error, 0, sizeof(ctx->error));
}

const struct ko_error *ko_last_error(const struct ko_context *ctx)
{
	return &ctx->error;
}

struct ko_context *ko_context_create(const struct ko_options *opts, char *err,
				     size_t errlen)
{
	struct ko_context *ctx = calloc(1, sizeof(*ctx));

	if (!ctx) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	ctx->opts = *opts;
	ctx->window_base = opts->window_base ? opts->window_base : KO_WINDOW_BASE_DEFAULT;
	ctx->window_size = opts->window_size ? opts->window_size : KO_WINDOW_SIZE_DEFAULT;
	ctx->percpu_reserved = opts->percpu_reserved ? opts->percpu_reserved :
			       KO_PERCPU_FIXED_SIZE;
	ctx->percpu_end = ctx->percpu_reserved;
	ctx->percpu_align = 64;		/* a cache line, as Linux aligns per-cpu areas */
	ctx->loading = "";
	if (window_reserve(ctx, err, errlen)) {
		free(ctx);
		return NULL;
	}
	return ctx;
}

static void module_free(struct loaded_module *m)
{
	struct ko_module *pub = &m->pub;

	free(pub->modinfo.entries);
	free(pub->sections.entries);
	free(pub->imports.entries);
	free(pub->exports.entries);
	free(pub->mcount_sites.entries);
	free(pub->retpoline_sites.entries);
	free(pub->return_sites.entries);
	free(pub->static_calls.entries);
	free(pub->jump_entries.entries);
	free(pub->alternatives.entries);
	free(pub->paravirt_sites.entries);
	free(pub->extable.entries);
	free(pub->bugs.entries);
	free(pub->params.entries);
	free(pub->check_sites.entries);
	free(m->versions);
	free(m->section_addr);
	free(m->symbol_value);
	free(m->import_of_symbol);
	free(m->file);
	free((char *)pub->path);
	free(m);
}

void ko_context_destroy(struct ko_context *ctx)
{
	if (!ctx)
		return;
	for (size_t i = 0; i < ctx->nmodules; i++)
		module_free(ctx->modules[i]);
	free(ctx->modules);
	strmap_free(&ctx->exports);
	clear_error(ctx);
	free(ctx->problems);
	window_release(ctx);
	free(ctx);
}

/* From the file to a list of resolved imports: nothing is mapped yet. */
static int read_and_resolve(struct ko_context *ctx, struct loaded_module *m,
			    bool checked)
{
	size_t size;

	if (elf_read_file(ctx, m->pub.path, &m->file, &size))
		return -1;
	m->pub.signature_appended = elf_strip_signature(m->file, &size);
	if (elf_parse(ctx, &m->elf, m->file, size) ||
	    (checked && rewrite_module(ctx, m)) ||
	    modinfo_parse(ctx, m))
		return -1;
	if (ko_find_module(ctx, m->pub.name))
		return ko_fail(ctx, KO_ERR_CONFLICT, "a module named '%s' is already loaded",
			       m->pub.name);
	return versions_parse(ctx, m) ||
	       entry_points_find(ctx, m) ||
	       imports_resolve(ctx, m) ? -1 : 0;
}

/*
 * From resolved imports to a relocated, protected image. On failure the low
 * window and the per-cpu block are rolled back to where they were before the
 * image; what the resolver allocated earlier stays, since the runtime may
 * have remembered it.
 */
static int place_and_relocate(struct ko_context *ctx, struct loaded_module *m)
{
	size_t window_used = ctx->window_used;
	size_t percpu_end = ctx->percpu_end, percpu_align = ctx->percpu_align;

	if (layout_map(ctx, m))
		goto fail;
	rewrite_place_sites(m);
	if (symbols_compute(ctx, m) ||
	    relocations_apply(ctx, m) ||
	    exports_parse(ctx, m) ||
	    special_sections_parse(ctx, m) ||
	    code_sites_patch(ctx, m) ||
	    layout_protect(ctx, m) ||
	    exports_prepare_commit(ctx, m))
		goto fail;
	return 0;
fail:
	window_rollback(ctx, window_used);
	ctx->percpu_end = percpu_end;
	ctx->percpu_align = percpu_align;
	return -1;
}

static const struct ko_module *load(struct ko_context *ctx, const char *path, bool checked)
{
	struct loaded_module *m = calloc(1, sizeof(*m));
	struct loaded_module **modules;

	clear_error(ctx);
	ctx->loading = path;
	if (!m || !(m->pub.path = strdup(path))) {
		free(m);
		ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
		return NULL;
	}
	modules = realloc(ctx->modules, (ctx->nmodules + 1) * sizeof(*modules));
	if (!modules) {
		module_free(m);
		ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
		return NULL;
	}
	ctx->modules = modules;
	if (read_and_resolve(ctx, m, checked) || place_and_relocate(ctx, m)) {
		module_free(m);
		return NULL;
	}

	/* Nothing below can fail: the load happens completely or not at all. */
	exports_commit(ctx, m);
	if (m->has_init)
		ctx->module_init_offset = m->init_offset;
	if (m->has_exit)
		ctx->module_exit_offset = m->exit_offset;
	ctx->modules[ctx->nmodules++] = m;
	return &m->pub;
}

const struct ko_module *ko_load_file(struct ko_context *ctx, const char *path)
{
	return load(ctx, path, false);
}

const struct ko_module *ko_load_file_checked(struct ko_context *ctx, const char *path)
{
	return load(ctx, path, true);
}

size_t ko_module_count(const struct ko_context *ctx)
{
	return ctx->nmodules;
}

const struct ko_module *ko_module_at(const struct ko_context *ctx, size_t i)
{
	return i < ctx->nmodules ? &ctx->modules[i]->pub : NULL;
}

const struct ko_module *ko_find_module(const struct ko_context *ctx,
				       const char *name)
{
	for (size_t i = 0; i < ctx->nmodules; i++)
		if (!strcmp(ctx->modules[i]->pub.name, name))
			return &ctx->modules[i]->pub;
	return NULL;
}

const struct ko_module *ko_module_containing(const struct ko_context *ctx,
					     uint64_t addr)
{
	for (size_t i = 0; i < ctx->nmodules; i++) {
		const struct ko_module *m = &ctx->modules[i]->pub;

		if (addr >= m->image.addr && addr - m->image.addr < m->image.size)
			return m;
	}
	return NULL;
}

const struct ko_export *ko_find_export(const struct ko_context *ctx,
				       const char *name)
{
	return strmap_get(&ctx->exports, name);
}
