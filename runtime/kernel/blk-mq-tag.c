// SPDX-License-Identifier: GPL-2.0
/*
 * Tag sets: each hardware queue's static pool of requests, made once when
 * the driver allocates its tag set (every request passed to its
 * init_request, as in Linux), and the maps from CPUs to hardware queues.
 *
 * Stands in for block/blk-mq-tag.c, the tag set parts of block/blk-mq.c,
 * block/blk-mq-cpumap.c, blk-mq-pci.c and blk-mq-virtio.c.
 *
 * Tags are a bitmap searched from the bottom: the reserved ones first, as
 * in Linux (a reserved request's tag is below nr_reserved_tags). There is
 * one CPU, so every map sends it to its first queue; the host names the
 * hardware queue of each of its requests itself (blk-core.c).
 */
#include <linux/blk-mq.h>
#include <linux/blk-mq-pci.h>
#include <linux/blk-mq-virtio.h>
#include <linux/bitmap.h>
#include <linux/slab.h>

#include "internal.h"
#include "blk.h"

long us_blk_tag_sets;

int us_blk_get_tag(struct blk_mq_tags *t, bool reserved)
{
	struct us_tags *tags = us_tags(t);
	unsigned int first = reserved ? 0 : t->nr_reserved_tags;
	unsigned int end = reserved ? t->nr_reserved_tags : t->nr_tags;
	unsigned int tag = find_next_zero_bit(tags->used, end, first);

	if (tag >= end)
		return -1;
	__set_bit(tag, tags->used);
	return tag;
}

void us_blk_put_tag(struct blk_mq_tags *t, unsigned int tag)
{
	struct us_tags *tags = us_tags(t);

	if (tag >= t->nr_tags || !test_bit(tag, tags->used))
		us_panic("tag %u of hardware queue %u freed twice", tag, tags->hctx_idx);
	__clear_bit(tag, tags->used);
}

static void free_tags(struct blk_mq_tag_set *set, struct us_tags *tags)
{
	unsigned int i;

	for (i = 0; i < tags->tags.nr_tags; i++) {
		if (tags->tags.rqs[i] && set->ops->exit_request)
			set->ops->exit_request(set, tags->tags.rqs[i], tags->hctx_idx);
		kfree(tags->tags.rqs[i]);
		kfree(tags->ext[i]);
	}
	kfree(tags->tags.rqs);
	kfree(tags->ext);
	kfree(tags->used);
	kfree(tags);
}

static struct us_tags *alloc_tags(struct blk_mq_tag_set *set, unsigned int hctx_idx)
{
	unsigned int depth = set->queue_depth, i;
	struct us_tags *tags = kzalloc(sizeof(*tags), GFP_KERNEL);

	if (!tags)
		return NULL;
	tags->tags.nr_tags = depth;
	tags->tags.nr_reserved_tags = set->reserved_tags;
	spin_lock_init(&tags->tags.lock);
	INIT_LIST_HEAD(&tags->tags.page_list);
	tags->hctx_idx = hctx_idx;
	tags->tags.rqs = kcalloc(depth, sizeof(*tags->tags.rqs), GFP_KERNEL);
	tags->ext = kcalloc(depth, sizeof(*tags->ext), GFP_KERNEL);
	tags->used = kcalloc(BITS_TO_LONGS(depth), sizeof(long), GFP_KERNEL);
	if (!tags->tags.rqs || !tags->ext || !tags->used)
		goto fail;
	for (i = 0; i < depth; i++) {
		/* The driver's per-request data (its pdu) follows the request. */
		struct request *rq = kzalloc(sizeof(*rq) + set->cmd_size, GFP_KERNEL);
		struct us_rq *ext = kzalloc(struct_size(ext, bio.bi_inline_vecs, US_BLK_MAX_VECS),
					    GFP_KERNEL);

		tags->tags.rqs[i] = rq;
		tags->ext[i] = ext;
		if (!rq || !ext)
			goto fail;
		rq->tag = i;
		rq->internal_tag = BLK_MQ_NO_TAG;
		WRITE_ONCE(rq->state, MQ_RQ_IDLE);
		if (set->ops->init_request &&
		    set->ops->init_request(set, rq, hctx_idx, set->numa_node)) {
			kfree(rq);
			tags->tags.rqs[i] = NULL;
			goto fail;
		}
	}
	return tags;
fail:
	free_tags(set, tags);
	return NULL;
}

static void free_set(struct blk_mq_tag_set *set);

int blk_mq_alloc_tag_set(struct blk_mq_tag_set *set)
{
	unsigned int i;

	if (!set->nr_hw_queues || !set->queue_depth || !set->ops || !set->ops->queue_rq ||
	    set->queue_depth > BLK_MQ_MAX_DEPTH || set->reserved_tags >= set->queue_depth)
		return -EINVAL;
	if (!set->nr_maps)
		set->nr_maps = 1;
	if (set->nr_maps > HCTX_MAX_TYPES)
		return -EINVAL;
	set->tags = kcalloc(set->nr_hw_queues, sizeof(*set->tags), GFP_KERNEL);
	if (!set->tags)
		return -ENOMEM;
	for (i = 0; i < set->nr_maps; i++) {
		set->map[i].mq_map = kcalloc(nr_cpu_ids, sizeof(unsigned int), GFP_KERNEL);
		if (!set->map[i].mq_map)
			goto fail;
		set->map[i].nr_queues = set->nr_hw_queues;
	}
	for (i = 0; i < set->nr_hw_queues; i++) {
		struct us_tags *tags = alloc_tags(set, i);

		if (!tags)
			goto fail;
		set->tags[i] = &tags->tags;
	}
	if (set->ops->map_queues)
		set->ops->map_queues(set);
	else
		blk_mq_map_queues(&set->map[HCTX_TYPE_DEFAULT]);
	mutex_init(&set->tag_list_lock);
	INIT_LIST_HEAD(&set->tag_list);
	us_blk_tag_sets++;
	return 0;
fail:
	free_set(set);
	return -ENOMEM;
}
EXPORT_SYMBOL(blk_mq_alloc_tag_set);

static void free_set(struct blk_mq_tag_set *set)
{
	unsigned int i;

	for (i = 0; set->tags && i < set->nr_hw_queues; i++)
		if (set->tags[i])
			free_tags(set, us_tags(set->tags[i]));
	for (i = 0; i < set->nr_maps; i++) {
		kfree(set->map[i].mq_map);
		set->map[i].mq_map = NULL;
	}
	kfree(set->tags);
	set->tags = NULL;
}

void blk_mq_free_tag_set(struct blk_mq_tag_set *set)
{
	if (set->tags)
		us_blk_tag_sets--;
	free_set(set);
}
EXPORT_SYMBOL(blk_mq_free_tag_set);

/* Each CPU to a queue of the map's range; with one CPU, to its first. */
void blk_mq_map_queues(struct blk_mq_queue_map *qmap)
{
	unsigned int cpu;

	for (cpu = 0; cpu < nr_cpu_ids; cpu++)
		qmap->mq_map[cpu] = qmap->queue_offset + cpu % max(qmap->nr_queues, 1u);
}
EXPORT_SYMBOL_GPL(blk_mq_map_queues);

/*
 * Linux follows the vectors' affinity masks; the one CPU is in every mask,
 * so the first queue whose vector serves it is the map's first.
 */
void blk_mq_virtio_map_queues(struct blk_mq_queue_map *qmap, struct virtio_device *vdev,
			      int first_vec)
{
	blk_mq_map_queues(qmap);
}
EXPORT_SYMBOL_GPL(blk_mq_virtio_map_queues);

void blk_mq_pci_map_queues(struct blk_mq_queue_map *qmap, struct pci_dev *pdev, int offset)
{
	blk_mq_map_queues(qmap);
}
EXPORT_SYMBOL_GPL(blk_mq_pci_map_queues);
