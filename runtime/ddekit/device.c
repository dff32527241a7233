// SPDX-License-Identifier: GPL-2.0
/*
 * ddekit's PCI function: what the kernel half gets of it -- config space,
 * the BARs (mapped, or granted as ports), and its interrupts -- from the
 * back-end the host chose (backend.h): VFIO, or uio_pci_generic without
 * an IOMMU.
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/io.h>

#include "backend.h"
#include "setup.h"

#define PCI_STD_BARS		6
#define PCI_BAR0		0x10
#define PCI_BAR_IO		0x1
#define PCI_BAR_MEM_64		0x4
#define PCI_BAR_PREFETCH	0x8

static struct {
	const struct ddekit_backend *ops;	/* NULL: no device */
	char name[32];
	void *bar_map[PCI_STD_BARS];
} device;

static void (*device_memory_observer)(void *addr, size_t size);	/* the checker's gate */

void ddekit_name_device(const char *pci_name)
{
	snprintf(device.name, sizeof(device.name), "%s", pci_name);
}

int ddekit_setup_device(const struct ddekit_device_fds *fds)
{
	device.ops = fds->vfio >= 0 ? ddekit_vfio_backend(fds->vfio) : ddekit_uio_backend(fds->uio);
	if (!device.ops)
		return -EINVAL;
	/*
	 * The device's I/O BARs are this process's ports. ioperm() is per
	 * thread and only threads created later inherit it, so it is granted
	 * here, before the kernel half starts any thread, and while the
	 * process still has CAP_SYS_RAWIO (sandbox.c gives it up).
	 */
	for (int bar = 0; bar < PCI_STD_BARS; bar++) {
		unsigned long long start, size;
		unsigned int flags;
		int err;

		if (ddekit_pci_bar(bar, &start, &size, &flags) || !(flags & DDEKIT_BAR_IO))
			continue;
		if (start + size > 0x10000)
			return -EINVAL;
		err = ioperm(start, size, 1);
		if (err)
			return -errno;
	}
	return 0;
}

int ddekit_pci_present(void)
{
	return device.ops != NULL;
}

const char *ddekit_pci_name(void)
{
	return device.name;
}

int ddekit_pci_config_read(unsigned int offset, void *buf, unsigned int len)
{
	return device.ops ? device.ops->config_rw(offset, buf, len, 0) : -EINVAL;
}

int ddekit_pci_config_write(unsigned int offset, const void *buf, unsigned int len)
{
	return device.ops ? device.ops->config_rw(offset, (void *)buf, len, 1) : -EINVAL;
}

int ddekit_pci_bar(int bar, unsigned long long *start, unsigned long long *size,
		   unsigned int *flags)
{
	uint32_t lo, hi = 0;

	if (bar < 0 || bar >= PCI_STD_BARS || !device.ops)
		return -EINVAL;
	*size = device.ops->bar_size(bar);
	*start = 0;
	*flags = 0;
	if (!*size)
		return 0;
	/* Config space holds the BAR as the host set it (VFIO's virtual copy, or the real one). */
	if (ddekit_pci_config_read(PCI_BAR0 + 4 * bar, &lo, 4))
		return -EIO;
	if (lo & PCI_BAR_IO) {
		*start = lo & ~3u;
		*flags = DDEKIT_BAR_IO;
		return 0;
	}
	*flags = DDEKIT_BAR_MMIO;
	if (lo & PCI_BAR_PREFETCH)
		*flags |= DDEKIT_BAR_PREFETCH;
	if (lo & PCI_BAR_MEM_64) {
		*flags |= DDEKIT_BAR_64BIT;
		if (bar + 1 < PCI_STD_BARS &&
		    ddekit_pci_config_read(PCI_BAR0 + 4 * (bar + 1), &hi, 4))
			return -EIO;
	}
	*start = ((unsigned long long)hi << 32) | (lo & ~0xfu);
	return 0;
}

void *ddekit_pci_bar_map(int bar)
{
	unsigned long long size;
	void *p;

	if (bar < 0 || bar >= PCI_STD_BARS || !device.ops)
		return NULL;
	if (device.bar_map[bar])
		return device.bar_map[bar];
	size = device.ops->bar_size(bar);
	if (!size)
		return NULL;
	p = device.ops->bar_map(bar, size);
	if (!p)
		return NULL;
	device.bar_map[bar] = p;
	if (device_memory_observer)
		device_memory_observer(p, size);
	return p;
}

void ddekit_setup_device_memory_observer(void (*observer)(void *addr, size_t size))
{
	device_memory_observer = observer;
}

/* ---- interrupts: the back-end's ------------------------------------------ */

int ddekit_irq_vectors(enum ddekit_irq_source source)
{
	return device.ops ? device.ops->irq_vectors(source) : 0;
}

int ddekit_irq_enable_vectors(enum ddekit_irq_source source, unsigned int count)
{
	return device.ops ? device.ops->irq_enable_vectors(source, count) : -ENODEV;
}

void ddekit_irq_disable_vectors(enum ddekit_irq_source source)
{
	if (device.ops)
		device.ops->irq_disable_vectors(source);
}

int ddekit_irq_attach(enum ddekit_irq_source source, unsigned int vector)
{
	return device.ops ? device.ops->irq_attach(source, vector) : -ENODEV;
}

int ddekit_irq_wait(int fd)
{
	return device.ops->irq_wait(fd);
}

int ddekit_irq_pending(int fd)
{
	struct pollfd ready = { .fd = fd, .events = POLLIN };
	int n = poll(&ready, 1, 0);

	return n < 0 ? -errno : n;
}

void ddekit_irq_unmask(void)
{
	device.ops->irq_unmask();
}

void ddekit_irq_detach(enum ddekit_irq_source source, unsigned int vector, int fd)
{
	device.ops->irq_detach(source, vector, fd);
}

void ddekit_irq_close(int fd)
{
	device.ops->irq_close(fd);
}
