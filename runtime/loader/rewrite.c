// SPDX-License-Identifier: GPL-2.0
/*
 * Rewriting a module for checking (docs/checking.md, "The rewritten module"):
 * a pass between validating the file and resolving its imports that turns
 * the .ko into another .ko, whose code calls a stub before every memory
 * access, and that the rest of the loader then loads like any other.
 *
 * Why this is safe on a binary: a module is a relocatable object. Every
 * pointer into its code from outside the instruction stream -- symbols,
 * __ex_table, __bug_table, __jump_table, .static_call_sites, the
 * retpoline and return sites, __mcount_loc, ORC -- is a relocation or a
 * symbol value, and every pointer inside it is a relative branch or a
 * rip-relative operand the decoder sees. Moving code is then a matter of
 * an old-to-new offset map (rewrite-x86.c) applied to all of them:
 *   - symbols in code get their new value and size;
 *   - relocations in code move with their instruction;
 *   - relocations that point into code (a section symbol plus an addend, or
 *     a function symbol) get the addend that reaches the same instruction;
 *     a branch target lands on the instruction's probes; an __ex_table
 *     "insn" field (the one that may fault) and a return or retpoline
 *     site (one to patch) on the instruction itself;
 *   - the stubs are new undefined symbols, resolved by the runtime.
 * Section indices do not change, so a site names its section as the
 * original file does. The new file is the old one with the new sections,
 * symbol table and section headers appended.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "rewrite.h"

struct rewrite {
	struct rw_text *texts;
	size_t ntexts;
	int *text_of;		/* by section index: index in texts, -1 if not rewritten */
	Elf64_Sym *syms;	/* the new symbol table */
	size_t nsyms;
	char *strtab;
	size_t strtab_size;
	uint32_t stub_symbols[NR_STUBS];
	/* the new RELA sections, by section index; NULL for other sections */
	struct rw_reloc **relas;
	size_t *nrelas;
};

static bool is_rewritten_code(const struct ko_elf *elf, unsigned int i)
{
	const Elf64_Shdr *sh = &elf->shdrs[i];

	/* alternatives are never applied (sections.c): their replacements never run */
	return sh->sh_type == SHT_PROGBITS && sh->sh_size &&
	       (sh->sh_flags & (SHF_ALLOC | SHF_EXECINSTR)) == (SHF_ALLOC | SHF_EXECINSTR) &&
	       strcmp(elf_section_name(elf, i), ".altinstr_replacement");
}

static unsigned int rela_of(const struct ko_elf *elf, unsigned int target)
{
	for (unsigned int i = 1; i < elf->shnum; i++)
		if (elf->shdrs[i].sh_type == SHT_RELA && elf->shdrs[i].sh_info == target)
			return i;
	return 0;
}

static int texts_decode(struct ko_context *ctx, const struct ko_elf *elf, struct rewrite *rw)
{
	rw->texts = calloc(elf->shnum, sizeof(*rw->texts));
	rw->text_of = malloc(elf->shnum * sizeof(*rw->text_of));
	if (!rw->texts || !rw->text_of)
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	for (unsigned int i = 0; i < elf->shnum; i++) {
		unsigned int rela = rela_of(elf, i);
		struct rw_text *t;

		rw->text_of[i] = -1;
		if (i == 0 || !is_rewritten_code(elf, i))
			continue;
		rw->text_of[i] = (int)rw->ntexts;
		t = &rw->texts[rw->ntexts++];
		t->shndx = i;
		t->code = elf_section_data(elf, i);
		t->size = elf->shdrs[i].sh_size;
		if (rela) {
			t->nrelocs = elf->shdrs[rela].sh_size / sizeof(Elf64_Rela);
			t->relocs = malloc((t->nrelocs + 1) * sizeof(*t->relocs));
			if (!t->relocs)
				return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
			memcpy(t->relocs, elf_section_data(elf, rela), t->nrelocs * sizeof(*t->relocs));
		}
		if (text_decode(ctx, elf, t))
			return -1;
	}
	return 0;
}

/* The old symbol table with values in code remapped, and the stubs appended. */
static int symbols_rewrite(struct ko_context *ctx, const struct ko_elf *elf, struct rewrite *rw)
{
	size_t used = elf->strtab_size;

	rw->nsyms = elf->nsyms + NR_STUBS;
	rw->syms = malloc(rw->nsyms * sizeof(*rw->syms));
	rw->strtab_size = used;
	for (int s = 0; s < NR_STUBS; s++)
		rw->strtab_size += strlen(rw_stub_names[s]) + 1;
	rw->strtab = malloc(rw->strtab_size);
	if (!rw->syms || !rw->strtab)
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	memcpy(rw->syms, elf->syms, elf->nsyms * sizeof(*rw->syms));
	memcpy(rw->strtab, elf->strtab, elf->strtab_size);

	for (size_t i = 1; i < elf->nsyms; i++) {
		Elf64_Sym *sym = &rw->syms[i];
		int t = sym->st_shndx < elf->shnum ? rw->text_of[sym->st_shndx] : -1;
		int64_t start, end;

		if (t < 0)
			continue;
		start = text_map(&rw->texts[t], sym->st_value, false);
		end = text_map(&rw->texts[t], sym->st_value + sym->st_size, false);
		if (start < 0 || end < 0)
			return ko_fail(ctx, KO_ERR_REWRITE,
				       "cannot rewrite for checking: symbol '%s' (%s+0x%" PRIx64 ") is not on an instruction",
				       elf_symbol_name(elf, i), elf_section_name(elf, sym->st_shndx),
				       (uint64_t)sym->st_value);
		sym->st_value = start;
		if (sym->st_size)
			sym->st_size = end - start;
	}
	for (int s = 0; s < NR_STUBS; s++) {
		Elf64_Sym *sym = &rw->syms[elf->nsyms + s];

		memset(sym, 0, sizeof(*sym));
		sym->st_name = used;
		sym->st_info = ELF64_ST_INFO(STB_GLOBAL, STT_NOTYPE);
		sym->st_shndx = SHN_UNDEF;
		strcpy(rw->strtab + used, rw_stub_names[s]);
		used += strlen(rw_stub_names[s]) + 1;
		rw->stub_symbols[s] = elf->nsyms + s;
	}
	return 0;
}

static bool pc_relative(unsigned int type)
{
	return type == R_X86_64_PC32 || type == R_X86_64_PLT32 || type == R_X86_64_PC64;
}

/*
 * Gives a relocation against a symbol in rewritten code the addend that
 * reaches the same instruction. In code, a pc-relative field's target is
 * S + A + (bytes from the field to the end of its instruction); in data
 * (`.long target - .`) and for absolute types it is S + A.
 */
static int reloc_retarget(struct ko_context *ctx, const struct ko_elf *elf,
			  const struct rewrite *rw, unsigned int rela_shndx, struct rw_reloc *r)
{
	size_t s = ELF64_R_SYM(r->rela.r_info);
	unsigned int type = ELF64_R_TYPE(r->rela.r_info);
	unsigned int in = elf->shdrs[rela_shndx].sh_info;
	const Elf64_Sym *old = s < elf->nsyms ? &elf->syms[s] : NULL;
	int t = old && old->st_shndx < elf->shnum ? rw->text_of[old->st_shndx] : -1;
	const char *from = elf_section_name(elf, in);
	/* a fault address, or a return or retpoline site to patch: the instruction, not its probes */
	bool itself = (!strcmp(from, "__ex_table") && r->rela.r_offset % 12 == 0) ||
		      !strcmp(from, ".return_sites") || !strcmp(from, ".retpoline_sites");
	int64_t k = pc_relative(type) && rw->text_of[in] >= 0 ? r->to_end : 0;
	int64_t target;

	if (t < 0 || type == R_X86_64_NONE)
		return 0;
	target = text_map(&rw->texts[t], old->st_value + r->rela.r_addend + k, itself);
	if (target < 0)
		return ko_fail(ctx, KO_ERR_REWRITE,
			       "cannot rewrite for checking: %s+0x%" PRIx64 " points into the middle of %s+0x%" PRIx64,
			       from, (uint64_t)r->rela.r_offset,
			       elf_section_name(elf, old->st_shndx),
			       (uint64_t)(old->st_value + r->rela.r_addend + k));
	r->rela.r_addend = target - (int64_t)rw->syms[s].st_value - k;
	return 0;
}

static int relocations_rewrite(struct ko_context *ctx, const struct ko_elf *elf,
			       struct rewrite *rw)
{
	rw->relas = calloc(elf->shnum, sizeof(*rw->relas));
	rw->nrelas = calloc(elf->shnum, sizeof(*rw->nrelas));
	if (!rw->relas || !rw->nrelas)
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	for (unsigned int i = 1; i < elf->shnum; i++) {
		const Elf64_Shdr *sh = &elf->shdrs[i];
		int t = elf->shdrs[i].sh_type == SHT_RELA ? rw->text_of[sh->sh_info] : -1;

		if (sh->sh_type != SHT_RELA)
			continue;
		if (t >= 0) {		/* emitted with the code; owned by the text */
			rw->relas[i] = rw->texts[t].new_relocs;
			rw->nrelas[i] = rw->texts[t].n_new_relocs;
		} else {
			const Elf64_Rela *old = elf_section_data(elf, i);

			rw->nrelas[i] = sh->sh_size / sizeof(*old);
			rw->relas[i] = calloc(rw->nrelas[i] + 1, sizeof(**rw->relas));
			if (!rw->relas[i])
				return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
			for (size_t j = 0; j < rw->nrelas[i]; j++)
				rw->relas[i][j].rela = old[j];
		}
		for (size_t j = 0; j < rw->nrelas[i]; j++)
			if (reloc_retarget(ctx, elf, rw, i, &rw->relas[i][j]))
				return -1;
	}
	return 0;
}

/* Appends len bytes at an aligned end of the file being built; returns their offset. */
static uint64_t append(uint8_t *file, size_t *size, const void *data, size_t len,
		       size_t align)
{
	uint64_t at = ALIGN_UP(*size, align);

	memset(file + *size, 0, at - *size);
	if (len)
		memcpy(file + at, data, len);
	*size = at + len;
	return at;
}

static int file_build(struct ko_context *ctx, const struct ko_elf *elf,
		      const struct rewrite *rw, uint8_t **out, size_t *out_size)
{
	size_t capacity = elf->size + 64, size = elf->size;
	Elf64_Shdr *shdrs;
	Elf64_Ehdr *eh;
	uint8_t *file;

	for (size_t t = 0; t < rw->ntexts; t++)
		capacity += rw->texts[t].new_size + 16;
	for (unsigned int i = 0; i < elf->shnum; i++)
		capacity += rw->nrelas[i] * sizeof(Elf64_Rela) + 8;
	capacity += rw->nsyms * sizeof(Elf64_Sym) + rw->strtab_size + 16 +
		    elf->shnum * sizeof(Elf64_Shdr) + 8;
	file = malloc(capacity);
	shdrs = malloc(elf->shnum * sizeof(*shdrs));
	if (!file || !shdrs) {
		free(file);
		free(shdrs);
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	}
	memcpy(file, elf->data, elf->size);
	memcpy(shdrs, elf->shdrs, elf->shnum * sizeof(*shdrs));

	for (size_t t = 0; t < rw->ntexts; t++) {
		const struct rw_text *text = &rw->texts[t];

		shdrs[text->shndx].sh_offset = append(file, &size, text->out, text->new_size, 16);
		shdrs[text->shndx].sh_size = text->new_size;
	}
	for (unsigned int i = 1; i < elf->shnum; i++) {
		if (elf->shdrs[i].sh_type != SHT_RELA)
			continue;
		shdrs[i].sh_offset = ALIGN_UP(size, 8);
		shdrs[i].sh_size = rw->nrelas[i] * sizeof(Elf64_Rela);
		for (size_t j = 0; j < rw->nrelas[i]; j++)
			append(file, &size, &rw->relas[i][j].rela, sizeof(Elf64_Rela), 8);
	}
	shdrs[elf->symtab_index].sh_offset = append(file, &size, rw->syms,
						    rw->nsyms * sizeof(Elf64_Sym), 8);
	shdrs[elf->symtab_index].sh_size = rw->nsyms * sizeof(Elf64_Sym);
	shdrs[elf->shdrs[elf->symtab_index].sh_link].sh_offset =
		append(file, &size, rw->strtab, rw->strtab_size, 1);
	shdrs[elf->shdrs[elf->symtab_index].sh_link].sh_size = rw->strtab_size;

	eh = (Elf64_Ehdr *)file;
	eh->e_shoff = append(file, &size, shdrs, elf->shnum * sizeof(*shdrs), 8);
	free(shdrs);
	*out = file;
	*out_size = size;
	return 0;
}

/* The sites, by section, for rewrite_place_sites() once the image is placed. */
static int sites_keep(struct ko_context *ctx, struct loaded_module *m, const struct rewrite *rw)
{
	size_t n = 0;

	for (size_t t = 0; t < rw->ntexts; t++)
		n += rw->texts[t].nsites;
	m->pub.check_sites.entries = calloc(n + 1, sizeof(*m->pub.check_sites.entries));
	if (!m->pub.check_sites.entries)
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	for (size_t t = 0; t < rw->ntexts; t++)
		for (size_t i = 0; i < rw->texts[t].nsites; i++) {
			const struct rw_site *s = &rw->texts[t].sites[i];
			struct ko_check_site *out = &m->pub.check_sites.entries[m->pub.check_sites.count++];

			out->ret = s->ret;	/* an offset until the section is placed */
			out->offset = s->offset;
			out->section = rw->texts[t].shndx;
			out->size = s->size;
			out->flags = s->flags;
		}
	return 0;
}

static void rewrite_free(const struct ko_elf *elf, struct rewrite *rw)
{
	for (unsigned int i = 1; rw->relas && i < elf->shnum; i++)
		if (elf->shdrs[i].sh_type == SHT_RELA && rw->text_of[elf->shdrs[i].sh_info] < 0)
			free(rw->relas[i]);
	for (size_t t = 0; t < rw->ntexts; t++)
		text_free(&rw->texts[t]);
	free(rw->texts);
	free(rw->text_of);
	free(rw->syms);
	free(rw->strtab);
	free(rw->relas);
	free(rw->nrelas);
}

int rewrite_module(struct ko_context *ctx, struct loaded_module *m)
{
	struct rewrite rw = { 0 };
	uint8_t *file = NULL;
	size_t size = 0;

	if (texts_decode(ctx, &m->elf, &rw) || symbols_rewrite(ctx, &m->elf, &rw))
		goto out;
	for (size_t t = 0; t < rw.ntexts; t++)
		if (text_emit(ctx, &rw.texts[t], rw.stub_symbols))
			goto out;
	if (relocations_rewrite(ctx, &m->elf, &rw) ||
	    file_build(ctx, &m->elf, &rw, &file, &size) ||
	    sites_keep(ctx, m, &rw))
		goto out;
	rewrite_free(&m->elf, &rw);
	free(m->file);
	m->file = file;
	return elf_parse(ctx, &m->elf, m->file, size);
out:
	rewrite_free(&m->elf, &rw);
	free(file);
	return -1;
}

static int compare_sites(const void *a, const void *b)
{
	const struct ko_check_site *x = a, *y = b;

	return x->ret < y->ret ? -1 : x->ret > y->ret;
}

void rewrite_place_sites(struct loaded_module *m)
{
	for (size_t i = 0; i < m->pub.check_sites.count; i++) {
		struct ko_check_site *s = &m->pub.check_sites.entries[i];

		s->ret += m->section_addr[s->section];
	}
	qsort(m->pub.check_sites.entries, m->pub.check_sites.count,
	      sizeof(*m->pub.check_sites.entries), compare_sites);
}
