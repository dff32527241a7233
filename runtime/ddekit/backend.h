/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The seam between device.c, which gives the kernel half its PCI function,
 * and the back-end the host chose for it (docs/design.md §4): VFIO
 * (vfio.c) or, without an IOMMU, uio_pci_generic (uio.c). libc-only.
 */
#ifndef UNDERSTUDY_DDEKIT_BACKEND_H
#define UNDERSTUDY_DDEKIT_BACKEND_H

#include <stddef.h>

#include "device.h"

struct ddekit_backend {
	/* Reads or writes config space; 0 or -errno. */
	int (*config_rw)(unsigned int offset, void *buf, unsigned int len, int write);
	/* The BAR's size; 0: none. */
	unsigned long long (*bar_size)(int bar);
	/* Maps a memory BAR of size bytes; NULL if it cannot be mapped. */
	void *(*bar_map)(int bar, unsigned long long size);
	/* The ddekit_irq_* calls of device.h, for this back-end. */
	int (*irq_vectors)(enum ddekit_irq_source source);
	int (*irq_enable_vectors)(enum ddekit_irq_source source, unsigned int count);
	void (*irq_disable_vectors)(enum ddekit_irq_source source);
	int (*irq_attach)(enum ddekit_irq_source source, unsigned int vector);
	int (*irq_wait)(int fd);
	void (*irq_unmask)(void);
	void (*irq_detach)(enum ddekit_irq_source source, unsigned int vector, int fd);
	void (*irq_close)(int fd);
};

/* Each takes its fds and returns its back-end, or NULL if they are unusable. */
const struct ddekit_backend *ddekit_vfio_backend(int device_fd);
const struct ddekit_backend *ddekit_uio_backend(const int *fds);

#endif /* UNDERSTUDY_DDEKIT_BACKEND_H */
