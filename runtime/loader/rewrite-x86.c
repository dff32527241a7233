// SPDX-License-Identifier: GPL-2.0
/*
 * One code section of a checked module, decoded completely, with the probes
 * each instruction needs: a stub call before every memory access the
 * checker must see (docs/checking.md, "The rewritten module").
 *
 * Decoding is a linear sweep with Zydis: kernel code holds no data in its
 * text (Debian builds with -fno-jump-tables), and padding is int3 or nops,
 * so a sweep meets every instruction; the checks below (every relocation on
 * an instruction's field, every branch onto an instruction) would catch a
 * sweep that lost step. A byte that does not decode refuses the module.
 *
 * A probe is
 *	push %rdi; <load %rdi>; call __understudy_trace_<kind>; pop %rdi
 * before the instruction: the load is `lea EA,%rdi` (the instruction's own
 * addressing, so it computes exactly the address the instruction will use),
 * or the port number for in/out. Kernel code has no red zone
 * (-mno-red-zone), so pushing below %rsp is safe. The stub keeps every
 * register; it keeps the flags only if they may be live (the _FLAGS
 * stubs), which a short forward scan decides. An access through %rsp gets
 * 8 added to its displacement: the probe's push moved %rsp.
 *
 * The stack's bookkeeping gets probes too (rewrite-stack.c; docs/checking.md,
 * "Stack frames"): `sub $n,%rsp` allocates a frame (FRAME, %rdi = the frame's
 * lowest byte), `ret` and a jump to another module's symbol (the return
 * thunk, a tail call) end the function's frames (RETURN, %rdi = %rsp after
 * the return), and `lea d(%rsp),%reg` or `mov %rsp,%reg` hands a stack
 * address to code that may write through it unseen (ESCAPE). Returns and
 * tail calls keep no flags: the ABI carries none across them.
 *
 * What a probe and a moved instruction become is rewrite-emit.c's: short
 * branches become rel32 (their targets move apart); every other
 * instruction is copied byte for byte, with same-section displacements
 * (branches, rip-relative operands without a relocation) recomputed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <Zydis/Zydis.h>
#include <understudy/trace.h>

#include "rewrite.h"

const char *const rw_stub_names[NR_STUBS] = {
	[STUB_ACCESS]		= "__understudy_trace_access",
	[STUB_ACCESS_FLAGS]	= "__understudy_trace_access_flags",
	[STUB_STACK]		= "__understudy_trace_stack",
	[STUB_STACK_FLAGS]	= "__understudy_trace_stack_flags",
	[STUB_PERCPU]		= "__understudy_trace_percpu",
	[STUB_PERCPU_FLAGS]	= "__understudy_trace_percpu_flags",
	[STUB_PORT_IN]		= "__understudy_trace_port_in",
	[STUB_PORT_IN_FLAGS]	= "__understudy_trace_port_in_flags",
	[STUB_PORT_OUT]		= "__understudy_trace_port_out",
	[STUB_PORT_OUT_FLAGS]	= "__understudy_trace_port_out_flags",
	[STUB_STRING]		= "__understudy_trace_string",
	[STUB_FRAME]		= "__understudy_trace_frame",
	[STUB_RETURN]		= "__understudy_trace_return",
	[STUB_ESCAPE]		= "__understudy_trace_escape",
	[STUB_ESCAPE_FLAGS]	= "__understudy_trace_escape_flags",
};

#define STATUS_FLAGS	(ZYDIS_CPUFLAG_CF | ZYDIS_CPUFLAG_PF | ZYDIS_CPUFLAG_AF | \
			 ZYDIS_CPUFLAG_ZF | ZYDIS_CPUFLAG_SF | ZYDIS_CPUFLAG_OF)
#define MAX_LISTED	8	/* offsets named in a refusal */

/* What the flag scan needs of each instruction, kept beside rw_insn while decoding. */
struct flag_use {
	uint32_t read, written;
	bool ends_flow;		/* call, ret, ud2, int3: the flags die here */
	bool leaves_flow;	/* jmp, indirect jumps: unknown successor */
};

/* A refusal lists the offsets it concerns; collected while decoding goes on. */
struct offsets {
	uint64_t at[MAX_LISTED];
	size_t count;
};

static void offsets_add(struct offsets *o, uint64_t off)
{
	if (o->count < MAX_LISTED)
		o->at[o->count] = off;
	o->count++;
}

/* "N <what> at 0x.., 0x.., ..." for a refusal; empty if there are none. */
static void offsets_describe(char *buf, size_t len, const struct offsets *o, const char *what)
{
	size_t used;

	buf[0] = '\0';
	if (!o->count)
		return;
	used = snprintf(buf, len, "%zu %s at ", o->count, what);
	for (size_t i = 0; i < o->count && i < MAX_LISTED && used < len; i++)
		used += snprintf(buf + used, len - used, "%s0x%" PRIx64, i ? ", " : "", o->at[i]);
	if (o->count > MAX_LISTED && used < len)
		snprintf(buf + used, len - used, ", ...");
}

static int offsets_fail(struct ko_context *ctx, const struct ko_elf *elf,
			const struct rw_text *t, const struct offsets *o, const char *what)
{
	char list[MAX_LISTED * 20 + 160];

	offsets_describe(list, sizeof(list), o, what);
	return ko_fail(ctx, KO_ERR_REWRITE, "cannot rewrite %s for checking: %s",
		       elf_section_name(elf, t->shndx), list);
}

const Elf64_Rela *text_reloc_at(const struct rw_text *t, uint64_t off)
{
	size_t lo = 0, hi = t->nrelocs;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (t->relocs[mid].r_offset < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < t->nrelocs && t->relocs[lo].r_offset == off ? &t->relocs[lo] : NULL;
}

/* The 0-15 number of a 64-bit general register, -1 for anything else. */
static int gpr64(ZydisRegister r)
{
	return ZydisRegisterGetClass(r) == ZYDIS_REGCLASS_GPR64 ? ZydisRegisterGetId(r) : -1;
}

/*
 * lea EA,%rdi with a disp32 always: one encoding for every base, rbp and
 * r13 included. Based on %rsp, EA is 8 further up: the probe pushed %rdi.
 */
int rw_encode_lea(struct rw_probe *p, const ZydisDecodedOperandMem *mem)
{
	int base = mem->base == ZYDIS_REGISTER_NONE ? -1 : gpr64(mem->base);
	int index = mem->index == ZYDIS_REGISTER_NONE ? -1 : gpr64(mem->index);
	int64_t wanted = mem->disp.value + (mem->base == ZYDIS_REGISTER_RSP ? 8 : 0);
	int32_t disp = (int32_t)wanted;
	uint8_t *b = p->load, n = 0;
	static const uint8_t scale_bits[9] = { 0, 0, 1, 0, 2, 0, 0, 0, 3 };

	if (wanted != disp)
		return -1;
	p->disp_at = -1;
	if (mem->base == ZYDIS_REGISTER_RIP) {
		if (index >= 0)
			return -1;
		b[n++] = 0x48;
		b[n++] = 0x8d;
		b[n++] = 0x3d;			/* mod 00, reg rdi, rm 101: rip+disp32 */
		p->disp_at = n;
	} else if ((mem->base != ZYDIS_REGISTER_NONE && base < 0) ||
		   (mem->index != ZYDIS_REGISTER_NONE && index < 0) || mem->scale > 8) {
		return -1;			/* 32-bit addressing, or not a GPR */
	} else {
		b[n++] = 0x48 | (index >= 8 ? 0x02 : 0) | (base >= 8 ? 0x01 : 0);
		b[n++] = 0x8d;
		if (base < 0) {			/* [index*scale + disp32] or [disp32] */
			b[n++] = 0x3c;		/* mod 00, reg rdi, rm 100: SIB */
			b[n++] = (scale_bits[mem->scale] << 6) |
				 ((index < 0 ? 4 : index & 7) << 3) | 5;
		} else if (index >= 0 || (base & 7) == 4) {
			b[n++] = 0xbc;		/* mod 10, reg rdi, rm 100: SIB + disp32 */
			b[n++] = (scale_bits[mem->scale] << 6) |
				 ((index < 0 ? 4 : index & 7) << 3) | (base & 7);
		} else {
			b[n++] = 0xb8 | (base & 7);	/* mod 10, reg rdi, rm base */
		}
	}
	memcpy(b + n, &disp, 4);
	p->len = n + 4;
	return 0;
}

/* Instructions whose memory operand names memory they do not access. */
static bool accesses_nothing(const ZydisDecodedInstruction *zi)
{
	switch (zi->meta.category) {
	case ZYDIS_CATEGORY_NOP:
	case ZYDIS_CATEGORY_WIDENOP:
		return true;
	default:
		break;
	}
	switch (zi->mnemonic) {
	case ZYDIS_MNEMONIC_PREFETCH:
	case ZYDIS_MNEMONIC_PREFETCHW:
	case ZYDIS_MNEMONIC_PREFETCHNTA:
	case ZYDIS_MNEMONIC_PREFETCHT0:
	case ZYDIS_MNEMONIC_PREFETCHT1:
	case ZYDIS_MNEMONIC_PREFETCHT2:
	case ZYDIS_MNEMONIC_CLFLUSH:
	case ZYDIS_MNEMONIC_CLFLUSHOPT:
	case ZYDIS_MNEMONIC_CLWB:
	case ZYDIS_MNEMONIC_INVLPG:
		return true;
	default:
		return false;
	}
}

struct rw_probe *rw_probe_add(struct rw_insn *in, enum rw_stub stub, unsigned int size,
			     unsigned int flags)
{
	struct rw_probe *p = &in->probes[in->nprobes++];

	p->stub = stub;
	p->size = size;
	p->flags = flags;
	p->len = 0;
	p->disp_at = -1;
	p->at_rsp = false;
	return p;
}

/* A probe for the memory operand mem; the register form of the string ops too. */
static int probe_memory(struct rw_insn *in, const ZydisDecodedInstruction *zi,
			const ZydisDecodedOperandMem *mem, unsigned int bits,
			unsigned int actions)
{
	unsigned int flags = 0;
	bool percpu = mem->segment == ZYDIS_REGISTER_GS;
	struct rw_probe *p;

	if (mem->segment == ZYDIS_REGISTER_FS || zi->address_width != 64)
		return -1;
	if (mem->base == ZYDIS_REGISTER_RSP && zi->mnemonic == ZYDIS_MNEMONIC_POP)
		return 0;		/* pop d(%rsp) addresses after the pop: not worth a probe */
	if (actions & ZYDIS_OPERAND_ACTION_MASK_READ)
		flags |= US_SITE_READ;
	if (actions & ZYDIS_OPERAND_ACTION_MASK_WRITE)
		flags |= US_SITE_WRITE;
	if (percpu)
		flags |= US_SITE_PERCPU;
	if (mem->base == ZYDIS_REGISTER_RSP)
		flags |= US_SITE_STACK;
	if ((zi->attributes & ZYDIS_ATTRIB_HAS_LOCK) || zi->mnemonic == ZYDIS_MNEMONIC_XCHG)
		flags |= US_SITE_ATOMIC;
	if (in->nprobes == RW_MAX_PROBES)
		return -1;
	p = rw_probe_add(in, percpu ? STUB_PERCPU : flags & US_SITE_STACK ? STUB_STACK : STUB_ACCESS,
			 bits / 8, flags);
	p->at_rsp = mem->base == ZYDIS_REGISTER_RSP && mem->index == ZYDIS_REGISTER_NONE;
	p->rsp_disp = (int32_t)mem->disp.value;
	return rw_encode_lea(p, mem);
}

/*
 * movs/stos/lods/cmps/scas: with rep one STRING event, without one access
 * per operand. ins/outs move between memory and a port: only their rep
 * form (PIO drivers' insw/outsw loops) is taken, as a STRING event that
 * is also port I/O -- outs passes the gate.
 */
static int probe_string(struct rw_insn *in, const ZydisDecodedInstruction *zi,
			const ZydisDecodedOperand *ops)
{
	bool rep = zi->attributes & (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE |
				     ZYDIS_ATTRIB_HAS_REPNE);
	bool io = zi->meta.category == ZYDIS_CATEGORY_IOSTRINGOP;
	unsigned int element = 0, flags = io ? US_SITE_PORT : 0;

	if (io && !rep)
		return -1;
	if (zi->mnemonic == ZYDIS_MNEMONIC_OUTSB || zi->mnemonic == ZYDIS_MNEMONIC_OUTSW ||
	    zi->mnemonic == ZYDIS_MNEMONIC_OUTSD)
		flags |= US_SITE_WRITE;		/* to the device; its memory operand is read */

	for (unsigned int i = 0; i < zi->operand_count; i++) {
		const ZydisDecodedOperand *op = &ops[i];

		if (op->type != ZYDIS_OPERAND_TYPE_MEMORY)
			continue;
		element = op->size / 8;
		if (op->actions & ZYDIS_OPERAND_ACTION_MASK_READ)
			flags |= US_SITE_READ;
		if (op->actions & ZYDIS_OPERAND_ACTION_MASK_WRITE)
			flags |= US_SITE_WRITE;
		if (!rep && probe_memory(in, zi, &op->mem, op->size, op->actions))
			return -1;
	}
	if (rep)
		rw_probe_add(in, STUB_STRING, element, flags | US_SITE_STRING);
	return 0;
}

/* in/out: the port is %dx or an imm8, loaded into %edi. */
static int probe_port(struct rw_insn *in, const ZydisDecodedInstruction *zi,
		      const ZydisDecodedOperand *ops)
{
	bool out = zi->mnemonic == ZYDIS_MNEMONIC_OUT;
	const ZydisDecodedOperand *port = &ops[out ? 0 : 1];
	const ZydisDecodedOperand *data = &ops[out ? 1 : 0];
	struct rw_probe *p = rw_probe_add(in, out ? STUB_PORT_OUT : STUB_PORT_IN, data->size / 8,
					  US_SITE_PORT | (out ? US_SITE_WRITE : US_SITE_READ));

	if (port->type == ZYDIS_OPERAND_TYPE_REGISTER && port->reg.value == ZYDIS_REGISTER_DX) {
		static const uint8_t movzwl_dx_edi[] = { 0x0f, 0xb7, 0xfa };

		memcpy(p->load, movzwl_dx_edi, sizeof(movzwl_dx_edi));
		p->len = sizeof(movzwl_dx_edi);
	} else if (port->type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
		uint32_t imm = (uint32_t)port->imm.value.u & 0xff;

		p->load[0] = 0xbf;				/* mov $imm32,%edi */
		memcpy(p->load + 1, &imm, 4);
		p->len = 5;
	} else {
		return -1;
	}
	return 0;
}

static int classify_branch(struct rw_text *t, struct rw_insn *in,
			   const ZydisDecodedInstruction *zi)
{
	int64_t rel = zi->raw.imm[0].value.s;

	in->rel_at = zi->raw.imm[0].offset;
	in->rel_reloc = text_reloc_at(t, in->old_off + in->rel_at) != NULL;
	if (zi->raw.imm[0].size == 32) {
		in->branch = BRANCH_NEAR;
	} else if (zi->raw.imm[0].size == 8 && zi->mnemonic == ZYDIS_MNEMONIC_JMP) {
		in->branch = BRANCH_SHORT_JMP;
	} else if (zi->raw.imm[0].size == 8 && zi->meta.category == ZYDIS_CATEGORY_COND_BR &&
		   (t->code[in->old_off + in->rel_at - 1] & 0xf0) == 0x70) {
		in->branch = BRANCH_SHORT_JCC;
	} else {
		return -1;			/* loop, jrcxz, xbegin: no rel32 form */
	}
	if (in->branch != BRANCH_NEAR && in->rel_reloc)
		return -1;
	in->target = in->old_off + in->len + rel;
	return 0;
}

/* Decodes one instruction into in, its probes and flag use; -1 if it cannot be rewritten. */
static int classify(const struct ko_elf *elf, struct rw_text *t, struct rw_insn *in,
		    struct flag_use *fu, const ZydisDecodedInstruction *zi,
		    const ZydisDecodedOperand *ops)
{
	const ZydisAccessedFlags *f = zi->cpu_flags;

	fu->read = f ? f->tested : 0;
	fu->written = f ? f->modified | f->set_0 | f->set_1 | f->undefined : 0;
	switch (zi->meta.category) {
	case ZYDIS_CATEGORY_CALL:
	case ZYDIS_CATEGORY_RET:
	case ZYDIS_CATEGORY_INTERRUPT:
		fu->ends_flow = true;
		break;
	case ZYDIS_CATEGORY_UNCOND_BR:
		fu->leaves_flow = true;
		break;
	default:
		fu->ends_flow = zi->mnemonic == ZYDIS_MNEMONIC_UD2;
	}

	if ((zi->attributes & ZYDIS_ATTRIB_IS_RELATIVE) && zi->raw.imm[0].is_relative &&
	    classify_branch(t, in, zi))
		return -1;
	in->flow = rw_flow_of(in, zi);
	in->moves_rsp = rw_moves_rsp(zi, ops);
	if (rw_probe_stack(elf, t, in, zi, ops))
		return -1;
	if (zi->meta.category == ZYDIS_CATEGORY_IO)
		return probe_port(in, zi, ops);
	if (zi->meta.category == ZYDIS_CATEGORY_STRINGOP ||
	    zi->meta.category == ZYDIS_CATEGORY_IOSTRINGOP)
		return probe_string(in, zi, ops);

	for (unsigned int i = 0; i < zi->operand_count; i++) {
		const ZydisDecodedOperand *op = &ops[i];

		if (op->type != ZYDIS_OPERAND_TYPE_MEMORY)
			continue;
		if (op->mem.type == ZYDIS_MEMOP_TYPE_MIB || op->mem.type == ZYDIS_MEMOP_TYPE_VSIB)
			return -1;
		if (op->mem.base == ZYDIS_REGISTER_RIP) {
			in->rip_disp_at = zi->raw.disp.offset;
			in->rip_reloc = text_reloc_at(t, in->old_off + in->rip_disp_at) != NULL;
			in->target = in->old_off + in->len + op->mem.disp.value;
		}
		/* push/pop/call/ret reach the stack implicitly: not probed */
		if (op->visibility != ZYDIS_OPERAND_VISIBILITY_EXPLICIT ||
		    op->mem.type != ZYDIS_MEMOP_TYPE_MEM || accesses_nothing(zi))
			continue;
		if (probe_memory(in, zi, &op->mem, op->size, op->actions))
			return -1;
	}
	return 0;
}

/* Whether the status flags may be read after the probes of insn i run. */
static bool flags_live(const struct flag_use *fu, size_t n, size_t i)
{
	for (size_t j = i; j < n && j < i + 64; j++) {
		if (fu[j].read & STATUS_FLAGS)
			return true;
		if ((fu[j].written & STATUS_FLAGS) == STATUS_FLAGS || fu[j].ends_flow)
			return false;
		if (fu[j].leaves_flow)
			return true;
	}
	return true;
}

/*
 * Every relocation must patch a displacement or an immediate of an
 * instruction that keeps its encoding; fields[k] has bit o set if a field
 * of instruction k starts at its byte o.
 */
static int check_relocs(struct ko_context *ctx, const struct ko_elf *elf,
			const struct rw_text *t, const uint16_t *fields)
{
	struct offsets bad = { 0 };
	size_t k = 0;

	for (size_t r = 0; r < t->nrelocs; r++) {
		uint64_t off = t->relocs[r].r_offset;
		const struct rw_insn *in;

		if (ELF64_R_TYPE(t->relocs[r].r_info) == R_X86_64_NONE)
			continue;
		while (k + 1 < t->ninsns && t->insns[k + 1].old_off <= off)
			k++;
		in = &t->insns[k];
		if (off < in->old_off || off - in->old_off >= in->len ||
		    !(fields[k] & (1u << (off - in->old_off))) ||
		    in->branch == BRANCH_SHORT_JMP || in->branch == BRANCH_SHORT_JCC)
			offsets_add(&bad, off);
	}
	return bad.count ? offsets_fail(ctx, elf, t, &bad,
					"relocations not on an instruction's field") : 0;
}

/* Every same-section branch and rip-relative operand must land on an instruction. */
static int check_targets(struct ko_context *ctx, const struct ko_elf *elf,
			 const struct rw_text *t)
{
	struct offsets bad = { 0 };

	for (size_t k = 0; k < t->ninsns; k++) {
		const struct rw_insn *in = &t->insns[k];
		bool same_section = (in->branch && !in->rel_reloc) ||
				    (in->rip_disp_at && !in->rip_reloc);

		if (same_section && text_map(t, in->target, false) < 0)
			offsets_add(&bad, in->old_off);
	}
	return bad.count ? offsets_fail(ctx, elf, t, &bad,
					"branches or rip-relative operands into the middle of an instruction") : 0;
}

static uint16_t field_bits(const ZydisDecodedInstruction *zi)
{
	uint16_t bits = 0;

	if (zi->raw.disp.size)
		bits |= 1u << zi->raw.disp.offset;
	for (int i = 0; i < 2; i++)
		if (zi->raw.imm[i].size)
			bits |= 1u << zi->raw.imm[i].offset;
	return bits;
}

static int compare_rela(const void *a, const void *b)
{
	const Elf64_Rela *x = a, *y = b;

	return x->r_offset < y->r_offset ? -1 : x->r_offset > y->r_offset;
}

int text_decode(struct ko_context *ctx, const struct ko_elf *elf, struct rw_text *t)
{
	ZydisDecoder decoder;
	ZydisDecodedInstruction zi;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
	struct offsets undecodable = { 0 }, unsupported = { 0 };
	struct flag_use *fu;
	uint16_t *fields;
	int ret = -1;

	qsort(t->relocs, t->nrelocs, sizeof(*t->relocs), compare_rela);
	ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
	/* at most one instruction per byte */
	t->insns = calloc(t->size ? t->size : 1, sizeof(*t->insns));
	fu = calloc(t->size ? t->size : 1, sizeof(*fu));
	fields = calloc(t->size ? t->size : 1, sizeof(*fields));
	if (!t->insns || !fu || !fields) {
		ko_fail(ctx, KO_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (size_t off = 0; off < t->size;) {
		struct rw_insn *in = &t->insns[t->ninsns];

		if (ZYAN_FAILED(ZydisDecoderDecodeFull(&decoder, t->code + off, t->size - off,
						       &zi, ops))) {
			offsets_add(&undecodable, off);
			off++;
			continue;
		}
		in->old_off = off;
		in->len = zi.length;
		fields[t->ninsns] = field_bits(&zi);
		if (classify(elf, t, in, &fu[t->ninsns], &zi, ops))
			offsets_add(&unsupported, off);
		t->ninsns++;
		off += zi.length;
	}
	if (undecodable.count || unsupported.count) {
		char bytes[MAX_LISTED * 20 + 160], insns[MAX_LISTED * 20 + 160];

		offsets_describe(bytes, sizeof(bytes), &undecodable, "bytes that do not decode");
		offsets_describe(insns, sizeof(insns), &unsupported,
				 "instructions the rewriter cannot move or probe (loop, jrcxz, %fs, 32-bit addressing, ins/outs without rep)");
		ko_fail(ctx, KO_ERR_REWRITE, "cannot rewrite %s for checking: %s%s%s",
			elf_section_name(elf, t->shndx), bytes, *bytes && *insns ? "; " : "", insns);
		goto out;
	}
	for (size_t k = 0; k < t->ninsns; k++)
		for (unsigned int p = 0; p < t->insns[k].nprobes; p++)
			if (flags_live(fu, t->ninsns, k)) {
				struct rw_probe *probe = &t->insns[k].probes[p];

				if (probe->stub == STUB_ACCESS || probe->stub == STUB_STACK ||
				    probe->stub == STUB_PERCPU || probe->stub == STUB_PORT_IN ||
				    probe->stub == STUB_PORT_OUT || probe->stub == STUB_ESCAPE)
					probe->stub++;	/* its _FLAGS twin */
			}
	if (text_prune_stack_probes(ctx, elf, t))
		goto out;
	text_layout(t);
	ret = check_relocs(ctx, elf, t, fields) || check_targets(ctx, elf, t) ? -1 : 0;
out:
	free(fu);
	free(fields);
	return ret;
}

