// SPDX-License-Identifier: GPL-2.0
/*
 * What virtio's core asks of the platform. A driver process's device must
 * reach memory through the IOMMU only (docs/design.md §4): the arena is
 * mapped at arena_iova there, and a virtio device that bypassed the IOMMU
 * would take the ring and buffer addresses the DMA API hands out for
 * guest-physical ones and write whatever memory sits at those offsets.
 * A virtio device bypasses it unless it negotiated VIRTIO_F_ACCESS_PLATFORM
 * (QEMU's iommu_platform=on).
 *
 * The kernel has the hook for this: before virtio accepts a device's
 * features (virtio_features_ok()), it asks virtio_check_mem_acc_cb whether
 * memory access is restricted -- as confidential guests answer yes -- and
 * then refuses a device without VIRTIO_F_VERSION_1 and
 * VIRTIO_F_ACCESS_PLATFORM with -ENODEV. The runtime always answers yes,
 * and says why when the device is about to be refused.
 *
 * Stands in for Linux's drivers/virtio/virtio_anchor.c.
 */
#include <linux/module.h>
#include <linux/virtio.h>
#include <linux/virtio_config.h>
#include <linux/virtio_anchor.h>

#include "internal.h"

static bool dma_must_be_translated(struct virtio_device *vdev)
{
	if (!virtio_has_feature(vdev, VIRTIO_F_ACCESS_PLATFORM))
		dev_err(&vdev->dev,
			"refused: the device did not negotiate VIRTIO_F_ACCESS_PLATFORM, so its DMA would bypass the IOMMU (give it iommu_platform=on)\n");
	return true;
}

bool (*virtio_check_mem_acc_cb)(struct virtio_device *dev) = dma_must_be_translated;
EXPORT_SYMBOL_GPL(virtio_check_mem_acc_cb);
