// SPDX-License-Identifier: GPL-2.0
/*
 * The DMA API. The host mapped the whole arena into the IOMMU before the
 * process started, and all memory a module can hand the device comes from
 * it (mem.c), so mapping is arithmetic and unmapping has nothing to undo.
 * x86 DMA is cache-coherent: the sync calls only order memory accesses.
 *
 * Stands in for Linux's kernel/dma/mapping.c, kernel/dma/direct.c and
 * mm/dmapool.c.
 */
#include <linux/module.h>
#include <linux/dma-mapping.h>
#include <linux/scatterlist.h>
#include <linux/dmapool.h>
#include <linux/log2.h>
#include <linux/slab.h>

#include "internal.h"

dma_addr_t dma_map_page_attrs(struct device *dev, struct page *page, size_t offset,
			      size_t size, enum dma_data_direction dir, unsigned long attrs)
{
	phys_addr_t phys = page_to_phys(page) + offset;
	dma_addr_t addr;

	if (!us_in_dma_region(page_address(page) + offset, size))
		us_panic("dma_map_page(%px + %zu, %zu) from %pS: not arena memory",
			 page_address(page), offset, size, __builtin_return_address(0));
	addr = us_dma_addr(phys, size);
	us_trace(US_TRACE_DMA(US_EV_DMA_MAP, dir), _RET_IP_, page_address(page) + offset,
		 size, addr);
	return addr;
}
EXPORT_SYMBOL(dma_map_page_attrs);

void dma_unmap_page_attrs(struct device *dev, dma_addr_t addr, size_t size,
			  enum dma_data_direction dir, unsigned long attrs)
{
	us_trace(US_TRACE_DMA(US_EV_DMA_UNMAP, dir), _RET_IP_, (void *)addr, size, 0);
}
EXPORT_SYMBOL(dma_unmap_page_attrs);

unsigned int dma_map_sg_attrs(struct device *dev, struct scatterlist *sg, int nents,
			      enum dma_data_direction dir, unsigned long attrs)
{
	struct scatterlist *s;
	int i;

	for_each_sg(sg, s, nents, i) {
		s->dma_address = dma_map_page_attrs(dev, sg_page(s), s->offset, s->length,
						    dir, attrs);
		sg_dma_len(s) = s->length;
	}
	return nents;
}
EXPORT_SYMBOL(dma_map_sg_attrs);

void dma_unmap_sg_attrs(struct device *dev, struct scatterlist *sg, int nents,
			enum dma_data_direction dir, unsigned long attrs)
{
	struct scatterlist *s;
	int i;

	for_each_sg(sg, s, nents, i)
		us_trace(US_TRACE_DMA(US_EV_DMA_UNMAP, dir), _RET_IP_,
			 (void *)sg_dma_address(s), sg_dma_len(s), 0);
}
EXPORT_SYMBOL(dma_unmap_sg_attrs);

void dma_sync_single_for_cpu(struct device *dev, dma_addr_t addr, size_t size,
			     enum dma_data_direction dir)
{
	us_trace(US_TRACE_DMA(US_EV_DMA_SYNC_CPU, dir), _RET_IP_, (void *)addr, size, 0);
	rmb();
}
EXPORT_SYMBOL(dma_sync_single_for_cpu);

void dma_sync_single_for_device(struct device *dev, dma_addr_t addr, size_t size,
				enum dma_data_direction dir)
{
	us_trace(US_TRACE_DMA(US_EV_DMA_SYNC_DEVICE, dir), _RET_IP_, (void *)addr, size, 0);
	wmb();
}
EXPORT_SYMBOL(dma_sync_single_for_device);

void *us_dma_alloc_coherent(size_t size, dma_addr_t *dma_handle, gfp_t flag, unsigned long site)
{
	void *va = us_alloc(PAGE_ALIGN(size), flag | __GFP_ZERO);

	if (!va)
		return NULL;
	*dma_handle = us_dma_addr(virt_to_phys(va), size);
	if (*dma_handle == DMA_MAPPING_ERROR) {
		/* Coherent memory the device cannot see in one piece is no memory. */
		us_free(va);
		return NULL;
	}
	us_trace(US_EV_DMA_ALLOC, site, va, size, *dma_handle);
	return va;
}

void us_dma_free_coherent(size_t size, void *cpu_addr, unsigned long site)
{
	us_trace(US_EV_DMA_FREE, site, cpu_addr, size, 0);
	us_free(cpu_addr);
}

void *dma_alloc_attrs(struct device *dev, size_t size, dma_addr_t *dma_handle,
		      gfp_t flag, unsigned long attrs)
{
	return us_dma_alloc_coherent(size, dma_handle, flag, _RET_IP_);
}
EXPORT_SYMBOL(dma_alloc_attrs);

void dma_free_attrs(struct device *dev, size_t size, void *cpu_addr,
		    dma_addr_t dma_handle, unsigned long attrs)
{
	us_dma_free_coherent(size, cpu_addr, _RET_IP_);
}
EXPORT_SYMBOL(dma_free_attrs);

/* A mask is supported if the device can reach the whole arena with it. */
static bool mask_covers_arena(u64 mask)
{
	return ddekit_dma_limit() - 1 <= mask;
}

int dma_set_mask(struct device *dev, u64 mask)
{
	if (!dev->dma_mask || !mask_covers_arena(mask))
		return -EIO;
	*dev->dma_mask = mask;
	return 0;
}
EXPORT_SYMBOL(dma_set_mask);

int dma_set_coherent_mask(struct device *dev, u64 mask)
{
	if (!mask_covers_arena(mask))
		return -EIO;
	dev->coherent_dma_mask = mask;
	return 0;
}
EXPORT_SYMBOL(dma_set_coherent_mask);

/*
 * Whether the sync calls matter for addr: they only order memory on x86,
 * but the checker follows buffer ownership through them (docs/checking.md),
 * so drivers that ask (virtio_ring) are told to keep making them.
 */
bool dma_need_sync(struct device *dev, dma_addr_t dma_addr)
{
	return true;
}
EXPORT_SYMBOL_GPL(dma_need_sync);

/* No bounce buffers: a mapping is as large as the arena lets it be. */
size_t dma_max_mapping_size(struct device *dev)
{
	return SIZE_MAX;
}
EXPORT_SYMBOL_GPL(dma_max_mapping_size);

/*
 * DMA pools: small coherent blocks. Each block is its own allocation; the
 * allocator aligns power-of-two sizes to themselves, which meets any
 * alignment up to the block size and keeps a block inside any boundary
 * that is a multiple of it.
 */
struct dma_pool {
	struct device *dev;
	size_t size;
	char name[32];
};

struct dma_pool *dma_pool_create(const char *name, struct device *dev, size_t size,
				 size_t align, size_t boundary)
{
	struct dma_pool *pool;

	if (!size || (align && !is_power_of_2(align)))
		return NULL;
	size = roundup_pow_of_two(max(size, align ? align : 1));
	if (boundary && (size > boundary || boundary % size))
		return NULL;
	pool = kzalloc(sizeof(*pool), GFP_KERNEL);
	if (!pool)
		return NULL;
	pool->dev = dev;
	pool->size = size;
	strscpy(pool->name, name, sizeof(pool->name));
	return pool;
}
EXPORT_SYMBOL(dma_pool_create);

void *dma_pool_alloc(struct dma_pool *pool, gfp_t mem_flags, dma_addr_t *handle)
{
	void *va = us_alloc(pool->size, mem_flags);

	if (va) {
		/* A block is aligned to its power-of-two size: none of up to 2 MiB crosses a hugepage. */
		*handle = us_dma_addr(virt_to_phys(va), pool->size);
		us_trace(US_EV_DMA_ALLOC, _RET_IP_, va, pool->size, *handle);
	}
	return va;
}
EXPORT_SYMBOL(dma_pool_alloc);

void dma_pool_free(struct dma_pool *pool, void *vaddr, dma_addr_t dma)
{
	us_trace(US_EV_DMA_FREE, _RET_IP_, vaddr, pool->size, 0);
	us_free(vaddr);
}
EXPORT_SYMBOL(dma_pool_free);

void dma_pool_destroy(struct dma_pool *pool)
{
	kfree(pool);
}
EXPORT_SYMBOL(dma_pool_destroy);
