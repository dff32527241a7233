// SPDX-License-Identifier: GPL-2.0
/*
 * Managed device resources (devres), as drivers/base/devres.c keeps them:
 * a list of release actions per struct device, run newest first when the
 * device's driver detaches -- its probe failed, or it was removed
 * (__pci_register_driver and pci_unregister_driver in pci.c). And the
 * managed variants drivers import (devm_kmalloc, dmam_alloc_attrs,
 * devm_alloc_etherdev_mqs, pcim_enable_device, pcim_iomap), each the plain
 * function plus a release action, as in the kernel.
 *
 * Stands in for Linux's drivers/base/devres.c and lib/devres.c.
 */
#include <linux/module.h>
#include <linux/device.h>
#include <linux/pci.h>
#include <linux/etherdevice.h>
#include <linux/dma-mapping.h>
#include <linux/slab.h>

#include "internal.h"

struct devres {
	struct list_head	entry;
	dr_release_t		release;
	const char		*name;
	/* kmalloc's alignment, as the kernel gives it (ARCH_KMALLOC_MINALIGN) */
	u8 __aligned(ARCH_KMALLOC_MINALIGN) data[];
};

void *__devres_alloc_node(dr_release_t release, size_t size, gfp_t gfp, int nid,
			  const char *name)
{
	struct devres *dr;
	size_t total;

	if (check_add_overflow(sizeof(*dr), size, &total))
		return NULL;
	dr = kmalloc(total, gfp | __GFP_ZERO);
	if (!dr)
		return NULL;
	INIT_LIST_HEAD(&dr->entry);
	dr->release = release;
	dr->name = name;
	return dr->data;
}
EXPORT_SYMBOL_GPL(__devres_alloc_node);

void devres_free(void *res)
{
	struct devres *dr;

	if (!res)
		return;
	dr = container_of(res, struct devres, data);
	BUG_ON(!list_empty(&dr->entry));
	kfree(dr);
}
EXPORT_SYMBOL_GPL(devres_free);

void devres_add(struct device *dev, void *res)
{
	struct devres *dr = container_of(res, struct devres, data);
	unsigned long flags;

	/* device_initialize() sets the list up; the runtime does it for its pci_dev. */
	if (!dev->devres_head.next)
		us_panic("devres_add(%s, %s): a device the runtime never initialised",
			 dev_name(dev), dr->name);
	spin_lock_irqsave(&dev->devres_lock, flags);
	BUG_ON(!list_empty(&dr->entry));
	list_add_tail(&dr->entry, &dev->devres_head);
	spin_unlock_irqrestore(&dev->devres_lock, flags);
}
EXPORT_SYMBOL_GPL(devres_add);

/* devres_find() without a match function: the newest resource with this release. */
static void *find_res(struct device *dev, dr_release_t release)
{
	struct devres *dr, *found = NULL;
	unsigned long flags;

	spin_lock_irqsave(&dev->devres_lock, flags);
	list_for_each_entry_reverse(dr, &dev->devres_head, entry) {
		if (dr->release == release) {
			found = dr;
			break;
		}
	}
	spin_unlock_irqrestore(&dev->devres_lock, flags);
	return found ? found->data : NULL;
}

/*
 * The driver detached: every managed resource is released, the newest
 * first, as the kernel's driver core does after a failed probe or after
 * remove. Exported for the self-tests, which detach a device of their own.
 */
int devres_release_all(struct device *dev)
{
	struct devres *dr, *tmp;
	unsigned long flags;
	LIST_HEAD(todo);
	int count = 0;

	if (WARN_ON(!dev->devres_head.next))
		return -ENODEV;
	spin_lock_irqsave(&dev->devres_lock, flags);
	list_splice_init(&dev->devres_head, &todo);
	spin_unlock_irqrestore(&dev->devres_lock, flags);
	/* A release may sleep, as a driver's devm action may: none runs under the lock. */
	list_for_each_entry_safe_reverse(dr, tmp, &todo, entry) {
		dr->release(dev, dr->data);
		kfree(dr);
		count++;
	}
	return count;
}
EXPORT_SYMBOL_GPL(devres_release_all);

/*
 * Puts `object` (NULL: its allocation failed) in dev's managed resources,
 * to be released by `release`; without room for the record, it is
 * released at once. Returns the object or NULL.
 */
static void *devres_keep(struct device *dev, dr_release_t release, void *object, gfp_t gfp)
{
	void **dr;

	if (!object)
		return NULL;
	dr = devres_alloc(release, sizeof(*dr), gfp);
	if (!dr) {
		release(dev, &object);
		return NULL;
	}
	*dr = object;
	devres_add(dev, dr);
	return object;
}

/* ---- memory --------------------------------------------------------------- */

/*
 * The kernel puts a devm_kmalloc'd block right after its devres header.
 * Here the block is an allocation of its own, attributed to the driver's
 * call site, so that the checker sees the driver's memory with its own
 * bounds and undefined until written (docs/checking.md, "The trace"),
 * and the header as the runtime's.
 */
static void devm_kmalloc_release(struct device *dev, void *res)
{
	kfree(*(void **)res);
}

void *devm_kmalloc(struct device *dev, size_t size, gfp_t gfp)
{
	if (unlikely(!size))
		return ZERO_SIZE_PTR;
	return devres_keep(dev, devm_kmalloc_release, us_alloc_for(size, gfp, _RET_IP_), gfp);
}
EXPORT_SYMBOL_GPL(devm_kmalloc);

struct dma_devres {
	size_t		size;
	void		*vaddr;
};

/* Through the DMA path, so that the checker sees the coherent buffer freed. */
static void dmam_release(struct device *dev, void *res)
{
	struct dma_devres *this = res;

	us_dma_free_coherent(this->size, this->vaddr, _THIS_IP_);
}

void *dmam_alloc_attrs(struct device *dev, size_t size, dma_addr_t *dma_handle,
		       gfp_t gfp, unsigned long attrs)
{
	struct dma_devres *dr;

	dr = devres_alloc(dmam_release, sizeof(*dr), gfp);
	if (!dr)
		return NULL;
	dr->vaddr = us_dma_alloc_coherent(size, dma_handle, gfp, _RET_IP_);
	if (!dr->vaddr) {
		devres_free(dr);
		return NULL;
	}
	dr->size = size;
	devres_add(dev, dr);
	return dr->vaddr;
}
EXPORT_SYMBOL(dmam_alloc_attrs);

/* ---- network devices (net/devres.c) ----------------------------------------- */

static void devm_free_netdev(struct device *dev, void *res)
{
	free_netdev(*(struct net_device **)res);
}

struct net_device *devm_alloc_etherdev_mqs(struct device *dev, int sizeof_priv,
					   unsigned int txqs, unsigned int rxqs)
{
	return devres_keep(dev, devm_free_netdev, alloc_etherdev_mqs(sizeof_priv, txqs, rxqs),
			   GFP_KERNEL);
}
EXPORT_SYMBOL(devm_alloc_etherdev_mqs);

/* ---- PCI (drivers/pci/pci.c, lib/devres.c) ---------------------------------- */

/*
 * The kernel's pcim_release also gives back the regions, MWI and INTx
 * state of a managed device; requesting regions takes nothing here (iomap.c)
 * and pcim_set_mwi and pci_intx are not provided, so disabling the device
 * is what there is to undo.
 */
static void pcim_release(struct device *gendev, void *res)
{
	struct pci_dev *pdev = to_pci_dev(gendev);

	if (pci_is_enabled(pdev))
		pci_disable_device(pdev);
}

int pcim_enable_device(struct pci_dev *pdev)
{
	void *dr;
	int err;

	if (pci_is_managed(pdev) && pci_is_enabled(pdev))
		return 0;
	dr = devres_alloc(pcim_release, 0, GFP_KERNEL);
	if (!dr)
		return -ENOMEM;
	err = pci_enable_device(pdev);
	if (err) {
		devres_free(dr);
		return err;
	}
	pdev->is_managed = 1;
	devres_add(&pdev->dev, dr);
	return 0;
}
EXPORT_SYMBOL(pcim_enable_device);

struct pcim_iomap_devres {
	void __iomem *table[PCI_STD_NUM_BARS];
};

/* pci_iounmap: the runtime's BAR mappings last as long as the process (iomap.c). */
static void pcim_iomap_release(struct device *gendev, void *res)
{
	struct pcim_iomap_devres *this = res;

	for (int i = 0; i < PCI_STD_NUM_BARS; i++)
		if (this->table[i])
			pci_iounmap(to_pci_dev(gendev), this->table[i]);
}

void __iomem *pcim_iomap(struct pci_dev *pdev, int bar, unsigned long maxlen)
{
	struct pcim_iomap_devres *dr;

	BUG_ON(bar >= PCI_STD_NUM_BARS);
	dr = find_res(&pdev->dev, pcim_iomap_release);
	if (!dr) {
		dr = devres_alloc(pcim_iomap_release, sizeof(*dr), GFP_KERNEL);
		if (!dr)
			return NULL;
		devres_add(&pdev->dev, dr);
	}
	if (dr->table[bar])
		return NULL;	/* one mapping of a BAR, as the kernel allows */
	dr->table[bar] = pci_iomap(pdev, bar, maxlen);
	return dr->table[bar];
}
EXPORT_SYMBOL(pcim_iomap);
