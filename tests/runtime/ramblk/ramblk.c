// SPDX-License-Identifier: GPL-2.0
/*
 * understudy-ramblk: a blk-mq driver over a buffer of RAM, for testing the
 * runtime's block layer (runtime/kernel/blk-*.c, genhd.c) without a
 * device: tests/runtime/test_blk_selftest.py.
 *
 * It behaves like a device driver where the block layer can tell: its
 * requests complete asynchronously, from a work item standing in for the
 * device's interrupt; it maps each request's data with blk_rq_map_sg()
 * and copies through the scatterlist; its tag set has two hardware
 * queues and only a few tags, so the host's requests wait for tags; its
 * disk's "serial" attribute issues a request of the driver's own
 * (blk_execute_rq()); and a request touching HANG_SECTOR is never
 * completed, so that its timeout handler runs and ends it.
 *
 * The disk's sector s holds bytes (s * 512 + i) * 7 mod 251 until written.
 */
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#define RAMBLK_SECTORS		2048
#define RAMBLK_HANG_SECTOR	2000
#define RAMBLK_SEGMENTS		16
#define RAMBLK_SERIAL		"ramblk-0001"

struct ramblk_cmd {
	struct scatterlist sg[RAMBLK_SEGMENTS];
	int nents;
	bool initialised;
	struct list_head node;
};

static struct ramblk {
	struct blk_mq_tag_set set;
	struct gendisk *disk;
	u8 *data;
	int major;
	spinlock_t lock;
	struct list_head pending;
	struct work_struct device;	/* serves pending requests, as a device and its interrupt would */
	unsigned int inits, timeouts;
} rb;

static int ramblk_init_request(struct blk_mq_tag_set *set, struct request *rq,
			       unsigned int hctx_idx, unsigned int numa_node)
{
	struct ramblk_cmd *cmd = blk_mq_rq_to_pdu(rq);

	cmd->initialised = true;
	rb.inits++;
	return 0;
}

static bool touches_hang_sector(struct request *rq)
{
	sector_t pos = blk_rq_pos(rq);

	return req_op(rq) == REQ_OP_READ && pos <= RAMBLK_HANG_SECTOR &&
	       pos + blk_rq_sectors(rq) > RAMBLK_HANG_SECTOR;
}

static blk_status_t ramblk_queue_rq(struct blk_mq_hw_ctx *hctx, const struct blk_mq_queue_data *bd)
{
	struct request *rq = bd->rq;
	struct ramblk_cmd *cmd = blk_mq_rq_to_pdu(rq);

	if (WARN_ON(!cmd->initialised))
		return BLK_STS_IOERR;
	sg_init_table(cmd->sg, RAMBLK_SEGMENTS);
	cmd->nents = 0;
	if (blk_rq_nr_phys_segments(rq))
		cmd->nents = blk_rq_map_sg(hctx->queue, rq, cmd->sg);
	blk_mq_start_request(rq);
	if (touches_hang_sector(rq))
		return BLK_STS_OK;	/* the "device" loses it */
	spin_lock_irq(&rb.lock);
	list_add_tail(&cmd->node, &rb.pending);
	spin_unlock_irq(&rb.lock);
	schedule_work(&rb.device);
	return BLK_STS_OK;
}

static blk_status_t ramblk_serve(struct request *rq, struct ramblk_cmd *cmd)
{
	u64 off = (u64)blk_rq_pos(rq) << SECTOR_SHIFT;
	struct scatterlist *sg;
	int i;

	switch (req_op(rq)) {
	case REQ_OP_DRV_IN:
		if (cmd->nents != 1)
			return BLK_STS_IOERR;
		strscpy(sg_virt(cmd->sg), RAMBLK_SERIAL, cmd->sg->length);
		return BLK_STS_OK;
	case REQ_OP_FLUSH:
		return BLK_STS_OK;
	case REQ_OP_DISCARD:
	case REQ_OP_WRITE_ZEROES:
		memset(rb.data + off, 0, blk_rq_bytes(rq));
		return BLK_STS_OK;
	case REQ_OP_READ:
	case REQ_OP_WRITE:
		for_each_sg(cmd->sg, sg, cmd->nents, i) {
			if (req_op(rq) == REQ_OP_READ)
				memcpy(sg_virt(sg), rb.data + off, sg->length);
			else
				memcpy(rb.data + off, sg_virt(sg), sg->length);
			off += sg->length;
		}
		return off == ((u64)blk_rq_pos(rq) << SECTOR_SHIFT) + blk_rq_bytes(rq) ?
		       BLK_STS_OK : BLK_STS_IOERR;
	default:
		return BLK_STS_NOTSUPP;
	}
}

static void ramblk_device(struct work_struct *work)
{
	for (;;) {
		struct ramblk_cmd *cmd;
		struct request *rq;

		spin_lock_irq(&rb.lock);
		cmd = list_first_entry_or_null(&rb.pending, struct ramblk_cmd, node);
		if (cmd)
			list_del(&cmd->node);
		spin_unlock_irq(&rb.lock);
		if (!cmd)
			return;
		rq = blk_mq_rq_from_pdu(cmd);
		/* The status travels to ->complete in end_io_data, which nothing else uses here. */
		rq->end_io_data = (void *)(unsigned long)ramblk_serve(rq, cmd);
		blk_mq_complete_request(rq);
	}
}

static void ramblk_complete(struct request *rq)
{
	blk_status_t status = (blk_status_t)(unsigned long)rq->end_io_data;

	rq->end_io_data = NULL;
	blk_mq_end_request(rq, status);
}

static enum blk_eh_timer_return ramblk_timeout(struct request *rq)
{
	rb.timeouts++;
	pr_info("ramblk: request %d at sector %llu timed out (%u so far)\n", rq->tag,
		(unsigned long long)blk_rq_pos(rq), rb.timeouts);
	blk_mq_end_request(rq, BLK_STS_TIMEOUT);
	return BLK_EH_DONE;
}

static const struct blk_mq_ops ramblk_ops = {
	.queue_rq = ramblk_queue_rq,
	.complete = ramblk_complete,
	.init_request = ramblk_init_request,
	.timeout = ramblk_timeout,
};

static ssize_t serial_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct gendisk *disk = dev_to_disk(dev);
	struct request *rq;
	blk_status_t status;
	int err;

	rq = blk_mq_alloc_request(disk->queue, REQ_OP_DRV_IN, 0);
	if (IS_ERR(rq))
		return PTR_ERR(rq);
	err = blk_rq_map_kern(disk->queue, rq, buf, 32, GFP_KERNEL);
	if (err) {
		blk_mq_free_request(rq);
		return err;
	}
	status = blk_execute_rq(rq, false);
	blk_mq_free_request(rq);
	if (status)
		return blk_status_to_errno(status);
	return strlen(buf);
}
static DEVICE_ATTR_RO(serial);

static struct attribute *ramblk_attrs[] = { &dev_attr_serial.attr, NULL };
static const struct attribute_group ramblk_attr_group = { .attrs = ramblk_attrs };
static const struct attribute_group *ramblk_attr_groups[] = { &ramblk_attr_group, NULL };

static const struct block_device_operations ramblk_fops = { .owner = THIS_MODULE };

static int __init ramblk_init(void)
{
	struct request_queue *q;
	int err, i;

	spin_lock_init(&rb.lock);
	INIT_LIST_HEAD(&rb.pending);
	INIT_WORK(&rb.device, ramblk_device);
	rb.data = kmalloc(RAMBLK_SECTORS << SECTOR_SHIFT, GFP_KERNEL);
	if (!rb.data)
		return -ENOMEM;
	for (i = 0; i < RAMBLK_SECTORS << SECTOR_SHIFT; i++)
		rb.data[i] = (u8)((u64)i * 7 % 251);
	rb.major = register_blkdev(0, "ramblk");
	if (rb.major < 0) {
		err = rb.major;
		goto free_data;
	}
	rb.set.ops = &ramblk_ops;
	rb.set.nr_hw_queues = 2;
	rb.set.queue_depth = 8;
	rb.set.cmd_size = sizeof(struct ramblk_cmd);
	rb.set.numa_node = NUMA_NO_NODE;
	rb.set.timeout = HZ / 2;
	rb.set.flags = BLK_MQ_F_SHOULD_MERGE;
	rb.set.driver_data = &rb;
	err = blk_mq_alloc_tag_set(&rb.set);
	if (err)
		goto unregister;
	pr_info("ramblk: %u requests initialised\n", rb.inits);
	rb.disk = blk_mq_alloc_disk(&rb.set, &rb);
	if (IS_ERR(rb.disk)) {
		err = PTR_ERR(rb.disk);
		goto free_tags;
	}
	q = rb.disk->queue;
	blk_queue_logical_block_size(q, 512);
	blk_queue_max_hw_sectors(q, 64);
	blk_queue_max_segments(q, RAMBLK_SEGMENTS);
	blk_queue_write_cache(q, true, true);
	blk_queue_max_discard_sectors(q, 64);
	blk_queue_max_write_zeroes_sectors(q, 64);
	rb.disk->major = rb.major;
	rb.disk->first_minor = 0;
	rb.disk->minors = 1;
	rb.disk->fops = &ramblk_fops;
	rb.disk->private_data = &rb;
	strscpy(rb.disk->disk_name, "ramblk0", DISK_NAME_LEN);
	set_capacity(rb.disk, RAMBLK_SECTORS);
	err = device_add_disk(NULL, rb.disk, ramblk_attr_groups);
	if (err)
		goto put;
	return 0;
put:
	put_disk(rb.disk);
free_tags:
	blk_mq_free_tag_set(&rb.set);
unregister:
	unregister_blkdev(rb.major, "ramblk");
free_data:
	kfree(rb.data);
	return err;
}

static void __exit ramblk_exit(void)
{
	del_gendisk(rb.disk);
	cancel_work_sync(&rb.device);
	blk_mq_free_tag_set(&rb.set);
	put_disk(rb.disk);
	unregister_blkdev(rb.major, "ramblk");
	kfree(rb.data);
}

module_init(ramblk_init);
module_exit(ramblk_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("understudy: a RAM-backed blk-mq driver for the runtime's block layer tests");
