// SPDX-License-Identifier: GPL-2.0
/*
 * Memory. Everything the runtime hands a module comes from its share of the
 * DMA arena, which the host mapped into the IOMMU once (docs/design.md
 * §5), so any of it may be given to the device and dma_map_* is arithmetic.
 *
 * The arena is the runtime's "physical memory": a physical address is the
 * offset into the arena, the linear map (page_offset_base) is the arena's
 * address, and vmemmap covers it with one struct page per 4 KiB, so
 * virt_to_page(), page_address() and page_to_phys() work inline in modules,
 * for the host's packet pool (zero-copy TX) as for the runtime's own part.
 * The allocator manages the runtime's part only: [pool_size, arena size).
 *
 * The allocator hands out power-of-two blocks aligned to their size: blocks
 * below a page are carved from pages of one size class, larger ones are
 * whole naturally-aligned page runs. One byte per page records the class,
 * so kfree() needs no header and kmalloc memory keeps the alignment the
 * kernel promises (ARCH_KMALLOC_MINALIGN, power-of-two sizes aligned).
 * Freed blocks go back to their class's free list; runs are not merged.
 *
 * Stands in for Linux's mm/slab_common.c, mm/slub.c, mm/page_alloc.c,
 * mm/vmalloc.c and mm/util.c.
 */
#include <linux/module.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/gfp.h>
#include <linux/log2.h>
#include <linux/skbuff.h>
#include <linux/string.h>

#include "internal.h"

#define MIN_ORDER	5		/* 32-byte blocks */
#define MAX_ORDER_BITS	(BITS_PER_LONG)

unsigned long page_offset_base __ro_after_init;
EXPORT_SYMBOL(page_offset_base);
unsigned long vmemmap_base __ro_after_init;
EXPORT_SYMBOL(vmemmap_base);
unsigned long phys_base __ro_after_init;
EXPORT_SYMBOL(phys_base);

/* The page cache of a running kernel; nothing here is ever device memory. */
DEFINE_STATIC_KEY_FALSE(devmap_managed_key);
EXPORT_SYMBOL(devmap_managed_key);
DEFINE_STATIC_KEY_FALSE(hugetlb_optimize_vmemmap_key);
EXPORT_SYMBOL(hugetlb_optimize_vmemmap_key);

/* Indexed by the inline kmalloc(); the caches themselves are never used. */
struct kmem_cache *kmalloc_caches[NR_KMALLOC_TYPES][KMALLOC_SHIFT_HIGH + 1] __ro_after_init;
EXPORT_SYMBOL(kmalloc_caches);

static struct {
	char *arena;		/* the whole arena: pool, then the runtime's part */
	unsigned long arena_size;
	unsigned long pool_size;
	char *va;		/* the runtime's part, which the allocator manages */
	unsigned long size;
	unsigned long npages;
	u8 *page_order;		/* block order of each page, 0: never allocated */
	void *free[MAX_ORDER_BITS];
	unsigned long bump;	/* offset of the first never-used page */
	unsigned long in_use;	/* bytes, arena blocks and vmalloc areas */
} region;

int us_mem_init(void)
{
	void *va;
	unsigned long long iova;
	unsigned long size, pool_size;

	ddekit_arena(&va, &iova, &size, &pool_size);
	if (!va || (pool_size & ~PAGE_MASK) || pool_size + PAGE_SIZE > size)
		return -ENOMEM;
	region.arena = va;
	region.arena_size = size & PAGE_MASK;
	region.pool_size = pool_size;
	region.va = region.arena + pool_size;
	region.size = region.arena_size - pool_size;
	region.npages = region.size >> PAGE_SHIFT;
	region.page_order = ddekit_zalloc(region.npages);
	vmemmap_base = (unsigned long)ddekit_zalloc((region.arena_size >> PAGE_SHIFT) *
						    sizeof(struct page));
	if (!region.page_order || !vmemmap_base)
		return -ENOMEM;
	page_offset_base = (unsigned long)va;
	phys_base = 0;
	return 0;
}

static bool inside(const void *p, size_t len, const char *start, unsigned long size)
{
	return (const char *)p >= start && len <= size && (const char *)p - start <= size - len;
}

/* Anywhere in the arena: memory the device may be given. */
bool us_in_dma_region(const void *p, size_t len)
{
	return inside(p, len, region.arena, region.arena_size);
}

/* The host's packet pool, whose buffers the allocator never hands out. */
bool us_in_pool(const void *p)
{
	return inside(p, 1, region.arena, region.pool_size);
}

/*
 * The device's address of [phys, phys + len): DMA_MAPPING_ERROR when it has
 * none, which happens only without an IOMMU, for a range that crosses into
 * a hugepage that is not its physical neighbour (docs/design.md §4,
 * "Without an IOMMU"). Blocks of up to 2 MiB never do: the allocator
 * aligns them to their size from the pool's end, a hugepage boundary.
 */
dma_addr_t us_dma_addr(phys_addr_t phys, size_t len)
{
	unsigned long long addr;

	if (phys >= region.arena_size)
		us_panic("DMA mapping of physical address %pa outside the arena", &phys);
	addr = ddekit_dma_address(phys, max_t(size_t, len, 1));
	return addr == DDEKIT_DMA_NONE ? DMA_MAPPING_ERROR : addr;
}

/*
 * [offset, offset + len) of the arena holds every block the allocator has
 * handed out so far and its free lists (which live in freed blocks); its
 * bookkeeping (region, page_order) is process memory.
 */
void us_mem_used_extent(unsigned long *offset, unsigned long *len)
{
	*offset = region.pool_size;
	*len = PAGE_ALIGN(region.bump);
}

static void *take_run(unsigned int order)
{
	unsigned long size = 1UL << order;
	unsigned long start = ALIGN(region.bump, size);

	if (start + size > region.size || start + size < start)
		return NULL;
	region.bump = start + size;
	region.page_order[start >> PAGE_SHIFT] = order;
	return region.va + start;
}

static void *take_block(unsigned int order)
{
	void **head = &region.free[order];
	void *block = *head;

	if (block) {
		*head = *(void **)block;
		return block;
	}
	if (order >= PAGE_SHIFT)
		return take_run(order);
	/* A fresh page for this size class, cut into blocks. */
	block = take_block(PAGE_SHIFT);
	if (!block)
		return NULL;
	region.page_order[((char *)block - region.va) >> PAGE_SHIFT] = order;
	for (unsigned long off = PAGE_SIZE - (1UL << order); off; off -= 1UL << order) {
		void **b = (void **)((char *)block + off);

		*b = *head;
		*head = b;
	}
	return block;
}

static void *alloc_block(size_t size)
{
	unsigned int order;
	void *p;

	if (!size)
		return ZERO_SIZE_PTR;
	order = max_t(unsigned int, MIN_ORDER, order_base_2(size));
	if (order >= MAX_ORDER_BITS - 1)
		return NULL;
	p = take_block(order);
	if (!p)
		return NULL;
	region.in_use += 1UL << order;
	return p;
}

/*
 * An allocation as the checker sees it (docs/checking.md, "The trace"):
 * its bytes are undefined until written, unless zeroed (memset tells the
 * checker, after the allocation). The producer counts the runtime's own
 * allocations as defined at once, since the runtime fills them in code the
 * checker does not see.
 */
static void *alloc_traced(size_t size, gfp_t flags, unsigned long site)
{
	void *p = alloc_block(size);

	if (!ZERO_OR_NULL_PTR(p)) {
		us_trace(US_EV_ALLOC, site, p, size, 0);
		if (flags & __GFP_ZERO) {
			memset(p, 0, size);	/* as the slab does: the bytes asked for */
			us_trace(US_EV_FILL, site, p, 0, size);
		}
	}
	return p;
}

void *us_alloc(size_t size, gfp_t flags)
{
	return alloc_traced(size, flags, _RET_IP_);
}

void *us_alloc_for(size_t size, gfp_t flags, unsigned long site)
{
	return alloc_traced(size, flags, site);
}

static unsigned int block_order(const void *p, const char *who)
{
	unsigned long off = (const char *)p - region.va;
	unsigned int order;

	if (!inside(p, 1, region.va, region.size))
		us_panic("%s(%px): not runtime memory", who, p);
	order = region.page_order[off >> PAGE_SHIFT];
	if (!order || off & ((1UL << order) - 1))
		us_panic("%s(%px): not the start of an allocated block", who, p);
	return order;
}

size_t us_alloc_size(const void *p)
{
	return 1UL << block_order(p, "ksize");
}

void us_free(const void *p)
{
	unsigned int order;

	if (ZERO_OR_NULL_PTR(p))
		return;
	order = block_order(p, "kfree");
	us_trace(US_EV_FREE, _RET_IP_, p, 0, 0);
	*(void **)p = region.free[order];
	region.free[order] = (void *)p;
	region.in_use -= 1UL << order;
}

/* Bytes currently allocated (self-tests check that frees balance). */
unsigned long us_mem_in_use(void)
{
	return region.in_use;
}
EXPORT_SYMBOL_GPL(us_mem_in_use);

/* ---- kmalloc and friends ----------------------------------------------- */

void *__kmalloc(size_t size, gfp_t flags)
{
	return alloc_traced(size, flags, _RET_IP_);
}
EXPORT_SYMBOL(__kmalloc);

void *__kmalloc_node(size_t size, gfp_t flags, int node)
{
	return alloc_traced(size, flags, _RET_IP_);
}
EXPORT_SYMBOL(__kmalloc_node);

void *kmalloc_trace(struct kmem_cache *s, gfp_t flags, size_t size)
{
	return alloc_traced(size, flags, _RET_IP_);
}
EXPORT_SYMBOL(kmalloc_trace);

void *kmalloc_node_trace(struct kmem_cache *s, gfp_t flags, int node, size_t size)
{
	return alloc_traced(size, flags, _RET_IP_);
}
EXPORT_SYMBOL(kmalloc_node_trace);

void *kmalloc_large(size_t size, gfp_t flags)
{
	return alloc_traced(size, flags, _RET_IP_);
}
EXPORT_SYMBOL(kmalloc_large);

void kfree(const void *p)
{
	us_free(p);
}
EXPORT_SYMBOL(kfree);

size_t ksize(const void *p)
{
	return ZERO_OR_NULL_PTR(p) ? 0 : us_alloc_size(p);
}
EXPORT_SYMBOL(ksize);

void *krealloc(const void *p, size_t new_size, gfp_t flags)
{
	size_t old = ksize(p);
	void *n;

	if (!new_size) {
		kfree(p);
		return ZERO_SIZE_PTR;
	}
	if (new_size <= old)
		return (void *)p;
	n = us_alloc(new_size, flags);
	if (n && old) {
		memcpy(n, p, old);
		kfree(p);
	}
	return n;
}
EXPORT_SYMBOL(krealloc);

void *kmemdup(const void *src, size_t len, gfp_t gfp)
{
	void *p = us_alloc(len, gfp & ~__GFP_ZERO);

	if (p)
		memcpy(p, src, len);
	return p;
}
EXPORT_SYMBOL(kmemdup);

char *kstrdup(const char *s, gfp_t gfp)
{
	return s ? kmemdup(s, strlen(s) + 1, gfp) : NULL;
}
EXPORT_SYMBOL(kstrdup);

/*
 * vmalloc areas are process memory with guard pages (ddekit_vmalloc), as in
 * the kernel: outside the arena, so the DMA API refuses them as the kernel's
 * debug checks would, and an overrun faults instead of corrupting a block.
 */
void *vmalloc(unsigned long size)
{
	void *p = ddekit_vmalloc(size);

	if (p) {
		region.in_use += PAGE_ALIGN(size);
		us_trace(US_EV_ALLOC, _RET_IP_, p, size, 0);
		us_trace(US_EV_FILL, _RET_IP_, p, 0, size);	/* fresh pages are zero */
	}
	return p;
}
EXPORT_SYMBOL(vmalloc);

void *vzalloc(unsigned long size)
{
	return vmalloc(size);	/* fresh anonymous pages are zero */
}
EXPORT_SYMBOL(vzalloc);

void vfree(const void *addr)
{
	unsigned long len;

	if (!addr)
		return;
	len = ddekit_vfree(addr);
	if (!len)
		us_panic("vfree(%px): not the start of a vmalloc area", addr);
	us_trace(US_EV_FREE, _RET_IP_, addr, 0, 0);
	region.in_use -= len;
}
EXPORT_SYMBOL(vfree);

bool is_vmalloc_addr(const void *x)
{
	/* Asked for every dma_map_single(): the arena's memory answers at once. */
	return !us_in_dma_region(x, 1) && ddekit_is_vmalloc(x);
}
EXPORT_SYMBOL(is_vmalloc_addr);

void kvfree(const void *addr)
{
	if (is_vmalloc_addr(addr))
		vfree(addr);
	else
		us_free(addr);
}
EXPORT_SYMBOL(kvfree);

void *kvmalloc_node(size_t size, gfp_t flags, int node)
{
	return alloc_traced(size, flags, _RET_IP_);
}
EXPORT_SYMBOL(kvmalloc_node);

/* ---- pages -------------------------------------------------------------- */

struct page *alloc_pages(gfp_t gfp, unsigned int order)
{
	void *va = us_alloc(PAGE_SIZE << order, gfp);
	struct page *page;

	if (!va)
		return NULL;
	page = virt_to_page(va);
	memset(page, 0, sizeof(*page) << order);
	set_page_count(page, 1);
	if (order && (gfp & __GFP_COMP)) {
		__SetPageHead(page);
		for (unsigned int i = 1; i < (1U << order); i++)
			set_compound_head(page + i, page);
		set_compound_order(page, order);
	}
	return page;
}
EXPORT_SYMBOL(alloc_pages);

void __free_pages(struct page *page, unsigned int order)
{
	if (put_page_testzero(page))
		us_free(page_address(page));
}
EXPORT_SYMBOL(__free_pages);

unsigned long __get_free_pages(gfp_t gfp, unsigned int order)
{
	struct page *page = alloc_pages(gfp, order);

	return page ? (unsigned long)page_address(page) : 0;
}
EXPORT_SYMBOL(__get_free_pages);

void free_pages(unsigned long addr, unsigned int order)
{
	if (addr)
		__free_pages(virt_to_page((void *)addr), order);
}
EXPORT_SYMBOL(free_pages);

/*
 * size bytes of whole pages, each its own page with a reference of one, as
 * the kernel leaves them after giving back the rest of the power-of-two
 * block. Here the rest stays with the block (the allocator does not split
 * blocks), and is freed with it.
 */
void *alloc_pages_exact(size_t size, gfp_t gfp)
{
	void *va = us_alloc(PAGE_ALIGN(size), gfp & ~__GFP_COMP);

	if (!va)
		return NULL;
	for (size_t off = 0; off < PAGE_ALIGN(size); off += PAGE_SIZE) {
		struct page *page = virt_to_page(va + off);

		memset(page, 0, sizeof(*page));
		set_page_count(page, 1);
	}
	return va;
}
EXPORT_SYMBOL(alloc_pages_exact);

void free_pages_exact(void *virt, size_t size)
{
	us_free(virt);
}
EXPORT_SYMBOL(free_pages_exact);

/* The last reference to a page (or compound page) went away. */
void __folio_put(struct folio *folio)
{
	us_free(folio_address(folio));
}
EXPORT_SYMBOL(__folio_put);

/* Reached only when devmap_managed_key is on, and it never is. */
bool __put_devmap_managed_page_refs(struct page *page, int refs)
{
	us_unreachable();
}
EXPORT_SYMBOL(__put_devmap_managed_page_refs);

/*
 * Page fragments (RX buffers, skb heads). The kernel carves them out of a
 * shared page with a biased refcount; here each fragment is a page (run) of
 * its own with a reference count of one, which page_frag_free() drops, so
 * get_page()/put_page() on a fragment keep their meaning.
 */
static void *alloc_frag(unsigned int fragsz, gfp_t gfp)
{
	struct page *page = alloc_pages(gfp | __GFP_COMP, get_order(fragsz));

	return page ? page_address(page) : NULL;
}

void *__netdev_alloc_frag_align(unsigned int fragsz, unsigned int align_mask)
{
	return alloc_frag(fragsz, GFP_ATOMIC);
}
EXPORT_SYMBOL(__netdev_alloc_frag_align);

void *__napi_alloc_frag_align(unsigned int fragsz, unsigned int align_mask)
{
	return alloc_frag(fragsz, GFP_ATOMIC);
}
EXPORT_SYMBOL(__napi_alloc_frag_align);

void page_frag_free(void *addr)
{
	struct page *page = virt_to_head_page(addr);

	if (put_page_testzero(page))
		us_free(page_address(page));
}
EXPORT_SYMBOL(page_frag_free);
