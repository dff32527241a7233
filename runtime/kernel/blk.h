/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The block layer's declarations between the kernel half's block files
 * (stands in for block/blk.h, blk-mq.h and blk-mq-tag.h): the private
 * structures the public headers only name (struct blk_mq_tags,
 * struct blk_mq_ctx), the queue as the runtime allocates it, and what the
 * runtime keeps beside each request.
 *
 * No I/O scheduler, no merging, no splitting, no plugging: a request is
 * one bio, made by the runtime from the host's entry (blk-core.c) or by a
 * driver's blk_rq_map_kern (blk-merge.c), and goes straight to its
 * hardware queue's queue_rq.
 */
#ifndef UNDERSTUDY_KERNEL_BLK_H
#define UNDERSTUDY_KERNEL_BLK_H

#include <linux/blk-mq.h>
#include <linux/blkdev.h>

/*
 * The most bytes one request carries: each request's bio vector is
 * allocated with it, once, so the data path never allocates one. DISK's
 * max_sectors is never above it.
 */
#define US_BLK_MAX_BYTES	(256u * 1024)
#define US_BLK_MAX_VECS		(US_BLK_MAX_BYTES / PAGE_SIZE + 1)

/* What the runtime keeps beside each request, found by its tag. */
struct us_rq {
	void *bounce;		/* runtime DMA memory the data goes through, or NULL */
	void *data;		/* a read's destination at the end (copy_back) */
	unsigned int len;
	bool copy_back;
	bool host;		/* the host's: ends with ddekit_blk_done(cookie) */
	unsigned long cookie;
	bool executed;		/* blk_execute_rq's: its end sets done and status */
	bool done;
	blk_status_t status;
	struct bio bio;		/* last: its inline vector holds US_BLK_MAX_VECS */
};

/*
 * One hardware queue's requests, allocated with the tag set (blk-mq-tag.c):
 * the public struct blk_mq_tags (drivers read its rqs inline, in
 * blk_mq_tag_to_rq()), and what the runtime keeps beside it.
 */
struct us_tags {
	struct blk_mq_tags tags;
	unsigned int hctx_idx;
	struct us_rq **ext;		/* by tag */
	unsigned long *used;		/* bitmap of tags handed out */
};

static inline struct us_tags *us_tags(struct blk_mq_tags *tags)
{
	return container_of(tags, struct us_tags, tags);
}

/* block/blk-mq.h's: a request without a scheduler tag. */
#define BLK_MQ_NO_TAG	-1U

/* The software queue the public API names: one, since there is one CPU. */
struct blk_mq_ctx {
	unsigned int cpu;
};

/* A request_queue as the runtime allocates it (genhd.c). */
struct us_queue {
	struct blk_mq_hw_ctx *hctxs;	/* nr_hw_queues of them */
	struct blk_mq_ctx ctx;
	unsigned int in_use;		/* requests allocated on it: what a freeze drains */
	bool dying;			/* del_gendisk or blk_mq_destroy_queue: no new requests */
	struct request_queue q;		/* last: it ends in a flexible array */
};

static inline struct us_queue *us_queue(struct request_queue *q)
{
	return container_of(q, struct us_queue, q);
}

static inline struct us_rq *us_rq(struct request *rq)
{
	return us_tags(rq->mq_hctx->tags)->ext[rq->tag];
}

/* blk-mq-tag.c: tag sets allocated and not yet freed. */
extern long us_blk_tag_sets;
/* blk-mq-tag.c: a free tag of tags (reserved: one of the reserved ones), or -1. */
int us_blk_get_tag(struct blk_mq_tags *tags, bool reserved);
void us_blk_put_tag(struct blk_mq_tags *tags, unsigned int tag);

/* blk-mq.c */
int us_blk_init_hctxs(struct request_queue *q, struct blk_mq_tag_set *set);
void us_blk_exit_hctxs(struct request_queue *q);
/* A request of hardware queue hctx_idx, waiting while none is free or q is frozen. */
struct request *us_blk_get_request(struct request_queue *q, unsigned int hctx_idx,
				   blk_opf_t opf, blk_mq_req_flags_t flags);
/* Queues rq on its hardware queue and runs the queue. */
void us_blk_insert(struct request *rq, bool at_head);
void us_blk_drain(struct request_queue *q);

/* blk-merge.c: the bio of rq over [buf, buf + len) (DMA memory), its segment count. */
void us_blk_init_bio(struct request *rq, void *buf, unsigned int len);

/* blk-core.c: a host request ended; returns true if it was one (and is freed). */
bool us_blk_host_end(struct request *rq, blk_status_t error);

/* blk-settings.c: the limits a new queue starts with (block/blk.h). */
void blk_set_default_limits(struct queue_limits *lim);

/* genhd.c: the disk was added, or its capacity or read-only state changed. */
void us_blk_report_disk(struct gendisk *disk);
struct gendisk *us_blk_disk(void);

#endif /* UNDERSTUDY_KERNEL_BLK_H */
