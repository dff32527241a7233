// SPDX-License-Identifier: GPL-2.0
/*
 * The VFIO back-end (docs/design.md §4): config space and BARs are regions
 * of the device fd, interrupts (INTx, MSI, MSI-X) are eventfds VFIO signals.
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h). Only the uapi
 * <linux/vfio.h> is included, never a kernel-internal header.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/vfio.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "log.h"

static struct {
	int fd;
	struct vfio_region_info regions[VFIO_PCI_NUM_REGIONS];
} vfio = { .fd = -1 };

static int config_rw(unsigned int offset, void *buf, unsigned int len, int write)
{
	const struct vfio_region_info *r = &vfio.regions[VFIO_PCI_CONFIG_REGION_INDEX];
	ssize_t done;

	if (offset + (uint64_t)len > r->size)
		return -EINVAL;
	if (write)
		done = pwrite(vfio.fd, buf, len, r->offset + offset);
	else
		done = pread(vfio.fd, buf, len, r->offset + offset);
	return done == (ssize_t)len ? 0 : -EIO;
}

static unsigned long long bar_size(int bar)
{
	return vfio.regions[bar].size;
}

static void *bar_map(int bar, unsigned long long size)
{
	const struct vfio_region_info *r = &vfio.regions[bar];
	void *p;

	if (!(r->flags & VFIO_REGION_INFO_FLAG_MMAP))
		return NULL;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, vfio.fd, r->offset);
	return p == MAP_FAILED ? NULL : p;
}

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
	return ioctl(vfio.fd, VFIO_DEVICE_SET_IRQS, &req) ? -errno : 0;
}

static int irq_vectors(enum ddekit_irq_source source)
{
	struct vfio_irq_info info = { .argsz = sizeof(info), .index = irq_index[source] };

	if (ioctl(vfio.fd, VFIO_DEVICE_GET_IRQ_INFO, &info) || !(info.flags & VFIO_IRQ_INFO_EVENTFD))
		return 0;
	return info.count;
}

/*
 * VFIO allocates the host's vectors when a trigger is first set on the
 * index, for as many as that call names; an fd of -1 enables a vector
 * without an eventfd, which request_irq() attaches later.
 */
static int irq_enable_vectors(enum ddekit_irq_source source, unsigned int count)
{
	int32_t none[DDEKIT_IRQ_MAX_VECTORS];

	if (source == DDEKIT_IRQ_INTX || !count || count > DDEKIT_IRQ_MAX_VECTORS)
		return -EINVAL;
	for (unsigned int i = 0; i < count; i++)
		none[i] = -1;
	return set_irqs(source, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, 0, count, none);
}

static void irq_disable_vectors(enum ddekit_irq_source source)
{
	/* DATA_NONE with count 0 tears down every vector of the index. */
	set_irqs(source, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, 0, 0, NULL);
}

static int irq_attach(enum ddekit_irq_source source, unsigned int vector)
{
	int32_t fd = eventfd(0, EFD_CLOEXEC);
	int err;

	if (fd < 0)
		return -errno;
	err = set_irqs(source, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, vector, 1, &fd);
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

static int irq_wait(int fd)
{
	uint64_t count;

	for (;;) {
		if (read(fd, &count, sizeof(count)) == sizeof(count))
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

static void irq_unmask(void)
{
	/* VFIO masked the level-triggered line when it fired. */
	set_irqs(DDEKIT_IRQ_INTX, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_UNMASK, 0, 1, NULL);
}

static void irq_detach(enum ddekit_irq_source source, unsigned int vector, int fd)
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

static void irq_close(int fd)
{
	close(fd);
}

static const struct ddekit_backend backend = {
	.config_rw = config_rw,
	.bar_size = bar_size,
	.bar_map = bar_map,
	.irq_vectors = irq_vectors,
	.irq_enable_vectors = irq_enable_vectors,
	.irq_disable_vectors = irq_disable_vectors,
	.irq_attach = irq_attach,
	.irq_wait = irq_wait,
	.irq_unmask = irq_unmask,
	.irq_detach = irq_detach,
	.irq_close = irq_close,
};

const struct ddekit_backend *ddekit_vfio_backend(int device_fd)
{
	for (unsigned int i = 0; i < VFIO_PCI_NUM_REGIONS; i++) {
		struct vfio_region_info *r = &vfio.regions[i];

		r->argsz = sizeof(*r);
		r->index = i;
		if (ioctl(device_fd, VFIO_DEVICE_GET_REGION_INFO, r))
			r->size = 0;
	}
	vfio.fd = device_fd;
	return &backend;
}
