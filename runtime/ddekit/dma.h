/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The device's addresses of the DMA arena (dma.c, docs/design.md §5).
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_DMA_H
#define UNDERSTUDY_DDEKIT_DMA_H

/*
 * The device's address of [offset, offset + len) of the arena (memory.h): its
 * IOVA, or without an IOMMU its physical address; DDEKIT_DMA_NONE if the
 * range is outside the arena or crosses into a hugepage that is not its
 * physical neighbour. ddekit_dma_limit: one past the highest address.
 */
#define DDEKIT_DMA_NONE	(~0ULL)
unsigned long long ddekit_dma_address(unsigned long offset, unsigned long len);
unsigned long long ddekit_dma_limit(void);

#endif /* UNDERSTUDY_DDEKIT_DMA_H */
