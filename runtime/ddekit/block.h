/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The block class's data path between the halves (block.c; docs/protocol.md,
 * "Block devices"): requests going down to the kernel half's blk-mq, their
 * completions and the disk's description coming back up.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_BLOCK_H
#define UNDERSTUDY_DDEKIT_BLOCK_H

/* The protocol's US_BLK_OP_*, US_BLK_FUA and US_DISK_* (block.c asserts them equal). */
#define DDEKIT_BLK_CONSTANTS(X)			\
	X(BLK_OP_READ,		0)		\
	X(BLK_OP_WRITE,		1)		\
	X(BLK_OP_FLUSH,		2)		\
	X(BLK_OP_DISCARD,	3)		\
	X(BLK_OP_WRITE_ZEROES,	4)		\
	X(BLK_FUA,		0x0001)		\
	X(DISK_WRITE_CACHE,	0x0001)		\
	X(DISK_FUA,		0x0002)		\
	X(DISK_READ_ONLY,	0x0004)		\
	X(DISK_ROTATIONAL,	0x0008)

#define DDEKIT_BLK_CONSTANT(name, value) DDEKIT_##name = value,
enum { DDEKIT_BLK_CONSTANTS(DDEKIT_BLK_CONSTANT) };
#undef DDEKIT_BLK_CONSTANT

/*
 * One request handed to the kernel half (us_blk_submit): op on len bytes
 * from sector, a write's data read from, a read's data copied into, the
 * len bytes at data (pool buffers under the host, the stand-alone run's
 * own part of the arena otherwise). Its completion is
 * ddekit_blk_done(cookie, status), from the request's end only.
 */
struct ddekit_blk_request {
	unsigned long cookie;
	void *data;
	unsigned long long sector;
	unsigned int len;
	unsigned short op;	/* DDEKIT_BLK_OP_* */
	unsigned short flags;	/* DDEKIT_BLK_FUA */
	unsigned short queue;	/* the hardware queue */
};

/* Called at the request's end, in whatever context ends it (often an interrupt). */
void ddekit_blk_done(unsigned long cookie, int status);

/* The disk as the host learns it (DISK); strings NUL-terminated. */
struct ddekit_disk {
	unsigned long long capacity;	/* 512-byte sectors */
	unsigned int logical_block_size, physical_block_size;
	unsigned int max_sectors, max_discard_sectors, max_write_zeroes_sectors;
	unsigned int features;		/* DDEKIT_DISK_* */
	unsigned short n_queues, queue_depth;
	char driver[32], disk_name[32], serial[64], wwid[192];
};

void ddekit_blk_disk(const struct ddekit_disk *disk);

#endif /* UNDERSTUDY_DDEKIT_BLOCK_H */
