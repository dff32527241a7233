// SPDX-License-Identifier: GPL-2.0
/*
 * Linking: imports, exports and their CRCs.
 *
 * An import resolves, in this order, to an export of a module loaded earlier
 * in the same context (as in Linux, where mii.ko's exports serve 8139too.ko),
 * then to whatever the runtime's resolver provides. When some imports resolve
 * nowhere the load fails and reports every one of them, so the runtime's
 * authors see the whole list at once.
 *
 * CRCs (CONFIG_MODVERSIONS): __versions holds the CRC the module was built
 * against for each import. The reference is the exporting module's __kcrctab
 * entry if a module provides the symbol, otherwise the caller's table
 * (Module.symvers of the pinned ABI). Every mismatch is reported.
 *
 * Exports (6.1, CONFIG_HAVE_ARCH_PREL32_RELOCATIONS): __ksymtab and
 * __ksymtab_gpl are arrays of
 *	struct kernel_symbol { int value_offset, name_offset, namespace_offset; };
 * each field relative to its own address, sorted by name; __kcrctab and
 * __kcrctab_gpl hold one u32 CRC per entry, in the same order.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

#define KERNEL_SYMBOL_SIZE	12

/* ---------------------------------------------------------------------- */
/* strmap */

static uint64_t hash_string(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;	/* FNV-1a */

	while (*s)
		h = (h ^ (uint8_t)*s++) * 0x100000001b3ULL;
	return h;
}

static struct strmap_slot *strmap_slot(const struct strmap *map, const char *key)
{
	size_t mask = map->capacity - 1;
	size_t i = hash_string(key) & mask;

	while (map->slots[i].key && strcmp(map->slots[i].key, key))
		i = (i + 1) & mask;
	return &map->slots[i];
}

static int strmap_grow(struct strmap *map)
{
	struct strmap bigger = { .capacity = map->capacity ? map->capacity * 2 : 64 };

	bigger.slots = calloc(bigger.capacity, sizeof(*bigger.slots));
	if (!bigger.slots)
		return -1;
	for (size_t i = 0; i < map->capacity; i++)
		if (map->slots[i].key)
			*strmap_slot(&bigger, map->slots[i].key) = map->slots[i];
	bigger.count = map->count;
	free(map->slots);
	*map = bigger;
	return 0;
}

/* Makes room for extra more keys, so that the next extra puts cannot fail. */
int strmap_reserve(struct strmap *map, size_t extra)
{
	while (2 * (map->count + extra) > map->capacity)
		if (strmap_grow(map))
			return -1;
	return 0;
}

/* Adds or replaces; returns -1 only when out of memory. */
int strmap_put(struct strmap *map, const char *key, void *value)
{
	struct strmap_slot *slot;

	if (strmap_reserve(map, 1))
		return -1;
	slot = strmap_slot(map, key);
	if (!slot->key)
		map->count++;
	slot->key = key;
	slot->value = value;
	return 0;
}

void *strmap_get(const struct strmap *map, const char *key)
{
	return map->capacity ? strmap_slot(map, key)->value : NULL;
}

void strmap_free(struct strmap *map)
{
	free(map->slots);
	memset(map, 0, sizeof(*map));
}

/* ---------------------------------------------------------------------- */
/* Module.symvers */

struct ko_crc_table {
	char *text;			/* the file; keys and owners point into it */
	struct strmap by_name;		/* -> struct crc_entry */
	struct crc_entry {
		uint32_t crc;
		const char *owner;
	} *entries;
};

struct ko_crc_table *ko_crc_table_load_symvers(const char *path, char *err,
					       size_t errlen)
{
	struct ko_crc_table *t = calloc(1, sizeof(*t));
	size_t lines = 0, n = 0, lineno = 0;
	char *line, *next;
	long size;
	FILE *f;

	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		free(t);
		return NULL;
	}
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	rewind(f);
	t->text = size >= 0 ? malloc((size_t)size + 1) : NULL;
	if (!t->text || fread(t->text, 1, (size_t)size, f) != (size_t)size) {
		snprintf(err, errlen, "%s: cannot read", path);
		goto fail;
	}
	fclose(f);
	f = NULL;
	t->text[size] = '\0';

	for (char *p = t->text; *p; p++)
		lines += *p == '\n';
	t->entries = calloc(lines + 1, sizeof(*t->entries));
	if (!t->entries) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (line = t->text; line && *line; line = next) {
		char *crc, *name, *owner, *end;
		unsigned long value;

		lineno++;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		crc = strtok(line, "\t");
		name = strtok(NULL, "\t");
		owner = strtok(NULL, "\t");
		if (!crc || !name || !owner || strtok(NULL, "\t") == NULL) {
			snprintf(err, errlen,
				 "%s:%zu: expected crc, symbol, module, export type", path,
				 lineno);
			goto fail;
		}
		errno = 0;
		value = strtoul(crc, &end, 16);
		if (strncmp(crc, "0x", 2) || *end || errno || value > UINT32_MAX) {
			snprintf(err, errlen, "%s:%zu: bad CRC '%s'", path, lineno, crc);
			goto fail;
		}
		t->entries[n].crc = (uint32_t)value;
		t->entries[n].owner = owner;
		if (strmap_put(&t->by_name, name, &t->entries[n++])) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
	}
	return t;
fail:
	if (f)
		fclose(f);
	ko_crc_table_destroy(t);
	return NULL;
}

int ko_crc_table_lookup(const struct ko_crc_table *table, const char *name,
			uint32_t *crc, const char **owner)
{
	const struct crc_entry *e = strmap_get(&table->by_name, name);

	if (!e)
		return -1;
	*crc = e->crc;
	if (owner)
		*owner = e->owner;
	return 0;
}

size_t ko_crc_table_size(const struct ko_crc_table *table)
{
	return table->by_name.count;
}

void ko_crc_table_destroy(struct ko_crc_table *table)
{
	if (!table)
		return;
	strmap_free(&table->by_name);
	free(table->entries);
	free(table->text);
	free(table);
}

/* ---------------------------------------------------------------------- */
/* Imports */

static struct module_version *find_version(struct loaded_module *m, const char *name)
{
	for (size_t i = 0; i < m->nversions; i++)
		if (!strcmp(m->versions[i].name, name))
			return &m->versions[i];
	return NULL;
}

/*
 * The reference CRC for name: the providing module's, else the table's.
 * Returns false if there is none; *source names where it came from.
 */
static bool reference_crc(struct ko_context *ctx, const struct ko_export *export,
			  const char *name, uint32_t *crc, const char **source)
{
	const char *owner;

	if (export && export->has_crc) {
		*crc = export->crc;
		*source = export->owner->name;
		return true;
	}
	if (ctx->opts.crcs && !ko_crc_table_lookup(ctx->opts.crcs, name, crc, &owner)) {
		*source = owner;
		return true;
	}
	return false;
}

static void check_crc(struct ko_context *ctx, struct loaded_module *m,
		      struct ko_import *imp, const struct ko_export *export)
{
	struct module_version *v = find_version(m, imp->name);
	const char *source;

	if (!v) {
		imp->crc_status = KO_CRC_UNVERSIONED;
		return;
	}
	v->used = true;
	imp->crc = v->crc;
	if (!reference_crc(ctx, export, imp->name, &imp->reference_crc, &source)) {
		imp->crc_status = KO_CRC_UNKNOWN;
		return;
	}
	imp->crc_status = imp->crc == imp->reference_crc ? KO_CRC_MATCH : KO_CRC_MISMATCH;
	if (imp->crc_status == KO_CRC_MISMATCH)
		ko_add_problem(ctx, KO_PROBLEM_CRC_MISMATCH, imp->name,
			       "module expects CRC 0x%08x, %s has 0x%08x",
			       imp->crc, source, imp->reference_crc);
}

int imports_resolve(struct ko_context *ctx, struct loaded_module *m)
{
	const struct ko_elf *elf = &m->elf;
	size_t nmissing = 0, nmismatch = 0;
	struct ko_import *imports;

	m->import_of_symbol = malloc(elf->nsyms * sizeof(*m->import_of_symbol));
	imports = calloc(elf->nsyms, sizeof(*imports));
	m->pub.imports.entries = imports;
	if (!m->import_of_symbol || !imports)
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");

	for (size_t i = 0; i < elf->nsyms; i++) {
		const Elf64_Sym *sym = &elf->syms[i];
		const char *name = elf_symbol_name(elf, i);
		const struct ko_export *export;
		struct ko_import *imp;

		m->import_of_symbol[i] = -1;
		if (i == 0 || sym->st_shndx != SHN_UNDEF || !*name)
			continue;
		m->import_of_symbol[i] = (int32_t)m->pub.imports.count;
		imp = &imports[m->pub.imports.count++];
		imp->name = name;
		imp->weak = ELF64_ST_BIND(sym->st_info) == STB_WEAK;

		export = strmap_get(&ctx->exports, name);
		if (export) {
			imp->value = export->value;
			imp->provider = export->owner;
			imp->resolved = true;
		} else if (ctx->opts.resolve &&
			   !ctx->opts.resolve(ctx->opts.resolve_arg, name, &imp->value)) {
			imp->resolved = true;
		} else if (!imp->weak) {
			nmissing++;
			ko_add_problem(ctx, KO_PROBLEM_MISSING, name,
				       "no loaded module exports it and the runtime does not provide it");
		}
		check_crc(ctx, m, imp, export);
		nmismatch += imp->crc_status == KO_CRC_MISMATCH;
	}

	/* Entries that are no import, e.g. module_layout: check them too. */
	for (size_t i = 0; i < m->nversions; i++) {
		struct module_version *v = &m->versions[i];
		const char *owner;
		uint32_t crc;

		if (v->used || !ctx->opts.crcs ||
		    ko_crc_table_lookup(ctx->opts.crcs, v->name, &crc, &owner) ||
		    crc == v->crc)
			continue;
		nmismatch++;
		ko_add_problem(ctx, KO_PROBLEM_CRC_MISMATCH, v->name,
			       "module expects CRC 0x%08x, %s has 0x%08x", v->crc,
			       owner, crc);
	}

	if (nmismatch)
		return ko_fail(ctx, KO_ERR_CRC,
			       "%zu CRC mismatches and %zu unresolved imports: built for another kernel ABI?",
			       nmismatch, nmissing);
	if (nmissing)
		return ko_fail(ctx, KO_ERR_UNRESOLVED, "%zu unresolved imports", nmissing);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Exports */

bool image_contains(const struct ko_module *m, uint64_t addr, uint64_t size)
{
	return addr >= m->image.addr && addr <= m->image.addr + m->image.size &&
	       size <= m->image.addr + m->image.size - addr;
}

/* A C string inside the module image, or NULL if it runs off the end. */
const char *image_string(const struct ko_module *m, uint64_t addr)
{
	if (!image_contains(m, addr, 1) ||
	    !memchr((void *)addr, '\0', m->image.addr + m->image.size - addr))
		return NULL;
	return (const char *)addr;
}

/* Whether the module's own definition of name lives in .data..percpu. */
static bool defined_percpu(const struct loaded_module *m, const char *name)
{
	const struct ko_elf *elf = &m->elf;

	if (!m->percpu_shndx)
		return false;
	for (size_t i = 1; i < elf->nsyms; i++)
		if (elf->syms[i].st_shndx == m->percpu_shndx &&
		    !strcmp(elf_symbol_name(elf, i), name))
			return true;
	return false;
}

static int parse_ksymtab(struct ko_context *ctx, struct loaded_module *m,
			 const char *table, const char *crctable, bool gpl_only)
{
	const struct ko_elf *elf = &m->elf;
	unsigned int index = elf_find_section(elf, table);
	unsigned int crcs = elf_find_section(elf, crctable);
	uint64_t base, crcbase = 0;
	size_t n;

	if (!index)
		return 0;
	base = m->section_addr[index];
	n = elf->shdrs[index].sh_size / KERNEL_SYMBOL_SIZE;
	if (!base || elf->shdrs[index].sh_size % KERNEL_SYMBOL_SIZE)
		return ko_fail(ctx, KO_ERR_SECTION, "%s: size %llu is not a multiple of %d",
			       table, (unsigned long long)elf->shdrs[index].sh_size,
			       KERNEL_SYMBOL_SIZE);
	if (crcs) {
		crcbase = m->section_addr[crcs];
		if (!crcbase || elf->shdrs[crcs].sh_size != n * 4)
			return ko_fail(ctx, KO_ERR_SECTION,
				       "%s has %llu bytes for %zu exports", crctable,
				       (unsigned long long)elf->shdrs[crcs].sh_size, n);
	}

	for (size_t i = 0; i < n; i++) {
		uint64_t entry = base + i * KERNEL_SYMBOL_SIZE;
		struct ko_export *e = &m->pub.exports.entries[m->pub.exports.count];

		e->value.value = entry + read_s32((void *)entry);
		e->name = image_string(&m->pub, entry + 4 + read_s32((void *)(entry + 4)));
		e->namespace = image_string(&m->pub, entry + 8 + read_s32((void *)(entry + 8)));
		if (!e->name || !e->namespace)
			return ko_fail(ctx, KO_ERR_SECTION,
				       "%s entry %zu: name or namespace outside the module",
				       table, i);
		e->value.percpu = defined_percpu(m, e->name);
		e->gpl_only = gpl_only;
		e->owner = &m->pub;
		if (crcs) {
			e->has_crc = true;
			e->crc = (uint32_t)read_s32((void *)(crcbase + 4 * i));
		}
		m->pub.exports.count++;
	}
	return 0;
}

int exports_parse(struct ko_context *ctx, struct loaded_module *m)
{
	const struct ko_elf *elf = &m->elf;
	unsigned int plain = elf_find_section(elf, "__ksymtab");
	unsigned int gpl = elf_find_section(elf, "__ksymtab_gpl");
	size_t n = (plain ? elf->shdrs[plain].sh_size : 0) +
		   (gpl ? elf->shdrs[gpl].sh_size : 0);

	m->pub.exports.entries = calloc(n / KERNEL_SYMBOL_SIZE + 1, sizeof(struct ko_export));
	if (!m->pub.exports.entries)
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	if (parse_ksymtab(ctx, m, "__ksymtab", "__kcrctab", false) ||
	    parse_ksymtab(ctx, m, "__ksymtab_gpl", "__kcrctab_gpl", true))
		return -1;

	/* Linux refuses a module that exports a name already exported. */
	for (size_t i = 0; i < m->pub.exports.count; i++) {
		const char *name = m->pub.exports.entries[i].name;
		const struct ko_export *other = strmap_get(&ctx->exports, name);

		if (other)
			return ko_fail(ctx, KO_ERR_CONFLICT,
				       "exports '%s', already exported by %s", name,
				       other->owner->name);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(m->pub.exports.entries[j].name, name))
				return ko_fail(ctx, KO_ERR_CONFLICT,
					       "exports '%s' twice", name);
	}
	return 0;
}

/*
 * Makes room for the module's exports in the context; after this,
 * exports_commit() cannot fail, so a load either fully happens or not at all.
 */
int exports_prepare_commit(struct ko_context *ctx, struct loaded_module *m)
{
	if (strmap_reserve(&ctx->exports, m->pub.exports.count))
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	return 0;
}

/* Makes the exports visible to later loads. */
void exports_commit(struct ko_context *ctx, struct loaded_module *m)
{
	for (size_t i = 0; i < m->pub.exports.count; i++) {
		struct ko_export *e = &m->pub.exports.entries[i];

		strmap_put(&ctx->exports, e->name, e);
	}
}
