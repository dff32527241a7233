// SPDX-License-Identifier: GPL-2.0
/*
 * ddekit's PCI function: the VFIO device fd and what it gives the kernel
 * half -- config space, the BARs (mapped, or granted as ports), and its
 * interrupts (INTx, MSI, MSI-X) through eventfds.
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h). Only the uapi
 * <linux/vfio.h> is included, never a kernel-internal header.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/vfio.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/io.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ddekit.h"
#include "setup.h"

#define PCI_STD_BARS		6
#define PCI_BAR0		0x10
#define PCI_BAR_IO		0x1
#define PCI_BAR_MEM_64		0x4
#define PCI_BAR_PREFETCH	0x8

static struct {
	int fd;
	char name[32];
	struct vfio_region_info regions[VFIO_PCI_NUM_REGIONS];
	void *bar_map[PCI_STD_BARS];
} device = { .fd = -1 };

static void (*device_memory_observer)(void *addr, size_t size);	/* the checker's gate */

int ddekit_setup_device(int device_fd, const char *pci_name)
{
	for (unsigned int i = 0; i < VFIO_PCI_NUM_REGIONS; i++) {
		struct vfio_region_info *r = &device.regions[i];

		r->argsz = sizeof(*r);
		r->index = i;
		if (ioctl(device_fd, VFIO_DEVICE_GET_REGION_INFO, r))
			r->size = 0;
	}
	device.fd = device_fd;
	snprintf(device.name, sizeof(device.name), "%s", pci_name);
	/*
	 * The device's I/O BARs are this process's ports. ioperm() is per
	 * thread and only threads created later inherit it, so it is granted
	 * here, before the kernel half starts any thread.
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
	return device.fd >= 0;
}

const char *ddekit_pci_name(void)
{
	return device.name;
}

static int region_rw(unsigned int index, unsigned int offset, void *buf,
		     unsigned int len, int write)
{
	const struct vfio_region_info *r = &device.regions[index];
	ssize_t done;

	if (device.fd < 0 || offset + (uint64_t)len > r->size)
		return -EINVAL;
	if (write)
		done = pwrite(device.fd, buf, len, r->offset + offset);
	else
		done = pread(device.fd, buf, len, r->offset + offset);
	return done == (ssize_t)len ? 0 : -EIO;
}

int ddekit_pci_config_read(unsigned int offset, void *buf, unsigned int len)
{
	return region_rw(VFIO_PCI_CONFIG_REGION_INDEX, offset, buf, len, 0);
}

int ddekit_pci_config_write(unsigned int offset, const void *buf, unsigned int len)
{
	return region_rw(VFIO_PCI_CONFIG_REGION_INDEX, offset, (void *)buf, len, 1);
}

int ddekit_pci_bar(int bar, unsigned long long *start, unsigned long long *size,
		   unsigned int *flags)
{
	uint32_t lo, hi = 0;

	if (bar < 0 || bar >= PCI_STD_BARS || device.fd < 0)
		return -EINVAL;
	*size = device.regions[bar].size;
	*start = 0;
	*flags = 0;
	if (!*size)
		return 0;
	/* vfio-pci's virtual config space holds the BAR as the host set it. */
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
	const struct vfio_region_info *r;
	void *p;

	if (bar < 0 || bar >= PCI_STD_BARS || device.fd < 0)
		return NULL;
	if (device.bar_map[bar])
		return device.bar_map[bar];
	r = &device.regions[bar];
	if (!r->size || !(r->flags & VFIO_REGION_INFO_FLAG_MMAP))
		return NULL;
	p = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, device.fd, r->offset);
	if (p == MAP_FAILED)
		return NULL;
	device.bar_map[bar] = p;
	if (device_memory_observer)
		device_memory_observer(p, r->size);
	return p;
}

void ddekit_setup_device_memory_observer(void (*observer)(void *addr, size_t size))
{
	device_memory_observer = observer;
}

/* ---- interrupts: INTx, MSI, MSI-X ---------------------------------------- */

static const uint32_t irq_index[] = {
	[DDEKIT_IRQ_INTX] = VFIO_PCI_INTX_IRQ_INDEX,
	[DDEKIT_IRQ_MSI] = VFIO_PCI_MSI_IRQ_INDEX,
	[DDEKIT_IRQ_MSIX] = VFIO_PCI_MSIX_IRQ_INDEX,
};

/* VFIO_DEVICE_SET_IRQS on vectors [start, start + count); fds: one each, or NULL for DATA_NONE. */
static int set_irqs(enum ddekit_irq_source source, uint32_t flags, unsigned int start,
		    unsigned int count, const int32_t *fds)
{
	struct {
		struct vfio_irq_set set;
		int32_t fds[DDEKIT_IRQ_MAX_VECTORS];
	} req = {
		.set = {
			.argsz = sizeof(struct vfio_irq_set) + (fds ? count * sizeof(int32_t) : 0),
			.flags = flags,
			.index = irq_index[source],
			.start = start,
			.count = count,
		},
	};

	if (fds) {
		if (count > DDEKIT_IRQ_MAX_VECTORS)
			return -EINVAL;
		memcpy(req.fds, fds, count * sizeof(int32_t));
	}
	return ioctl(device.fd, VFIO_DEVICE_SET_IRQS, &req) ? -errno : 0;
}

int ddekit_irq_vectors(enum ddekit_irq_source source)
{
	struct vfio_irq_info info = { .argsz = sizeof(info), .index = irq_index[source] };

	if (device.fd < 0 || ioctl(device.fd, VFIO_DEVICE_GET_IRQ_INFO, &info) ||
	    !(info.flags & VFIO_IRQ_INFO_EVENTFD))
		return 0;
	return info.count;
}

/*
 * VFIO allocates the host's vectors when a trigger is first set on the
 * index, for as many as that call names; an fd of -1 enables a vector
 * without an eventfd, which request_irq() attaches later.
 */
int ddekit_irq_enable_vectors(enum ddekit_irq_source source, unsigned int count)
{
	int32_t none[DDEKIT_IRQ_MAX_VECTORS];

	if (device.fd < 0)
		return -ENODEV;
	if (source == DDEKIT_IRQ_INTX || !count || count > DDEKIT_IRQ_MAX_VECTORS)
		return -EINVAL;
	for (unsigned int i = 0; i < count; i++)
		none[i] = -1;
	return set_irqs(source, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, 0, count, none);
}

void ddekit_irq_disable_vectors(enum ddekit_irq_source source)
{
	/* DATA_NONE with count 0 tears down every vector of the index. */
	set_irqs(source, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, 0, 0, NULL);
}

int ddekit_irq_attach(enum ddekit_irq_source source, unsigned int vector)
{
	int32_t fd;
	int err;

	if (device.fd < 0)
		return -ENODEV;
	fd = eventfd(0, EFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	err = set_irqs(source, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, vector, 1, &fd);
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

int ddekit_irq_wait(int fd)
{
	uint64_t count;

	for (;;) {
		if (read(fd, &count, sizeof(count)) == sizeof(count))
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

void ddekit_irq_unmask(void)
{
	/* VFIO masked the level-triggered line when it fired. */
	set_irqs(DDEKIT_IRQ_INTX, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_UNMASK, 0, 1, NULL);
}

void ddekit_irq_detach(enum ddekit_irq_source source, unsigned int vector, int fd)
{
	const int32_t none = -1;
	uint64_t one = 1;

	if (source == DDEKIT_IRQ_INTX)
		set_irqs(source, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, 0, 0, NULL);
	else	/* the vector stays enabled, without an eventfd */
		set_irqs(source, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, vector, 1, &none);
	if (write(fd, &one, sizeof(one)) != sizeof(one))
		ddekit_panic("cannot wake the IRQ thread");
}

void ddekit_irq_close(int fd)
{
	close(fd);
}
