// SPDX-License-Identifier: GPL-2.0
/*
 * What the module says about itself: .modinfo (name, vermagic, license,
 * depends, ...), __versions (the CRC it expects of each import) and the
 * entry points recorded in its struct module.
 */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

static const char *modinfo_get(const struct ko_module *m, const char *key)
{
	size_t len = strlen(key);

	for (size_t i = 0; i < m->modinfo.count; i++) {
		const char *entry = m->modinfo.entries[i];

		if (!strncmp(entry, key, len) && entry[len] == '=')
			return entry + len + 1;
	}
	return NULL;
}

/*
 * .modinfo is a run of NUL-terminated "key=value" strings, with NUL padding
 * between them where the compiler aligned a variable.
 */
/*
 * Linux's rule (kernel/module/version.c, same_magic): a module with CRCs
 * (__versions) is checked symbol by symbol, so the release at the start of
 * vermagic is not compared -- a module of an ABI Debian ships no headers for
 * loads on a kernel half whose CRCs it all matches (runtime/README.md, "One
 * kernel half per ABI"). Without CRCs the whole string must match.
 */
static bool same_magic(const char *module, const char *expected, bool has_crcs)
{
	if (has_crcs) {
		module += strcspn(module, " ");
		expected += strcspn(expected, " ");
	}
	return !strcmp(module, expected);
}

int modinfo_parse(struct ko_context *ctx, struct loaded_module *m)
{
	const struct ko_elf *elf = &m->elf;
	unsigned int index = elf_find_section(elf, ".modinfo");
	const char *p, *end;
	size_t count = 0;

	if (!index)
		return ko_fail(ctx, KO_ERR_MODINFO, "no .modinfo section");
	p = elf_section_data(elf, index);
	end = p + elf->shdrs[index].sh_size;
	if (elf->shdrs[index].sh_type == SHT_NOBITS ||
	    (p != end && end[-1] != '\0'))
		return ko_fail(ctx, KO_ERR_MODINFO, ".modinfo is not NUL-terminated");

	for (const char *s = p; s < end; s += strlen(s) + 1)
		count += *s != '\0';
	m->pub.modinfo.entries = calloc(count ? count : 1, sizeof(char *));
	if (!m->pub.modinfo.entries)
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	for (const char *s = p; s < end; s += strlen(s) + 1)
		if (*s)
			m->pub.modinfo.entries[m->pub.modinfo.count++] = s;

	m->pub.name = modinfo_get(&m->pub, "name");
	m->pub.vermagic = modinfo_get(&m->pub, "vermagic");
	m->pub.license = modinfo_get(&m->pub, "license");
	m->pub.depends = modinfo_get(&m->pub, "depends");
	if (!m->pub.depends)
		m->pub.depends = "";
	if (!m->pub.name || !*m->pub.name)
		return ko_fail(ctx, KO_ERR_MODINFO, "no name= in .modinfo");
	if (!m->pub.vermagic)
		return ko_fail(ctx, KO_ERR_MODINFO, "no vermagic= in .modinfo");

	if (ctx->opts.vermagic && !same_magic(m->pub.vermagic, ctx->opts.vermagic,
					      elf_find_section(elf, "__versions")))
		return ko_fail(ctx, KO_ERR_VERMAGIC,
			       "vermagic mismatch: module has '%s', expected '%s'",
			       m->pub.vermagic, ctx->opts.vermagic);
	return 0;
}

int versions_parse(struct ko_context *ctx, struct loaded_module *m)
{
	const struct ko_elf *elf = &m->elf;
	unsigned int index = elf_find_section(elf, "__versions");
	const uint8_t *p;
	size_t size;

	if (!index)
		return 0;	/* built without CONFIG_MODVERSIONS */
	size = elf->shdrs[index].sh_size;
	if (elf->shdrs[index].sh_type == SHT_NOBITS || size % MODVERSION_SIZE)
		return ko_fail(ctx, KO_ERR_MODINFO,
			       "__versions size %zu is not a multiple of %d", size,
			       MODVERSION_SIZE);
	p = elf_section_data(elf, index);
	m->nversions = size / MODVERSION_SIZE;
	m->versions = calloc(m->nversions ? m->nversions : 1, sizeof(*m->versions));
	if (!m->versions)
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < m->nversions; i++) {
		const uint8_t *entry = p + i * MODVERSION_SIZE;
		const char *name = (const char *)entry + 8;

		if (!memchr(name, '\0', MODVERSION_SIZE - 8))
			return ko_fail(ctx, KO_ERR_MODINFO,
				       "__versions entry %zu: name is not NUL-terminated", i);
		/* The field is an unsigned long; the CRC is its low 32 bits. */
		m->versions[i].crc = (uint32_t)read_u64(entry);
		m->versions[i].name = name;
	}
	return 0;
}

/*
 * init_module()/cleanup_module() are found through the module's own
 * relocations: modpost's generated .mod.c initialises
 *	struct module __this_module = { .init = init_module, .exit = cleanup_module }
 * so .rela.gnu.linkonce.this_module holds one R_X86_64_64 against each name,
 * at offsetof(struct module, init/exit). That gives the offsets of the real
 * struct module of the ABI the module was built for, without compiling
 * anything and without hard-coding a layout; the context checks that every
 * module agrees, since the runtime writes to these fields.
 * The addresses themselves are read back after relocation.
 */
int entry_points_find(struct ko_context *ctx, struct loaded_module *m)
{
	const struct ko_elf *elf = &m->elf;

	m->this_module_shndx = elf_find_section(elf, ".gnu.linkonce.this_module");
	if (!m->this_module_shndx)
		return ko_fail(ctx, KO_ERR_MODINFO,
			       "no .gnu.linkonce.this_module section (struct module)");
	if (!(elf->shdrs[m->this_module_shndx].sh_flags & SHF_ALLOC))
		return ko_fail(ctx, KO_ERR_MODINFO,
			       ".gnu.linkonce.this_module is not an allocated section");

	for (unsigned int i = 1; i < elf->shnum; i++) {
		const Elf64_Shdr *sh = &elf->shdrs[i];
		const Elf64_Rela *rela = elf_section_data(elf, i);

		if (sh->sh_type != SHT_RELA || sh->sh_info != m->this_module_shndx)
			continue;
		for (size_t j = 0; j < sh->sh_size / sizeof(*rela); j++) {
			const char *name = elf_symbol_name(elf, ELF64_R_SYM(rela[j].r_info));

			if (ELF64_R_TYPE(rela[j].r_info) != R_X86_64_64)
				continue;
			if (!strcmp(name, "init_module")) {
				m->init_offset = rela[j].r_offset;
				m->has_init = true;
			} else if (!strcmp(name, "cleanup_module")) {
				m->exit_offset = rela[j].r_offset;
				m->has_exit = true;
			}
		}
	}
	if ((m->has_init && ctx->module_init_offset &&
	     m->init_offset != ctx->module_init_offset) ||
	    (m->has_exit && ctx->module_exit_offset &&
	     m->exit_offset != ctx->module_exit_offset))
		return ko_fail(ctx, KO_ERR_MODINFO,
			       "struct module layout differs from earlier modules: init at 0x%llx, exit at 0x%llx (earlier: 0x%llx, 0x%llx)",
			       (unsigned long long)m->init_offset,
			       (unsigned long long)m->exit_offset,
			       (unsigned long long)ctx->module_init_offset,
			       (unsigned long long)ctx->module_exit_offset);
	return 0;
}
