// SPDX-License-Identifier: GPL-2.0
/*
 * Reading and validating the .ko file.
 *
 * The file is untrusted input. Everything later steps dereference is checked
 * here once: the ELF header, every section header, the string tables (NUL
 * terminated), every symbol (name and section index) and every relocation
 * (symbol index, type, and that the bytes it patches lie inside its section).
 * After elf_parse() succeeds the other files may index freely.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "internal.h"

/* Linux appends a signature to signed modules; see scripts/sign-file.c. */
static const char module_sig_magic[] = "~Module signature appended~\n";
#define MODULE_SIG_INFO_SIZE	12	/* struct module_signature */

int elf_read_file(struct ko_context *ctx, const char *path, uint8_t **data,
		  size_t *size)
{
	struct stat st;
	uint8_t *buf;
	FILE *f;

	f = fopen(path, "rb");
	if (!f)
		return ko_fail(ctx, KO_ERR_IO, "cannot open: %s", strerror(errno));
	if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
		fclose(f);
		return ko_fail(ctx, KO_ERR_IO, "not a regular file");
	}
	/* One spare byte so an empty file still gets a valid buffer. */
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		fclose(f);
		return ko_fail(ctx, KO_ERR_NOMEM, "cannot allocate %lld bytes",
			       (long long)st.st_size);
	}
	if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		fclose(f);
		free(buf);
		return ko_fail(ctx, KO_ERR_IO, "read error");
	}
	fclose(f);
	*data = buf;
	*size = (size_t)st.st_size;
	return 0;
}

/*
 * Drops an appended signature from *size, as the kernel does before looking
 * at the ELF. The signature is not verified: the host decides which files a
 * driver process may load. Returns whether there was one.
 */
bool elf_strip_signature(const uint8_t *data, size_t *size)
{
	size_t magic_len = sizeof(module_sig_magic) - 1;
	const uint8_t *info;
	uint32_t sig_len;

	if (*size < magic_len + MODULE_SIG_INFO_SIZE ||
	    memcmp(data + *size - magic_len, module_sig_magic, magic_len))
		return false;
	info = data + *size - magic_len - MODULE_SIG_INFO_SIZE;
	/* The last member, sig_len, is big-endian. */
	sig_len = (uint32_t)info[8] << 24 | info[9] << 16 | info[10] << 8 | info[11];
	if (sig_len > *size - magic_len - MODULE_SIG_INFO_SIZE)
		return false;
	*size -= magic_len + MODULE_SIG_INFO_SIZE + sig_len;
	return true;
}

const char *elf_section_name(const struct ko_elf *elf, unsigned int index)
{
	return elf->shstrtab + elf->shdrs[index].sh_name;
}

const char *elf_symbol_name(const struct ko_elf *elf, size_t index)
{
	return elf->strtab + elf->syms[index].st_name;
}

unsigned int elf_find_section(const struct ko_elf *elf, const char *name)
{
	for (unsigned int i = 1; i < elf->shnum; i++)
		if (!strcmp(elf_section_name(elf, i), name))
			return i;
	return 0;
}

const void *elf_section_data(const struct ko_elf *elf, unsigned int index)
{
	return elf->data + elf->shdrs[index].sh_offset;
}

static const char *machine_name(unsigned int machine)
{
	switch (machine) {
	case EM_386:		return "i386";
	case EM_ARM:		return "ARM";
	case EM_AARCH64:	return "AArch64";
	case EM_PPC64:		return "PowerPC64";
	case EM_S390:		return "s390";
	case EM_RISCV:		return "RISC-V";
	case EM_MIPS:		return "MIPS";
	default:		return "unknown";
	}
}

static int check_header(struct ko_context *ctx, const Elf64_Ehdr *eh, size_t size)
{
	if (size < sizeof(*eh))
		return ko_fail(ctx, KO_ERR_ELF,
			       "file is %zu bytes, too short for an ELF header (%zu bytes)",
			       size, sizeof(*eh));
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG))
		return ko_fail(ctx, KO_ERR_ELF, "not an ELF file (bad magic)");
	if (eh->e_ident[EI_CLASS] != ELFCLASS64)
		return ko_fail(ctx, KO_ERR_ELF, "not a 64-bit ELF file (EI_CLASS %u)",
			       eh->e_ident[EI_CLASS]);
	if (eh->e_ident[EI_DATA] != ELFDATA2LSB)
		return ko_fail(ctx, KO_ERR_ELF, "not a little-endian ELF file (EI_DATA %u)",
			       eh->e_ident[EI_DATA]);
	if (eh->e_machine != EM_X86_64)
		return ko_fail(ctx, KO_ERR_ELF,
			       "ELF machine is %u (%s), not x86_64 (%u)",
			       eh->e_machine, machine_name(eh->e_machine), EM_X86_64);
	if (eh->e_type != ET_REL)
		return ko_fail(ctx, KO_ERR_ELF,
			       "ELF type is %u, not a relocatable object (ET_REL)",
			       eh->e_type);
	if (eh->e_shentsize != sizeof(Elf64_Shdr))
		return ko_fail(ctx, KO_ERR_ELF, "section header size is %u, not %zu",
			       eh->e_shentsize, sizeof(Elf64_Shdr));
	/* e_shnum == 0 would mean "more than 0xff00 sections": no module has that many. */
	if (eh->e_shnum == 0 || eh->e_shnum >= SHN_LORESERVE)
		return ko_fail(ctx, KO_ERR_ELF, "unsupported section count %u", eh->e_shnum);
	if (eh->e_shoff % 8)
		return ko_fail(ctx, KO_ERR_ELF,
			       "section header table offset 0x%llx is misaligned",
			       (unsigned long long)eh->e_shoff);
	if (eh->e_shoff > size ||
	    (size - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum)
		return ko_fail(ctx, KO_ERR_ELF,
			       "section header table (offset 0x%llx, %u entries) extends beyond the end of the file (%zu bytes): truncated?",
			       (unsigned long long)eh->e_shoff, eh->e_shnum, size);
	if (eh->e_shstrndx == SHN_UNDEF || eh->e_shstrndx >= eh->e_shnum)
		return ko_fail(ctx, KO_ERR_ELF, "section name table index %u out of range (%u sections)",
			       eh->e_shstrndx, eh->e_shnum);
	return 0;
}

/* A string table must end in NUL so that any in-range offset is a C string. */
static int check_strtab(struct ko_context *ctx, const struct ko_elf *elf,
			unsigned int index, const char *what)
{
	const Elf64_Shdr *sh = &elf->shdrs[index];

	if (sh->sh_type != SHT_STRTAB || sh->sh_size == 0 ||
	    elf->data[sh->sh_offset + sh->sh_size - 1] != '\0')
		return ko_fail(ctx, KO_ERR_ELF,
			       "%s (section %u) is not a NUL-terminated string table",
			       what, index);
	return 0;
}

static int check_sections(struct ko_context *ctx, struct ko_elf *elf)
{
	for (unsigned int i = 0; i < elf->shnum; i++) {
		const Elf64_Shdr *sh = &elf->shdrs[i];

		if (sh->sh_type != SHT_NOBITS &&
		    (sh->sh_offset > elf->size || sh->sh_size > elf->size - sh->sh_offset))
			return ko_fail(ctx, KO_ERR_ELF,
				       "section %u (offset 0x%llx, size 0x%llx) extends beyond the end of the file (%zu bytes)",
				       i, (unsigned long long)sh->sh_offset,
				       (unsigned long long)sh->sh_size, elf->size);
		if (sh->sh_addralign & (sh->sh_addralign - 1))
			return ko_fail(ctx, KO_ERR_ELF,
				       "section %u alignment %llu is not a power of two",
				       i, (unsigned long long)sh->sh_addralign);
		/* Regions are page-aligned, so sections can be aligned up to a page. */
		if ((sh->sh_flags & SHF_ALLOC) && sh->sh_addralign > PAGE_SIZE)
			return ko_fail(ctx, KO_ERR_ELF,
				       "section %u alignment %llu exceeds the page size",
				       i, (unsigned long long)sh->sh_addralign);
		if ((sh->sh_flags & SHF_ALLOC) && sh->sh_size > (1UL << 31))
			return ko_fail(ctx, KO_ERR_ELF,
				       "section %u is larger than 2 GiB", i);
	}
	return 0;
}

static int check_symbols(struct ko_context *ctx, struct ko_elf *elf)
{
	unsigned int symtab = 0;
	const Elf64_Shdr *sh;

	for (unsigned int i = 1; i < elf->shnum; i++) {
		if (elf->shdrs[i].sh_type != SHT_SYMTAB)
			continue;
		if (symtab)
			return ko_fail(ctx, KO_ERR_ELF,
				       "more than one symbol table (sections %u and %u)",
				       symtab, i);
		symtab = i;
	}
	if (!symtab)
		return ko_fail(ctx, KO_ERR_ELF, "no symbol table");
	sh = &elf->shdrs[symtab];
	if (sh->sh_entsize != sizeof(Elf64_Sym) || sh->sh_size % sizeof(Elf64_Sym) ||
	    sh->sh_offset % 8 || sh->sh_size == 0)
		return ko_fail(ctx, KO_ERR_ELF,
			       "symbol table (section %u) has a bad entry size, size or alignment",
			       symtab);
	if (sh->sh_link == 0 || sh->sh_link >= elf->shnum)
		return ko_fail(ctx, KO_ERR_ELF,
			       "symbol table's string table index %u out of range",
			       sh->sh_link);
	if (check_strtab(ctx, elf, sh->sh_link, "the symbol string table"))
		return -1;

	elf->symtab_index = symtab;
	elf->syms = elf_section_data(elf, symtab);
	elf->nsyms = sh->sh_size / sizeof(Elf64_Sym);
	elf->strtab = elf_section_data(elf, sh->sh_link);
	elf->strtab_size = elf->shdrs[sh->sh_link].sh_size;

	for (size_t i = 1; i < elf->nsyms; i++) {
		const Elf64_Sym *sym = &elf->syms[i];

		if (sym->st_name >= elf->strtab_size)
			return ko_fail(ctx, KO_ERR_ELF,
				       "symbol %zu: name offset %u out of range", i,
				       sym->st_name);
		if (sym->st_shndx == SHN_COMMON)
			return ko_fail(ctx, KO_ERR_ELF,
				       "symbol '%s' is COMMON (built with -fcommon?)",
				       elf_symbol_name(elf, i));
		if (sym->st_shndx >= elf->shnum && sym->st_shndx != SHN_ABS)
			return ko_fail(ctx, KO_ERR_ELF,
				       "symbol %zu ('%s'): section index %u out of range (%u sections)",
				       i, elf_symbol_name(elf, i), sym->st_shndx,
				       elf->shnum);
	}
	return 0;
}

static int check_relocations(struct ko_context *ctx, const struct ko_elf *elf)
{
	for (unsigned int i = 1; i < elf->shnum; i++) {
		const Elf64_Shdr *sh = &elf->shdrs[i];
		const char *name = elf_section_name(elf, i);
		const Elf64_Rela *rela;
		const Elf64_Shdr *target;
		size_t n;

		if (sh->sh_type == SHT_REL)
			return ko_fail(ctx, KO_ERR_ELF,
				       "section %s is SHT_REL; x86_64 modules use SHT_RELA only",
				       name);
		if (sh->sh_type != SHT_RELA)
			continue;
		if (sh->sh_entsize != sizeof(Elf64_Rela) || sh->sh_size % sizeof(Elf64_Rela) ||
		    sh->sh_offset % 8)
			return ko_fail(ctx, KO_ERR_ELF,
				       "section %s has a bad entry size, size or alignment",
				       name);
		if (sh->sh_link != elf->symtab_index)
			return ko_fail(ctx, KO_ERR_ELF,
				       "section %s refers to section %u, not the symbol table",
				       name, sh->sh_link);
		if (sh->sh_info == 0 || sh->sh_info >= elf->shnum)
			return ko_fail(ctx, KO_ERR_ELF,
				       "section %s: target section index %u out of range (%u sections)",
				       name, sh->sh_info, elf->shnum);
		target = &elf->shdrs[sh->sh_info];
		rela = elf_section_data(elf, i);
		n = sh->sh_size / sizeof(Elf64_Rela);
		for (size_t j = 0; j < n; j++) {
			size_t sym = ELF64_R_SYM(rela[j].r_info);
			unsigned int type = ELF64_R_TYPE(rela[j].r_info);
			unsigned int width = reloc_width(type);

			if (sym >= elf->nsyms)
				return ko_fail(ctx, KO_ERR_ELF,
					       "section %s entry %zu: symbol index %zu out of range (symbol table has %zu entries)",
					       name, j, sym, elf->nsyms);
			if (!ko_reloc_type_name(type))
				return ko_fail(ctx, KO_ERR_RELOC,
					       "section %s entry %zu: unsupported relocation type %u",
					       name, j, type);
			if (rela[j].r_offset > target->sh_size ||
			    target->sh_size - rela[j].r_offset < width)
				return ko_fail(ctx, KO_ERR_ELF,
					       "section %s entry %zu: offset 0x%llx (+%u bytes) outside its %llu-byte target section",
					       name, j, (unsigned long long)rela[j].r_offset,
					       width, (unsigned long long)target->sh_size);
		}
	}
	return 0;
}

int elf_parse(struct ko_context *ctx, struct ko_elf *elf, const uint8_t *data,
	      size_t size)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)data;

	memset(elf, 0, sizeof(*elf));
	elf->data = data;
	elf->size = size;
	if (check_header(ctx, eh, size))
		return -1;
	elf->shdrs = (const Elf64_Shdr *)(data + eh->e_shoff);
	elf->shnum = eh->e_shnum;
	if (check_sections(ctx, elf))
		return -1;
	if (check_strtab(ctx, elf, eh->e_shstrndx, "the section name table"))
		return -1;
	elf->shstrtab = elf_section_data(elf, eh->e_shstrndx);
	elf->shstrtab_size = elf->shdrs[eh->e_shstrndx].sh_size;
	for (unsigned int i = 0; i < elf->shnum; i++)
		if (elf->shdrs[i].sh_name >= elf->shstrtab_size)
			return ko_fail(ctx, KO_ERR_ELF,
				       "section %u: name offset %u out of range", i,
				       elf->shdrs[i].sh_name);
	if (check_symbols(ctx, elf))
		return -1;
	return check_relocations(ctx, elf);
}
