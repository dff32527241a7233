// SPDX-License-Identifier: GPL-2.0
/*
 * ID allocators (struct ida), as buses number their devices (virtio0, ...).
 * The kernel keeps the IDs in a radix tree of bitmaps under the ida's
 * xarray; here the xarray's head points to one bitmap that grows as
 * needed. An ida is only ever used through these functions (and
 * DEFINE_IDA/ida_init, which leave the head NULL), so its layout is ours
 * to choose.
 *
 * Stands in for Linux's lib/idr.c.
 */
#include <linux/module.h>
#include <linux/idr.h>
#include <linux/slab.h>

#include "internal.h"

struct id_bitmap {
	unsigned int nbits;
	unsigned long bits[];
};

static struct id_bitmap *bitmap_of(struct ida *ida)
{
	return (struct id_bitmap *)ida->xa.xa_head;
}

/* Makes room for IDs below nbits; false if out of memory. */
static bool grow(struct ida *ida, unsigned int nbits)
{
	struct id_bitmap *old = bitmap_of(ida), *new;
	unsigned int size = max(nbits, 2 * (old ? old->nbits : BITS_PER_LONG));

	if (old && old->nbits >= nbits)
		return true;
	size = round_up(size, BITS_PER_LONG);
	new = kzalloc(struct_size(new, bits, BITS_TO_LONGS(size)), GFP_KERNEL);
	if (!new)
		return false;
	new->nbits = size;
	if (old) {
		memcpy(new->bits, old->bits, BITS_TO_LONGS(old->nbits) * sizeof(long));
		kfree(old);
	}
	ida->xa.xa_head = new;
	return true;
}

/* The lowest free ID in [min, max]. */
int ida_alloc_range(struct ida *ida, unsigned int min, unsigned int max, gfp_t gfp)
{
	struct id_bitmap *b;
	unsigned long id;

	if ((int)min < 0)
		return -ENOSPC;
	if ((int)max < 0)
		max = INT_MAX;
	for (;;) {
		b = bitmap_of(ida);
		if (b && min < b->nbits) {
			id = find_next_zero_bit(b->bits, b->nbits, min);
			if (id < b->nbits)
				break;
		}
		id = max(b ? b->nbits : 0, min);	/* the first ID the bitmap lacks */
		if (id > max)
			return -ENOSPC;
		if (!grow(ida, id + 1))
			return -ENOMEM;
	}
	if (id > max)
		return -ENOSPC;
	__set_bit(id, b->bits);
	return id;
}
EXPORT_SYMBOL(ida_alloc_range);

void ida_free(struct ida *ida, unsigned int id)
{
	struct id_bitmap *b = bitmap_of(ida);

	if (!b || id >= b->nbits || !test_bit(id, b->bits)) {
		WARN(1, "ida_free called for id=%u which is not allocated.\n", id);
		return;
	}
	__clear_bit(id, b->bits);
}
EXPORT_SYMBOL(ida_free);

void ida_destroy(struct ida *ida)
{
	kfree(bitmap_of(ida));
	ida->xa.xa_head = NULL;
}
EXPORT_SYMBOL(ida_destroy);
