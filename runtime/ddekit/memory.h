/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ddekit's memory (memory.c) that the device never sees.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_MEMORY_H
#define UNDERSTUDY_DDEKIT_MEMORY_H

/* Zeroed memory the device never sees (runtime bookkeeping). */
void *ddekit_zalloc(unsigned long size);
/*
 * vmalloc: zeroed, page-aligned memory the device never sees, with a
 * no-access page on each side as the kernel's vmalloc areas have, so a
 * driver that runs off the end of an array faults here as it would in the
 * kernel instead of silently corrupting what lies next to it. It is private
 * to the process: a template's fork starts from the template's copy.
 * ddekit_vfree returns the bytes the area held, 0 if addr starts none.
 */
void *ddekit_vmalloc(unsigned long size);
unsigned long ddekit_vfree(const void *addr);
int ddekit_is_vmalloc(const void *addr);

#endif /* UNDERSTUDY_DDEKIT_MEMORY_H */
