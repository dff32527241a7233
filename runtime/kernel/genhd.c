// SPDX-License-Identifier: GPL-2.0
/*
 * Disks and their queues: allocation with the tag set's hardware queues,
 * adding (the host learns the disk: DISK), capacity and read-only
 * changes, deletion and release; block major numbers.
 *
 * Stands in for block/genhd.c, the queue allocation and release of
 * block/blk-mq.c and block/blk-core.c, and block/bdev.c (part0).
 *
 * One disk per process is the host's (docs/protocol.md, "Block devices"):
 * the first the driver adds. Its identity strings are read once, when it
 * is added, from the sysfs attributes the driver passed to
 * device_add_disk, by calling their show() as udev's read of the file
 * would; a later report (a capacity change) repeats them.
 */
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/sysfs.h>

#include "internal.h"
#include "blk.h"

static struct gendisk *host_disk;
static long queues_live, majors_live;
static struct ddekit_disk identity;	/* the host disk's strings, read when it was added */

struct gendisk *us_blk_disk(void)
{
	return host_disk;
}

/* ---- queues ---------------------------------------------------------------- */

static struct request_queue *alloc_queue(struct blk_mq_tag_set *set, void *queuedata)
{
	struct us_queue *uq = kzalloc(sizeof(*uq), GFP_KERNEL);
	struct request_queue *q;
	int err;

	if (!uq)
		return ERR_PTR(-ENOMEM);
	q = &uq->q;
	q->mq_ops = set->ops;
	q->tag_set = set;
	q->queuedata = queuedata;
	q->node = NUMA_NO_NODE;
	q->queue_flags = BIT(QUEUE_FLAG_IO_STAT) | BIT(QUEUE_FLAG_SAME_COMP) | BIT(QUEUE_FLAG_NOWAIT);
	spin_lock_init(&q->queue_lock);
	mutex_init(&q->sysfs_lock);
	mutex_init(&q->sysfs_dir_lock);
	mutex_init(&q->mq_freeze_lock);
	INIT_LIST_HEAD(&q->requeue_list);
	INIT_LIST_HEAD(&q->tag_set_list);
	blk_set_default_limits(&q->limits);
	err = us_blk_init_hctxs(q, set);
	if (err) {
		kfree(uq);
		return ERR_PTR(err);
	}
	queues_live++;
	return q;
}

struct request_queue *blk_mq_init_queue(struct blk_mq_tag_set *set)
{
	return alloc_queue(set, NULL);
}
EXPORT_SYMBOL(blk_mq_init_queue);

/* No new requests, the old ones end, the hardware contexts go (blk_mq_exit_queue()). */
void blk_mq_destroy_queue(struct request_queue *q)
{
	struct us_queue *uq = us_queue(q);

	uq->dying = true;
	us_wake();	/* allocations waiting for a tag see it */
	us_blk_drain(q);
	if (uq->hctxs)
		us_blk_exit_hctxs(q);
}
EXPORT_SYMBOL(blk_mq_destroy_queue);

void blk_put_queue(struct request_queue *q)
{
	struct us_queue *uq = us_queue(q);

	if (uq->hctxs)
		us_blk_exit_hctxs(q);
	kfree(uq);
	queues_live--;
}
EXPORT_SYMBOL(blk_put_queue);

long us_blk_live(void)
{
	return us_blk_tag_sets + queues_live + majors_live;
}
EXPORT_SYMBOL_GPL(us_blk_live);

/* ---- disks ----------------------------------------------------------------- */

static struct gendisk *alloc_disk(struct request_queue *q)
{
	struct gendisk *disk = kzalloc(sizeof(*disk), GFP_KERNEL);
	struct block_device *part0 = kzalloc(sizeof(*part0), GFP_KERNEL);

	if (!disk || !part0) {
		kfree(disk);
		kfree(part0);
		return NULL;
	}
	part0->bd_disk = disk;
	part0->bd_queue = q;
	part0->bd_partno = 0;
	spin_lock_init(&part0->bd_size_lock);
	disk->part0 = part0;
	disk->queue = q;
	disk->node_id = NUMA_NO_NODE;
	mutex_init(&disk->open_mutex);
	q->disk = disk;
	return disk;
}

struct gendisk *__blk_mq_alloc_disk(struct blk_mq_tag_set *set, void *queuedata,
				    struct lock_class_key *lkclass)
{
	struct request_queue *q = alloc_queue(set, queuedata);
	struct gendisk *disk;

	if (IS_ERR(q))
		return ERR_CAST(q);
	disk = alloc_disk(q);
	if (!disk) {
		blk_put_queue(q);
		return ERR_PTR(-ENOMEM);
	}
	set_bit(GD_OWNS_QUEUE, &disk->state);
	return disk;
}
EXPORT_SYMBOL(__blk_mq_alloc_disk);

/*
 * The show() of the visible attribute called name among groups, into a
 * page of runtime memory (drivers may hand it to the device: virtio_blk
 * reads its serial into it); its first line, or "" without one.
 */
static void read_attribute(struct gendisk *disk, const struct attribute_group **groups,
			   const char *name, char *out, size_t size)
{
	struct device *dev = disk_to_dev(disk);
	char *page;
	int g, i;

	out[0] = '\0';
	for (g = 0; groups && groups[g]; g++) {
		const struct attribute_group *grp = groups[g];

		for (i = 0; grp->attrs && grp->attrs[i]; i++) {
			struct attribute *attr = grp->attrs[i];
			struct device_attribute *da = container_of(attr, struct device_attribute, attr);
			ssize_t n;

			if (strcmp(attr->name, name) || !da->show)
				continue;
			if (grp->is_visible && !grp->is_visible(&dev->kobj, attr, i))
				continue;
			page = kzalloc(PAGE_SIZE, GFP_KERNEL);
			if (!page)
				return;
			n = da->show(dev, da, page);
			if (n > 0) {
				page[min_t(ssize_t, n, PAGE_SIZE - 1)] = '\0';
				page[strcspn(page, "\n")] = '\0';
				strscpy(out, page, size);
			}
			kfree(page);
			return;
		}
	}
}

static const char *const wwid_names[] = { "wwid", "eui", "nguid", "uuid" };

static const char *driver_name(struct gendisk *disk)
{
	struct device *parent = disk_to_dev(disk)->parent;

	if (disk->fops && disk->fops->owner)
		return disk->fops->owner->name;
	return parent ? dev_driver_string(parent) : "";
}

/* The most sectors of one host request: the runtime's limit, and the queue's. */
static unsigned int max_request_sectors(struct request_queue *q)
{
	struct queue_limits *lim = &q->limits;
	unsigned int max = min_t(unsigned int, lim->max_sectors, US_BLK_MAX_BYTES >> SECTOR_SHIFT);
	/* A buffer that does not start at a segment's boundary may need one more. */
	u64 segs = lim->max_segments > 1 ? lim->max_segments - 1 : 1;
	u64 by_segments = segs * min_t(u64, lim->max_segment_size, US_BLK_MAX_BYTES) >> SECTOR_SHIFT;

	max = min_t(u64, max, by_segments);
	return round_down(max, lim->logical_block_size >> SECTOR_SHIFT);
}

void us_blk_report_disk(struct gendisk *disk)
{
	struct request_queue *q = disk->queue;
	struct ddekit_disk d = identity;

	d.capacity = get_capacity(disk);
	d.logical_block_size = queue_logical_block_size(q);
	d.physical_block_size = queue_physical_block_size(q);
	d.max_sectors = max_request_sectors(q);
	d.max_discard_sectors = q->limits.max_discard_sectors;
	d.max_write_zeroes_sectors = q->limits.max_write_zeroes_sectors;
	d.features = 0;
	if (test_bit(QUEUE_FLAG_WC, &q->queue_flags)) {
		d.features |= DDEKIT_DISK_WRITE_CACHE;
		if (test_bit(QUEUE_FLAG_FUA, &q->queue_flags))
			d.features |= DDEKIT_DISK_FUA;
	}
	if (get_disk_ro(disk))
		d.features |= DDEKIT_DISK_READ_ONLY;
	if (!test_bit(QUEUE_FLAG_NONROT, &q->queue_flags))
		d.features |= DDEKIT_DISK_ROTATIONAL;
	d.n_queues = q->nr_hw_queues;
	d.queue_depth = q->tag_set->queue_depth - q->tag_set->reserved_tags;
	ddekit_blk_disk(&d);
}

int device_add_disk(struct device *parent, struct gendisk *disk,
		    const struct attribute_group **groups)
{
	struct device *dev = disk_to_dev(disk);
	unsigned int i;

	if (test_bit(GD_ADDED, &disk->state))
		return -EBUSY;
	dev->parent = parent;
	dev->groups = groups;
	dev->init_name = disk->disk_name;	/* dev_name() of the disk, as device_add() names it */
	set_bit(GD_ADDED, &disk->state);
	if (host_disk) {
		pr_warn("%s: only %s is the host's disk\n", disk->disk_name, host_disk->disk_name);
		return 0;
	}
	host_disk = disk;
	memset(&identity, 0, sizeof(identity));
	strscpy(identity.driver, driver_name(disk), sizeof(identity.driver));
	strscpy(identity.disk_name, disk->disk_name, sizeof(identity.disk_name));
	read_attribute(disk, groups, "serial", identity.serial, sizeof(identity.serial));
	for (i = 0; i < ARRAY_SIZE(wwid_names) && !identity.wwid[0]; i++)
		read_attribute(disk, groups, wwid_names[i], identity.wwid, sizeof(identity.wwid));
	us_blk_report_disk(disk);
	return 0;
}
EXPORT_SYMBOL(device_add_disk);

/*
 * The disk goes: no new requests (the host's get -ENODEV), those in flight
 * end, and a queue the disk owns loses its hardware contexts, as Linux's
 * del_gendisk() exits it, since drivers free the tag set right after.
 */
void del_gendisk(struct gendisk *disk)
{
	struct request_queue *q = disk->queue;
	struct us_queue *uq = us_queue(q);

	if (!test_and_clear_bit(GD_ADDED, &disk->state))
		return;
	uq->dying = true;
	us_wake();
	us_blk_drain(q);
	set_bit(GD_DEAD, &disk->state);
	if (test_bit(GD_OWNS_QUEUE, &disk->state) && uq->hctxs)
		us_blk_exit_hctxs(q);
	if (host_disk == disk)
		host_disk = NULL;
}
EXPORT_SYMBOL(del_gendisk);

void put_disk(struct gendisk *disk)
{
	if (!disk)
		return;
	if (host_disk == disk)
		host_disk = NULL;
	if (test_bit(GD_OWNS_QUEUE, &disk->state))
		blk_put_queue(disk->queue);
	kfree(disk->part0);
	kfree(disk);
}
EXPORT_SYMBOL(put_disk);

void set_capacity(struct gendisk *disk, sector_t sectors)
{
	disk->part0->bd_nr_sectors = sectors;
}
EXPORT_SYMBOL(set_capacity);

bool set_capacity_and_notify(struct gendisk *disk, sector_t size)
{
	sector_t capacity = get_capacity(disk);

	set_capacity(disk, size);
	if (size == capacity || !test_bit(GD_ADDED, &disk->state))
		return false;
	pr_info("%s: detected capacity change from %lld to %lld\n", disk->disk_name,
		(long long)capacity, (long long)size);
	if (disk == host_disk)
		us_blk_report_disk(disk);
	return true;
}
EXPORT_SYMBOL_GPL(set_capacity_and_notify);

void set_disk_ro(struct gendisk *disk, bool read_only)
{
	if (read_only == test_bit(GD_READ_ONLY, &disk->state))
		return;
	if (read_only)
		set_bit(GD_READ_ONLY, &disk->state);
	else
		clear_bit(GD_READ_ONLY, &disk->state);
	if (disk == host_disk)
		us_blk_report_disk(disk);
}
EXPORT_SYMBOL(set_disk_ro);

/* ---- block majors ---------------------------------------------------------- */

#define US_BLKDEV_MAJORS	512
/* Linux's dynamic majors: 254 down to 234, then 511 down to 384. */
static const char *major_names[US_BLKDEV_MAJORS];

int __register_blkdev(unsigned int major, const char *name, void (*probe)(dev_t devt))
{
	if (!major) {
		for (major = 254; major >= 234 && major_names[major]; major--)
			;
		if (major < 234)
			return -EBUSY;
	}
	if (major >= US_BLKDEV_MAJORS)
		return -EINVAL;
	if (major_names[major])
		return -EBUSY;
	major_names[major] = name;
	majors_live++;
	return major;
}
EXPORT_SYMBOL(__register_blkdev);

void unregister_blkdev(unsigned int major, const char *name)
{
	if (major < US_BLKDEV_MAJORS && major_names[major] && !strcmp(major_names[major], name)) {
		major_names[major] = NULL;
		majors_live--;
	} else
		WARN(1, "unregister_blkdev: major %u is not %s's\n", major, name);
}
EXPORT_SYMBOL(unregister_blkdev);
