// SPDX-License-Identifier: GPL-2.0
/*
 * The stack in a checked module (docs/checking.md, "Stack frames"): the
 * probes of its bookkeeping -- FRAME, RETURN, ESCAPE, chosen while
 * rewrite-x86.c decodes -- and, once a section is decoded, the stack
 * probes that cannot tell the checker anything, dropped before layout.
 *
 * The checker judges a stack access only for definedness: a read of a byte
 * of a live frame that nothing wrote. Within one function, once its frame
 * is allocated (`sub $n,%rsp`), a byte the function wrote stays written
 * until it returns: nothing the checker hears of can make it undefined
 * again (callees' frames lie below %rsp). So a probe of an access through
 * %rsp whose bytes every path from the frame's allocation has written
 * already -- a spill slot reloaded, a slot written twice -- changes nothing
 * the checker knows, and costs as much as any other.
 *
 * This is a "must" dataflow over the instructions that the allocation
 * reaches without %rsp moving again: a byte counts as written before an
 * instruction if it was written on every path to it. Anything that can
 * enter the region another way -- a symbol, a relocation's target (a jump
 * from a cold section, an exception fixup), the target of a call, a branch
 * from an instruction that moved %rsp -- counts as knowing nothing; a
 * static key's site is a branch to its target. An ESCAPE writes from its
 * address to the frame's end, as the checker takes it.
 */
#include <stdlib.h>
#include <string.h>

#include <Zydis/Zydis.h>
#include <understudy/trace.h>

#include "rewrite.h"

/* lea d(%rsp),%rdi: d as the instruction sees %rsp (rw_encode_lea adds the push). */
static void load_stack_address(struct rw_probe *p, int32_t d)
{
	ZydisDecodedOperandMem mem = { .type = ZYDIS_MEMOP_TYPE_MEM, .base = ZYDIS_REGISTER_RSP,
				       .index = ZYDIS_REGISTER_NONE, .disp = { .value = d } };

	rw_encode_lea(p, &mem);
	p->at_rsp = true;
	p->rsp_disp = d;
}

/* Whether the relocation at `off` names a symbol outside the module. */
static bool reloc_is_import(const struct ko_elf *elf, const struct rw_text *t, uint64_t off)
{
	const Elf64_Rela *r = text_reloc_at(t, off);
	size_t sym = r ? ELF64_R_SYM(r->r_info) : 0;

	return r && sym && sym < elf->nsyms && elf->syms[sym].st_shndx == SHN_UNDEF;
}

/* FRAME, RETURN and ESCAPE probes (docs/checking.md, "Stack frames"). */
int rw_probe_stack(const struct ko_elf *elf, const struct rw_text *t, struct rw_insn *in,
		   const ZydisDecodedInstruction *zi, const ZydisDecodedOperand *ops)
{
	const ZydisDecodedOperand *dst = &ops[0], *src = &ops[1];
	bool to_rsp = dst->type == ZYDIS_OPERAND_TYPE_REGISTER && dst->reg.value == ZYDIS_REGISTER_RSP;

	if (in->nprobes == RW_MAX_PROBES)
		return 0;
	switch (zi->mnemonic) {
	case ZYDIS_MNEMONIC_SUB:
		/* sub $n,%rsp: [%rsp - n, %rsp) becomes the frame */
		if (to_rsp && src->type == ZYDIS_OPERAND_TYPE_IMMEDIATE &&
		    src->imm.value.s > 0 && src->imm.value.s <= UINT16_MAX)
			load_stack_address(rw_probe_add(in, STUB_FRAME, src->imm.value.s, US_SITE_FRAME),
					   -(int32_t)src->imm.value.s);
		return 0;
	case ZYDIS_MNEMONIC_RET:
		/* %rsp after the return: above the return address */
		load_stack_address(rw_probe_add(in, STUB_RETURN, 0, US_SITE_FRAME), 8);
		return 0;
	case ZYDIS_MNEMONIC_JMP:
		if (in->branch == BRANCH_NEAR && in->rel_reloc &&
		    reloc_is_import(elf, t, in->old_off + in->rel_at))
			load_stack_address(rw_probe_add(in, STUB_RETURN, 0, US_SITE_FRAME), 8);
		return 0;
	case ZYDIS_MNEMONIC_LEA:
		if (src->type == ZYDIS_OPERAND_TYPE_MEMORY && src->mem.base == ZYDIS_REGISTER_RSP && !to_rsp) {
			struct rw_probe *p = rw_probe_add(in, STUB_ESCAPE, 0, US_SITE_FRAME);

			p->at_rsp = src->mem.index == ZYDIS_REGISTER_NONE;
			p->rsp_disp = (int32_t)src->mem.disp.value;
			return rw_encode_lea(p, &src->mem);
		}
		return 0;
	case ZYDIS_MNEMONIC_MOV:
		/* into a register or memory: either way the address is out */
		if (src->type == ZYDIS_OPERAND_TYPE_REGISTER && src->reg.value == ZYDIS_REGISTER_RSP)
			load_stack_address(rw_probe_add(in, STUB_ESCAPE, 0, US_SITE_FRAME), 0);
		return 0;
	default:
		return 0;
	}
}

/* Where control goes after the instruction, for the pruning below. */
enum rw_flow rw_flow_of(const struct rw_insn *in, const ZydisDecodedInstruction *zi)
{
	bool in_section = in->branch && !in->rel_reloc;

	switch (zi->meta.category) {
	case ZYDIS_CATEGORY_RET:
	case ZYDIS_CATEGORY_INTERRUPT:
		return FLOW_END;
	case ZYDIS_CATEGORY_UNCOND_BR:
		return in_section ? FLOW_JUMP : FLOW_END;
	case ZYDIS_CATEGORY_COND_BR:
		return in_section ? FLOW_BRANCH : FLOW_NEXT;
	default:
		return zi->mnemonic == ZYDIS_MNEMONIC_UD2 ? FLOW_END : FLOW_NEXT;
	}
}

/* push, pop, sub/add/lea/mov to %rsp, leave...; a call puts %rsp back as it was. */
bool rw_moves_rsp(const ZydisDecodedInstruction *zi, const ZydisDecodedOperand *ops)
{
	if (zi->meta.category == ZYDIS_CATEGORY_CALL)
		return false;
	for (unsigned int i = 0; i < zi->operand_count; i++)
		if (ops[i].type == ZYDIS_OPERAND_TYPE_REGISTER && ops[i].reg.value == ZYDIS_REGISTER_RSP &&
		    (ops[i].actions & ZYDIS_OPERAND_ACTION_MASK_WRITE))
			return true;
	return false;
}

/* Frames larger than this keep every probe: their states would cost too much. */
#define MAX_PRUNED_FRAME	4096

#define NEXT_MAX	3	/* the next instruction, a branch target, a static key's target */
#define JUMP_ENTRY	16	/* struct jump_entry: code, target (.long each), key (.quad) */

/* What the pruning needs of a whole section: predecessors and entries. */
struct section_flow {
	long *key_target;	/* a static key's site: where it jumps when patched, -1 if not a site */
	size_t *pred_start;	/* preds of k: pred[pred_start[k] .. pred_start[k + 1]) */
	size_t *pred;
	bool *entry;		/* reached from outside the section's own branches */
	int32_t *slot;		/* index in the current region, -1 if not in it */
};

/* The first instruction that starts at or after `off`. */
static size_t insn_from(const struct rw_text *t, int64_t off)
{
	size_t lo = 0, hi = t->ninsns;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if ((int64_t)t->insns[mid].old_off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static long insn_at(const struct rw_text *t, int64_t off)
{
	size_t k = insn_from(t, off);

	return k < t->ninsns && t->insns[k].old_off == off ? (long)k : -1;
}

/* The same-section successors of insn k, -1 for none. */
static void successors(const struct rw_text *t, const struct section_flow *f, size_t k,
		       long next[NEXT_MAX])
{
	const struct rw_insn *in = &t->insns[k];

	next[0] = next[1] = -1;
	if ((in->flow == FLOW_NEXT || in->flow == FLOW_BRANCH) && k + 1 < t->ninsns)
		next[0] = (long)k + 1;
	if (in->flow == FLOW_BRANCH || in->flow == FLOW_JUMP)
		next[1] = insn_at(t, in->target);
	/* a static key's site is a nop or a jmp as the key flips: both ways */
	next[2] = f->key_target[k];
	if (next[2] >= 0 && k + 1 < t->ninsns)
		next[0] = (long)k + 1;
}

static bool is_call_in_section(const struct rw_insn *in)
{
	return in->branch == BRANCH_NEAR && !in->rel_reloc && in->flow == FLOW_NEXT;
}

/* Marks every instruction overlapping [off, off + len) as an entry. */
static void mark_entries(const struct rw_text *t, bool *entry, int64_t off, int64_t len)
{
	size_t k = insn_from(t, off);

	if (k > 0)
		k--;			/* the one that starts before off may overlap it */
	for (; k < t->ninsns && (int64_t)t->insns[k].old_off < off + len; k++)
		if ((int64_t)t->insns[k].old_off + t->insns[k].len > off)
			entry[k] = true;
}

/*
 * Tables whose relocations name instructions to patch or describe, not
 * places control arrives at: their targets are not entries.
 */
static bool names_sites_only(const char *section)
{
	static const char *const tables[] = {
		".rela.orc_unwind_ip", ".rela.return_sites", ".rela.retpoline_sites",
		".rela.static_call_sites", ".rela__mcount_loc", ".rela.altinstructions",
		".rela__bug_table", ".rela.call_sites", ".rela.smp_locks",
	};

	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		if (!strcmp(section, tables[i]))
			return true;
	return false;
}

/*
 * __jump_table: a static key's site (a nop or a jmp, patched when the key
 * flips) may jump to its target -- an edge, not an unknown entry.
 */
static void static_key_edges(const struct ko_elf *elf, const struct rw_text *t, struct section_flow *f)
{
	unsigned int rela = 0;
	const Elf64_Rela *r;
	size_t count;

	for (unsigned int i = 0; i < elf->shnum && !rela; i++)
		if (elf->shdrs[i].sh_type == SHT_RELA && !strcmp(elf_section_name(elf, i), ".rela__jump_table"))
			rela = i;
	if (!rela)
		return;
	r = elf_section_data(elf, rela);
	count = elf->shdrs[rela].sh_size / sizeof(*r);
	for (size_t j = 0; j + 1 < count; j++) {
		size_t code = ELF64_R_SYM(r[j].r_info), target = ELF64_R_SYM(r[j + 1].r_info);
		long site, to;

		if (r[j].r_offset % JUMP_ENTRY != 0 || r[j + 1].r_offset != r[j].r_offset + 4 ||
		    code >= elf->nsyms || target >= elf->nsyms ||
		    elf->syms[code].st_shndx != t->shndx || elf->syms[target].st_shndx != t->shndx)
			continue;
		site = insn_at(t, elf->syms[code].st_value + r[j].r_addend);
		to = insn_at(t, elf->syms[target].st_value + r[j + 1].r_addend);
		if (site >= 0 && to >= 0)
			f->key_target[site] = to;
	}
}

/* Tables whose entries are edges, handled as such (static_key_edges). */
static bool names_edges(const char *section)
{
	return !strcmp(section, ".rela__jump_table");
}

static int section_flow_build(const struct ko_elf *elf, const struct rw_text *t,
			      struct section_flow *f)
{
	size_t n = t->ninsns, nedges = 0;

	f->pred_start = calloc(n + 1, sizeof(*f->pred_start));
	f->entry = calloc(n ? n : 1, sizeof(*f->entry));
	f->slot = malloc((n ? n : 1) * sizeof(*f->slot));
	f->key_target = malloc((n ? n : 1) * sizeof(*f->key_target));
	if (!f->pred_start || !f->entry || !f->slot || !f->key_target)
		return -1;
	for (size_t k = 0; k < n; k++)
		f->key_target[k] = -1;
	static_key_edges(elf, t, f);
	for (size_t k = 0; k < n; k++) {
		long next[NEXT_MAX];

		f->slot[k] = -1;
		successors(t, f, k, next);
		for (int i = 0; i < NEXT_MAX; i++)
			if (next[i] >= 0) {
				f->pred_start[next[i] + 1]++;
				nedges++;
			}
		if (is_call_in_section(&t->insns[k]))
			mark_entries(t, f->entry, t->insns[k].target, 1);
	}
	for (size_t k = 0; k < n; k++)
		f->pred_start[k + 1] += f->pred_start[k];
	f->pred = malloc((nedges ? nedges : 1) * sizeof(*f->pred));
	if (!f->pred)
		return -1;
	{
		size_t *fill = calloc(n ? n : 1, sizeof(*fill));

		if (!fill)
			return -1;
		for (size_t k = 0; k < n; k++) {
			long next[NEXT_MAX];

			successors(t, f, k, next);
			for (int i = 0; i < NEXT_MAX; i++)
				if (next[i] >= 0)
					f->pred[f->pred_start[next[i]] + fill[next[i]]++] = k;
		}
		free(fill);
	}
	/* symbols, and every relocation's target: a section symbol plus an addend,
	 * a pc-relative field a few bytes before its instruction's end */
	for (size_t s = 0; s < elf->nsyms; s++)
		if (elf->syms[s].st_shndx == t->shndx)
			mark_entries(t, f->entry, elf->syms[s].st_value, 1);
	for (unsigned int i = 0; i < elf->shnum; i++) {
		const Elf64_Rela *r = elf_section_data(elf, i);
		size_t count = elf->shdrs[i].sh_size / sizeof(*r);

		if (elf->shdrs[i].sh_type != SHT_RELA || names_sites_only(elf_section_name(elf, i)) ||
		    names_edges(elf_section_name(elf, i)))
			continue;
		for (size_t j = 0; j < count; j++) {
			size_t s = ELF64_R_SYM(r[j].r_info);

			if (s && s < elf->nsyms && elf->syms[s].st_shndx == t->shndx)
				mark_entries(t, f->entry, elf->syms[s].st_value + r[j].r_addend, 16);
		}
	}
	return 0;
}

static void section_flow_free(struct section_flow *f)
{
	free(f->pred_start);
	free(f->pred);
	free(f->entry);
	free(f->slot);
	free(f->key_target);
}

static void set_bytes(uint64_t *state, int64_t from, int64_t to, int64_t frame)
{
	if (from < 0)
		from = 0;
	if (to > frame)
		to = frame;
	for (int64_t b = from; b < to; b++)
		state[b / 64] |= 1ull << (b % 64);
}

static bool has_bytes(const uint64_t *state, int64_t from, int64_t to)
{
	for (int64_t b = from; b < to; b++)
		if (!(state[b / 64] & (1ull << (b % 64))))
			return false;
	return true;
}

static bool is_stack_access(const struct rw_probe *p)
{
	return (p->stub == STUB_STACK || p->stub == STUB_STACK_FLAGS) && p->at_rsp && p->size;
}

/* What insn k writes of the frame: its stores through %rsp, and its escapes. */
static void written_by(const struct rw_insn *in, uint64_t *state, int64_t frame)
{
	for (unsigned int p = 0; p < in->nprobes; p++) {
		const struct rw_probe *probe = &in->probes[p];

		if (is_stack_access(probe) && (probe->flags & US_SITE_WRITE))
			set_bytes(state, probe->rsp_disp, (int64_t)probe->rsp_disp + probe->size, frame);
		else if ((probe->stub == STUB_ESCAPE || probe->stub == STUB_ESCAPE_FLAGS) &&
			 probe->at_rsp && probe->rsp_disp >= 0)
			set_bytes(state, probe->rsp_disp, frame, frame);
	}
}

/* The bytes written before insn k on every path: the meet of its predecessors. */
static void written_before(const struct rw_text *t, const struct section_flow *f,
			   const uint64_t *out, size_t words, size_t k, uint64_t *in)
{
	memset(in, f->entry[k] ? 0 : 0xff, words * sizeof(*in));
	for (size_t e = f->pred_start[k]; e < f->pred_start[k + 1]; e++) {
		size_t p = f->pred[e];

		if (f->slot[p] < 0 || t->insns[p].moves_rsp) {
			memset(in, 0, words * sizeof(*in));
			return;
		}
		for (size_t w = 0; w < words; w++)
			in[w] &= out[f->slot[p] * words + w];
	}
}

/* Drops the redundant stack probes of the region that the frame allocated at insn `at` reaches. */
static int prune_frame(struct rw_text *t, struct section_flow *f, size_t at, int64_t frame)
{
	size_t words = (frame + 63) / 64, nregion = 0, head = 0;
	size_t *region = malloc(t->ninsns * sizeof(*region));
	uint64_t *out = NULL, *in = malloc(words * sizeof(*in)), *next_out = malloc(words * sizeof(*in));
	bool changed = true;
	long first[NEXT_MAX];

	if (!region || !in || !next_out)
		goto fail;
	successors(t, f, at, first);
	for (int i = 0; i < NEXT_MAX; i++)
		if (first[i] >= 0 && f->slot[first[i]] < 0) {
			f->slot[first[i]] = nregion;
			region[nregion++] = first[i];
		}
	while (head < nregion) {		/* breadth first, not past a move of %rsp */
		size_t k = region[head++];
		long next[NEXT_MAX];

		if (t->insns[k].moves_rsp)
			continue;
		successors(t, f, k, next);
		for (int i = 0; i < NEXT_MAX; i++)
			if (next[i] >= 0 && f->slot[next[i]] < 0) {
				f->slot[next[i]] = nregion;
				region[nregion++] = next[i];
			}
	}
	out = malloc((nregion ? nregion : 1) * words * sizeof(*out));
	if (!out)
		goto fail;
	memset(out, 0xff, nregion * words * sizeof(*out));	/* the top: everything written */
	while (changed) {
		changed = false;
		for (size_t r = 0; r < nregion; r++) {
			written_before(t, f, out, words, region[r], next_out);
			written_by(&t->insns[region[r]], next_out, frame);
			if (memcmp(next_out, out + r * words, words * sizeof(*out))) {
				memcpy(out + r * words, next_out, words * sizeof(*out));
				changed = true;
			}
		}
	}
	for (size_t r = 0; r < nregion; r++) {
		struct rw_insn *insn = &t->insns[region[r]];
		unsigned int kept = 0;

		written_before(t, f, out, words, region[r], in);
		for (unsigned int p = 0; p < insn->nprobes; p++) {
			const struct rw_probe *probe = &insn->probes[p];
			int64_t from = probe->rsp_disp, to = from + probe->size;

			if (!(is_stack_access(probe) && from >= 0 && to <= frame && has_bytes(in, from, to)))
				insn->probes[kept++] = *probe;
		}
		insn->nprobes = kept;
	}
	for (size_t r = 0; r < nregion; r++)
		f->slot[region[r]] = -1;
	free(region);
	free(out);
	free(in);
	free(next_out);
	return 0;
fail:
	free(region);
	free(out);
	free(in);
	free(next_out);
	return -1;
}

int text_prune_stack_probes(struct ko_context *ctx, const struct ko_elf *elf, struct rw_text *t)
{
	struct section_flow f = { 0 };
	int ret = 0;

	if (section_flow_build(elf, t, &f)) {
		ret = ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < t->ninsns; k++) {
		const struct rw_insn *in = &t->insns[k];

		if (in->nprobes && in->probes[0].stub == STUB_FRAME && in->probes[0].size <= MAX_PRUNED_FRAME &&
		    prune_frame(t, &f, k, in->probes[0].size)) {
			ret = ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
			goto out;
		}
	}
out:
	section_flow_free(&f);
	return ret;
}
