// SPDX-License-Identifier: GPL-2.0
/*
 * blk-mq without a scheduler: hardware contexts, requests from the tag
 * set's pools, dispatch to the driver's queue_rq, completion and end,
 * requeueing, stopped and quiesced queues, freezing, per-request timeouts
 * and the driver's own requests (blk_execute_rq).
 *
 * Stands in for block/blk-mq.c, block/blk-timeout.c and the execution
 * part of block/blk-exec (blk_execute_rq, now in blk-mq.c).
 *
 * Everything runs under the one CPU (docs/design.md §6), which is what
 * makes the hardware queue's list safe without Linux's per-CPU and
 * per-queue locking: an interrupt's completion cannot run while a thread
 * dispatches. Waiting for a tag or for a frozen queue sleeps (us_wait),
 * and every freed request wakes the sleepers.
 */
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/jiffies.h>
#include <linux/sched/clock.h>
#include <linux/slab.h>
#include <linux/timer.h>
#include <linux/workqueue.h>

#include "internal.h"
#include "blk.h"

/* Linux's default request timeout (BLK_DEFAULT_SG_TIMEOUT). */
#define US_BLK_DEFAULT_TIMEOUT	(30 * HZ)
/* A hardware queue that gave up for want of resources with nothing in flight is run again after this. */
#define US_BLK_RESOURCE_DELAY_MS	3

static void run_work_fn(struct work_struct *work);
static void timeout_timer_fn(struct timer_list *t);
static void timeout_work_fn(struct work_struct *work);

int us_blk_init_hctxs(struct request_queue *q, struct blk_mq_tag_set *set)
{
	struct us_queue *uq = us_queue(q);
	unsigned int i;
	int err;

	uq->hctxs = kcalloc(set->nr_hw_queues, sizeof(*uq->hctxs), GFP_KERNEL);
	if (!uq->hctxs)
		return -ENOMEM;
	q->nr_hw_queues = set->nr_hw_queues;
	q->queue_depth = set->queue_depth;
	q->nr_requests = set->queue_depth;
	q->rq_timeout = set->timeout ? set->timeout : US_BLK_DEFAULT_TIMEOUT;
	timer_setup(&q->timeout, timeout_timer_fn, 0);
	INIT_WORK(&q->timeout_work, timeout_work_fn);
	for (i = 0; i < set->nr_hw_queues; i++) {
		struct blk_mq_hw_ctx *hctx = &uq->hctxs[i];

		spin_lock_init(&hctx->lock);
		INIT_LIST_HEAD(&hctx->dispatch);
		INIT_DELAYED_WORK(&hctx->run_work, run_work_fn);
		hctx->queue = q;
		hctx->queue_num = i;
		hctx->tags = set->tags[i];
		hctx->numa_node = NUMA_NO_NODE;
		hctx->flags = set->flags;
		hctx->nr_ctx = 1;
		if (set->ops->init_hctx) {
			err = set->ops->init_hctx(hctx, set->driver_data, i);
			if (err) {
				q->nr_hw_queues = i;
				us_blk_exit_hctxs(q);
				return err;
			}
		}
	}
	return 0;
}

void us_blk_exit_hctxs(struct request_queue *q)
{
	struct us_queue *uq = us_queue(q);
	unsigned int i;

	del_timer_sync(&q->timeout);
	cancel_work_sync(&q->timeout_work);
	for (i = 0; uq->hctxs && i < q->nr_hw_queues; i++) {
		cancel_delayed_work_sync(&uq->hctxs[i].run_work);
		if (q->tag_set->ops->exit_hctx)
			q->tag_set->ops->exit_hctx(&uq->hctxs[i], i);
	}
	kfree(uq->hctxs);
	uq->hctxs = NULL;
}

/* ---- requests -------------------------------------------------------------- */

struct request *us_blk_get_request(struct request_queue *q, unsigned int hctx_idx,
				   blk_opf_t opf, blk_mq_req_flags_t flags)
{
	struct us_queue *uq = us_queue(q);
	struct blk_mq_hw_ctx *hctx;
	struct request *rq;
	struct us_rq *ext;
	int tag;

	if (hctx_idx >= q->nr_hw_queues)
		return ERR_PTR(-EINVAL);
	hctx = &uq->hctxs[hctx_idx];
	for (;;) {
		if (uq->dying)
			return ERR_PTR(-ENODEV);
		/* blk_queue_enter(): a frozen queue takes no new requests (PM is never in progress). */
		tag = q->mq_freeze_depth ? -1 : us_blk_get_tag(hctx->tags, flags & BLK_MQ_REQ_RESERVED);
		if (tag >= 0)
			break;
		if (flags & BLK_MQ_REQ_NOWAIT)
			return ERR_PTR(-EWOULDBLOCK);
		us_wait(0);
	}
	rq = hctx->tags->rqs[tag];
	ext = us_tags(hctx->tags)->ext[tag];
	uq->in_use++;
	rq->q = q;
	rq->mq_ctx = &uq->ctx;
	rq->mq_hctx = hctx;
	rq->cmd_flags = opf;
	rq->rq_flags = flags & BLK_MQ_REQ_PM ? RQF_PM : 0;
	rq->timeout = 0;
	rq->__data_len = 0;
	rq->__sector = (sector_t)-1;
	rq->bio = rq->biotail = NULL;
	INIT_LIST_HEAD(&rq->queuelist);
	rq->part = q->disk ? q->disk->part0 : NULL;
	rq->start_time_ns = ktime_get_ns();
	rq->io_start_time_ns = 0;
	rq->nr_phys_segments = 0;
	rq->ioprio = 0;
	rq->end_io = NULL;
	rq->end_io_data = NULL;
	rq->deadline = 0;
	atomic_set(&rq->ref, 1);
	WRITE_ONCE(rq->state, MQ_RQ_IDLE);
	memset(ext, 0, offsetof(struct us_rq, bio));
	return rq;
}

struct request *blk_mq_alloc_request(struct request_queue *q, blk_opf_t opf,
				     blk_mq_req_flags_t flags)
{
	/* The one CPU's software queue maps to the default map's queue. */
	unsigned int idx = q->tag_set->map[HCTX_TYPE_DEFAULT].mq_map[0];

	return us_blk_get_request(q, idx, opf, flags);
}
EXPORT_SYMBOL(blk_mq_alloc_request);

struct request *blk_mq_alloc_request_hctx(struct request_queue *q, blk_opf_t opf,
					  blk_mq_req_flags_t flags, unsigned int hctx_idx)
{
	return us_blk_get_request(q, hctx_idx, opf, flags | BLK_MQ_REQ_NOWAIT);
}
EXPORT_SYMBOL_GPL(blk_mq_alloc_request_hctx);

void blk_mq_free_request(struct request *rq)
{
	struct blk_mq_hw_ctx *hctx = rq->mq_hctx;
	struct us_queue *uq = us_queue(rq->q);
	struct us_rq *ext = us_rq(rq);

	if (READ_ONCE(rq->state) == MQ_RQ_IN_FLIGHT)
		us_panic("request %d freed while the device has it", rq->tag);
	kfree(ext->bounce);
	ext->bounce = NULL;
	WRITE_ONCE(rq->state, MQ_RQ_IDLE);
	us_blk_put_tag(hctx->tags, rq->tag);
	uq->in_use--;
	/* Someone may wait for a tag, or for a freeze to drain. */
	us_wake();
	/* A queue that ran out of resources runs again once one came back (SCHED_RESTART). */
	if (test_and_clear_bit(BLK_MQ_S_SCHED_RESTART, &hctx->state))
		blk_mq_run_hw_queue(hctx, true);
}
EXPORT_SYMBOL_GPL(blk_mq_free_request);

unsigned int blk_mq_rq_cpu(struct request *rq)
{
	return rq->mq_ctx->cpu;
}
EXPORT_SYMBOL(blk_mq_rq_cpu);

/* ---- dispatch -------------------------------------------------------------- */

static bool hctx_stopped(struct blk_mq_hw_ctx *hctx)
{
	return test_bit(BLK_MQ_S_STOPPED, &hctx->state) ||
	       test_bit(QUEUE_FLAG_QUIESCED, &hctx->queue->queue_flags);
}

/* Gives the driver what the hardware queue holds, until it refuses or the queue stops. */
static void dispatch(struct blk_mq_hw_ctx *hctx)
{
	struct request_queue *q = hctx->queue;

	while (!hctx_stopped(hctx) && !list_empty(&hctx->dispatch)) {
		struct request *rq = list_first_entry(&hctx->dispatch, struct request, queuelist);
		struct blk_mq_queue_data bd = { .rq = rq, .last = true };
		blk_status_t ret;

		list_del_init(&rq->queuelist);
		ret = q->mq_ops->queue_rq(hctx, &bd);
		if (ret == BLK_STS_OK)
			continue;
		if (ret == BLK_STS_RESOURCE || ret == BLK_STS_DEV_RESOURCE) {
			list_add(&rq->queuelist, &hctx->dispatch);
			/*
			 * DEV_RESOURCE: the driver restarts the queue itself
			 * once a request of its completes; RESOURCE: the next
			 * freed request does, or, with none in flight, a delay.
			 */
			set_bit(BLK_MQ_S_SCHED_RESTART, &hctx->state);
			if (ret == BLK_STS_RESOURCE && !us_queue(q)->in_use)
				blk_mq_delay_run_hw_queue(hctx, US_BLK_RESOURCE_DELAY_MS);
			return;
		}
		/* Refused for good: it ends with that status, as in Linux. */
		blk_mq_end_request(rq, ret);
	}
}

void us_blk_insert(struct request *rq, bool at_head)
{
	struct blk_mq_hw_ctx *hctx = rq->mq_hctx;

	if (at_head)
		list_add(&rq->queuelist, &hctx->dispatch);
	else
		list_add_tail(&rq->queuelist, &hctx->dispatch);
	dispatch(hctx);
}

static void run_work_fn(struct work_struct *work)
{
	struct blk_mq_hw_ctx *hctx = container_of(to_delayed_work(work), struct blk_mq_hw_ctx,
						  run_work);

	dispatch(hctx);
}

/*
 * Asynchronous runs go to the workqueue, as Linux's go to kblockd: drivers
 * ask for them from completion paths that hold their queue's lock, which
 * a synchronous queue_rq would take again.
 */
void blk_mq_run_hw_queue(struct blk_mq_hw_ctx *hctx, bool async)
{
	if (async)
		mod_delayed_work(system_wq, &hctx->run_work, 0);
	else
		dispatch(hctx);
}
EXPORT_SYMBOL(blk_mq_run_hw_queue);

void blk_mq_delay_run_hw_queue(struct blk_mq_hw_ctx *hctx, unsigned long msecs)
{
	mod_delayed_work(system_wq, &hctx->run_work, msecs_to_jiffies(msecs));
}
EXPORT_SYMBOL(blk_mq_delay_run_hw_queue);

void blk_mq_run_hw_queues(struct request_queue *q, bool async)
{
	unsigned int i;

	for (i = 0; i < q->nr_hw_queues; i++)
		blk_mq_run_hw_queue(&us_queue(q)->hctxs[i], async);
}
EXPORT_SYMBOL(blk_mq_run_hw_queues);

void blk_mq_stop_hw_queue(struct blk_mq_hw_ctx *hctx)
{
	cancel_delayed_work(&hctx->run_work);
	set_bit(BLK_MQ_S_STOPPED, &hctx->state);
}
EXPORT_SYMBOL(blk_mq_stop_hw_queue);

void blk_mq_stop_hw_queues(struct request_queue *q)
{
	unsigned int i;

	for (i = 0; i < q->nr_hw_queues; i++)
		blk_mq_stop_hw_queue(&us_queue(q)->hctxs[i]);
}
EXPORT_SYMBOL(blk_mq_stop_hw_queues);

void blk_mq_start_stopped_hw_queue(struct blk_mq_hw_ctx *hctx, bool async)
{
	if (!test_and_clear_bit(BLK_MQ_S_STOPPED, &hctx->state))
		return;
	blk_mq_run_hw_queue(hctx, async);
}
EXPORT_SYMBOL_GPL(blk_mq_start_stopped_hw_queue);

void blk_mq_start_stopped_hw_queues(struct request_queue *q, bool async)
{
	unsigned int i;

	for (i = 0; i < q->nr_hw_queues; i++)
		blk_mq_start_stopped_hw_queue(&us_queue(q)->hctxs[i], async);
}
EXPORT_SYMBOL(blk_mq_start_stopped_hw_queues);

void blk_mq_start_hw_queues(struct request_queue *q)
{
	unsigned int i;

	for (i = 0; i < q->nr_hw_queues; i++) {
		clear_bit(BLK_MQ_S_STOPPED, &us_queue(q)->hctxs[i].state);
		blk_mq_run_hw_queue(&us_queue(q)->hctxs[i], false);
	}
}
EXPORT_SYMBOL(blk_mq_start_hw_queues);

/*
 * Quiescing: no queue_rq runs once it returns. A dispatch in progress
 * holds the CPU, so none runs while the caller does: there is nothing to
 * wait for beyond the flag (Linux's synchronize_rcu/srcu).
 */
void blk_mq_quiesce_queue_nowait(struct request_queue *q)
{
	if (!q->quiesce_depth++)
		set_bit(QUEUE_FLAG_QUIESCED, &q->queue_flags);
}
EXPORT_SYMBOL_GPL(blk_mq_quiesce_queue_nowait);

void blk_mq_quiesce_queue(struct request_queue *q)
{
	blk_mq_quiesce_queue_nowait(q);
}
EXPORT_SYMBOL_GPL(blk_mq_quiesce_queue);

void blk_mq_unquiesce_queue(struct request_queue *q)
{
	if (WARN_ON_ONCE(q->quiesce_depth <= 0))
		return;
	if (--q->quiesce_depth)
		return;
	clear_bit(QUEUE_FLAG_QUIESCED, &q->queue_flags);
	blk_mq_run_hw_queues(q, true);
}
EXPORT_SYMBOL_GPL(blk_mq_unquiesce_queue);

/* ---- freezing -------------------------------------------------------------- */

/* Waits until no request of q is allocated (they all ended and were freed). */
void us_blk_drain(struct request_queue *q)
{
	while (us_queue(q)->in_use)
		us_wait(0);
}

void blk_freeze_queue_start(struct request_queue *q)
{
	q->mq_freeze_depth++;
}
EXPORT_SYMBOL_GPL(blk_freeze_queue_start);

void blk_mq_freeze_queue_wait(struct request_queue *q)
{
	us_blk_drain(q);
}
EXPORT_SYMBOL_GPL(blk_mq_freeze_queue_wait);

int blk_mq_freeze_queue_wait_timeout(struct request_queue *q, unsigned long timeout)
{
	unsigned long expires;

	us_update_jiffies();
	expires = jiffies + timeout;
	while (us_queue(q)->in_use && time_before(jiffies, expires)) {
		us_wait(us_jiffies_to_deadline(expires));
		us_update_jiffies();
	}
	return us_queue(q)->in_use ? 0 : max(1L, (long)(expires - jiffies));
}
EXPORT_SYMBOL_GPL(blk_mq_freeze_queue_wait_timeout);

void blk_mq_freeze_queue(struct request_queue *q)
{
	blk_freeze_queue_start(q);
	blk_mq_freeze_queue_wait(q);
}
EXPORT_SYMBOL_GPL(blk_mq_freeze_queue);

void blk_mq_unfreeze_queue(struct request_queue *q)
{
	if (WARN_ON_ONCE(q->mq_freeze_depth <= 0))
		return;
	if (!--q->mq_freeze_depth)
		us_wake();	/* allocations waiting for the queue to thaw */
}
EXPORT_SYMBOL_GPL(blk_mq_unfreeze_queue);

/* ---- start, completion, end ---------------------------------------------- */

void blk_mq_start_request(struct request *rq)
{
	struct request_queue *q = rq->q;

	rq->io_start_time_ns = ktime_get_ns();
	if (!rq->timeout)
		rq->timeout = q->rq_timeout;
	rq->deadline = jiffies + rq->timeout;
	if (!timer_pending(&q->timeout) || time_before(rq->deadline, q->timeout.expires))
		mod_timer(&q->timeout, rq->deadline);
	WRITE_ONCE(rq->state, MQ_RQ_IN_FLIGHT);
}
EXPORT_SYMBOL(blk_mq_start_request);

/* One CPU: a completion is always local, so it runs ->complete right here. */
bool blk_mq_complete_request_remote(struct request *rq)
{
	WRITE_ONCE(rq->state, MQ_RQ_COMPLETE);
	return false;
}
EXPORT_SYMBOL_GPL(blk_mq_complete_request_remote);

void blk_mq_complete_request(struct request *rq)
{
	if (!blk_mq_complete_request_remote(rq))
		rq->q->mq_ops->complete(rq);
}
EXPORT_SYMBOL(blk_mq_complete_request);

/*
 * The request's end: a read that went through runtime memory is copied to
 * its destination first, then the host hears of it (blk-core.c), or the
 * driver's end_io or blk_execute_rq's waiter does, or it is freed.
 */
static void end_request(struct request *rq, blk_status_t error)
{
	struct us_rq *ext = us_rq(rq);

	WRITE_ONCE(rq->state, MQ_RQ_COMPLETE);
	if (ext->copy_back && error == BLK_STS_OK && ext->bounce)
		memcpy(ext->data, ext->bounce, ext->len);
	if (ext->host) {
		us_blk_host_end(rq, error);
		return;
	}
	if (ext->executed) {
		ext->status = error;
		ext->done = true;
		us_wake();
		return;
	}
	if (rq->end_io) {
		if (rq->end_io(rq, error) == RQ_END_IO_FREE)
			blk_mq_free_request(rq);
		return;
	}
	blk_mq_free_request(rq);
}

bool blk_update_request(struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	/* The runtime never splits, so a request ends whole. */
	rq->__data_len = nr_bytes >= blk_rq_bytes(rq) ? 0 : blk_rq_bytes(rq) - nr_bytes;
	return rq->__data_len != 0;
}
EXPORT_SYMBOL_GPL(blk_update_request);

void __blk_mq_end_request(struct request *rq, blk_status_t error)
{
	end_request(rq, error);
}
EXPORT_SYMBOL(__blk_mq_end_request);

void blk_mq_end_request(struct request *rq, blk_status_t error)
{
	end_request(rq, error);
}
EXPORT_SYMBOL(blk_mq_end_request);

/* The requests a driver's poll gathered (blk_mq_add_to_batch), each ended without error. */
void blk_mq_end_request_batch(struct io_comp_batch *iob)
{
	struct request *rq;

	while ((rq = rq_list_pop(&iob->req_list)))
		end_request(rq, BLK_STS_OK);
}
EXPORT_SYMBOL_GPL(blk_mq_end_request_batch);

void blk_mq_requeue_request(struct request *rq, bool kick_requeue_list)
{
	WRITE_ONCE(rq->state, MQ_RQ_IDLE);
	list_add_tail(&rq->queuelist, &rq->mq_hctx->dispatch);
	if (kick_requeue_list)
		blk_mq_run_hw_queue(rq->mq_hctx, true);
}
EXPORT_SYMBOL(blk_mq_requeue_request);

void blk_mq_kick_requeue_list(struct request_queue *q)
{
	blk_mq_run_hw_queues(q, true);
}
EXPORT_SYMBOL(blk_mq_kick_requeue_list);

/* ---- the driver's own requests --------------------------------------------- */

blk_status_t blk_execute_rq(struct request *rq, bool at_head)
{
	struct us_rq *ext = us_rq(rq);

	ext->executed = true;
	ext->done = false;
	us_blk_insert(rq, at_head);
	while (!ext->done)
		us_wait(0);
	ext->executed = false;
	return ext->status;
}
EXPORT_SYMBOL(blk_execute_rq);

void blk_execute_rq_nowait(struct request *rq, bool at_head)
{
	us_blk_insert(rq, at_head);
}
EXPORT_SYMBOL_GPL(blk_execute_rq_nowait);

/* ---- timeouts -------------------------------------------------------------- */

static void timeout_timer_fn(struct timer_list *t)
{
	struct request_queue *q = from_timer(q, t, timeout);

	/* The driver's handler may sleep (nvme's resets): it runs from a work item, as in Linux. */
	queue_work(system_wq, &q->timeout_work);
}

/*
 * Every started request of q past its deadline gets the driver's timeout
 * handler: BLK_EH_RESET_TIMER gives it another period, BLK_EH_DONE means
 * the driver has completed it or will. Without a handler the timer is reset,
 * as Linux does.
 */
static void timeout_work_fn(struct work_struct *work)
{
	struct request_queue *q = container_of(work, struct request_queue, timeout_work);
	struct us_queue *uq = us_queue(q);
	unsigned long next = 0;
	bool any = false;
	unsigned int i, tag;

	us_update_jiffies();
	for (i = 0; i < q->nr_hw_queues; i++) {
		struct us_tags *tags = us_tags(uq->hctxs[i].tags);

		for_each_set_bit(tag, tags->used, tags->tags.nr_tags) {
			struct request *rq = tags->tags.rqs[tag];
			enum blk_eh_timer_return ret = BLK_EH_RESET_TIMER;

			if (rq->q != q || READ_ONCE(rq->state) != MQ_RQ_IN_FLIGHT)
				continue;
			if (time_after_eq(jiffies, rq->deadline)) {
				if (q->mq_ops->timeout)
					ret = q->mq_ops->timeout(rq);
				if (ret == BLK_EH_RESET_TIMER)
					rq->deadline = jiffies + rq->timeout;
			}
			if (READ_ONCE(rq->state) == MQ_RQ_IN_FLIGHT) {
				if (!any || time_before(rq->deadline, next))
					next = rq->deadline;
				any = true;
			}
		}
	}
	if (any)
		mod_timer(&q->timeout, next);
}
