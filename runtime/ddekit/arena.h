/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The DMA arena and its device addresses (arena.c, docs/design.md §5).
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_ARENA_H
#define UNDERSTUDY_DDEKIT_ARENA_H

/*
 * The DMA arena: [va, va + size) is IOMMU-mapped at iova; its first
 * pool_size bytes are the host's packet pool, the rest is the runtime's.
 * Without an arena fd (self-test mode) iova is 0 and nothing is mapped.
 */
void ddekit_arena(void **va, unsigned long long *iova, unsigned long *size,
		  unsigned long *pool_size);
/*
 * The device's address of [offset, offset + len) of the arena: its IOVA,
 * or without an IOMMU its physical address; DDEKIT_DMA_NONE if the
 * range is outside the arena or crosses into a hugepage that is not its
 * physical neighbour. ddekit_dma_limit: one past the highest address.
 */
#define DDEKIT_DMA_NONE	(~0ULL)
unsigned long long ddekit_dma_address(unsigned long offset, unsigned long len);
unsigned long long ddekit_dma_limit(void);

#endif /* UNDERSTUDY_DDEKIT_ARENA_H */
