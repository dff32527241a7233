// SPDX-License-Identifier: GPL-2.0
/*
 * Makes loaded modules visible to gdb, so that `gdb -p PID` on a driver
 * process names the module's functions in backtraces and breakpoints (the DDE
 * paper's point: a driver in a process is debugged with ordinary tools).
 *
 * gdb does not know where our loader placed a module, so we use gdb's JIT
 * interface, the one JIT compilers use: the process keeps a list of in-memory
 * ELF files in __jit_debug_descriptor and calls __jit_debug_register_code()
 * after each change, where gdb keeps a breakpoint.  On attach gdb reads the
 * whole list.  Each entry is a copy of the .ko whose allocated sections'
 * sh_addr is set to where the loader put them; gdb takes a section's address
 * from sh_addr, so every symbol of the module lands where its code runs.
 *
 * perf has no such interface: it names code in anonymous memory from
 * /tmp/perf-PID.map, a text file JIT compilers write ("START SIZE name" per
 * function, in hex). With UNDERSTUDY_PERF_MAP=1 in the environment (the
 * daemon passes its own on) every module's functions go there too; not by
 * default, because the file outlives the process.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../loader/loader.h"
#include "driver.h"

enum { JIT_NOACTION = 0, JIT_REGISTER_FN, JIT_UNREGISTER_FN };

struct jit_code_entry {
	struct jit_code_entry *next, *prev;
	const char *symfile_addr;
	uint64_t symfile_size;
};

struct jit_descriptor {
	uint32_t version;
	uint32_t action_flag;
	struct jit_code_entry *relevant_entry, *first_entry;
};

/* The names and layout are gdb's; both symbols must stay in the executable. */
struct jit_descriptor __jit_debug_descriptor = { 1, JIT_NOACTION, NULL, NULL };

void __attribute__((noinline, used)) __jit_debug_register_code(void)
{
	/* gdb's breakpoint lives here; the asm keeps the call from being elided. */
	__asm__ volatile("" ::: "memory");
}

static char *read_file(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long len;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 &&
	    fseek(f, 0, SEEK_SET) == 0 && (buf = malloc(len)) &&
	    fread(buf, 1, len, f) != (size_t)len) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*size = buf ? (size_t)len : 0;
	return buf;
}

static const struct ko_section *placed(const struct ko_module *m, const char *name)
{
	for (size_t i = 0; i < m->sections.count; i++)
		if (!strcmp(m->sections.entries[i].name, name))
			return &m->sections.entries[i];
	return NULL;
}

bool debugger_perf_map_wanted(void)
{
	const char *v = getenv("UNDERSTUDY_PERF_MAP");

	return v && *v && strcmp(v, "0");
}

static void perf_map_path(char *buf, size_t len, pid_t pid)
{
	snprintf(buf, len, "/tmp/perf-%d.map", (int)pid);
}

/* Appends the functions of placed sections (sh_addr set) to this process's perf map. */
static void write_perf_map(const char *elf, size_t size, const Elf64_Ehdr *eh, const Elf64_Shdr *sh)
{
	static FILE *map;
	char path[64];

	if (!map) {
		int fd;

		perf_map_path(path, sizeof(path), getpid());
		/* A predictable name in /tmp: never written through a link planted there. */
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
		map = fd < 0 ? NULL : fdopen(fd, "w");
		if (!map) {
			fprintf(stderr, "understudy-driver: perf map %s: %s\n", path, strerror(errno));
			if (fd >= 0)
				close(fd);
			return;
		}
	}
	for (unsigned int i = 0; i < eh->e_shnum; i++) {
		const Elf64_Shdr *names;
		const Elf64_Sym *syms;

		if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum ||
		    sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset)
			continue;
		names = &sh[sh[i].sh_link];
		if (names->sh_offset > size || names->sh_size > size - names->sh_offset)
			continue;
		syms = (const Elf64_Sym *)(elf + sh[i].sh_offset);
		for (size_t k = 0; k < sh[i].sh_size / sizeof(*syms); k++) {
			const Elf64_Sym *sym = &syms[k];
			const char *name = elf + names->sh_offset + sym->st_name;

			if (ELF64_ST_TYPE(sym->st_info) != STT_FUNC || sym->st_shndx == SHN_UNDEF ||
			    sym->st_shndx >= eh->e_shnum || !sh[sym->st_shndx].sh_addr ||
			    !(sh[sym->st_shndx].sh_flags & SHF_EXECINSTR) || sym->st_name >= names->sh_size)
				continue;
			fprintf(map, "%llx %llx %.*s\n",
				(unsigned long long)(sh[sym->st_shndx].sh_addr + sym->st_value),
				(unsigned long long)sym->st_size,
				(int)strnlen(name, names->sh_size - sym->st_name), name);
		}
	}
	fflush(map);
}

void debugger_follow_fork(pid_t parent)
{
	char from[64], to[64];

	if (!debugger_perf_map_wanted())
		return;
	/* Same modules at the same addresses: the same map, under the fork's pid. */
	perf_map_path(from, sizeof(from), parent);
	perf_map_path(to, sizeof(to), getpid());
	unlink(to);
	if (link(from, to))
		fprintf(stderr, "understudy-driver: perf map %s: %s\n", to, strerror(errno));
}

/*
 * The loader has already validated the file (it is the one just loaded), so
 * only what this copy needs is checked: that the section table is in range.
 */
void debugger_register_module(const struct ko_module *m)
{
	struct jit_code_entry *entry;
	const Elf64_Shdr *strtab;
	Elf64_Ehdr *eh;
	Elf64_Shdr *sh;
	size_t size;
	char *elf = read_file(m->path, &size);

	if (!elf)
		return;
	eh = (Elf64_Ehdr *)elf;
	if (size < sizeof(*eh) || eh->e_shoff > size ||
	    eh->e_shnum > (size - eh->e_shoff) / sizeof(*sh) || eh->e_shstrndx >= eh->e_shnum)
		goto bad;
	sh = (Elf64_Shdr *)(elf + eh->e_shoff);
	strtab = &sh[eh->e_shstrndx];
	if (strtab->sh_offset > size || strtab->sh_size > size - strtab->sh_offset)
		goto bad;
	for (unsigned int i = 0; i < eh->e_shnum; i++) {
		const struct ko_section *s;

		if (!(sh[i].sh_flags & SHF_ALLOC) || sh[i].sh_name >= strtab->sh_size)
			continue;
		s = placed(m, elf + strtab->sh_offset + sh[i].sh_name);
		/* Per-cpu sections hold offsets into the GS block, not addresses. */
		if (s && !(s->flags & KO_SEC_PERCPU))
			sh[i].sh_addr = s->addr;
	}
	if (debugger_perf_map_wanted())
		write_perf_map(elf, size, eh, sh);
	entry = calloc(1, sizeof(*entry));
	if (!entry)
		goto bad;
	entry->symfile_addr = elf;
	entry->symfile_size = size;
	entry->next = __jit_debug_descriptor.first_entry;
	if (entry->next)
		entry->next->prev = entry;
	__jit_debug_descriptor.first_entry = entry;
	__jit_debug_descriptor.relevant_entry = entry;
	__jit_debug_descriptor.action_flag = JIT_REGISTER_FN;
	__jit_debug_register_code();
	return;
bad:
	/* Debugging aid only: a driver runs the same without it. */
	fprintf(stderr, "understudy-driver: %s: not registered with debuggers\n", m->path);
	free(elf);
}
