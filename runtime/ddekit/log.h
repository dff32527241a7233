/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ddekit's logging (log.c): printk records, the runtime's event lines,
 * and a panic.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_LOG_H
#define UNDERSTUDY_DDEKIT_LOG_H

/* One preformatted printk record; level is the KERN_* digit (0..7). */
void ddekit_log(int level, const char *text, unsigned long len);
/* A line of the runtime's machine-readable event stream (stdout). */
void ddekit_event(const char *line);
/* "module+0xoffset" for a code address, for %pS; implemented by main. */
void ddekit_symbolize(unsigned long addr, char *buf, unsigned long len);
/*
 * Ends the process after printing why (BUG, stack smash, fortify, ...).
 * Not declared noreturn to kernel code: objtool only knows the kernel's own
 * noreturn functions, so the kernel half follows the call with a loop.
 */
#ifdef __KERNEL__
void ddekit_panic(const char *why);
#else
void ddekit_panic(const char *why) __attribute__((noreturn));
#endif

#endif /* UNDERSTUDY_DDEKIT_LOG_H */
