/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared between the loader's source files; not part of the API.
 *
 * A load goes through these steps, one file each:
 *   elf.c       read the file, strip the signature, validate every header,
 *               symbol and relocation entry the later steps will touch
 *   modinfo.c   .modinfo, vermagic, __versions, struct module entry points
 *   symbols.c   resolve imports (module exports first, then the runtime),
 *               check CRCs, parse the module's own exports; Module.symvers
 *   layout.c    the low window, section placement, the per-cpu block
 *   relocate.c  symbol values and RELA relocations
 *   sections.c  special sections, fault lookups, __fentry__ patching
 *   rewrite.c   for checked modules, before resolving: the code rewritten
 *               with probes (rewrite-x86.c decodes a code section,
 *               rewrite-emit.c emits it again)
 *   module.c    the context and the order of the steps above
 */
#ifndef UNDERSTUDY_LOADER_INTERNAL_H
#define UNDERSTUDY_LOADER_INTERNAL_H

#include <elf.h>
#include <stdarg.h>
#include <string.h>

#include "loader.h"

#define PAGE_SIZE	4096UL
#define ALIGN_UP(x, a)	(((x) + (a) - 1) & ~((uint64_t)(a) - 1))
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))

/* Module data may be unaligned in a hostile file: always read through memcpy. */
static inline int32_t read_s32(const void *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline uint64_t read_u64(const void *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline uint16_t read_u16(const void *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Open-addressing map from a C string (not copied) to a pointer. */
struct strmap {
	struct strmap_slot {
		const char *key;
		void *value;
	} *slots;
	size_t capacity;
	size_t count;
};

int strmap_reserve(struct strmap *map, size_t extra);
int strmap_put(struct strmap *map, const char *key, void *value);
void *strmap_get(const struct strmap *map, const char *key);
void strmap_free(struct strmap *map);

/* A validated view of the .ko file; all pointers point into the file buffer. */
struct ko_elf {
	const uint8_t *data;
	size_t size;
	const Elf64_Shdr *shdrs;
	unsigned int shnum;
	const char *shstrtab;
	size_t shstrtab_size;
	const Elf64_Sym *syms;
	size_t nsyms;
	unsigned int symtab_index;
	const char *strtab;
	size_t strtab_size;
};

/* One __versions entry: struct modversion_info { unsigned long crc; char name[56]; } */
#define MODVERSION_SIZE	64

struct module_version {
	uint32_t crc;
	const char *name;
	bool used;		/* matched an import */
};

/* A module being loaded or loaded: the public part and what building it needs. */
struct loaded_module {
	struct ko_module pub;
	uint8_t *file;			/* the .ko, owned; strings point into it */
	struct ko_elf elf;
	struct module_version *versions;
	size_t nversions;
	uint64_t *section_addr;		/* by section index; 0: not placed */
	uint64_t *symbol_value;		/* by symbol index, after resolution */
	int32_t *import_of_symbol;	/* by symbol index; -1: not an import */
	unsigned int percpu_shndx;	/* 0: no .data..percpu */
	unsigned int this_module_shndx;
	/* offsetof(struct module, init/exit), from entry_points_find() */
	uint64_t init_offset, exit_offset;
	bool has_init, has_exit;
};

struct ko_context {
	struct ko_options opts;
	const char *loading;		/* path of the module being loaded */

	struct ko_error error;
	struct ko_problem *problems;
	size_t problems_capacity;

	uintptr_t window_base;
	size_t window_size;
	size_t window_used;

	size_t percpu_reserved;
	size_t percpu_end;
	size_t percpu_align;

	struct loaded_module **modules;
	size_t nmodules;
	struct strmap exports;		/* name -> struct ko_export *, committed modules */

	/* offsetof(struct module, init/exit), learnt from the first module */
	uint64_t module_init_offset;
	uint64_t module_exit_offset;
};

static inline struct loaded_module *to_loaded(const struct ko_module *m)
{
	return (struct loaded_module *)((char *)m - offsetof(struct loaded_module, pub));
}

/* module.c: record the failure reason ("<path>: <what>"); always returns -1. */
int ko_fail(struct ko_context *ctx, enum ko_status status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int ko_add_problem(struct ko_context *ctx, enum ko_problem_kind kind,
		   const char *symbol, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* elf.c */
int elf_read_file(struct ko_context *ctx, const char *path, uint8_t **data,
		  size_t *size);
bool elf_strip_signature(const uint8_t *data, size_t *size);
int elf_parse(struct ko_context *ctx, struct ko_elf *elf, const uint8_t *data,
	      size_t size);
const char *elf_section_name(const struct ko_elf *elf, unsigned int index);
const char *elf_symbol_name(const struct ko_elf *elf, size_t index);
/* The index of the section called name, 0 if none. */
unsigned int elf_find_section(const struct ko_elf *elf, const char *name);
const void *elf_section_data(const struct ko_elf *elf, unsigned int index);

/* modinfo.c */
int modinfo_parse(struct ko_context *ctx, struct loaded_module *m);
int versions_parse(struct ko_context *ctx, struct loaded_module *m);
int entry_points_find(struct ko_context *ctx, struct loaded_module *m);

/* symbols.c */
int imports_resolve(struct ko_context *ctx, struct loaded_module *m);
int exports_parse(struct ko_context *ctx, struct loaded_module *m);
int exports_prepare_commit(struct ko_context *ctx, struct loaded_module *m);
void exports_commit(struct ko_context *ctx, struct loaded_module *m);
bool image_contains(const struct ko_module *m, uint64_t addr, uint64_t size);
const char *image_string(const struct ko_module *m, uint64_t addr);

/* layout.c */
int window_reserve(struct ko_context *ctx, char *err, size_t errlen);
void window_release(struct ko_context *ctx);
void window_rollback(struct ko_context *ctx, size_t mark);
int layout_map(struct ko_context *ctx, struct loaded_module *m);
int layout_protect(struct ko_context *ctx, struct loaded_module *m);

/* relocate.c */
unsigned int reloc_width(unsigned int type);
int symbols_compute(struct ko_context *ctx, struct loaded_module *m);
int relocations_apply(struct ko_context *ctx, struct loaded_module *m);

/* rewrite.c */
int rewrite_module(struct ko_context *ctx, struct loaded_module *m);
/* check_sites' ret from section offsets to addresses, sorted */
void rewrite_place_sites(struct loaded_module *m);

/* sections.c */
int special_sections_parse(struct ko_context *ctx, struct loaded_module *m);
int code_sites_patch(struct ko_context *ctx, struct loaded_module *m);

#endif /* UNDERSTUDY_LOADER_INTERNAL_H */
