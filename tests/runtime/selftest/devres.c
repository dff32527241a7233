// SPDX-License-Identifier: GPL-2.0
/*
 * Managed resources (runtime/kernel/devres.c) on a device of the test's
 * own: each kind the runtime provides without a PCI function, released
 * newest first when the device is detached, and nothing of them left.
 * pcim_* need the process's PCI function; the lab's tulip run has them
 * (tests/runtime/test_nic_lab.py).
 */
#include <linux/device.h>
#include <linux/dma-mapping.h>
#include <linux/etherdevice.h>
#include <linux/slab.h>

#include "selftest.h"

#define MARKERS 4

static int released[MARKERS], n_released;

static void marker_release(struct device *dev, void *res)
{
	if (n_released < MARKERS)
		released[n_released] = *(int *)res;
	n_released++;
}

/* A resource that records when it is released, after those added before it. */
static bool add_marker(struct device *dev, int id)
{
	int *res = devres_alloc(marker_release, sizeof(*res), GFP_KERNEL);

	if (!res)
		return false;
	*res = id;
	devres_add(dev, res);
	return true;
}

void test_devres(void)
{
	static struct device dev = { .init_name = "selftest" };
	unsigned long mem = us_mem_in_use();
	struct net_device *netdev;
	dma_addr_t handle;
	u8 *block, *ring;
	void *unused;

	/* What device_initialize() does for devres. */
	INIT_LIST_HEAD(&dev.devres_head);
	spin_lock_init(&dev.devres_lock);
	n_released = 0;

	CHECK(add_marker(&dev, 1));
	block = devm_kzalloc(&dev, 100, GFP_KERNEL);
	CHECK(block && block[0] == 0 && block[99] == 0 && ksize(block) >= 100);
	CHECK(devm_kmalloc(&dev, 0, GFP_KERNEL) == ZERO_SIZE_PTR);	/* nothing to manage */
	CHECK(add_marker(&dev, 2));
	ring = dmam_alloc_coherent(&dev, 3000, &handle, GFP_KERNEL);
	CHECK(ring && handle && ring[0] == 0 && ring[2999] == 0);
	CHECK(add_marker(&dev, 3));
	netdev = devm_alloc_etherdev(&dev, 64);
	CHECK(netdev && netdev_priv(netdev));
	CHECK(add_marker(&dev, 4));
	/* Allocated and freed without ever being added: not the device's. */
	unused = devres_alloc(marker_release, sizeof(int), GFP_KERNEL);
	CHECK(unused);
	devres_free(unused);
	CHECK(us_mem_in_use() > mem);

	CHECK(devres_release_all(&dev) == 7);
	CHECK(n_released == MARKERS);
	CHECK(released[0] == 4 && released[1] == 3 && released[2] == 2 && released[3] == 1);
	CHECK(list_empty(&dev.devres_head) && devres_release_all(&dev) == 0);
	/* The block, the ring, the net_device and every devres record are gone. */
	CHECK(us_mem_in_use() == mem);
}
