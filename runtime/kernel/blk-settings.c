// SPDX-License-Identifier: GPL-2.0
/*
 * A queue's limits and flags as drivers set them: the defaults every new
 * queue starts with, the blk_queue_* setters, the write cache.
 *
 * Stands in for block/blk-settings.c. The limits decide what the runtime
 * accepts from the host (blk-core.c) and what DISK reports (genhd.c);
 * their rules (a physical block never below the logical one, max_sectors
 * under max_hw_sectors) are Linux's.
 */
#include <linux/blkdev.h>
#include <linux/blk-mq.h>
#include <linux/gcd.h>

#include "internal.h"
#include "blk.h"

void blk_set_default_limits(struct queue_limits *lim)
{
	memset(lim, 0, sizeof(*lim));
	lim->max_segments = BLK_MAX_SEGMENTS;
	lim->max_discard_segments = 1;
	lim->max_integrity_segments = 0;
	lim->seg_boundary_mask = BLK_SEG_BOUNDARY_MASK;
	lim->virt_boundary_mask = 0;
	lim->max_segment_size = BLK_MAX_SEGMENT_SIZE;
	lim->max_sectors = lim->max_hw_sectors = BLK_SAFE_MAX_SECTORS;
	lim->max_dev_sectors = 0;
	lim->logical_block_size = lim->physical_block_size = lim->io_min = 512;
	lim->dma_alignment = 511;
}

void blk_queue_max_hw_sectors(struct request_queue *q, unsigned int max_hw_sectors)
{
	struct queue_limits *limits = &q->limits;
	unsigned int max_sectors;

	if ((max_hw_sectors << 9) < PAGE_SIZE)
		max_hw_sectors = 1 << (PAGE_SHIFT - 9);
	max_hw_sectors = round_down(max_hw_sectors, limits->logical_block_size >> SECTOR_SHIFT);
	limits->max_hw_sectors = max_hw_sectors;
	max_sectors = min_not_zero(max_hw_sectors, limits->max_dev_sectors);
	max_sectors = min_t(unsigned int, max_sectors, BLK_DEF_MAX_SECTORS);
	limits->max_sectors = round_down(max_sectors, limits->logical_block_size >> SECTOR_SHIFT);
}
EXPORT_SYMBOL(blk_queue_max_hw_sectors);

void blk_queue_max_segments(struct request_queue *q, unsigned short max_segments)
{
	q->limits.max_segments = max_t(unsigned short, max_segments, 1);
}
EXPORT_SYMBOL(blk_queue_max_segments);

void blk_queue_max_discard_segments(struct request_queue *q, unsigned short max_segments)
{
	q->limits.max_discard_segments = max_segments;
}
EXPORT_SYMBOL_GPL(blk_queue_max_discard_segments);

void blk_queue_max_segment_size(struct request_queue *q, unsigned int max_size)
{
	if (max_size < PAGE_SIZE)
		max_size = PAGE_SIZE;
	/* A virt boundary makes segments unbounded in Linux: it must not be combined with one. */
	WARN_ON_ONCE(q->limits.virt_boundary_mask);
	q->limits.max_segment_size = max_size;
}
EXPORT_SYMBOL(blk_queue_max_segment_size);

void blk_queue_segment_boundary(struct request_queue *q, unsigned long mask)
{
	if (mask < PAGE_SIZE - 1)
		mask = PAGE_SIZE - 1;
	q->limits.seg_boundary_mask = mask;
}
EXPORT_SYMBOL(blk_queue_segment_boundary);

void blk_queue_virt_boundary(struct request_queue *q, unsigned long mask)
{
	q->limits.virt_boundary_mask = mask;
	/* Devices with a virt boundary take any segment size (Linux's rule). */
	if (mask)
		q->limits.max_segment_size = UINT_MAX;
}
EXPORT_SYMBOL(blk_queue_virt_boundary);

void blk_queue_max_discard_sectors(struct request_queue *q, unsigned int max_discard_sectors)
{
	q->limits.max_hw_discard_sectors = max_discard_sectors;
	q->limits.max_discard_sectors = max_discard_sectors;
}
EXPORT_SYMBOL(blk_queue_max_discard_sectors);

void blk_queue_max_secure_erase_sectors(struct request_queue *q, unsigned int max_sectors)
{
	q->limits.max_secure_erase_sectors = max_sectors;
}
EXPORT_SYMBOL(blk_queue_max_secure_erase_sectors);

void blk_queue_max_write_zeroes_sectors(struct request_queue *q,
					unsigned int max_write_zeroes_sectors)
{
	q->limits.max_write_zeroes_sectors = max_write_zeroes_sectors;
}
EXPORT_SYMBOL(blk_queue_max_write_zeroes_sectors);

void blk_queue_logical_block_size(struct request_queue *q, unsigned int size)
{
	struct queue_limits *limits = &q->limits;

	limits->logical_block_size = size;
	if (limits->physical_block_size < size)
		limits->physical_block_size = size;
	if (limits->io_min < limits->physical_block_size)
		limits->io_min = limits->physical_block_size;
	limits->max_hw_sectors = round_down(limits->max_hw_sectors, size >> SECTOR_SHIFT);
	limits->max_sectors = round_down(limits->max_sectors, size >> SECTOR_SHIFT);
}
EXPORT_SYMBOL(blk_queue_logical_block_size);

void blk_queue_physical_block_size(struct request_queue *q, unsigned int size)
{
	q->limits.physical_block_size = max(size, q->limits.logical_block_size);
	if (q->limits.io_min < q->limits.physical_block_size)
		q->limits.io_min = q->limits.physical_block_size;
}
EXPORT_SYMBOL(blk_queue_physical_block_size);

void blk_queue_alignment_offset(struct request_queue *q, unsigned int offset)
{
	q->limits.alignment_offset = offset & (q->limits.physical_block_size - 1);
	q->limits.misaligned = 0;
}
EXPORT_SYMBOL(blk_queue_alignment_offset);

void blk_queue_io_min(struct request_queue *q, unsigned int min)
{
	q->limits.io_min = max(min, q->limits.physical_block_size);
}
EXPORT_SYMBOL(blk_queue_io_min);

void blk_queue_io_opt(struct request_queue *q, unsigned int opt)
{
	q->limits.io_opt = opt;
}
EXPORT_SYMBOL(blk_queue_io_opt);

void blk_queue_dma_alignment(struct request_queue *q, int mask)
{
	q->limits.dma_alignment = mask;
}
EXPORT_SYMBOL(blk_queue_dma_alignment);

void blk_queue_write_cache(struct request_queue *q, bool wc, bool fua)
{
	if (wc)
		set_bit(QUEUE_FLAG_WC, &q->queue_flags);
	else
		clear_bit(QUEUE_FLAG_WC, &q->queue_flags);
	if (fua)
		set_bit(QUEUE_FLAG_FUA, &q->queue_flags);
	else
		clear_bit(QUEUE_FLAG_FUA, &q->queue_flags);
}
EXPORT_SYMBOL_GPL(blk_queue_write_cache);

void blk_queue_flag_set(unsigned int flag, struct request_queue *q)
{
	set_bit(flag, &q->queue_flags);
}
EXPORT_SYMBOL(blk_queue_flag_set);

void blk_queue_flag_clear(unsigned int flag, struct request_queue *q)
{
	clear_bit(flag, &q->queue_flags);
}
EXPORT_SYMBOL(blk_queue_flag_clear);
