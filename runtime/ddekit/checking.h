/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Checking (docs/checking.md): the trace the kernel half adds to, which
 * runtime/check/producer.c implements.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_CHECKING_H
#define UNDERSTUDY_DDEKIT_CHECKING_H

/*
 * Nonzero when the driver's modules run rewritten under the checker: the
 * kernel half's interposition points then report what the probes cannot
 * see (allocations, DMA mappings, locks, contexts, copies) as events, each
 * with `site`, the caller in the module. Call with the CPU held: the CPU
 * lock makes the trace one ordered stream.
 */
extern int ddekit_checking;
void ddekit_trace(unsigned int kind, unsigned long site, unsigned long addr,
		  unsigned long arg0, unsigned long arg1);
/*
 * The thread now runs kernel code of context `kind` (US_CTX_*): the
 * handler `handler` (0 for process context). Returns the previous kind.
 */
int ddekit_trace_context(int kind, unsigned long handler);
/* A device write the runtime does for the driver (config space): the gate applies. */
void ddekit_check_gate(unsigned long site);

/*
 * The events' kinds and arguments (US_EV_*, US_LOCK_*, US_STOP_*, US_CTX_*):
 * the trace contract's header that includes nothing, so that this one may
 * include it. The path is relative to this file, for Kbuild has no -I of
 * the repository's include/ (runtime/Makefile links ddekit/ beside each
 * kernel half's tree).
 */
#include "../../include/understudy/trace-events.h"

#endif /* UNDERSTUDY_DDEKIT_CHECKING_H */
