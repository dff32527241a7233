// SPDX-License-Identifier: GPL-2.0
/*
 * MSI and MSI-X: the PCI core's message-signalled interrupts, through VFIO
 * (docs/design.md §3). VFIO owns the function's MSI capability and MSI-X
 * table on the host and says how many vectors it can give (the capability's
 * size); enabling asks it for a number of them, and each vector becomes an
 * irq number (US_MSI_FIRST_IRQ + its table entry) that request_irq() gives
 * its own eventfd and IRQ thread (irq.c). The function has one of INTx, MSI
 * or MSI-X at a time, as in the kernel, and dev->msi_enabled,
 * dev->msix_enabled and dev->irq say which.
 *
 * A driver that asks for more vectors than VFIO grants gets fewer if its
 * minimum allows, else -ENOSPC, and a function without the capability
 * -EINVAL: the kernel's answers, so that a driver falls back (MSI-X, then
 * MSI, then INTx) as it would. Both are logged, since a driver that gets
 * fewer vectors than it wants runs differently.
 *
 * Affinity: the process is one CPU (docs/design.md §6), so vectors whose
 * affinity the core manages are spread over that one CPU -- as many as the
 * kernel gives on a uniprocessor -- and affinity hints change nothing.
 *
 * Stands in for Linux's drivers/pci/msi/.
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/interrupt.h>

#include "internal.h"

/* The enabled vectors: entries [0, count) of source's table. */
static struct {
	enum ddekit_irq_source source;	/* DDEKIT_IRQ_INTX: none enabled */
	unsigned int count;
} enabled;

static const char *const source_name[] = {
	[DDEKIT_IRQ_MSI] = "MSI",
	[DDEKIT_IRQ_MSIX] = "MSI-X",
};

int us_msi_vector(unsigned int irq, unsigned int *vector)
{
	if (enabled.source == DDEKIT_IRQ_INTX || irq < US_MSI_FIRST_IRQ ||
	    irq - US_MSI_FIRST_IRQ >= enabled.count)
		return -EINVAL;
	*vector = irq - US_MSI_FIRST_IRQ;
	return enabled.source;
}

bool us_msi_enabled(void)
{
	return enabled.source != DDEKIT_IRQ_INTX;
}

/* The table size VFIO grants for source, within what the runtime keeps. */
static unsigned int granted(struct pci_dev *dev, enum ddekit_irq_source source)
{
	int offered = ddekit_irq_vectors(source);

	if (offered > DDEKIT_IRQ_MAX_VECTORS) {
		pci_info(dev, "VFIO offers %d %s vectors, the runtime uses the first %d\n",
			 offered, source_name[source], DDEKIT_IRQ_MAX_VECTORS);
		return DDEKIT_IRQ_MAX_VECTORS;
	}
	return offered;
}

/*
 * How many vectors a set whose affinity the core manages gets: the
 * reserved pre and post vectors, and one per CPU -- the process has one --
 * for the rest, unless the driver sizes its sets itself (calc_sets).
 */
static int affinity_vectors(unsigned int minvec, unsigned int maxvec,
			    const struct irq_affinity *affd)
{
	unsigned int reserved = affd->pre_vectors + affd->post_vectors;
	unsigned int spread;

	if (reserved > minvec)
		return 0;
	spread = affd->calc_sets ? maxvec - reserved : 1;
	return reserved + min(spread, maxvec - reserved);
}

/*
 * The number of vectors to enable for a request of [minvec, maxvec] from a
 * table of size table: -ENOSPC below minvec.
 */
static int fit(struct pci_dev *dev, enum ddekit_irq_source source, unsigned int table,
	       int minvec, int maxvec, const struct irq_affinity *affd)
{
	int nvec = maxvec;

	if (nvec > (int)table) {
		pci_info(dev, "the driver asks for up to %d %s vectors, VFIO grants %u\n",
			 maxvec, source_name[source], table);
		nvec = table;
	}
	if (affd)
		nvec = affinity_vectors(minvec, nvec, affd);
	if (nvec < minvec) {
		pci_info(dev, "%s refused: the driver needs %d vectors, %d are available\n",
			 source_name[source], minvec, nvec);
		return -ENOSPC;
	}
	return nvec;
}

/* Table entries [0, count) through VFIO, of which the driver uses nvec. */
static int enable(struct pci_dev *dev, enum ddekit_irq_source source, unsigned int count,
		  int nvec, unsigned int table)
{
	char event[96];
	int err = ddekit_irq_enable_vectors(source, count);

	if (err) {
		pci_err(dev, "VFIO refused %u %s vectors: %d\n", count, source_name[source], err);
		return err;
	}
	enabled.source = source;
	enabled.count = count;
	if (source == DDEKIT_IRQ_MSI) {
		dev->msi_enabled = 1;
		dev->irq = US_MSI_FIRST_IRQ;	/* as the PCI core points dev->irq at MSI */
	} else {
		dev->msix_enabled = 1;
	}
	snprintf(event, sizeof(event), "IRQ_VECTORS source=%s vectors=%d granted=%u first_irq=%d",
		 source == DDEKIT_IRQ_MSI ? "msi" : "msix", nvec, table, US_MSI_FIRST_IRQ);
	ddekit_event(event);
	return nvec;
}

static void disable(struct pci_dev *dev, enum ddekit_irq_source source)
{
	if (enabled.source != source)
		return;
	/* The kernel refuses too: the handlers would wait on vectors that are gone. */
	if (WARN(us_irq_vectors_requested(), "%s: %s disabled with handlers still requested\n",
		 pci_name(dev), source_name[source]))
		return;
	ddekit_irq_disable_vectors(source);
	enabled.source = DDEKIT_IRQ_INTX;
	enabled.count = 0;
	if (source == DDEKIT_IRQ_MSI) {
		dev->msi_enabled = 0;
		dev->irq = US_INTX_IRQ;
	} else {
		dev->msix_enabled = 0;
	}
}

/*
 * What enabling either kind checks first -- a sane range, the other kind
 * not enabled, this one not yet enabled and present -- and then how many
 * vectors of source's table (*table, what VFIO grants) the request gets.
 */
static int vectors_for(struct pci_dev *dev, enum ddekit_irq_source source, int minvec,
		       int maxvec, const struct irq_affinity *affd, unsigned int *table)
{
	bool msi = source == DDEKIT_IRQ_MSI;

	if (maxvec < minvec)
		return -ERANGE;
	if (msi ? dev->msix_enabled : dev->msi_enabled) {
		pci_info(dev, "%s refused: %s is enabled\n", source_name[source],
			 source_name[msi ? DDEKIT_IRQ_MSIX : DDEKIT_IRQ_MSI]);
		return -EINVAL;
	}
	if (WARN_ON_ONCE(msi ? dev->msi_enabled : dev->msix_enabled) ||
	    !(msi ? dev->msi_cap : dev->msix_cap))
		return -EINVAL;
	*table = granted(dev, source);
	return fit(dev, source, *table, minvec, maxvec, affd);
}

static int enable_msi_range(struct pci_dev *dev, int minvec, int maxvec,
			    const struct irq_affinity *affd)
{
	unsigned int table;
	int nvec = vectors_for(dev, DDEKIT_IRQ_MSI, minvec, maxvec, affd, &table);

	if (nvec < 0)
		return nvec;
	return enable(dev, DDEKIT_IRQ_MSI, nvec, nvec, table);
}

/*
 * With entries, the driver names the table entries it wants (entries[i].entry,
 * each once) and learns their irq numbers; every entry up to the highest
 * named is enabled through VFIO, which allocates a table from its start.
 */
static int enable_msix_range(struct pci_dev *dev, struct msix_entry *entries, int minvec,
			     int maxvec, const struct irq_affinity *affd)
{
	unsigned int table, count;
	int nvec, i, j;

	nvec = vectors_for(dev, DDEKIT_IRQ_MSIX, minvec, maxvec, affd, &table);
	if (nvec < 0)
		return nvec;
	count = nvec;
	for (i = 0; entries && i < nvec; i++) {
		if (entries[i].entry >= table)
			return -EINVAL;
		for (j = 0; j < i; j++) {
			if (entries[j].entry == entries[i].entry)
				return -EINVAL;
		}
		count = max_t(unsigned int, count, entries[i].entry + 1);
	}
	nvec = enable(dev, DDEKIT_IRQ_MSIX, count, nvec, table);
	for (i = 0; entries && nvec > 0 && i < nvec; i++)
		entries[i].vector = US_MSI_FIRST_IRQ + entries[i].entry;
	return nvec;
}

int pci_enable_msi(struct pci_dev *dev)
{
	int nvec = enable_msi_range(dev, 1, 1, NULL);

	return nvec < 0 ? nvec : 0;
}
EXPORT_SYMBOL(pci_enable_msi);

int pci_enable_msix_range(struct pci_dev *dev, struct msix_entry *entries, int minvec, int maxvec)
{
	return enable_msix_range(dev, entries, minvec, maxvec, NULL);
}
EXPORT_SYMBOL(pci_enable_msix_range);

void pci_disable_msi(struct pci_dev *dev)
{
	if (dev->msi_enabled)
		disable(dev, DDEKIT_IRQ_MSI);
}
EXPORT_SYMBOL(pci_disable_msi);

void pci_disable_msix(struct pci_dev *dev)
{
	if (dev->msix_enabled)
		disable(dev, DDEKIT_IRQ_MSIX);
}
EXPORT_SYMBOL(pci_disable_msix);

/* INTx is allowed again (PCI_COMMAND_INTX_DISABLE clear), as pci_intx() does. */
static void allow_intx(struct pci_dev *dev)
{
	u16 cmd;

	if (pci_read_config_word(dev, PCI_COMMAND, &cmd) || !(cmd & PCI_COMMAND_INTX_DISABLE))
		return;
	pci_write_config_word(dev, PCI_COMMAND, cmd & ~PCI_COMMAND_INTX_DISABLE);
}

/*
 * The types a driver allows, best first: MSI-X, MSI, then the legacy line
 * if one vector will do. PCI_IRQ_AFFINITY without a description spreads
 * every vector.
 */
int pci_alloc_irq_vectors_affinity(struct pci_dev *dev, unsigned int min_vecs,
				   unsigned int max_vecs, unsigned int flags,
				   struct irq_affinity *affd)
{
	static const struct irq_affinity spread_all;
	const struct irq_affinity *spread = affd;
	int nvec = -ENOSPC;

	if (flags & PCI_IRQ_AFFINITY) {
		if (!spread)
			spread = &spread_all;
	} else if (WARN_ON(spread)) {
		spread = NULL;
	}
	if (flags & PCI_IRQ_MSIX) {
		nvec = enable_msix_range(dev, NULL, min_vecs, max_vecs, spread);
		if (nvec > 0)
			return nvec;
	}
	if (flags & PCI_IRQ_MSI) {
		nvec = enable_msi_range(dev, min_vecs, max_vecs, spread);
		if (nvec > 0)
			return nvec;
	}
	if ((flags & PCI_IRQ_LEGACY) && min_vecs == 1 && dev->irq) {
		allow_intx(dev);
		return 1;
	}
	return nvec;
}
EXPORT_SYMBOL(pci_alloc_irq_vectors_affinity);

void pci_free_irq_vectors(struct pci_dev *dev)
{
	pci_disable_msix(dev);
	pci_disable_msi(dev);
}
EXPORT_SYMBOL(pci_free_irq_vectors);

/* The irq number of vector nr: a message-signalled one, or INTx's only. */
int pci_irq_vector(struct pci_dev *dev, unsigned int nr)
{
	if (dev->msi_enabled || dev->msix_enabled)
		return nr < enabled.count ? US_MSI_FIRST_IRQ + nr : -EINVAL;
	return nr ? -EINVAL : dev->irq;
}
EXPORT_SYMBOL(pci_irq_vector);

/*
 * The CPUs vector nr's interrupts go to: the process's one CPU
 * (docs/design.md §6), for each enabled vector or the INTx line.
 */
const struct cpumask *pci_irq_get_affinity(struct pci_dev *dev, int nr)
{
	if (dev->msi_enabled || dev->msix_enabled)
		return nr >= 0 && nr < enabled.count ? cpu_online_mask : NULL;
	return nr ? NULL : cpu_online_mask;
}
EXPORT_SYMBOL(pci_irq_get_affinity);

/* One CPU (docs/design.md §6): every interrupt already goes to it. */
int __irq_apply_affinity_hint(unsigned int irq, const struct cpumask *m, bool setaffinity)
{
	return 0;
}
EXPORT_SYMBOL_GPL(__irq_apply_affinity_hint);
