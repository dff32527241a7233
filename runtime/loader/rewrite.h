/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The rewriting pass for checked drivers (docs/checking.md, "The rewritten
 * module"); shared by rewrite.c (the ELF file), rewrite-x86.c (decoding one
 * code section) and rewrite-emit.c (emitting it again). Not part of the
 * loader's API.
 */
#ifndef UNDERSTUDY_LOADER_REWRITE_H
#define UNDERSTUDY_LOADER_REWRITE_H

#include <Zydis/Zydis.h>

#include "internal.h"

/* The stubs a rewritten module calls; the runtime resolves them by name. */
enum rw_stub {
	STUB_ACCESS,		/* %rdi = effective address */
	STUB_ACCESS_FLAGS,	/* ... and the flags are live: keep them */
	STUB_STACK,		/* %rdi = an address on the stack: never device memory */
	STUB_STACK_FLAGS,
	STUB_PERCPU,		/* %rdi = offset in the per-cpu block */
	STUB_PERCPU_FLAGS,
	STUB_PORT_IN,		/* %rdi = port */
	STUB_PORT_IN_FLAGS,
	STUB_PORT_OUT,		/* %rdi = port; a write to the device: the gate */
	STUB_PORT_OUT_FLAGS,
	STUB_STRING,		/* reads %rdi, %rsi, %rcx and DF itself; keeps the flags */
	STUB_FRAME,		/* %rdi = a new frame's lowest byte (the flags are dead: sub) */
	STUB_RETURN,		/* %rdi = %rsp after a return (the ABI keeps no flags) */
	STUB_ESCAPE,		/* %rdi = a stack address the code took */
	STUB_ESCAPE_FLAGS,
	NR_STUBS,
};

extern const char *const rw_stub_names[NR_STUBS];

/* One instrumentation point before an instruction. */
struct rw_probe {
	uint8_t stub;		/* enum rw_stub */
	uint16_t size;		/* bytes accessed, element size for strings, a frame's bytes */
	uint8_t flags;		/* US_SITE_* */
	uint8_t len;		/* bytes of `load`: how %rdi gets its value */
	int8_t disp_at;		/* rip-relative: where in `load` its disp32 is; else -1 */
	bool at_rsp;		/* a stack access or ESCAPE of exactly %rsp + rsp_disp */
	int32_t rsp_disp;	/* as the instruction sees %rsp */
	uint8_t load[15];	/* lea EA,%rdi / movzwl %dx,%edi / mov $imm,%edi */
};

#define RW_MAX_PROBES	2

/* One decoded instruction of a code section. */
struct rw_insn {
	uint32_t old_off;
	uint32_t new_off;	/* where its probes start: branches land here */
	uint32_t new_insn_off;	/* where the instruction itself starts */
	uint8_t len;		/* in the original */
	uint8_t new_len;	/* emitted (a rel8 branch grows to rel32) */
	uint8_t nprobes;
	uint8_t branch;		/* enum rw_branch */
	uint8_t rip_disp_at;	/* rip-relative memory operand: offset of its disp32 */
	uint8_t rel_at;		/* a relative branch: offset of its displacement */
	bool rel_reloc;		/* that displacement is relocated (another section) */
	bool rip_reloc;		/* the rip-relative disp32 is relocated */
	uint8_t flow;		/* enum rw_flow: where control goes next */
	bool moves_rsp;		/* writes %rsp other than as a call does (push, pop, sub...) */
	int64_t target;		/* same-section target: old offset */
	struct rw_probe probes[RW_MAX_PROBES];
};

enum rw_flow {
	FLOW_NEXT,		/* to the next instruction (a call returns to it too) */
	FLOW_BRANCH,		/* jcc: to the next one or to `target` */
	FLOW_JUMP,		/* jmp: to `target` only */
	FLOW_END,		/* ret, ud2, int3, an indirect jump, a jump out of the section */
};

enum rw_branch {
	BRANCH_NONE,
	BRANCH_SHORT_JMP,	/* EB rel8: becomes E9 rel32 */
	BRANCH_SHORT_JCC,	/* 7x rel8: becomes 0F 8x rel32 */
	BRANCH_NEAR,		/* call/jmp/jcc rel32: keeps its encoding */
};

/* A relocation of the new file, and for one in code, how far its field is from the end of its instruction. */
struct rw_reloc {
	Elf64_Rela rela;
	uint8_t to_end;
};

/* One site: what a stub call at `ret` stands for (struct us_trace_site, before placement). */
struct rw_site {
	uint32_t ret;		/* new offset in the section */
	uint32_t offset;	/* old offset of the instruction */
	uint16_t size;
	uint8_t flags;
};

/* One code section being rewritten. */
struct rw_text {
	unsigned int shndx;
	const uint8_t *code;
	size_t size;
	size_t new_size;
	uint8_t *out;
	struct rw_insn *insns;
	size_t ninsns;
	/* the section's relocations (from its RELA section), sorted by offset */
	Elf64_Rela *relocs;
	size_t nrelocs;
	/* what emitting produced */
	struct rw_reloc *new_relocs;
	size_t n_new_relocs;
	struct rw_site *sites;
	size_t nsites;
};

/* rewrite-x86.c: decoding, the probes each instruction needs, the checks */
int text_decode(struct ko_context *ctx, const struct ko_elf *elf, struct rw_text *t);
/* rewrite-x86.c's helpers for the probes of rewrite-stack.c */
struct rw_probe *rw_probe_add(struct rw_insn *in, enum rw_stub stub, unsigned int size,
			      unsigned int flags);
int rw_encode_lea(struct rw_probe *p, const ZydisDecodedOperandMem *mem);

/* rewrite-stack.c: FRAME, RETURN and ESCAPE probes; control flow; pruning */
int rw_probe_stack(const struct ko_elf *elf, const struct rw_text *t, struct rw_insn *in,
		   const ZydisDecodedInstruction *zi, const ZydisDecodedOperand *ops);
enum rw_flow rw_flow_of(const struct rw_insn *in, const ZydisDecodedInstruction *zi);
bool rw_moves_rsp(const ZydisDecodedInstruction *zi, const ZydisDecodedOperand *ops);
/* drops stack probes whose bytes every path has written already */
int text_prune_stack_probes(struct ko_context *ctx, const struct ko_elf *elf, struct rw_text *t);
/* The relocation of the section at exactly `off`, or NULL. */
const Elf64_Rela *text_reloc_at(const struct rw_text *t, uint64_t off);

/* rewrite-emit.c: layout, the offset map, the new code and its relocations */
void text_layout(struct rw_text *t);
int text_emit(struct ko_context *ctx, struct rw_text *t, const uint32_t stub_symbols[NR_STUBS]);
/*
 * Where old offset `off` of the section went: to the instruction's probes
 * (`itself` false: where a branch to it must land) or to the instruction
 * itself. The section's end maps to the new end. Returns -1 if `off` falls
 * inside a widened instruction.
 */
int64_t text_map(const struct rw_text *t, uint64_t off, bool itself);
void text_free(struct rw_text *t);

#endif /* UNDERSTUDY_LOADER_REWRITE_H */
