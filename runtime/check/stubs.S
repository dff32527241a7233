/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The stubs a rewritten module calls before each memory access
 * (docs/checking.md, "The rewritten module"). The probe is
 *	push %rdi; <load %rdi>; call <stub>; pop %rdi
 * so a stub gets its operand in %rdi, finds its site in its own return
 * address, and must keep every other register -- the module's code around
 * the probe was compiled without knowing of it. The _flags variants also
 * keep the flags (the rewriter decides which are needed); the others may
 * clobber them. Kernel code calls with the stack 8-byte aligned only; the C
 * they call is compiled for that (-mincoming-stack-boundary=3).
 *
 * The fast path writes one event and publishes it; everything rarer is C
 * (producer.c): a full ring, a sleeping checker, a write to the device that
 * must wait (stringent mode) or stop (a verdict), an access inside device
 * memory, string instructions.
 */
#include "layout.h"

	.text

/*
 * Calls a C function of producer.c keeping the registers a stub must keep
 * (%rax, %rcx, %rdx are saved already). With ret_at, the second argument is
 * the stub's return address, which lay ret_at above %rsp before the call.
 */
.macro CALL_C fn, ret_at=-1
	push	%rsi
	push	%rdi
	push	%r8
	push	%r9
	push	%r10
	push	%r11
	.if \ret_at >= 0
	mov	(\ret_at + 48)(%rsp), %rsi
	.endif
	call	\fn
	pop	%r11
	pop	%r10
	pop	%r9
	pop	%r8
	pop	%rdi
	pop	%rsi
.endm

/* A stub's entry: the flags if asked, then the three registers the fast path uses. */
.macro STUB_ENTER name, flags
	.globl	\name
	.type	\name, @function
\name:
	.if \flags
	pushfq
	.endif
	push	%rax
	push	%rcx
	push	%rdx
	.set	ret_at, 24 + 8 * \flags	/* where the return address now lies */
.endm

.macro STUB_LEAVE flags
	pop	%rdx
	pop	%rcx
	pop	%rax
	.if \flags
	popfq
	.endif
	ret
.endm

/* What an access stub does after its event is published. */
#define THEN_RETURN	0
#define THEN_DEVICE	1	/* the address may be device memory: the gate if it is */
#define THEN_GATE	2	/* a write to the device (out): the gate */

/* One event {kind_flags, site = return address, addr = %rdi}. */
.macro ACCESS_STUB name, kind_flags, flags, then
	STUB_ENTER \name, \flags
1:	mov	us_trace_hdr(%rip), %rcx
	mov	us_trace_head(%rip), %rax
	mov	%rax, %rdx
	sub	STUB_HDR_APPROVED(%rcx), %rdx
	cmp	$(STUB_RING_ENTRIES - 1), %rdx
	jae	4f
	mov	%eax, %edx
	and	$(STUB_RING_ENTRIES - 1), %edx
	shl	$STUB_EVENT_SHIFT, %rdx
	add	us_trace_slots(%rip), %rdx
	movl	$\kind_flags, (%rdx)
	mov	ret_at(%rsp), %rcx
	mov	%ecx, 4(%rdx)
	mov	%rdi, 8(%rdx)
	inc	%rax
	mov	%rax, us_trace_head(%rip)
	mov	us_trace_hdr(%rip), %rcx
	mov	%rax, STUB_HDR_HEAD(%rcx)
	cmpl	$0, STUB_HDR_CHECKER_WAITING(%rcx)
	jne	5f
2:
	.if \then == THEN_DEVICE
	mov	%rdi, %rdx
	sub	us_trace_device_lo(%rip), %rdx
	cmp	us_trace_device_span(%rip), %rdx
	jb	6f
	.elseif \then == THEN_GATE
	/* the write waits only in stringent mode or once there is a verdict */
	cmpl	$0, us_trace_gate_waits(%rip)
	jne	6f
	cmpq	$0, STUB_HDR_VERDICT_AT(%rcx)
	jne	6f
	.endif
3:	STUB_LEAVE \flags
4:	CALL_C	us_trace_wait_room
	jmp	1b
5:	CALL_C	us_trace_wake_checker
	mov	us_trace_hdr(%rip), %rcx
	jmp	2b
	.if \then == THEN_DEVICE
6:	CALL_C	us_check_device_access, ret_at
	jmp	3b
	.elseif \then == THEN_GATE
6:	CALL_C	us_check_device_write, ret_at
	jmp	3b
	.endif
	.size	\name, . - \name
.endm

ACCESS_STUB __understudy_trace_access,		STUB_EV_ACCESS, 0, THEN_DEVICE
ACCESS_STUB __understudy_trace_access_flags,	STUB_EV_ACCESS, 1, THEN_DEVICE
/* Through %rsp: the thread's stack is never device memory. */
ACCESS_STUB __understudy_trace_stack,		STUB_EV_ACCESS, 0, THEN_RETURN
ACCESS_STUB __understudy_trace_stack_flags,	STUB_EV_ACCESS, 1, THEN_RETURN
ACCESS_STUB __understudy_trace_percpu,		STUB_EV_ACCESS | (STUB_EVF_PERCPU << 16), 0, THEN_RETURN
ACCESS_STUB __understudy_trace_percpu_flags,	STUB_EV_ACCESS | (STUB_EVF_PERCPU << 16), 1, THEN_RETURN

/* The stack's bookkeeping (docs/checking.md, "Stack frames"): %rdi is on the stack. */
ACCESS_STUB __understudy_trace_frame,		STUB_EV_FRAME, 0, THEN_RETURN
ACCESS_STUB __understudy_trace_return,		STUB_EV_RETURN, 0, THEN_RETURN
ACCESS_STUB __understudy_trace_escape,		STUB_EV_ESCAPE, 0, THEN_RETURN
ACCESS_STUB __understudy_trace_escape_flags,	STUB_EV_ESCAPE, 1, THEN_RETURN

/* in/out: %rdi = the port; every out is a write to the device. */
ACCESS_STUB __understudy_trace_port_in,		STUB_EV_PORT, 0, THEN_RETURN
ACCESS_STUB __understudy_trace_port_in_flags,	STUB_EV_PORT, 1, THEN_RETURN
ACCESS_STUB __understudy_trace_port_out,	STUB_EV_PORT, 0, THEN_GATE
ACCESS_STUB __understudy_trace_port_out_flags,	STUB_EV_PORT, 1, THEN_GATE

/* rep movs/stos/...: %rdi, %rsi, %rcx and DF are the instruction's own. */
	.globl	__understudy_trace_string
	.type	__understudy_trace_string, @function
__understudy_trace_string:
	pushfq
	push	%rax
	push	%rcx
	push	%rdx
	push	%r8
	mov	%rcx, %rdx		/* us_check_string(rdi, rsi, rcx, rflags, ret) */
	mov	32(%rsp), %rcx		/* the saved rflags */
	mov	40(%rsp), %r8		/* the return address */
	CALL_C	us_check_string
	pop	%r8
	pop	%rdx
	pop	%rcx
	pop	%rax
	popfq
	ret
	.size	__understudy_trace_string, . - __understudy_trace_string

	.section .note.GNU-stack, "", @progbits
