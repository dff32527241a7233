// SPDX-License-Identifier: GPL-2.0
/*
 * MSI and MSI-X: not yet. The runtime delivers the function's legacy INTx
 * through VFIO (irq.c, docs/design.md §13); it has no message-signalled
 * vectors to give. Enabling them therefore fails as the PCI core fails it
 * for a device on a system without MSI support (pci_msi_supported() false:
 * -EINVAL), and a driver falls back to INTx as it does on such a machine
 * (e1000e: MSI-X, then MSI, then legacy). dev->msi_enabled and
 * dev->msix_enabled stay clear, so the disabling calls have nothing to undo.
 */
#include <linux/module.h>
#include <linux/pci.h>

#include "internal.h"

int pci_enable_msi(struct pci_dev *dev)
{
	return -EINVAL;
}
EXPORT_SYMBOL(pci_enable_msi);

int pci_enable_msix_range(struct pci_dev *dev, struct msix_entry *entries, int minvec, int maxvec)
{
	return -EINVAL;
}
EXPORT_SYMBOL(pci_enable_msix_range);

void pci_disable_msi(struct pci_dev *dev)
{
	WARN_ON_ONCE(dev->msi_enabled);
}
EXPORT_SYMBOL(pci_disable_msi);

void pci_disable_msix(struct pci_dev *dev)
{
	WARN_ON_ONCE(dev->msix_enabled);
}
EXPORT_SYMBOL(pci_disable_msix);
