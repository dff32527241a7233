// SPDX-License-Identifier: GPL-2.0
/*
 * One code section of a checked module, emitted again (docs/checking.md,
 * "The rewritten module"): its instructions laid out with their probes
 * (push %rdi; <load %rdi>; call stub; pop %rdi) before them, short
 * branches widened to rel32, same-section displacements recomputed through
 * the old-to-new offset map, and the section's relocations moved with
 * their instructions. rewrite-x86.c decoded it; rewrite.c applies the map
 * to everything outside the code that points into it.
 */
#include <inttypes.h>
#include <stdlib.h>

#include <understudy/trace.h>

#include "rewrite.h"

#define PROBE_OVERHEAD	7	/* push, call rel32, pop */

static unsigned int emitted_len(const struct rw_insn *in)
{
	switch (in->branch) {
	case BRANCH_SHORT_JMP:	return 5;	/* E9 rel32 */
	case BRANCH_SHORT_JCC:	return 6;	/* 0F 8x rel32 */
	default:		return in->len;
	}
}

void text_layout(struct rw_text *t)
{
	uint32_t at = 0;

	for (size_t k = 0; k < t->ninsns; k++) {
		struct rw_insn *in = &t->insns[k];

		in->new_off = at;
		for (unsigned int p = 0; p < in->nprobes; p++)
			at += in->probes[p].len + PROBE_OVERHEAD;
		in->new_insn_off = at;
		in->new_len = emitted_len(in);
		at += in->new_len;
	}
	t->new_size = at;
}

int64_t text_map(const struct rw_text *t, uint64_t off, bool itself)
{
	size_t lo = 0, hi = t->ninsns;
	const struct rw_insn *in;

	if (off == t->size)
		return t->new_size;
	if (off > t->size)
		return -1;
	while (hi - lo > 1) {		/* the last instruction starting at or before off */
		size_t mid = (lo + hi) / 2;

		if (t->insns[mid].old_off <= off)
			lo = mid;
		else
			hi = mid;
	}
	in = &t->insns[lo];
	if (off == in->old_off)
		return itself ? in->new_insn_off : in->new_off;
	if (in->new_len != in->len)
		return -1;
	return in->new_insn_off + (off - in->old_off);
}

static void put32(uint8_t *p, int64_t v)
{
	int32_t v32 = (int32_t)v;

	memcpy(p, &v32, 4);
}

static void reloc_add(struct rw_text *t, uint64_t offset, uint64_t info, int64_t addend,
		      unsigned int to_end)
{
	struct rw_reloc *r = &t->new_relocs[t->n_new_relocs++];

	r->rela.r_offset = offset;
	r->rela.r_info = info;
	r->rela.r_addend = addend;
	r->to_end = to_end;
}

/* push %rdi; load; call stub; pop %rdi -- and its site and relocations. */
static void emit_probe(struct rw_text *t, const struct rw_insn *in, const struct rw_probe *p,
		       uint32_t at, const uint32_t stub_symbols[NR_STUBS])
{
	uint8_t *b = t->out + at;
	uint32_t call = at + 1 + p->len;
	struct rw_site *site = &t->sites[t->nsites++];

	b[0] = 0x57;
	memcpy(b + 1, p->load, p->len);
	b[1 + p->len] = 0xe8;
	put32(b + 2 + p->len, 0);
	b[6 + p->len] = 0x5f;
	reloc_add(t, call + 1, ELF64_R_INFO(stub_symbols[p->stub], R_X86_64_PLT32), -4, 4);

	if (p->disp_at >= 0) {		/* lea disp32(%rip),%rdi: the operand's own target */
		uint32_t disp = at + 1 + p->disp_at;
		unsigned int lea_to_end = 4;

		if (in->rip_reloc) {
			const Elf64_Rela *r = text_reloc_at(t, in->old_off + in->rip_disp_at);
			unsigned int to_end = in->len - in->rip_disp_at;

			reloc_add(t, disp, r->r_info, r->r_addend + to_end - lea_to_end, lea_to_end);
		} else {
			put32(t->out + disp, text_map(t, in->target, false) - (disp + lea_to_end));
		}
	}
	site->ret = call + 5;
	site->offset = in->old_off;
	site->size = p->size;
	site->flags = p->flags;
}

static void emit_insn(struct rw_text *t, const struct rw_insn *in)
{
	uint8_t *b = t->out + in->new_insn_off;
	uint32_t end = in->new_insn_off + in->new_len;
	const uint8_t *old = t->code + in->old_off;

	switch (in->branch) {
	case BRANCH_SHORT_JMP:
		b[0] = 0xe9;
		put32(b + 1, text_map(t, in->target, false) - end);
		return;
	case BRANCH_SHORT_JCC:
		b[0] = 0x0f;
		b[1] = 0x80 | (old[in->rel_at - 1] & 0x0f);
		put32(b + 2, text_map(t, in->target, false) - end);
		return;
	default:
		memcpy(b, old, in->len);
	}
	if (in->branch == BRANCH_NEAR && !in->rel_reloc)
		put32(b + in->rel_at, text_map(t, in->target, false) - end);
	if (in->rip_disp_at && !in->rip_reloc)
		put32(b + in->rip_disp_at, text_map(t, in->target, false) - end);
}

int text_emit(struct ko_context *ctx, struct rw_text *t, const uint32_t stub_symbols[NR_STUBS])
{
	size_t nprobes = 0, r = 0;

	for (size_t k = 0; k < t->ninsns; k++)
		nprobes += t->insns[k].nprobes;
	t->out = calloc(t->new_size ? t->new_size : 1, 1);
	/* each probe: a call, perhaps a rip-relative lea */
	t->new_relocs = calloc(t->nrelocs + 2 * nprobes + 1, sizeof(*t->new_relocs));
	t->sites = calloc(nprobes + 1, sizeof(*t->sites));
	if (!t->out || !t->new_relocs || !t->sites)
		return ko_fail(ctx, KO_ERR_NOMEM, "out of memory");

	for (size_t k = 0; k < t->ninsns; k++) {
		const struct rw_insn *in = &t->insns[k];
		uint32_t at = in->new_off;

		for (unsigned int p = 0; p < in->nprobes; p++) {
			emit_probe(t, in, &in->probes[p], at, stub_symbols);
			at += in->probes[p].len + PROBE_OVERHEAD;
		}
		emit_insn(t, in);
		/* the instruction's own relocations move with it (check_relocs: unwidened) */
		for (; r < t->nrelocs && t->relocs[r].r_offset < in->old_off + in->len; r++) {
			const Elf64_Rela *old = &t->relocs[r];

			reloc_add(t, in->new_insn_off + (old->r_offset - in->old_off), old->r_info,
				  old->r_addend, in->old_off + in->len - old->r_offset);
		}
	}
	return 0;
}

void text_free(struct rw_text *t)
{
	free(t->insns);
	free(t->out);
	free(t->new_relocs);
	free(t->sites);
	free(t->relocs);
}
