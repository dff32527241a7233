/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The understudy module loader.
 *
 * Loads an unmodified Linux kernel module (a .ko: ELF64, x86_64, ET_REL) into
 * this process the way the kernel's own loader would: it validates the file
 * (which is untrusted input), checks vermagic and the CRC of every import,
 * maps the allocated sections below 2 GiB, resolves imports against modules
 * loaded earlier and then against the runtime, applies the relocations,
 * write-protects text and rodata, and records the special sections that the
 * runtime has to act on (exception table, BUG/WARN table, alternatives, ...).
 *
 * Why below 2 GiB: kernel code is compiled for the kernel code model, so it
 * reaches other code and data with 32-bit displacements (R_X86_64_PC32/PLT32)
 * and sign-extended 32-bit absolutes (R_X86_64_32S). All modules, and the
 * non-PIE executable (linked at 0x400000) they call into, must therefore sit in
 * [0, 2 GiB). The loader reserves one window there when the context is created
 * and places every module inside it.
 *
 * Per-cpu data: kernel code reaches per-cpu variables as %gs:symbol, so a
 * per-cpu symbol's value is an *offset* into a per-cpu block whose address is
 * the GS base, never an address. The loader owns the layout of that block
 * (see ko_percpu_layout()); the runtime allocates one block per kernel "CPU".
 *
 * Memory ownership: everything a load returns (struct ko_module and all it
 * points to: names, arrays, the mapped image) is owned by the context and
 * stays valid and unchanged until ko_context_destroy(). Strings point either
 * into the loader's copy of the .ko file or into the module's mapped image.
 * Modules are never unloaded individually: a driver process that wants a
 * different module starts over (that is how understudy restarts drivers).
 *
 * Not thread-safe: one thread loads; lookups may run concurrently with each
 * other (e.g. from signal handlers) only when no load is in progress.
 */
#ifndef UNDERSTUDY_LOADER_H
#define UNDERSTUDY_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Default low window: [1.5 GiB, 2 GiB). It must stay clear of
 * - the brk heap, which Linux starts at a random page up to 1 GiB above the
 *   end of a non-PIE executable (measured: 0x431000 .. 0x40328000 for a small
 *   one); a heap that grows into the window makes malloc fall back to mmap,
 *   which is harmless;
 * - Valgrind's tool, which is linked at 0x58000000 and with its static data
 *   ends below 0x5b000000 (helgrind, the largest in 3.19; memcheck ends near
 *   0x59c8b000), so that the driver process runs under Valgrind
 *   (docs/debugging.md, "Run a driver under Valgrind").
 * 512 MiB holds every Debian module at once (about 180 MiB, the loader
 * tests) and a driver's few with room to spare.
 */
#define KO_WINDOW_BASE_DEFAULT	0x60000000UL
#define KO_WINDOW_SIZE_DEFAULT	0x20000000UL

/*
 * The first bytes of every per-cpu block are struct fixed_percpu_data (the
 * stack canary is hard-wired at %gs:40 by GCC), so the loader never places
 * module per-cpu data there.
 */
#define KO_PERCPU_FIXED_SIZE	48

/* R_X86_64_* types are indices into ko_module.relocs; PC64 (24) is the largest used. */
#define KO_NR_RELOC_TYPES	25

struct ko_context;
struct ko_module;

/* What a symbol resolves to: an address, or an offset in the per-cpu block. */
struct ko_symbol {
	uint64_t value;
	bool percpu;
};

/*
 * Supplied by the runtime: look up an import the loaded modules do not
 * export. Return 0 and fill *out if the runtime provides @name, -1 if not.
 * Addresses must be below 2 GiB (see above). Called once per import per load.
 */
typedef int (*ko_resolve_fn)(void *arg, const char *name, struct ko_symbol *out);

/* Reference CRCs of the kernel's exports, e.g. from Module.symvers. */
struct ko_crc_table;

struct ko_options {
	/*
	 * Expected vermagic, compared as Linux does: after the release (the
	 * first word) for a module with CRCs, whole otherwise; NULL skips it.
	 */
	const char *vermagic;
	/* Reference CRCs; NULL checks imports only against module exports. */
	const struct ko_crc_table *crcs;
	ko_resolve_fn resolve;		/* NULL: only module exports resolve */
	void *resolve_arg;
	uintptr_t window_base;		/* 0: KO_WINDOW_BASE_DEFAULT */
	size_t window_size;		/* 0: KO_WINDOW_SIZE_DEFAULT */
	/* Bytes at the start of the per-cpu block the loader leaves alone. */
	size_t percpu_reserved;		/* 0: KO_PERCPU_FIXED_SIZE */
};

/* ---------------------------------------------------------------------- */
/* Errors */

enum ko_status {
	KO_OK = 0,
	KO_ERR_IO,		/* the file could not be read */
	KO_ERR_NOMEM,		/* out of memory or out of low window */
	KO_ERR_ELF,		/* not a well-formed x86_64 relocatable ELF */
	KO_ERR_MODINFO,		/* .modinfo / __versions / this_module malformed */
	KO_ERR_VERMAGIC,	/* built for another kernel */
	KO_ERR_CRC,		/* some import's CRC differs (see problems) */
	KO_ERR_UNRESOLVED,	/* some imports are missing (see problems) */
	KO_ERR_RELOC,		/* a relocation cannot be applied */
	KO_ERR_SECTION,		/* a special section is malformed */
	KO_ERR_CONFLICT,	/* module name or an export already loaded */
	KO_ERR_REWRITE,		/* cannot be rewritten for checking (see message) */
};

enum ko_problem_kind {
	KO_PROBLEM_MISSING,		/* nobody provides this import */
	KO_PROBLEM_CRC_MISMATCH,	/* the import's CRC differs */
};

struct ko_problem {
	enum ko_problem_kind kind;
	char *symbol;
	char detail[160];
};

/*
 * The reason of the last failed load. message is one line naming the file
 * and the precise cause. For KO_ERR_CRC and KO_ERR_UNRESOLVED, problems lists
 * *every* CRC mismatch and every missing import, not just the first.
 * Valid until the next load or ko_context_destroy().
 */
struct ko_error {
	enum ko_status status;
	char message[512];
	size_t n_problems;
	const struct ko_problem *problems;
};

const char *ko_status_name(enum ko_status status);

/* ---------------------------------------------------------------------- */
/* What a loaded module looks like */

enum {
	KO_SEC_EXEC	= 1 << 0,	/* in the R-X text region */
	KO_SEC_WRITE	= 1 << 1,	/* in the RW- data region */
	KO_SEC_NOBITS	= 1 << 2,	/* zero-filled (.bss) */
	KO_SEC_PERCPU	= 1 << 3,	/* .data..percpu: the per-cpu template */
};

struct ko_section {
	const char *name;
	uint64_t addr;
	uint64_t size;
	uint64_t align;
	unsigned int flags;		/* KO_SEC_* */
};

struct ko_region {
	uint64_t addr;
	uint64_t size;
};

enum ko_crc_status {
	KO_CRC_MATCH,
	KO_CRC_MISMATCH,
	KO_CRC_UNKNOWN,		/* no reference CRC for this symbol */
	KO_CRC_UNVERSIONED,	/* the module has no __versions entry for it */
};

/* One undefined symbol of the module. */
struct ko_import {
	const char *name;
	struct ko_symbol value;		/* valid if resolved */
	bool resolved;
	bool weak;			/* unresolved weak imports are 0, as in Linux */
	const struct ko_module *provider;	/* exporting module, NULL: runtime */
	enum ko_crc_status crc_status;
	uint32_t crc;			/* from __versions */
	uint32_t reference_crc;		/* what the provider/table says */
};

/* One entry of __ksymtab or __ksymtab_gpl. */
struct ko_export {
	const char *name;
	struct ko_symbol value;		/* percpu: offset in the per-cpu block */
	const char *namespace;		/* "" if none */
	bool gpl_only;
	bool has_crc;
	uint32_t crc;			/* from __kcrctab[_gpl] */
	const struct ko_module *owner;
};

/* __ex_table: struct exception_table_entry { int insn, fixup, data; } */
struct ko_extable_entry {
	uint64_t insn;			/* address that may fault */
	uint64_t fixup;			/* where to continue */
	int32_t data;			/* EX_TYPE_* in the low byte, imm, reg */
};

#define KO_BUG_WARNING	(1 << 0)	/* BUGFLAG_WARNING: WARN, continue */
#define KO_BUG_ONCE	(1 << 1)	/* BUGFLAG_ONCE */
#define KO_BUG_DONE	(1 << 2)	/* BUGFLAG_DONE */

/* __bug_table, 6.1 with relative pointers and CONFIG_DEBUG_BUGVERBOSE. */
struct ko_bug_entry {
	uint64_t addr;			/* the ud2 */
	const char *file;		/* in the module's rodata */
	unsigned int line;
	unsigned int flags;		/* KO_BUG_*, taint in bits 8.. */
	uint64_t flags_addr;		/* where the kernel would set BUGFLAG_DONE */
};

/* .altinstructions (struct alt_instr); the loader applies none of them. */
struct ko_alt_instr {
	uint64_t instr;
	uint64_t replacement;
	unsigned int feature;		/* X86_FEATURE_* number */
	bool inverted;			/* ALT_NOT(feature) */
	uint8_t instr_len;
	uint8_t replacement_len;
};

/* .parainstructions (struct paravirt_patch_site) */
struct ko_para_site {
	uint64_t instr;
	uint8_t type;			/* index of the pv_ops slot */
	uint8_t len;
};

/* __jump_table (struct jump_entry): a static-key branch site */
struct ko_jump_entry {
	uint64_t code;
	uint64_t target;
	uint64_t key;			/* struct static_key */
	bool branch;			/* jump when the key is true */
	bool init;			/* site lies in init text */
};

/* .static_call_sites (struct static_call_site) */
struct ko_static_call_site {
	uint64_t addr;			/* the call/jmp to __SCT__name */
	uint64_t key;			/* struct static_call_key __SCK__name */
	bool tail;
	bool init;
};

/* __param (struct kernel_param); arg points to the variable or array. */
struct ko_param {
	uint64_t kernel_param;		/* address of the struct itself */
	const char *name;
	uint64_t ops;			/* const struct kernel_param_ops * */
	uint16_t perm;
	int8_t level;
	uint8_t flags;
	uint64_t arg;
};

/*
 * A probe of a module rewritten for checking (docs/checking.md): the stub
 * call that returns to `ret` stands for an access by the instruction at
 * `offset` of section `section` of the original file.
 */
struct ko_check_site {
	uint64_t ret;
	uint32_t offset;
	uint16_t section;
	uint16_t size;			/* bytes accessed; element size for strings; a frame's bytes */
	uint8_t flags;			/* US_SITE_* of include/understudy/trace.h */
};

/* An array of records parsed from one special section. */
#define KO_ARRAY(type) struct { type *entries; size_t count; }

struct ko_module {
	const char *name;		/* modinfo "name" */
	const char *path;
	const char *vermagic;
	const char *license;		/* NULL if none */
	const char *depends;		/* comma-separated, may be "" */
	bool signature_appended;	/* present, not verified */
	/* Every "key=value" string of .modinfo, in file order. */
	KO_ARRAY(const char *) modinfo;

	/* The image: [text | rodata | data], each page-aligned. */
	struct ko_region image, text, rodata, data;
	KO_ARRAY(struct ko_section) sections;	/* placed SHF_ALLOC sections */

	/* Per-cpu: .data..percpu sits at percpu.addr in every per-cpu block. */
	struct ko_region percpu;		/* addr is an offset; size 0: none */
	const void *percpu_template;		/* initial contents, percpu.size bytes */

	/* struct module (.gnu.linkonce.this_module) and its entry points. */
	uint64_t this_module;
	uint64_t this_module_size;
	uint64_t init;				/* init_module(), 0 if none */
	uint64_t exit;				/* cleanup_module(), 0 if none */
	struct ko_region init_text;		/* .init.text, size 0 if none */

	KO_ARRAY(struct ko_import) imports;
	KO_ARRAY(struct ko_export) exports;
	unsigned long relocs[KO_NR_RELOC_TYPES];	/* applied, by R_X86_64_* */

	KO_ARRAY(uint64_t) mcount_sites;	/* call __fentry__ sites */
	bool mcount_patched;			/* they are 5-byte NOPs now */
	KO_ARRAY(uint64_t) retpoline_sites;	/* call/jmp __x86_indirect_thunk_* */
	KO_ARRAY(uint64_t) return_sites;	/* jmp __x86_return_thunk */
	KO_ARRAY(struct ko_static_call_site) static_calls;
	KO_ARRAY(struct ko_jump_entry) jump_entries;
	KO_ARRAY(struct ko_alt_instr) alternatives;
	KO_ARRAY(struct ko_para_site) paravirt_sites;
	KO_ARRAY(struct ko_extable_entry) extable;	/* sorted by insn */
	KO_ARRAY(struct ko_bug_entry) bugs;		/* sorted by addr */
	KO_ARRAY(struct ko_param) params;
	/* Rewritten for checking: every probe, sorted by ret; count 0 otherwise. */
	KO_ARRAY(struct ko_check_site) check_sites;
};

/* ---------------------------------------------------------------------- */
/* Context and loading */

/*
 * Reserves the low window (PROT_NONE) and prepares an empty context. Returns
 * NULL with a message in err (errlen bytes) if the window cannot be reserved.
 */
struct ko_context *ko_context_create(const struct ko_options *opts,
				     char *err, size_t errlen);

/* Unmaps every module and frees everything the context handed out. */
void ko_context_destroy(struct ko_context *ctx);

/*
 * Loads one module. Returns it, or NULL with the reason in ko_last_error().
 * A failed load leaves the context as it was before the call, except for
 * what the resolver itself allocated with ko_alloc_low()/ko_percpu_alloc():
 * that stays, because the runtime may have remembered it.
 */
const struct ko_module *ko_load_file(struct ko_context *ctx, const char *path);

/*
 * The same, for a module to run under the checker: its code is rewritten
 * first to call __understudy_trace_* stubs before every memory access
 * (docs/checking.md), which the resolver must provide. A module whose code
 * does not decode completely, or that the rewriter cannot place, is refused
 * with KO_ERR_REWRITE and the offsets concerned.
 */
const struct ko_module *ko_load_file_checked(struct ko_context *ctx, const char *path);

const struct ko_error *ko_last_error(const struct ko_context *ctx);

size_t ko_module_count(const struct ko_context *ctx);
const struct ko_module *ko_module_at(const struct ko_context *ctx, size_t i);
const struct ko_module *ko_find_module(const struct ko_context *ctx,
				       const char *name);
/* The module whose image contains addr, or NULL. */
const struct ko_module *ko_module_containing(const struct ko_context *ctx,
					     uint64_t addr);
/* An export of any loaded module, or NULL. */
const struct ko_export *ko_find_export(const struct ko_context *ctx,
				       const char *name);

/*
 * A symbol m defines, in a section the loader placed, whose name starts with
 * prefix and ends with suffix: how modpost finds MODULE_DEVICE_TABLE's
 * alias, __mod_<bus>__<table>_device_table. Returns 0 with its address and
 * size (st_size, checked to lie inside its section), or -1 if m defines none.
 */
int ko_module_find_symbol(const struct ko_module *m, const char *prefix,
			  const char *suffix, uint64_t *addr, uint64_t *size);

/* ---------------------------------------------------------------------- */
/* Lookups for the runtime's fault handlers (no allocation, no locks) */

/* SIGSEGV at rip: the __ex_table entry for it, or NULL. */
const struct ko_extable_entry *ko_find_exception(const struct ko_context *ctx,
						 uint64_t rip);
/* SIGILL at rip (a ud2): the __bug_table entry for it, or NULL. */
const struct ko_bug_entry *ko_find_bug(const struct ko_context *ctx,
				       uint64_t rip);

/* ---------------------------------------------------------------------- */
/* Low memory and the per-cpu block */

/*
 * size bytes (rounded up to pages) inside the low window with protection
 * prot (PROT_*), e.g. for thunks modules must reach with rel32. Freed with the
 * context. Returns NULL when the window is full.
 */
void *ko_alloc_low(struct ko_context *ctx, size_t size, int prot);

/*
 * Reserves size bytes, aligned to align (a power of two), in the per-cpu
 * block for a per-cpu variable the runtime defines itself; returns 0 and the
 * variable's offset in *offset, or -1 if align is not a power of two.
 */
int ko_percpu_alloc(struct ko_context *ctx, size_t size, size_t align,
		    uint64_t *offset);

struct ko_percpu_layout {
	size_t size;		/* bytes every per-cpu block needs */
	size_t align;		/* alignment every per-cpu block needs */
};

/* Size and alignment for each CPU's block; grows with every load. */
void ko_percpu_layout(const struct ko_context *ctx,
		      struct ko_percpu_layout *out);

/*
 * Fills a fresh per-cpu block (layout.size bytes): zeroes it and copies every
 * module's .data..percpu template to its offset. The first percpu_reserved
 * bytes are left zero for the runtime (canary, etc.).
 */
void ko_percpu_init_block(const struct ko_context *ctx, void *block);

/* ---------------------------------------------------------------------- */
/* Reference CRCs */

/*
 * Parses a Module.symvers ("0xcrc<TAB>symbol<TAB>module<TAB>EXPORT_*
 * [<TAB>namespace]" per line). Returns NULL with the reason (file and line)
 * in err.
 */
struct ko_crc_table *ko_crc_table_load_symvers(const char *path,
					       char *err, size_t errlen);
/* 0 and *crc (and *owner, the exporting module, if not NULL) if known. */
int ko_crc_table_lookup(const struct ko_crc_table *table, const char *name,
			uint32_t *crc, const char **owner);
size_t ko_crc_table_size(const struct ko_crc_table *table);
void ko_crc_table_destroy(struct ko_crc_table *table);

/* "R_X86_64_PC32" etc.; NULL for types the loader does not apply. */
const char *ko_reloc_type_name(unsigned int type);

#endif /* UNDERSTUDY_LOADER_H */
