/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Architecture entry points that kernel code calls by name. Plain assembly
 * (objtool is told to skip this file): none of it exists in a real kernel
 * in this form, because a real kernel patches the call sites instead.
 */
	.text

/* Function tracing is off: the loader also patches the call sites to NOPs. */
	.globl __fentry__
__fentry__:
	ret

/* Return thunk (-mfunction-return=thunk-extern): an ordinary return. */
	.globl __x86_return_thunk
__x86_return_thunk:
	ret
	int3

/* Retpolines (-mindirect-branch=thunk-extern): an ordinary indirect jump. */
.macro THUNK reg
	.globl __x86_indirect_thunk_\reg
__x86_indirect_thunk_\reg:
	jmp *%\reg
	int3
.endm
	THUNK rax
	THUNK rbx
	THUNK rcx
	THUNK rdx
	THUNK rsi
	THUNK rdi
	THUNK rbp
	THUNK r8
	THUNK r9
	THUNK r10
	THUNK r11
	THUNK r12
	THUNK r13
	THUNK r14
	THUNK r15

/*
 * cond_resched(): a voluntary preemption point. There is no involuntary
 * preemption on the CPU lock: a waiting thread runs when the current one
 * sleeps, so there is never a reason to reschedule here. Returns 0 ("did
 * not schedule"), which callers may rely on.
 */
	.globl __SCT__cond_resched
__SCT__cond_resched:
	xorl %eax, %eax
	ret

/*
 * might_resched(), inside might_sleep() of a kernel with dynamic
 * preemption: the same voluntary point as cond_resched() (the kernel
 * points both at __cond_resched), so the same answer.
 */
	.globl __SCT__might_resched
__SCT__might_resched:
	xorl %eax, %eax
	ret

/*
 * preempt_enable() calls this when the preempt count, whose NEED_RESCHED
 * bit is inverted, drops to zero. The runtime never requests a reschedule,
 * so the count never gets there; like the kernel's thunk it must preserve
 * every register.
 */
	.globl __SCT__preempt_schedule
__SCT__preempt_schedule:
	ret

/* preempt_enable_notrace()'s, for the same reason. */
	.globl __SCT__preempt_schedule_notrace
__SCT__preempt_schedule_notrace:
	ret
