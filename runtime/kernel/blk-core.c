// SPDX-License-Identifier: GPL-2.0
/*
 * The host's requests (docs/protocol.md, "Block devices"): each becomes a
 * request of the hardware queue the host names, with one bio over its
 * data, and goes to the driver; its end copies a read's data out of
 * runtime memory and tells the host (ddekit_blk_done). Block statuses and
 * errnos.
 *
 * Stands in for block/blk-core.c (submit_bio(), the checks of
 * submit_bio_noacct(), blk_status_to_errno()), the bio-to-request step of
 * block/blk-mq.c (blk_mq_submit_bio()) and block/blk-flush.c's policy.
 *
 * A write's bio points at the host's pool buffers themselves: the device
 * reads them through the IOMMU, which maps the pool read-only for it. A
 * read's bio points at runtime memory, since the device may not write the
 * pool; the data is copied into the pool buffers when the request ends.
 */
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/slab.h>

#include "internal.h"
#include "blk.h"

static const struct {
	int errno;
	const char *name;
} blk_errors[] = {
	[BLK_STS_OK]		= { 0,		"" },
	[BLK_STS_NOTSUPP]	= { -EOPNOTSUPP, "operation not supported" },
	[BLK_STS_TIMEOUT]	= { -ETIMEDOUT,	"timeout" },
	[BLK_STS_NOSPC]		= { -ENOSPC,	"critical space allocation" },
	[BLK_STS_TRANSPORT]	= { -ENOLINK,	"recoverable transport" },
	[BLK_STS_TARGET]	= { -EREMOTEIO,	"critical target" },
	[BLK_STS_NEXUS]		= { -EBADE,	"critical nexus" },
	[BLK_STS_MEDIUM]	= { -ENODATA,	"critical medium" },
	[BLK_STS_PROTECTION]	= { -EILSEQ,	"protection" },
	[BLK_STS_RESOURCE]	= { -ENOMEM,	"kernel resource" },
	[BLK_STS_DEV_RESOURCE]	= { -EBUSY,	"device resource" },
	[BLK_STS_AGAIN]		= { -EAGAIN,	"nonblocking retry" },
	[BLK_STS_OFFLINE]	= { -ENODEV,	"device offline" },
	[BLK_STS_DM_REQUEUE]	= { -EREMCHG,	"dm internal retry" },
	[BLK_STS_ZONE_OPEN_RESOURCE]	= { -ETOOMANYREFS, "open zones exceeded" },
	[BLK_STS_ZONE_ACTIVE_RESOURCE]	= { -EOVERFLOW,	"active zones exceeded" },
	[BLK_STS_IOERR]		= { -EIO,	"I/O" },
};

int blk_status_to_errno(blk_status_t status)
{
	unsigned int idx = (__force unsigned int)status;

	if (WARN_ON_ONCE(idx >= ARRAY_SIZE(blk_errors) ||
			 (idx && !blk_errors[idx].errno)))
		return -EIO;
	return blk_errors[idx].errno;
}
EXPORT_SYMBOL_GPL(blk_status_to_errno);

blk_status_t errno_to_blk_status(int errno)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(blk_errors); i++)
		if (blk_errors[i].errno == errno)
			return (__force blk_status_t)i;
	return BLK_STS_IOERR;
}
EXPORT_SYMBOL_GPL(errno_to_blk_status);

const char *blk_status_to_str(blk_status_t status)
{
	unsigned int idx = (__force unsigned int)status;

	if (WARN_ON_ONCE(idx >= ARRAY_SIZE(blk_errors)))
		return "<null>";
	return blk_errors[idx].name;
}

bool us_blk_host_end(struct request *rq, blk_status_t error)
{
	struct us_rq *ext = us_rq(rq);
	unsigned long cookie = ext->cookie;

	/* The tag is free before the host hears: it may send the next at once. */
	blk_mq_free_request(rq);
	ddekit_blk_done(cookie, blk_status_to_errno(error));
	return true;
}

/* The request's operation and flags, or a negative errno the host gets at once (1: done already). */
static int host_opf(struct request_queue *q, const struct ddekit_blk_request *r, blk_opf_t *opf)
{
	bool fua = r->flags & DDEKIT_BLK_FUA;

	switch (r->op) {
	case DDEKIT_BLK_OP_READ:
		*opf = REQ_OP_READ;
		return 0;
	case DDEKIT_BLK_OP_WRITE:
		/* Without FUA the host flushes after the write itself (DISK's features). */
		*opf = REQ_OP_WRITE |
		       (fua && test_bit(QUEUE_FLAG_FUA, &q->queue_flags) ? REQ_FUA : 0);
		return 0;
	case DDEKIT_BLK_OP_FLUSH:
		/* blk-flush.c: without a volatile cache a flush has nothing to do. */
		if (!test_bit(QUEUE_FLAG_WC, &q->queue_flags))
			return 1;
		*opf = REQ_OP_FLUSH;
		return 0;
	case DDEKIT_BLK_OP_DISCARD:
		*opf = REQ_OP_DISCARD;
		return q->limits.max_discard_sectors ? 0 : -EOPNOTSUPP;
	case DDEKIT_BLK_OP_WRITE_ZEROES:
		*opf = REQ_OP_WRITE_ZEROES;
		return q->limits.max_write_zeroes_sectors ? 0 : -EOPNOTSUPP;
	}
	return -EINVAL;
}

/* submit_bio_noacct()'s checks, and the runtime's own limits; 0 or a negative errno. */
static int host_check(struct gendisk *disk, const struct ddekit_blk_request *r, blk_opf_t opf)
{
	struct request_queue *q = disk->queue;
	unsigned int lbs = queue_logical_block_size(q);
	u64 sectors = r->len >> SECTOR_SHIFT;
	enum req_op op = opf & REQ_OP_MASK;

	if (r->queue >= q->nr_hw_queues)
		return -EINVAL;
	if (op == REQ_OP_FLUSH)
		return r->len ? -EINVAL : 0;
	if (!r->len || r->len % lbs || (r->sector << SECTOR_SHIFT) % lbs)
		return -EINVAL;
	if (r->sector > get_capacity(disk) || sectors > get_capacity(disk) - r->sector)
		return -EIO;	/* bio_check_eod() */
	if (op_is_write(op) && get_disk_ro(disk))
		return -EROFS;
	switch (op) {
	case REQ_OP_READ:
	case REQ_OP_WRITE:
		if (sectors > queue_max_sectors(q) || r->len > US_BLK_MAX_BYTES)
			return -EINVAL;
		return us_in_dma_region(r->data, r->len) ? 0 : -EFAULT;
	case REQ_OP_DISCARD:
		return sectors > q->limits.max_discard_sectors ? -EINVAL : 0;
	case REQ_OP_WRITE_ZEROES:
		return sectors > q->limits.max_write_zeroes_sectors ? -EINVAL : 0;
	default:
		return -EINVAL;
	}
}

/* One host request to its hardware queue; a negative errno if it never got there (1: done). */
static int submit_one(const struct ddekit_blk_request *r)
{
	struct gendisk *disk = us_blk_disk();
	struct request *rq;
	struct us_rq *ext;
	blk_opf_t opf;
	void *buf = NULL;
	int err;

	if (!disk)
		return -ENODEV;
	err = host_opf(disk->queue, r, &opf);
	if (!err)
		err = host_check(disk, r, opf);
	if (err)
		return err;
	rq = us_blk_get_request(disk->queue, r->queue, opf, 0);
	if (IS_ERR(rq))
		return PTR_ERR(rq);
	ext = us_rq(rq);
	ext->host = true;
	ext->cookie = r->cookie;
	rq->__sector = r->sector;
	switch (req_op(rq)) {
	case REQ_OP_READ:
		buf = kmalloc(r->len, GFP_NOIO);
		if (!buf) {
			ext->host = false;
			blk_mq_free_request(rq);
			return -ENOMEM;
		}
		ext->bounce = buf;
		ext->data = r->data;
		ext->len = r->len;
		ext->copy_back = true;
		us_blk_init_bio(rq, buf, r->len);
		break;
	case REQ_OP_WRITE:
		us_blk_init_bio(rq, r->data, r->len);
		break;
	case REQ_OP_DISCARD:
	case REQ_OP_WRITE_ZEROES:
		us_blk_init_bio(rq, NULL, r->len);
		break;
	default:	/* a flush carries no bio */
		rq->__sector = 0;
		break;
	}
	if (rq->nr_phys_segments > queue_max_segments(rq->q)) {
		ext->host = false;
		blk_mq_free_request(rq);
		return -EINVAL;
	}
	us_blk_insert(rq, false);
	return 0;
}

void us_blk_submit(const struct ddekit_blk_request *reqs, unsigned int n)
{
	unsigned int i;

	us_cpu_enter();
	for (i = 0; i < n; i++) {
		int err = submit_one(&reqs[i]);

		if (err)
			ddekit_blk_done(reqs[i].cookie, err > 0 ? 0 : err);
	}
	us_cpu_leave();
}
EXPORT_SYMBOL_GPL(us_blk_submit);
