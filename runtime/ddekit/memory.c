// SPDX-License-Identifier: GPL-2.0
/*
 * Memory kernel code gets that the device never sees (the DMA arena is
 * arena.c's): zeroed bookkeeping memory, and vmalloc areas between guard
 * pages.
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h).
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "checking.h"
#include "memory.h"

void *ddekit_zalloc(unsigned long size)
{
	return calloc(1, size);
}

/* x86-64's base page: the granule of mprotect and of the guard pages. */
#define VMALLOC_PAGE 4096UL

struct vmalloc_area {
	char *start;
	size_t len;		/* page-aligned; a guard page on each side */
	struct vmalloc_area *next;
};

static struct vmalloc_area *vmalloc_areas;
static pthread_mutex_t vmalloc_lock = PTHREAD_MUTEX_INITIALIZER;

void *ddekit_vmalloc(unsigned long size)
{
	const size_t page = VMALLOC_PAGE;
	size_t len = (size + page - 1) & ~(page - 1);
	struct vmalloc_area *area;
	char *guarded;

	if (!size || len < size || len + 2 * page < len)
		return NULL;
	area = malloc(sizeof(*area));
	if (!area)
		return NULL;
	guarded = mmap(NULL, len + 2 * page, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (guarded == MAP_FAILED) {
		free(area);
		return NULL;
	}
	if (mprotect(guarded + page, len, PROT_READ | PROT_WRITE)) {
		munmap(guarded, len + 2 * page);
		free(area);
		return NULL;
	}
	area->start = guarded + page;
	area->len = len;
	pthread_mutex_lock(&vmalloc_lock);
	area->next = vmalloc_areas;
	vmalloc_areas = area;
	pthread_mutex_unlock(&vmalloc_lock);
	return area->start;
}

static struct vmalloc_area **find_vmalloc_area(const char *p)
{
	struct vmalloc_area **link;

	for (link = &vmalloc_areas; *link; link = &(*link)->next)
		if (p >= (*link)->start && p < (*link)->start + (*link)->len)
			return link;
	return NULL;
}

unsigned long ddekit_vfree(const void *addr)
{
	const size_t page = VMALLOC_PAGE;
	struct vmalloc_area **link, *area = NULL;
	size_t len = 0;

	pthread_mutex_lock(&vmalloc_lock);
	link = find_vmalloc_area(addr);
	if (link && (*link)->start == addr) {
		area = *link;
		*link = area->next;
	}
	pthread_mutex_unlock(&vmalloc_lock);
	if (area) {
		len = area->len;
		/*
		 * Under the checker the area stays reserved, without its pages:
		 * an address it saw freed is never handed out again by mmap to
		 * memory it does not know (docs/checking.md, "The trace").
		 */
		if (ddekit_checking)
			mmap(area->start - page, len + 2 * page, PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
		else
			munmap(area->start - page, len + 2 * page);
		free(area);
	}
	return len;
}

int ddekit_is_vmalloc(const void *addr)
{
	int found;

	pthread_mutex_lock(&vmalloc_lock);
	found = find_vmalloc_area(addr) != NULL;
	pthread_mutex_unlock(&vmalloc_lock);
	return found;
}
