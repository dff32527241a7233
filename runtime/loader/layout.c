// SPDX-License-Identifier: GPL-2.0
/*
 * Where things go: the low window every module lives in, the layout of one
 * module's image inside it, and the per-cpu block.
 *
 * The window is reserved PROT_NONE once, with MAP_FIXED_NOREPLACE so that it
 * never silently replaces an existing mapping, and is then handed out from
 * the bottom up. Modules are never unloaded individually, so a bump pointer is
 * enough; a failed load rolls the pointer back.
 *
 * A module image is [text | rodata | data], each region page-aligned so that
 * it can get its own protection once relocation is done: text R-X, rodata R--,
 * data RW-. Linux's module loader uses the same three-way split.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "internal.h"

#define TWO_GIB	(1UL << 31)

enum region { REGION_TEXT, REGION_RODATA, REGION_DATA, NR_REGIONS };

int window_reserve(struct ko_context *ctx, char *err, size_t errlen)
{
	void *p;

	if (ctx->window_base % PAGE_SIZE || ctx->window_size % PAGE_SIZE ||
	    ctx->window_size == 0 || ctx->window_base > TWO_GIB ||
	    ctx->window_size > TWO_GIB - ctx->window_base) {
		snprintf(err, errlen,
			 "low window 0x%lx+0x%zx must be page-aligned, non-empty and end below 2 GiB",
			 (unsigned long)ctx->window_base, ctx->window_size);
		return -1;
	}
	p = mmap((void *)ctx->window_base, ctx->window_size, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
		 -1, 0);
	if (p == MAP_FAILED || p != (void *)ctx->window_base) {
		snprintf(err, errlen, "cannot reserve the low window 0x%lx+0x%zx: %s",
			 (unsigned long)ctx->window_base, ctx->window_size,
			 p == MAP_FAILED ? strerror(errno) : "kernel placed it elsewhere");
		if (p != MAP_FAILED)
			munmap(p, ctx->window_size);
		return -1;
	}
	return 0;
}

void window_release(struct ko_context *ctx)
{
	munmap((void *)ctx->window_base, ctx->window_size);
}

/* Returns [mark, window_used) to the PROT_NONE reservation. */
void window_rollback(struct ko_context *ctx, size_t mark)
{
	if (ctx->window_used > mark)
		mmap((void *)(ctx->window_base + mark), ctx->window_used - mark,
		     PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
		     -1, 0);
	ctx->window_used = mark;
}

void *ko_alloc_low(struct ko_context *ctx, size_t size, int prot)
{
	size_t rounded = ALIGN_UP(size, PAGE_SIZE);
	void *addr = (void *)(ctx->window_base + ctx->window_used);

	if (rounded < size || rounded > ctx->window_size - ctx->window_used)
		return NULL;
	/* MAP_FIXED is right here: the range is ours, reserved PROT_NONE. */
	if (mmap(addr, rounded, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		 -1, 0) == MAP_FAILED)
		return NULL;
	ctx->window_used += rounded;
	return addr;
}

int ko_percpu_alloc(struct ko_context *ctx, size_t size, size_t align,
		    uint64_t *offset)
{
	if (align == 0 || align & (align - 1))
		return -1;
	ctx->percpu_end = ALIGN_UP(ctx->percpu_end, align);
	*offset = ctx->percpu_end;
	ctx->percpu_end += size;
	if (align > ctx->percpu_align)
		ctx->percpu_align = align;
	return 0;
}

void ko_percpu_layout(const struct ko_context *ctx, struct ko_percpu_layout *out)
{
	out->align = ctx->percpu_align;
	out->size = ALIGN_UP(ctx->percpu_end, ctx->percpu_align);
}

void ko_percpu_init_block(const struct ko_context *ctx, void *block)
{
	struct ko_percpu_layout layout;

	ko_percpu_layout(ctx, &layout);
	memset(block, 0, layout.size);
	for (size_t i = 0; i < ctx->nmodules; i++) {
		const struct ko_module *m = &ctx->modules[i]->pub;

		if (m->percpu.size)
			memcpy((char *)block + m->percpu.addr, m->percpu_template,
			       m->percpu.size);
	}
}

static enum region region_of(const Elf64_Shdr *sh)
{
	if (sh->sh_flags & SHF_EXECINSTR)
		return REGION_TEXT;
	if (sh->sh_flags & SHF_WRITE)
		return REGION_DATA;
	return REGION_RODATA;
}

/*
 * Sections the kernel does not keep in memory either: the loader has already
 * read them from the file.
 */
static bool section_is_mapped(const struct ko_elf *elf, unsigned int i)
{
	const char *name = elf_section_name(elf, i);

	return (elf->shdrs[i].sh_flags & SHF_ALLOC) &&
	       strcmp(name, ".modinfo") && strcmp(name, "__versions");
}

int layout_map(struct ko_context *ctx, struct loaded_module *m)
{
	const struct ko_elf *elf = &m->elf;
	uint64_t size[NR_REGIONS] = { 0 }, start[NR_REGIONS];
	uint64_t *offset_in_region;
	struct ko_region *regions[NR_REGIONS] = {
		&m->pub.text, &m->pub.rodata, &m->pub.data
	};
	size_t nplaced = 0;
	uint8_t *base;

	offset_in_region = calloc(elf->shnum, sizeof(*offset_in_region));
	m->section_addr = calloc(elf->shnum, sizeof(*m->section_addr));
	m->pub.sections.entries = calloc(elf->shnum, sizeof(struct ko_section));
	if (!offset_in_region || !m->section_addr || !m->pub.sections.entries) {
		free(offset_in_region);
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	}

	for (unsigned int i = 1; i < elf->shnum; i++) {
		const Elf64_Shdr *sh = &elf->shdrs[i];
		enum region r = region_of(sh);

		if (!section_is_mapped(elf, i))
			continue;
		size[r] = ALIGN_UP(size[r], sh->sh_addralign ? sh->sh_addralign : 1);
		offset_in_region[i] = size[r];
		size[r] += sh->sh_size;
	}
	start[REGION_TEXT] = 0;
	start[REGION_RODATA] = ALIGN_UP(size[REGION_TEXT], PAGE_SIZE);
	start[REGION_DATA] = start[REGION_RODATA] + ALIGN_UP(size[REGION_RODATA], PAGE_SIZE);
	m->pub.image.size = start[REGION_DATA] + ALIGN_UP(size[REGION_DATA], PAGE_SIZE);

	base = ko_alloc_low(ctx, m->pub.image.size, PROT_READ | PROT_WRITE);
	if (!base) {
		free(offset_in_region);
		return ko_fail(ctx, KO_ERR_NOMEM,
			       "image of %llu bytes does not fit in the low window (%zu of %zu bytes used)",
			       (unsigned long long)m->pub.image.size, ctx->window_used,
			       ctx->window_size);
	}
	m->pub.image.addr = (uint64_t)base;
	for (int r = 0; r < NR_REGIONS; r++) {
		regions[r]->addr = m->pub.image.addr + start[r];
		regions[r]->size = size[r];
	}

	for (unsigned int i = 1; i < elf->shnum; i++) {
		const Elf64_Shdr *sh = &elf->shdrs[i];
		enum region r = region_of(sh);
		struct ko_section *s;

		if (!section_is_mapped(elf, i))
			continue;
		m->section_addr[i] = regions[r]->addr + offset_in_region[i];
		/* NOBITS (.bss) stays as mmap gave it: zero. */
		if (sh->sh_type != SHT_NOBITS)
			memcpy((void *)m->section_addr[i], elf_section_data(elf, i),
			       sh->sh_size);

		s = &m->pub.sections.entries[nplaced++];
		s->name = elf_section_name(elf, i);
		s->addr = m->section_addr[i];
		s->size = sh->sh_size;
		s->align = sh->sh_addralign;
		s->flags = (r == REGION_TEXT ? KO_SEC_EXEC : 0) |
			   (r == REGION_DATA ? KO_SEC_WRITE : 0) |
			   (sh->sh_type == SHT_NOBITS ? KO_SEC_NOBITS : 0);

		/*
		 * .data..percpu is kept in the image as the template each CPU's
		 * copy starts from; its symbols resolve to the offset of that
		 * copy in the per-cpu block (see symbols_compute()).
		 */
		if (!strcmp(s->name, ".data..percpu")) {
			s->flags |= KO_SEC_PERCPU;
			m->percpu_shndx = i;
			m->pub.percpu_template = (const void *)s->addr;
			m->pub.percpu.size = sh->sh_size;
			ko_percpu_alloc(ctx, sh->sh_size,
					sh->sh_addralign ? sh->sh_addralign : 1,
					&m->pub.percpu.addr);
		}
		if (!strcmp(s->name, ".init.text")) {
			m->pub.init_text.addr = s->addr;
			m->pub.init_text.size = s->size;
		}
	}
	m->pub.sections.count = nplaced;
	free(offset_in_region);
	return 0;
}

int layout_protect(struct ko_context *ctx, struct loaded_module *m)
{
	static const int prot[NR_REGIONS] = {
		PROT_READ | PROT_EXEC, PROT_READ, PROT_READ | PROT_WRITE
	};
	const struct ko_region *regions[NR_REGIONS] = {
		&m->pub.text, &m->pub.rodata, &m->pub.data
	};

	for (int r = 0; r < NR_REGIONS; r++) {
		size_t len = ALIGN_UP(regions[r]->size, PAGE_SIZE);

		if (len && mprotect((void *)regions[r]->addr, len, prot[r]))
			return ko_fail(ctx, KO_ERR_NOMEM, "mprotect of %zu bytes at 0x%llx: %s",
				       len, (unsigned long long)regions[r]->addr,
				       strerror(errno));
	}
	return 0;
}
