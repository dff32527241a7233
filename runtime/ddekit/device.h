/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The PCI function, through VFIO or uio_pci_generic (device.c): config
 * space, BARs and interrupts.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_DEVICE_H
#define UNDERSTUDY_DDEKIT_DEVICE_H

int ddekit_pci_present(void);
const char *ddekit_pci_name(void);		/* "0000:00:03.0" */
int ddekit_pci_config_read(unsigned int offset, void *buf, unsigned int len);
int ddekit_pci_config_write(unsigned int offset, const void *buf, unsigned int len);

#define DDEKIT_BAR_MMIO		1
#define DDEKIT_BAR_IO		2
#define DDEKIT_BAR_64BIT	4
#define DDEKIT_BAR_PREFETCH	8
/*
 * Size, bus address (what the BAR register holds) and DDEKIT_BAR_* flags.
 * Every thread may use in/out on I/O BARs: they are granted at set-up.
 */
int ddekit_pci_bar(int bar, unsigned long long *start, unsigned long long *size,
		   unsigned int *flags);
/* Maps a memory BAR (cached per BAR); NULL if it cannot be mapped. */
void *ddekit_pci_bar_map(int bar);

/*
 * Interrupts through VFIO (docs/design.md §3): the legacy INTx line, or the
 * function's MSI or MSI-X vectors. Each source delivers through eventfds,
 * one per line or vector, that the kernel signals on each interrupt.
 */
enum ddekit_irq_source { DDEKIT_IRQ_INTX, DDEKIT_IRQ_MSI, DDEKIT_IRQ_MSIX };
/* The most message-signalled vectors the runtime enables for one function. */
#define DDEKIT_IRQ_MAX_VECTORS	32
/* How many vectors VFIO offers for source (its capability's size); 0: none. */
int ddekit_irq_vectors(enum ddekit_irq_source source);
/*
 * Enables MSI or MSI-X vectors [0, count) with no eventfd attached yet;
 * 0 or -errno. Disabling takes every vector of source away again.
 */
int ddekit_irq_enable_vectors(enum ddekit_irq_source source, unsigned int count);
void ddekit_irq_disable_vectors(enum ddekit_irq_source source);
/*
 * An eventfd for the INTx line (vector 0), which this enables, or for an
 * enabled MSI/MSI-X vector. VFIO masks INTx when it fires, until
 * ddekit_irq_unmask(); message-signalled vectors are never masked. detach
 * stops the signalling and wakes the waiter once more, so it can see it was
 * detached; the waiter then closes the eventfd.
 */
int ddekit_irq_attach(enum ddekit_irq_source source, unsigned int vector);
/* Blocks (without the CPU) until an interrupt or the detach wake-up, and takes it. */
int ddekit_irq_wait(int eventfd);
/*
 * Whether one of those has come (1) or not (0), or -errno, without taking
 * it: ddekit_irq_wait() then takes it without blocking.
 */
int ddekit_irq_pending(int eventfd);
void ddekit_irq_unmask(void);
void ddekit_irq_detach(enum ddekit_irq_source source, unsigned int vector, int eventfd);
void ddekit_irq_close(int eventfd);

#endif /* UNDERSTUDY_DDEKIT_DEVICE_H */
