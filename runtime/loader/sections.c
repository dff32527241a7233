// SPDX-License-Identifier: GPL-2.0
/*
 * Special sections: tables the compiler and objtool leave in a module for the
 * kernel to act on. The loader parses each one after relocation into a plain
 * array of absolute addresses (struct ko_module) and checks that every code
 * address lies in the module's text, so the runtime can use them blindly.
 * It acts on three itself, as Linux does at boot on a CPU that needs no
 * mitigation and without ftrace: the "call __fentry__" at each __mcount_loc
 * site becomes a 5-byte NOP, each jump to the return thunk a plain return,
 * each call or jump through a retpoline a plain indirect one.
 *
 * Entry layouts are those of 6.1 x86_64 with Debian's configuration
 * (relative pointers everywhere: CONFIG_HAVE_ARCH_PREL32_RELOCATIONS,
 * CONFIG_GENERIC_BUG_RELATIVE_POINTERS, CONFIG_HAVE_ARCH_JUMP_LABEL_RELATIVE;
 * CONFIG_DEBUG_BUGVERBOSE=y). A field "relative" holds target - &field.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MCOUNT_ENTRY_SIZE	8	/* unsigned long address */
#define SITE_ENTRY_SIZE		4	/* s32 relative */
#define STATIC_CALL_SITE_SIZE	8	/* { s32 addr; s32 key | flags; } */
#define JUMP_ENTRY_SIZE		16	/* { s32 code; s32 target; long key | flags; } */
#define ALT_INSTR_SIZE		12	/* packed { s32 instr, repl; u16 cpuid; u8 len, replen; } */
#define PARA_SITE_SIZE		16	/* { u8 *instr; u8 type; u8 len; } padded */
#define EXTABLE_ENTRY_SIZE	12	/* { int insn, fixup, data; } */
#define BUG_ENTRY_SIZE		12	/* { s32 bug_addr, file; u16 line, flags; } */
#define KERNEL_PARAM_SIZE	40	/* struct kernel_param */

#define STATIC_CALL_SITE_TAIL	1
#define STATIC_CALL_SITE_INIT	2
#define JUMP_TYPE_TRUE		1
#define JUMP_TYPE_INIT		2
#define ALTINSTR_FLAG_INV	(1 << 15)

static const uint8_t nop5[5] = { 0x0f, 0x1f, 0x44, 0x00, 0x00 };

/* A table being parsed: where its entries are and how many. */
struct table {
	const char *name;
	uint64_t base;
	size_t count;
	size_t entsize;
};

/*
 * Finds the placed section called name and allocates *records, one per
 * entry; the module owns them from here on, even if parsing fails. Returns
 * 0 (count 0 if the module has no such section) or -1.
 */
static int table_open(struct ko_context *ctx, struct loaded_module *m,
		      struct table *t, const char *name, size_t entsize,
		      void *records, size_t record_size)
{
	unsigned int index = elf_find_section(&m->elf, name);
	uint64_t size = index ? m->elf.shdrs[index].sh_size : 0;
	void **out = records;

	t->name = name;
	t->entsize = entsize;
	t->base = index ? m->section_addr[index] : 0;
	t->count = t->base ? size / entsize : 0;
	if (!t->count)
		return 0;
	if (size % entsize)
		return ko_fail(ctx, KO_ERR_SECTION, "%s: size %" PRIu64 " is not a multiple of %zu",
			       name, size, entsize);
	*out = calloc(t->count, record_size);
	if (!*out)
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	return 0;
}

static uint64_t entry_addr(const struct table *t, size_t i)
{
	return t->base + i * t->entsize;
}

/* The target of the relative field at addr. */
static uint64_t relative(uint64_t addr)
{
	return addr + read_s32((void *)addr);
}

static bool in_text(const struct ko_module *m, uint64_t addr, uint64_t len)
{
	return addr >= m->text.addr && addr <= m->text.addr + m->text.size &&
	       len <= m->text.addr + m->text.size - addr;
}

static int check_code(struct ko_context *ctx, const struct loaded_module *m,
		      const struct table *t, size_t i, const char *what,
		      uint64_t addr, uint64_t len)
{
	if (in_text(&m->pub, addr, len))
		return 0;
	return ko_fail(ctx, KO_ERR_SECTION,
		       "%s entry %zu: %s 0x%" PRIx64 " (+%" PRIu64 ") is outside the module's text",
		       t->name, i, what, addr, len);
}

static int parse_mcount(struct ko_context *ctx, struct loaded_module *m)
{
	uint64_t **sites = &m->pub.mcount_sites.entries;
	struct table t;

	if (table_open(ctx, m, &t, "__mcount_loc", MCOUNT_ENTRY_SIZE, sites, sizeof(**sites)))
		return -1;
	for (size_t i = 0; i < t.count; i++) {
		(*sites)[i] = read_u64((void *)entry_addr(&t, i));
		if (check_code(ctx, m, &t, i, "site", (*sites)[i], sizeof(nop5)))
			return -1;
	}
	m->pub.mcount_sites.count = t.count;
	return 0;
}

/* .retpoline_sites and .return_sites: arrays of relative code addresses. */
static int parse_sites(struct ko_context *ctx, struct loaded_module *m,
		       const char *name, uint64_t **sites, size_t *count)
{
	struct table t;

	if (table_open(ctx, m, &t, name, SITE_ENTRY_SIZE, sites, sizeof(**sites)))
		return -1;
	for (size_t i = 0; i < t.count; i++) {
		(*sites)[i] = relative(entry_addr(&t, i));
		/* A call or jmp rel32: 5 bytes. */
		if (check_code(ctx, m, &t, i, "site", (*sites)[i], 5))
			return -1;
	}
	*count = t.count;
	return 0;
}

static int parse_static_calls(struct ko_context *ctx, struct loaded_module *m)
{
	struct ko_static_call_site **s = &m->pub.static_calls.entries;
	struct table t;

	if (table_open(ctx, m, &t, ".static_call_sites", STATIC_CALL_SITE_SIZE, s, sizeof(**s)))
		return -1;
	for (size_t i = 0; i < t.count; i++) {
		struct ko_static_call_site *site = &(*s)[i];
		uint64_t e = entry_addr(&t, i);
		int32_t key = read_s32((void *)(e + 4));

		site->addr = relative(e);
		site->key = e + 4 + (key & ~(STATIC_CALL_SITE_TAIL | STATIC_CALL_SITE_INIT));
		site->tail = key & STATIC_CALL_SITE_TAIL;
		site->init = key & STATIC_CALL_SITE_INIT;
		if (check_code(ctx, m, &t, i, "call site", site->addr, 5))
			return -1;
	}
	m->pub.static_calls.count = t.count;
	return 0;
}

static int parse_jump_table(struct ko_context *ctx, struct loaded_module *m)
{
	struct ko_jump_entry **j = &m->pub.jump_entries.entries;
	struct table t;

	if (table_open(ctx, m, &t, "__jump_table", JUMP_ENTRY_SIZE, j, sizeof(**j)))
		return -1;
	for (size_t i = 0; i < t.count; i++) {
		struct ko_jump_entry *entry = &(*j)[i];
		uint64_t e = entry_addr(&t, i);
		int64_t key = (int64_t)read_u64((void *)(e + 8));

		entry->code = relative(e);
		entry->target = relative(e + 4);
		entry->key = e + 8 + (key & ~(int64_t)(JUMP_TYPE_TRUE | JUMP_TYPE_INIT));
		entry->branch = key & JUMP_TYPE_TRUE;
		entry->init = key & JUMP_TYPE_INIT;
		/* The site is a 2- or 5-byte jmp or nop. */
		if (check_code(ctx, m, &t, i, "code", entry->code, 2) ||
		    check_code(ctx, m, &t, i, "target", entry->target, 0))
			return -1;
	}
	m->pub.jump_entries.count = t.count;
	return 0;
}

/*
 * Recorded, never applied: the replacements are chosen by CPU feature bits
 * the runtime must decide on, and some (cli/sti, wrmsr) must never run in a
 * user process.
 */
static int parse_alternatives(struct ko_context *ctx, struct loaded_module *m)
{
	struct ko_alt_instr **a = &m->pub.alternatives.entries;
	struct table t;

	if (table_open(ctx, m, &t, ".altinstructions", ALT_INSTR_SIZE, a, sizeof(**a)))
		return -1;
	for (size_t i = 0; i < t.count; i++) {
		struct ko_alt_instr *alt = &(*a)[i];
		uint64_t e = entry_addr(&t, i);
		uint16_t cpuid = read_u16((void *)(e + 8));

		alt->instr = relative(e);
		alt->replacement = relative(e + 4);
		alt->feature = cpuid & ~ALTINSTR_FLAG_INV;
		alt->inverted = cpuid & ALTINSTR_FLAG_INV;
		alt->instr_len = *(uint8_t *)(e + 10);
		alt->replacement_len = *(uint8_t *)(e + 11);
		if (check_code(ctx, m, &t, i, "instruction", alt->instr, alt->instr_len) ||
		    check_code(ctx, m, &t, i, "replacement", alt->replacement,
			       alt->replacement_len))
			return -1;
	}
	m->pub.alternatives.count = t.count;
	return 0;
}

static int parse_paravirt(struct ko_context *ctx, struct loaded_module *m)
{
	struct ko_para_site **p = &m->pub.paravirt_sites.entries;
	struct table t;

	if (table_open(ctx, m, &t, ".parainstructions", PARA_SITE_SIZE, p, sizeof(**p)))
		return -1;
	for (size_t i = 0; i < t.count; i++) {
		struct ko_para_site *site = &(*p)[i];
		uint64_t e = entry_addr(&t, i);

		site->instr = read_u64((void *)e);
		site->type = *(uint8_t *)(e + 8);
		site->len = *(uint8_t *)(e + 9);
		if (check_code(ctx, m, &t, i, "instruction", site->instr, site->len))
			return -1;
	}
	m->pub.paravirt_sites.count = t.count;
	return 0;
}

static int compare_extable(const void *a, const void *b)
{
	uint64_t x = ((const struct ko_extable_entry *)a)->insn;
	uint64_t y = ((const struct ko_extable_entry *)b)->insn;

	return x < y ? -1 : x > y;
}

static int parse_extable(struct ko_context *ctx, struct loaded_module *m)
{
	struct ko_extable_entry **x = &m->pub.extable.entries;
	struct table t;

	if (table_open(ctx, m, &t, "__ex_table", EXTABLE_ENTRY_SIZE, x, sizeof(**x)))
		return -1;
	for (size_t i = 0; i < t.count; i++) {
		struct ko_extable_entry *entry = &(*x)[i];
		uint64_t e = entry_addr(&t, i);

		entry->insn = relative(e);
		entry->fixup = relative(e + 4);
		entry->data = read_s32((void *)(e + 8));
		if (check_code(ctx, m, &t, i, "instruction", entry->insn, 1) ||
		    check_code(ctx, m, &t, i, "fixup", entry->fixup, 1))
			return -1;
	}
	/* Sorted for bsearch; Linux sorts module exception tables at load too. */
	if (t.count)
		qsort(*x, t.count, sizeof(**x), compare_extable);
	m->pub.extable.count = t.count;
	return 0;
}

static int compare_bug(const void *a, const void *b)
{
	uint64_t x = ((const struct ko_bug_entry *)a)->addr;
	uint64_t y = ((const struct ko_bug_entry *)b)->addr;

	return x < y ? -1 : x > y;
}

static int parse_bugs(struct ko_context *ctx, struct loaded_module *m)
{
	struct ko_bug_entry **b = &m->pub.bugs.entries;
	struct table t;

	if (table_open(ctx, m, &t, "__bug_table", BUG_ENTRY_SIZE, b, sizeof(**b)))
		return -1;
	for (size_t i = 0; i < t.count; i++) {
		struct ko_bug_entry *bug = &(*b)[i];
		uint64_t e = entry_addr(&t, i);

		bug->addr = relative(e);
		bug->file = image_string(&m->pub, relative(e + 4));
		bug->line = read_u16((void *)(e + 8));
		bug->flags = read_u16((void *)(e + 10));
		bug->flags_addr = e + 10;
		if (check_code(ctx, m, &t, i, "ud2", bug->addr, 2))
			return -1;
		if (!bug->file)
			return ko_fail(ctx, KO_ERR_SECTION,
				       "__bug_table entry %zu: file name outside the module", i);
	}
	if (t.count)
		qsort(*b, t.count, sizeof(**b), compare_bug);
	m->pub.bugs.count = t.count;
	return 0;
}

static int parse_params(struct ko_context *ctx, struct loaded_module *m)
{
	struct ko_param **p = &m->pub.params.entries;
	struct table t;

	if (table_open(ctx, m, &t, "__param", KERNEL_PARAM_SIZE, p, sizeof(**p)))
		return -1;
	for (size_t i = 0; i < t.count; i++) {
		struct ko_param *param = &(*p)[i];
		uint64_t e = entry_addr(&t, i);

		param->kernel_param = e;
		param->name = image_string(&m->pub, read_u64((void *)e));
		param->ops = read_u64((void *)(e + 16));
		param->perm = read_u16((void *)(e + 24));
		param->level = *(int8_t *)(e + 26);
		param->flags = *(uint8_t *)(e + 27);
		param->arg = read_u64((void *)(e + 32));
		if (!param->name)
			return ko_fail(ctx, KO_ERR_SECTION,
				       "__param entry %zu: name outside the module", i);
	}
	m->pub.params.count = t.count;
	return 0;
}

int special_sections_parse(struct ko_context *ctx, struct loaded_module *m)
{
	struct ko_module *pub = &m->pub;

	pub->this_module = m->section_addr[m->this_module_shndx];
	pub->this_module_size = m->elf.shdrs[m->this_module_shndx].sh_size;
	if (m->has_init)
		pub->init = read_u64((void *)(pub->this_module + m->init_offset));
	if (m->has_exit)
		pub->exit = read_u64((void *)(pub->this_module + m->exit_offset));

	return parse_mcount(ctx, m) ||
	       parse_sites(ctx, m, ".retpoline_sites", &pub->retpoline_sites.entries,
			   &pub->retpoline_sites.count) ||
	       parse_sites(ctx, m, ".return_sites", &pub->return_sites.entries,
			   &pub->return_sites.count) ||
	       parse_static_calls(ctx, m) ||
	       parse_jump_table(ctx, m) ||
	       parse_alternatives(ctx, m) ||
	       parse_paravirt(ctx, m) ||
	       parse_extable(ctx, m) ||
	       parse_bugs(ctx, m) ||
	       parse_params(ctx, m) ? -1 : 0;
}

/*
 * Turns every "call __fentry__" into a 5-byte NOP. Each site is checked to be
 * exactly that call first: patching anything else would corrupt code.
 */
static int fentry_calls_patch(struct ko_context *ctx, struct loaded_module *m)
{
	const struct ko_import *fentry = NULL;

	if (!m->pub.mcount_sites.count)
		return 0;
	for (size_t i = 0; i < m->pub.imports.count; i++)
		if (!strcmp(m->pub.imports.entries[i].name, "__fentry__"))
			fentry = &m->pub.imports.entries[i];
	if (!fentry || !fentry->resolved)
		return ko_fail(ctx, KO_ERR_SECTION,
			       "__mcount_loc lists %zu sites but __fentry__ is not imported",
			       m->pub.mcount_sites.count);

	for (size_t i = 0; i < m->pub.mcount_sites.count; i++) {
		uint8_t *site = (uint8_t *)m->pub.mcount_sites.entries[i];
		uint64_t target = (uint64_t)site + 5 + read_s32(site + 1);

		if (site[0] != 0xe8 || target != fentry->value.value)
			return ko_fail(ctx, KO_ERR_SECTION,
				       "__mcount_loc entry %zu: 0x%" PRIx64 " is not a call to __fentry__",
				       i, (uint64_t)site);
	}
	for (size_t i = 0; i < m->pub.mcount_sites.count; i++)
		memcpy((void *)m->pub.mcount_sites.entries[i], nop5, sizeof(nop5));
	m->pub.mcount_patched = true;
	return 0;
}

/* Where a symbol the module imports or defines (and exports) is; 0 if neither. */
static uint64_t symbol_address(const struct loaded_module *m, const char *name)
{
	for (size_t i = 0; i < m->pub.imports.count; i++)
		if (m->pub.imports.entries[i].resolved && !strcmp(m->pub.imports.entries[i].name, name))
			return m->pub.imports.entries[i].value.value;
	for (size_t i = 0; i < m->pub.exports.count; i++)
		if (!strcmp(m->pub.exports.entries[i].name, name))
			return m->pub.exports.entries[i].value.value;
	return 0;
}

/*
 * The target of the call or jmp rel32 at site, or 0 if it is neither. GCC
 * puts a CS prefix on calls of the r8 - r15 retpolines (6 bytes: room for
 * the kernel's lfence variant); *len says which.
 */
static uint64_t branch_target(const struct loaded_module *m, const uint8_t *site,
			      uint8_t *opcode, unsigned int *len)
{
	unsigned int prefix = site[0] == 0x2e;

	*opcode = site[prefix];
	*len = 5 + prefix;
	if ((*opcode != 0xe8 && *opcode != 0xe9) || !in_text(&m->pub, (uint64_t)site, *len))
		return 0;
	return (uint64_t)site + *len + read_s32(site + prefix + 1);
}

/* NOPs of 1 to 4 bytes, to fill the rest of a patched site. */
static const uint8_t nops[5][4] = {
	{ 0 }, { 0x90 }, { 0x66, 0x90 }, { 0x0f, 0x1f, 0x00 }, { 0x0f, 0x1f, 0x40, 0x00 },
};

/*
 * The thunks' code (runtime/kernel/thunks.S) is already a plain return and
 * plain indirect jumps -- the driver process is an ordinary user process,
 * and speculation hardening is the host kernel's business -- so this changes
 * no behaviour. It saves a jump per return and per indirect call, which the
 * lab's TCG runs as a block of its own each time. Debian's modules have only
 * such sites; anything else (a conditional jump to a thunk, say) would keep
 * going through the thunk, which is as correct.
 */
static void return_sites_patch(const struct loaded_module *m)
{
	uint64_t thunk = symbol_address(m, "__x86_return_thunk");
	unsigned int len;
	uint8_t op;

	for (size_t i = 0; thunk && i < m->pub.return_sites.count; i++) {
		uint8_t *site = (uint8_t *)m->pub.return_sites.entries[i];

		if (branch_target(m, site, &op, &len) == thunk && op == 0xe9) {
			site[0] = 0xc3;				/* ret */
			memset(site + 1, 0xcc, len - 1);	/* int3 */
		}
	}
}

/* Register numbers in ModRM order, as the thunks are named. */
static const char *const thunk_regs[16] = {
	"rax", "rcx", "rdx", "rbx", NULL, "rbp", "rsi", "rdi",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
};

static void retpoline_sites_patch(const struct loaded_module *m)
{
	uint64_t thunks[16] = { 0 };
	char name[40];

	for (int r = 0; r < 16; r++) {
		if (!thunk_regs[r])
			continue;
		snprintf(name, sizeof(name), "__x86_indirect_thunk_%s", thunk_regs[r]);
		thunks[r] = symbol_address(m, name);
	}
	for (size_t i = 0; i < m->pub.retpoline_sites.count; i++) {
		uint8_t *site = (uint8_t *)m->pub.retpoline_sites.entries[i];
		unsigned int len, n = 0;
		uint8_t op, insn[6];
		uint64_t target = branch_target(m, site, &op, &len);
		int r;

		for (r = 0; r < 16 && !(target && thunks[r] == target); r++)
			;
		if (r == 16)
			continue;
		if (r >= 8)
			insn[n++] = 0x41;				/* REX.B */
		insn[n++] = 0xff;
		insn[n++] = (op == 0xe8 ? 0xd0 : 0xe0) | (r & 7);	/* call/jmp *%reg */
		memcpy(insn + n, nops[len - n], len - n);
		memcpy(site, insn, len);
	}
}

int code_sites_patch(struct ko_context *ctx, struct loaded_module *m)
{
	if (fentry_calls_patch(ctx, m))
		return -1;
	return_sites_patch(m);
	retpoline_sites_patch(m);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Lookups for fault handlers */

const struct ko_extable_entry *ko_find_exception(const struct ko_context *ctx,
						 uint64_t rip)
{
	const struct ko_module *m = ko_module_containing(ctx, rip);
	struct ko_extable_entry key = { .insn = rip };

	if (!m || !m->extable.count)
		return NULL;
	return bsearch(&key, m->extable.entries, m->extable.count,
		       sizeof(key), compare_extable);
}

const struct ko_bug_entry *ko_find_bug(const struct ko_context *ctx, uint64_t rip)
{
	const struct ko_module *m = ko_module_containing(ctx, rip);
	struct ko_bug_entry key = { .addr = rip };

	if (!m || !m->bugs.count)
		return NULL;
	return bsearch(&key, m->bugs.entries, m->bugs.count, sizeof(key), compare_bug);
}
