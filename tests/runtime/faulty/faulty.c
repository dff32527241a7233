// SPDX-License-Identifier: GPL-2.0
/*
 * understudy-faulty.ko: a corpus of the bugs the checker exists to find
 * (docs/checking.md), one per value of the `fault` parameter, each in a
 * function of its own so that a finding's site names it. fault=0 does the
 * same things correctly and must draw no finding. Run without a device:
 *
 *	understudy-driver --module understudy-faulty.ko --param understudy_faulty.fault=N
 *		--trace-fd N --gate triage      (with understudy-checker on the region)
 *
 * tests/runtime/test_check.py runs each and checks which checker names
 * which bug at which function. Built by Kbuild like a driver, so the
 * rewriter sees compiler output of the same kind as Debian's modules.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/dma-mapping.h>
#include <linux/timer.h>
#include <linux/spinlock.h>
#include <linux/delay.h>
#include <linux/jiffies.h>

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("understudy: driver bugs for the checker to find");

static int fault;
module_param(fault, int, 0);
MODULE_PARM_DESC(fault, "which bug to commit (0: none, the same work done right)");

void ddekit_event(const char *line);

/* Keeps the compiler from folding a bug away: the access must happen. */
#define TOUCH(p)	WRITE_ONCE(*(volatile u8 *)(p), 1)
#define PEEK(p)		READ_ONCE(*(volatile u8 *)(p))

static noinline void use_after_free(bool bug)
{
	u8 *p = kmalloc(64, GFP_KERNEL);

	if (!bug)
		TOUCH(p + 8);
	kfree(p);
	if (bug)
		TOUCH(p + 8);		/* memory: use-after-free */
}

static noinline void out_of_bounds(bool bug)
{
	u8 *p = kmalloc(40, GFP_KERNEL);

	TOUCH(p + (bug ? 44 : 36));	/* memory: out-of-bounds-write, 4 past the end */
	kfree(p);
}

static noinline void double_free(bool bug)
{
	u8 *p = kmalloc(64, GFP_KERNEL), *q = kmalloc(64, GFP_KERNEL);

	kfree(p);
	kfree(bug ? p : q);		/* memory: double-free */
	if (bug)
		kfree(q);
}

static int seen;

static noinline void uninitialised_read(bool bug)
{
	u8 *p = kmalloc(64, GFP_KERNEL);

	if (!bug)
		TOUCH(p + 3);
	seen = PEEK(p + 3);		/* memory: uninitialised-read */
	kfree(p);
}

/*
 * The slots live in this function's stack frame (volatile keeps them out of
 * registers). Debian's kernels zero every stack variable on entry
 * (CONFIG_INIT_STACK_ALL_ZERO); `uninitialized` opts these out, as code
 * built without that option is.
 */
static noinline void uninitialised_stack_read(bool bug)
{
	volatile u32 slots[4] __attribute__((uninitialized));

	slots[0] = seen;
	if (!bug)
		slots[1] = seen;
	seen = slots[1];		/* memory: uninitialised-read, on the stack */
}

static noinline void write_device_owned(bool bug)
{
	u8 *buf = kzalloc(256, GFP_KERNEL);
	dma_addr_t dma = dma_map_single(NULL, buf, 256, DMA_FROM_DEVICE);

	if (bug)
		TOUCH(buf + 16);	/* dma: device-owned-write, the device owns it */
	dma_unmap_single(NULL, dma, 256, DMA_FROM_DEVICE);
	if (!bug)
		TOUCH(buf + 16);
	kfree(buf);
}

static noinline void unmap_never_mapped(bool bug)
{
	u8 *buf = kzalloc(128, GFP_KERNEL);
	dma_addr_t dma = dma_map_single(NULL, buf, 128, DMA_TO_DEVICE);

	/* dma: unmap-never-mapped, an address inside the mapping, not its start */
	dma_unmap_single(NULL, bug ? dma + 64 : dma, bug ? 64 : 128, DMA_TO_DEVICE);
	if (bug)
		dma_unmap_single(NULL, dma, 128, DMA_TO_DEVICE);
	kfree(buf);
}

static noinline void repeated_unmap(bool bug)
{
	u8 *buf = kzalloc(128, GFP_KERNEL);
	dma_addr_t dma = dma_map_single(NULL, buf, 128, DMA_TO_DEVICE);

	dma_unmap_single(NULL, dma, 128, DMA_TO_DEVICE);
	if (bug)
		dma_unmap_single(NULL, dma, 128, DMA_TO_DEVICE);	/* dma: repeated-unmap */
	kfree(buf);
}

/* A counter the timer updates under a lock; fault 8 updates it without. */
static DEFINE_SPINLOCK(count_lock);
static unsigned long *shared_count;
static struct timer_list ticker;
static int ticks;

static void tick(struct timer_list *t)
{
	spin_lock(&count_lock);
	(*shared_count)++;
	spin_unlock(&count_lock);
	if (++ticks < 10)
		mod_timer(&ticker, jiffies + 1);
}

static noinline void missing_lock(bool bug)
{
	shared_count = kzalloc(sizeof(*shared_count), GFP_KERNEL);
	timer_setup(&ticker, tick, 0);
	mod_timer(&ticker, jiffies + 1);
	for (int i = 0; i < 10; i++) {
		msleep(2);
		if (bug) {
			(*shared_count)++;	/* race: data-race, no lock against the timer */
		} else {
			spin_lock_bh(&count_lock);
			(*shared_count)++;
			spin_unlock_bh(&count_lock);
		}
	}
	del_timer_sync(&ticker);
	kfree(shared_count);
}

static void (*const bugs[])(bool) = {
	use_after_free, out_of_bounds, double_free, uninitialised_read,
	write_device_owned, unmap_never_mapped, repeated_unmap, missing_lock,
	uninitialised_stack_read,
};

static int __init faulty_init(void)
{
	char line[64];

	if (fault < 0 || fault > ARRAY_SIZE(bugs))
		return -EINVAL;
	for (int i = 0; i < ARRAY_SIZE(bugs); i++)
		if (!fault || fault == i + 1)
			bugs[i](fault == i + 1);
	snprintf(line, sizeof(line), "FAULTY fault=%d done=1", fault);
	ddekit_event(line);
	return 0;
}
module_init(faulty_init);
