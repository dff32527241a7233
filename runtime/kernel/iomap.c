// SPDX-License-Identifier: GPL-2.0
/*
 * The BARs of the process's PCI function: regions, mappings, and port and
 * memory I/O through them (lib/iomap.c's cookies).
 *
 * MMIO is the VFIO BAR mapping itself, so a module's inline readl/writel go
 * straight to the device. Port I/O is real too: ddekit grants the I/O BAR's
 * port range with ioperm() before any thread starts, so a module's inline
 * in/out instructions (e1000_io_write, pcnet32's wio ops) run unchanged.
 *
 * Stands in for Linux's lib/iomap.c, lib/pci_iomap.c, kernel/resource.c,
 * arch/x86/mm/ioremap.c and drivers/pci/pci.c (its regions).
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/io.h>
#include <linux/slab.h>

#include "internal.h"

/* ---- BARs and regions --------------------------------------------------- */

int pci_select_bars(struct pci_dev *dev, unsigned long flags)
{
	int bars = 0;

	for (int i = 0; i < PCI_STD_NUM_BARS; i++)
		if (pci_resource_flags(dev, i) & flags)
			bars |= 1 << i;
	return bars;
}
EXPORT_SYMBOL(pci_select_bars);

/*
 * Nothing to claim: the process owns its function's BARs outright (memory
 * BARs are mapped on ioremap, the I/O ports were granted at start-up).
 */
int pci_request_selected_regions(struct pci_dev *dev, int bars, const char *name)
{
	return 0;
}
EXPORT_SYMBOL(pci_request_selected_regions);

/* Exclusive too: no one else (no /dev/mem, no sysfs mapping) is in this process. */
int pci_request_selected_regions_exclusive(struct pci_dev *dev, int bars, const char *name)
{
	return pci_request_selected_regions(dev, bars, name);
}
EXPORT_SYMBOL(pci_request_selected_regions_exclusive);

int pci_request_regions(struct pci_dev *dev, const char *name)
{
	return pci_request_selected_regions(dev, (1 << PCI_STD_NUM_BARS) - 1, name);
}
EXPORT_SYMBOL(pci_request_regions);

int pci_request_region(struct pci_dev *dev, int bar, const char *name)
{
	return pci_request_selected_regions(dev, 1 << bar, name);
}
EXPORT_SYMBOL(pci_request_region);

/* Port permissions and BAR mappings last as long as the process. */
void pci_release_selected_regions(struct pci_dev *dev, int bars)
{
}
EXPORT_SYMBOL(pci_release_selected_regions);

void pci_release_regions(struct pci_dev *dev)
{
}
EXPORT_SYMBOL(pci_release_regions);

void pci_release_region(struct pci_dev *dev, int bar)
{
	pci_release_selected_regions(dev, 1 << bar);
}
EXPORT_SYMBOL(pci_release_region);

struct resource ioport_resource = {
	.name = "PCI IO", .start = 0, .end = IO_SPACE_LIMIT, .flags = IORESOURCE_IO,
};
EXPORT_SYMBOL(ioport_resource);

struct resource iomem_resource = {
	.name = "PCI mem", .start = 0, .end = -1, .flags = IORESOURCE_MEM,
};
EXPORT_SYMBOL(iomem_resource);

/*
 * request_region()/request_mem_region(): only ranges inside one of the
 * device's BARs can be had (their ports are granted at start-up).
 */
struct resource *__request_region(struct resource *parent, resource_size_t start,
				  resource_size_t n, const char *name, int flags)
{
	struct pci_dev *pdev = us_pci_dev();
	struct resource *res;
	bool inside = false;

	for (int i = 0; pdev && i < PCI_STD_NUM_BARS; i++) {
		struct resource *bar = &pdev->resource[i];

		if ((bar->flags & parent->flags & (IORESOURCE_IO | IORESOURCE_MEM)) &&
		    start >= bar->start && start + n - 1 <= bar->end)
			inside = true;
	}
	if (!inside || !n)
		return NULL;
	res = kzalloc(sizeof(*res), GFP_KERNEL);
	if (!res)
		return NULL;
	res->name = name;
	res->start = start;
	res->end = start + n - 1;
	res->flags = parent->flags | IORESOURCE_BUSY | flags;
	res->parent = parent;
	return res;
}
EXPORT_SYMBOL(__request_region);

/* The grant itself lasts as long as the process (like the BAR mappings). */
void __release_region(struct resource *parent, resource_size_t start, resource_size_t n)
{
}
EXPORT_SYMBOL(__release_region);

void __iomem *pci_ioremap_bar(struct pci_dev *pdev, int bar)
{
	if (!(pci_resource_flags(pdev, bar) & IORESOURCE_MEM))
		return NULL;
	return (void __iomem *)ddekit_pci_bar_map(bar);
}
EXPORT_SYMBOL(pci_ioremap_bar);

void __iomem *ioremap(resource_size_t offset, unsigned long size)
{
	struct pci_dev *pdev = us_pci_dev();

	for (int i = 0; i < PCI_STD_NUM_BARS; i++) {
		struct resource *r = &pdev->resource[i];
		char *base;

		if (!(r->flags & IORESOURCE_MEM) || offset < r->start ||
		    offset + size - 1 > r->end)
			continue;
		base = ddekit_pci_bar_map(i);
		return base ? (void __iomem *)(base + (offset - r->start)) : NULL;
	}
	pr_err("ioremap(%pa, %lu): not inside a memory BAR of %s\n", &offset, size,
	       pci_name(pdev));
	return NULL;
}
EXPORT_SYMBOL(ioremap);

void iounmap(volatile void __iomem *addr)
{
}
EXPORT_SYMBOL(iounmap);

/*
 * ioread/iowrite cookies, as lib/iomap.c makes them: a port number plus
 * PIO_OFFSET for I/O BARs, the mapped address for memory BARs.
 */
#define PIO_OFFSET	0x10000UL
#define PIO_RESERVED	0x40000UL

static bool is_pio(const void __iomem *addr)
{
	return (unsigned long)addr >= PIO_OFFSET && (unsigned long)addr < PIO_RESERVED;
}

static unsigned long port_of(const void __iomem *addr)
{
	return (unsigned long)addr - PIO_OFFSET;
}

void __iomem *pci_iomap_range(struct pci_dev *dev, int bar, unsigned long offset,
			      unsigned long maxlen)
{
	struct resource *r = &dev->resource[bar];

	if (!resource_size(r) || offset >= resource_size(r))
		return NULL;
	if (r->flags & IORESOURCE_IO)
		return (void __iomem *)(r->start + offset + PIO_OFFSET);
	if (r->flags & IORESOURCE_MEM) {
		char *base = ddekit_pci_bar_map(bar);

		return base ? (void __iomem *)(base + offset) : NULL;
	}
	return NULL;
}
EXPORT_SYMBOL(pci_iomap_range);

void __iomem *pci_iomap(struct pci_dev *dev, int bar, unsigned long maxlen)
{
	return pci_iomap_range(dev, bar, 0, maxlen);
}
EXPORT_SYMBOL(pci_iomap);

void pci_iounmap(struct pci_dev *dev, void __iomem *addr)
{
}
EXPORT_SYMBOL(pci_iounmap);

#define DEFINE_IOREAD(name, type, in, rd)				\
unsigned int name(const void __iomem *addr)				\
{									\
	if (is_pio(addr))						\
		return in(port_of(addr));				\
	return rd(addr);						\
}									\
EXPORT_SYMBOL(name)

/* A write to the device from the runtime on the driver's behalf: the checker's gate applies. */
#define DEFINE_IOWRITE(name, type, out, wr)				\
void name(type val, void __iomem *addr)					\
{									\
	ddekit_check_gate(_RET_IP_);					\
	if (is_pio(addr))						\
		out(val, port_of(addr));				\
	else								\
		wr(val, addr);						\
}									\
EXPORT_SYMBOL(name)

DEFINE_IOREAD(ioread8, u8, inb, readb);
DEFINE_IOREAD(ioread16, u16, inw, readw);
DEFINE_IOREAD(ioread32, u32, inl, readl);
DEFINE_IOWRITE(iowrite8, u8, outb, writeb);
DEFINE_IOWRITE(iowrite16, u16, outw, writew);
DEFINE_IOWRITE(iowrite32, u32, outl, writel);

void ioread16_rep(const void __iomem *addr, void *buf, unsigned long count)
{
	u16 *p = buf;

	while (count--)
		*p++ = ioread16(addr);
}
EXPORT_SYMBOL(ioread16_rep);

void iowrite16_rep(void __iomem *addr, const void *buf, unsigned long count)
{
	const u16 *p = buf;

	while (count--)
		iowrite16(*p++, addr);
}
EXPORT_SYMBOL(iowrite16_rep);

void memcpy_fromio(void *dst, const volatile void __iomem *src, size_t n)
{
	u8 *d = dst;
	const volatile u8 __iomem *s = src;

	while (n--)
		*d++ = readb(s++);
}
EXPORT_SYMBOL(memcpy_fromio);

void memcpy_toio(volatile void __iomem *dst, const void *src, size_t n)
{
	volatile u8 __iomem *d = dst;
	const u8 *s = src;

	ddekit_check_gate(_RET_IP_);
	while (n--)
		writeb(*s++, d++);
}
EXPORT_SYMBOL(memcpy_toio);
