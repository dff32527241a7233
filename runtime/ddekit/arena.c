// SPDX-License-Identifier: GPL-2.0
/*
 * The DMA arena (docs/design.md §5): the memory the host shares with the
 * process, mapped here, and the device's addresses of it. With an IOMMU
 * the host mapped the whole arena at one IOVA, so an address is the IOVA
 * plus the offset. Without one (docs/design.md §4, "Without an
 * IOMMU") the arena is hugepages and the device sees physical addresses:
 * the host hands over one per 2 MiB chunk, and a range has a single device
 * address only if it stays in one chunk or runs on into a chunk that is
 * physically next to it.
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "setup.h"

static struct {
	void *va;
	uint64_t iova;
	size_t size;
	size_t pool_size;
} arena;

int ddekit_setup_arena(int arena_fd, uint64_t iova, size_t size, size_t pool_size)
{
	void *va;

	if (pool_size >= size || !ddekit_dma_chunks_fit(size))
		return -EINVAL;
	if (arena_fd >= 0)
		va = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, arena_fd, 0);
	else
		va = mmap(NULL, size, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED)
		return -errno;
	arena.va = va;
	arena.iova = arena_fd >= 0 ? iova : 0;
	arena.size = size;
	arena.pool_size = pool_size;
	return 0;
}

void ddekit_arena(void **va, unsigned long long *iova, unsigned long *size,
		  unsigned long *pool_size)
{
	*va = arena.va;
	*iova = arena.iova;
	*size = arena.size;
	*pool_size = arena.pool_size;
}

#define CHUNK_SHIFT	21

static struct {
	uint64_t *chunk;	/* NULL: the arena is at its IOVA */
	unsigned long n;
} bus;

int ddekit_setup_dma_chunks(int fd)
{
	struct stat st;
	uint64_t *table;

	if (fstat(fd, &st) || !st.st_size || st.st_size % sizeof(*table))
		return -EINVAL;
	table = malloc(st.st_size);
	if (!table)
		return -ENOMEM;
	if (pread(fd, table, st.st_size, 0) != st.st_size) {
		free(table);
		return -EIO;
	}
	bus.chunk = table;
	bus.n = st.st_size / sizeof(*table);
	return 0;
}

bool ddekit_dma_chunks_fit(size_t arena_size)
{
	return !bus.chunk || (uint64_t)bus.n << CHUNK_SHIFT == arena_size;
}

unsigned long long ddekit_dma_address(unsigned long offset, unsigned long len)
{
	void *va;
	unsigned long long iova;
	unsigned long size, pool_size, first, last;

	ddekit_arena(&va, &iova, &size, &pool_size);
	if (!len || offset >= size || len > size - offset)
		return DDEKIT_DMA_NONE;
	if (!bus.chunk)
		return iova + offset;
	first = offset >> CHUNK_SHIFT;
	last = (offset + len - 1) >> CHUNK_SHIFT;
	for (unsigned long c = first; c < last; c++)
		if (bus.chunk[c + 1] != bus.chunk[c] + (1UL << CHUNK_SHIFT))
			return DDEKIT_DMA_NONE;
	return bus.chunk[first] + (offset & ((1UL << CHUNK_SHIFT) - 1));
}

unsigned long long ddekit_dma_limit(void)
{
	void *va;
	unsigned long long iova, top = 0;
	unsigned long size, pool_size;

	ddekit_arena(&va, &iova, &size, &pool_size);
	if (!bus.chunk)
		return iova + size;
	for (unsigned long c = 0; c < bus.n; c++)
		if (bus.chunk[c] + (1UL << CHUNK_SHIFT) > top)
			top = bus.chunk[c] + (1UL << CHUNK_SHIFT);
	return top;
}
