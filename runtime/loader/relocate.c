// SPDX-License-Identifier: GPL-2.0
/*
 * Symbol values and RELA relocations.
 *
 * Across all 4023 modules of Debian's 6.1.0-55-amd64 only R_X86_64_64, PC32,
 * PLT32, 32S, PC64 and NONE occur (readelf -r; see tests/loader). R_X86_64_32
 * is accepted as well because nothing about it is hard. Every other type is
 * refused when the file is validated.
 *
 * S = symbol value, A = addend, P = address being patched:
 *	64	S + A		any 64-bit value
 *	32	S + A		must fit unsigned 32 bits
 *	32S	S + A		must fit signed 32 bits (kernel code model)
 *	PC32	S + A - P	must fit signed 32 bits
 *	PLT32	S + A - P	same as PC32: there is no PLT, calls go direct
 *	PC64	S + A - P	any 64-bit value
 *
 * As Linux does (arch/x86/kernel/module.c), the bytes being patched must be
 * zero beforehand: anything else means a corrupt or doubly-relocated file.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

const char *ko_reloc_type_name(unsigned int type)
{
	switch (type) {
	case R_X86_64_NONE:	return "R_X86_64_NONE";
	case R_X86_64_64:	return "R_X86_64_64";
	case R_X86_64_PC32:	return "R_X86_64_PC32";
	case R_X86_64_32:	return "R_X86_64_32";
	case R_X86_64_32S:	return "R_X86_64_32S";
	case R_X86_64_PLT32:	return "R_X86_64_PLT32";
	case R_X86_64_PC64:	return "R_X86_64_PC64";
	default:		return NULL;
	}
}

/* Bytes a relocation of this type patches. */
unsigned int reloc_width(unsigned int type)
{
	switch (type) {
	case R_X86_64_64:
	case R_X86_64_PC64:
		return 8;
	case R_X86_64_PC32:
	case R_X86_64_32:
	case R_X86_64_32S:
	case R_X86_64_PLT32:
		return 4;
	default:
		return 0;
	}
}

/* Marks a symbol whose section is not in memory; relocating against it fails. */
#define SYMBOL_NOT_PLACED	UINT64_MAX

/*
 * The value of every symbol: imports from the resolution step, symbols in
 * .data..percpu as offsets in the per-cpu block, other defined symbols as
 * addresses in the image.
 */
int symbols_compute(struct ko_context *ctx, struct loaded_module *m)
{
	const struct ko_elf *elf = &m->elf;

	m->symbol_value = calloc(elf->nsyms, sizeof(*m->symbol_value));
	if (!m->symbol_value)
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	for (size_t i = 1; i < elf->nsyms; i++) {
		const Elf64_Sym *sym = &elf->syms[i];
		int32_t import = m->import_of_symbol[i];

		if (sym->st_shndx == SHN_UNDEF)
			m->symbol_value[i] = import >= 0 ?
				m->pub.imports.entries[import].value.value : 0;
		else if (sym->st_shndx == SHN_ABS)
			m->symbol_value[i] = sym->st_value;
		else if (sym->st_shndx == m->percpu_shndx)
			m->symbol_value[i] = m->pub.percpu.addr + sym->st_value;
		else if (m->section_addr[sym->st_shndx])
			m->symbol_value[i] = m->section_addr[sym->st_shndx] + sym->st_value;
		else
			m->symbol_value[i] = SYMBOL_NOT_PLACED;
	}
	return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && !strcmp(s + n - k, suffix);
}

int ko_module_find_symbol(const struct ko_module *pub, const char *prefix,
			  const char *suffix, uint64_t *addr, uint64_t *size)
{
	const struct loaded_module *m = to_loaded(pub);
	const struct ko_elf *elf = &m->elf;

	for (size_t i = 1; i < elf->nsyms; i++) {
		const Elf64_Sym *sym = &elf->syms[i];
		const char *name = elf_symbol_name(elf, i);
		uint64_t section_size;

		if (sym->st_shndx == SHN_UNDEF || sym->st_shndx == SHN_ABS ||
		    sym->st_shndx == m->percpu_shndx || !m->section_addr[sym->st_shndx] ||
		    strncmp(name, prefix, strlen(prefix)) || !ends_with(name, suffix))
			continue;
		section_size = elf->shdrs[sym->st_shndx].sh_size;
		if (sym->st_value > section_size || sym->st_size > section_size - sym->st_value)
			continue;
		*addr = m->symbol_value[i];
		*size = sym->st_size;
		return 0;
	}
	return -1;
}

static int apply_one(struct ko_context *ctx, struct loaded_module *m,
		     unsigned int rela_shndx, size_t j, const Elf64_Rela *r)
{
	const struct ko_elf *elf = &m->elf;
	unsigned int target = elf->shdrs[rela_shndx].sh_info;
	unsigned int type = ELF64_R_TYPE(r->r_info);
	size_t symbol = ELF64_R_SYM(r->r_info);
	unsigned int width = reloc_width(type);
	uint64_t place = m->section_addr[target] + r->r_offset;
	uint64_t s = m->symbol_value[symbol];
	uint64_t value;
	static const uint8_t zero[8];
	const char *name = elf_symbol_name(elf, symbol);

	if (type == R_X86_64_NONE)
		goto counted;
	if (!*name && elf->syms[symbol].st_shndx < elf->shnum)
		name = elf_section_name(elf, elf->syms[symbol].st_shndx);
	if (s == SYMBOL_NOT_PLACED)
		return ko_fail(ctx, KO_ERR_RELOC,
			       "%s entry %zu: symbol '%s' lies in a section that is not loaded",
			       elf_section_name(elf, rela_shndx), j, name);

	switch (type) {
	case R_X86_64_64:
	case R_X86_64_32:
	case R_X86_64_32S:
		value = s + r->r_addend;
		break;
	default:		/* PC32, PLT32, PC64 */
		value = s + r->r_addend - place;
		break;
	}
	if ((type == R_X86_64_32 && value != (uint32_t)value) ||
	    (type != R_X86_64_32 && width == 4 && (int64_t)value != (int32_t)value))
		return ko_fail(ctx, KO_ERR_RELOC,
			       "%s entry %zu: %s against '%s' (0x%" PRIx64 "%+" PRId64 ") at 0x%" PRIx64 " overflows 32 bits (0x%" PRIx64 ")",
			       elf_section_name(elf, rela_shndx), j,
			       ko_reloc_type_name(type), name, s, (int64_t)r->r_addend,
			       place, value);
	if (memcmp((void *)place, zero, width))
		return ko_fail(ctx, KO_ERR_RELOC,
			       "%s entry %zu: %s at %s+0x%llx: existing value is not zero",
			       elf_section_name(elf, rela_shndx), j,
			       ko_reloc_type_name(type), elf_section_name(elf, target),
			       (unsigned long long)r->r_offset);
	memcpy((void *)place, &value, width);	/* little-endian: low bytes */
counted:
	m->pub.relocs[type]++;
	return 0;
}

int relocations_apply(struct ko_context *ctx, struct loaded_module *m)
{
	const struct ko_elf *elf = &m->elf;

	for (unsigned int i = 1; i < elf->shnum; i++) {
		const Elf64_Shdr *sh = &elf->shdrs[i];
		const Elf64_Rela *rela = elf_section_data(elf, i);

		/* Relocations of sections not loaded (none in practice) are moot. */
		if (sh->sh_type != SHT_RELA || !m->section_addr[sh->sh_info])
			continue;
		for (size_t j = 0; j < sh->sh_size / sizeof(*rela); j++)
			if (apply_one(ctx, m, i, j, &rela[j]))
				return -1;
	}
	return 0;
}
