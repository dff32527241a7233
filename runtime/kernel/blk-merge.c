// SPDX-License-Identifier: GPL-2.0
/*
 * A request's data: its one bio over a buffer, the buffer's physical
 * segments under the queue's limits, the scatterlist drivers map for the
 * device, a driver's kernel buffer mapped into a request, and the
 * scatterlist pools drivers size their tables with.
 *
 * Stands in for block/blk-merge.c (segments, __blk_rq_map_sg()),
 * block/blk-map.c (blk_rq_map_kern()), block/bio.c (bio_init()) and
 * lib/sg_pool.c.
 *
 * Buffers are contiguous in the arena (pool buffers are consecutive,
 * runtime memory comes from one block), so the bio has one vector entry
 * per page and neighbouring entries merge into a segment whenever the
 * queue's segment size and boundary allow, as Linux merges them.
 */
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/mm.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>

#include "internal.h"
#include "blk.h"

/* Whether bytes [start, start + len) may be one segment under q's limits. */
static bool one_segment(struct request_queue *q, phys_addr_t start, unsigned int len)
{
	unsigned long mask = q->limits.seg_boundary_mask;

	return len <= q->limits.max_segment_size &&
	       (start | mask) == ((start + len - 1) | mask);
}

/*
 * Walks rq's bio segment by segment: calls emit (if not NULL) with each
 * segment's first page, offset and length; returns the count.
 */
static unsigned int walk_segments(struct request *rq,
				  void (*emit)(void *arg, struct page *page, unsigned int off,
					       unsigned int len),
				  void *arg)
{
	struct request_queue *q = rq->q;
	struct bio *bio = rq->bio;
	struct page *seg_page = NULL;
	unsigned int seg_off = 0, seg_len = 0, n = 0, i;
	phys_addr_t seg_start = 0;

	if (!bio)
		return 0;
	for (i = 0; i < bio->bi_vcnt; i++) {
		struct bio_vec *bv = &bio->bi_io_vec[i];
		phys_addr_t start = page_to_phys(bv->bv_page) + bv->bv_offset;

		if (seg_len && seg_start + seg_len == start &&
		    one_segment(q, seg_start, seg_len + bv->bv_len)) {
			seg_len += bv->bv_len;
			continue;
		}
		if (seg_len && emit)
			emit(arg, seg_page, seg_off, seg_len);
		n += !!seg_len;
		seg_page = bv->bv_page;
		seg_off = bv->bv_offset;
		seg_start = start;
		seg_len = bv->bv_len;
	}
	if (seg_len && emit)
		emit(arg, seg_page, seg_off, seg_len);
	return n + !!seg_len;
}

void us_blk_init_bio(struct request *rq, void *buf, unsigned int len)
{
	struct us_rq *ext = us_rq(rq);
	struct bio *bio = &ext->bio;
	enum req_op op = req_op(rq);

	memset(bio, 0, sizeof(*bio));
	bio->bi_io_vec = bio->bi_inline_vecs;
	bio->bi_max_vecs = US_BLK_MAX_VECS;
	bio->bi_opf = rq->cmd_flags;
	bio->bi_bdev = rq->part;
	bio->bi_iter.bi_sector = rq->__sector;
	bio->bi_iter.bi_size = len;
	atomic_set(&bio->__bi_remaining, 1);
	atomic_set(&bio->__bi_cnt, 1);
	while (buf && len) {
		unsigned int off = offset_in_page(buf);
		unsigned int n = min_t(unsigned int, len, PAGE_SIZE - off);
		struct bio_vec *bv = &bio->bi_io_vec[bio->bi_vcnt++];

		bv->bv_page = virt_to_page(buf);
		bv->bv_offset = off;
		bv->bv_len = n;
		buf += n;
		len -= n;
	}
	rq->bio = rq->biotail = bio;
	rq->__data_len = bio->bi_iter.bi_size;
	/* Discards count one segment per bio (blk_rq_nr_discard_segments), write-zeroes none. */
	if (op == REQ_OP_DISCARD || op == REQ_OP_SECURE_ERASE)
		rq->nr_phys_segments = 1;
	else
		rq->nr_phys_segments = walk_segments(rq, NULL, NULL);
}

struct map_sg {
	struct scatterlist *sglist, *sg;
	unsigned int n;
};

static void map_one(void *arg, struct page *page, unsigned int off, unsigned int len)
{
	struct map_sg *m = arg;

	/* blk_next_sg(): the first entry, or the one after the last, unmarking its end. */
	if (!m->sg) {
		m->sg = m->sglist;
	} else {
		sg_unmark_end(m->sg);
		m->sg = sg_next(m->sg);
	}
	sg_set_page(m->sg, page, len, off);
	m->n++;
}

int __blk_rq_map_sg(struct request_queue *q, struct request *rq, struct scatterlist *sglist,
		    struct scatterlist **last_sg)
{
	struct map_sg m = { .sglist = sglist, .sg = *last_sg };

	if (rq->rq_flags & RQF_SPECIAL_PAYLOAD)
		map_one(&m, rq->special_vec.bv_page, rq->special_vec.bv_offset,
			rq->special_vec.bv_len);
	else if (rq->bio)
		walk_segments(rq, map_one, &m);
	*last_sg = m.sg;
	if (m.sg)
		sg_mark_end(m.sg);
	WARN_ON(m.n > blk_rq_nr_phys_segments(rq));
	return m.n;
}
EXPORT_SYMBOL(__blk_rq_map_sg);

/*
 * A driver's buffer as rq's data. The device can only reach the arena, so
 * a buffer outside it (on a thread's stack, in vmalloc space) goes through
 * a copy in runtime memory, as Linux copies buffers it cannot map.
 */
int blk_rq_map_kern(struct request_queue *q, struct request *rq, void *kbuf, unsigned int len,
		    gfp_t gfp_mask)
{
	struct us_rq *ext = us_rq(rq);
	bool write = op_is_write(req_op(rq));
	void *buf = kbuf;

	if (!len || len > US_BLK_MAX_BYTES || len > (queue_max_hw_sectors(q) << SECTOR_SHIFT))
		return -EINVAL;
	if (rq->bio)
		return -EINVAL;	/* no merging: one bio per request */
	if (!us_in_dma_region(kbuf, len)) {
		buf = kmalloc(len, gfp_mask);
		if (!buf)
			return -ENOMEM;
		if (write)
			memcpy(buf, kbuf, len);
		ext->bounce = buf;
		ext->data = kbuf;
		ext->len = len;
		ext->copy_back = !write;
	}
	us_blk_init_bio(rq, buf, len);
	if (rq->nr_phys_segments > queue_max_segments(q)) {
		kfree(ext->bounce);
		ext->bounce = NULL;
		rq->bio = rq->biotail = NULL;
		rq->__data_len = 0;
		return -EINVAL;
	}
	return 0;
}
EXPORT_SYMBOL(blk_rq_map_kern);

/* ---- scatterlist pools (lib/sg_pool.c) ------------------------------------- */

int sg_alloc_table_chained(struct sg_table *table, int nents, struct scatterlist *first_chunk,
			   unsigned nents_first_chunk)
{
	struct scatterlist *sgl = first_chunk;

	if (WARN_ON(nents <= 0))
		return -EINVAL;
	/* A table the inline chunk cannot hold is one flat array: sg_next() walks it alike. */
	if (!first_chunk || nents > nents_first_chunk) {
		sgl = kmalloc_array(nents, sizeof(*sgl), GFP_ATOMIC);
		if (!sgl)
			return -ENOMEM;
	}
	sg_init_table(sgl, nents);
	table->sgl = sgl;
	table->nents = table->orig_nents = nents;
	return 0;
}
EXPORT_SYMBOL_GPL(sg_alloc_table_chained);

void sg_free_table_chained(struct sg_table *table, unsigned nents_first_chunk)
{
	if (table->orig_nents > nents_first_chunk || !nents_first_chunk)
		kfree(table->sgl);
	table->sgl = NULL;
	table->nents = table->orig_nents = 0;
}
EXPORT_SYMBOL_GPL(sg_free_table_chained);
