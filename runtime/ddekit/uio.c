// SPDX-License-Identifier: GPL-2.0
/*
 * The UIO back-end (docs/design.md §4, "Without an IOMMU"): the function is
 * bound to uio_pci_generic, and the host hands over its files: /dev/uioN,
 * sysfs `config` and the `resourceN` of each BAR. Config space is the real
 * one (no VFIO filtering it), a memory BAR is its resource file mapped, and
 * the one interrupt is INTx: uio_pci_generic masks it with the command
 * register's INTx-disable bit when it fires and counts it on /dev/uioN,
 * whose read() waits for it. It has no irqcontrol (a write to /dev/uioN
 * fails with ENOSYS): the line is re-enabled by clearing that bit through
 * config space, as the kernel's UIO documentation does.
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "log.h"
#include "setup.h"

static struct {
	int irq, config;
	int bar[DDEKIT_UIO_FDS - 2];
	/*
	 * Each attachment's epoll fd and the eventfd that wakes its IRQ thread
	 * when the line is freed: a driver may request the line again before
	 * the old thread has closed its own.
	 */
	struct waiter { int ep, wake; } waiters[2];
} uio = { .waiters = { { -1, -1 }, { -1, -1 } } };
/* Taken and given back by different threads: request_irq's and the IRQ thread. */
static pthread_mutex_t waiters_lock = PTHREAD_MUTEX_INITIALIZER;

/* The attachment whose epoll fd is ep; waiter_of(-1): a free one, or NULL. */
static struct waiter *waiter_of(int ep)
{
	for (unsigned int i = 0; i < 2; i++)
		if (uio.waiters[i].ep == ep)
			return &uio.waiters[i];
	return NULL;
}

static int config_rw(unsigned int offset, void *buf, unsigned int len, int write)
{
	ssize_t done;

	if (write)
		done = pwrite(uio.config, buf, len, offset);
	else
		done = pread(uio.config, buf, len, offset);
	return done == (ssize_t)len ? 0 : -EIO;
}

/* A resource file is as long as its BAR. */
static unsigned long long bar_size(int bar)
{
	struct stat st;

	if (uio.bar[bar] < 0 || fstat(uio.bar[bar], &st))
		return 0;
	return st.st_size;
}

static void *bar_map(int bar, unsigned long long size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, uio.bar[bar], 0);

	return p == MAP_FAILED ? NULL : p;
}

/* uio_pci_generic offers the INTx line only. */
static int irq_vectors(enum ddekit_irq_source source)
{
	return source == DDEKIT_IRQ_INTX ? 1 : 0;
}

static int irq_enable_vectors(enum ddekit_irq_source source, unsigned int count)
{
	return -EINVAL;
}

static void irq_disable_vectors(enum ddekit_irq_source source)
{
}

/*
 * INTx-disable is bit 10 of the command register, written as the whole
 * 16-bit register (read, change the bit, write), as DPDK does. A one-byte
 * write of its high byte alone left QEMU's emulated line asserted with no
 * device behind it in the lab's runs: an interrupt storm the kernel ended by
 * disabling the IRQ ("nobody cared").
 */
#define PCI_COMMAND			0x04
#define PCI_COMMAND_INTX_DISABLE	0x400

static void set_intx(int on)
{
	uint16_t cmd, want;
	char why[96];

	if (pread(uio.config, &cmd, sizeof(cmd), PCI_COMMAND) == sizeof(cmd)) {
		want = on ? cmd & ~PCI_COMMAND_INTX_DISABLE : cmd | PCI_COMMAND_INTX_DISABLE;
		if (want == cmd || pwrite(uio.config, &want, sizeof(want), PCI_COMMAND) == sizeof(want))
			return;
	}
	snprintf(why, sizeof(why), "cannot %s INTx in config space: %s", on ? "enable" : "disable",
		 strerror(errno));
	ddekit_panic(why);
}

static void irq_unmask(void)
{
	set_intx(1);
}

/* An epoll fd over /dev/uioN and a wake-up eventfd: the IRQ thread waits on both. */
static int irq_attach(enum ddekit_irq_source source, unsigned int vector)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct waiter *w;
	int ep, wake, err;

	if (source != DDEKIT_IRQ_INTX || vector)
		return -EINVAL;
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		return -errno;
	wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ev.data.fd = uio.irq;
	if (wake < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, uio.irq, &ev))
		goto fail;
	ev.data.fd = wake;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, wake, &ev))
		goto fail;
	pthread_mutex_lock(&waiters_lock);
	w = waiter_of(-1);
	if (w) {
		w->ep = ep;
		w->wake = wake;
	}
	pthread_mutex_unlock(&waiters_lock);
	if (!w) {
		errno = EBUSY;
		goto fail;
	}
	/* The line may have fired and been masked before anyone listened. */
	irq_unmask();
	return ep;
fail:
	err = -errno;
	if (wake >= 0)
		close(wake);
	close(ep);
	return err;
}

static int irq_wait(int ep)
{
	const struct waiter *w = waiter_of(ep);
	struct epoll_event ev;
	int32_t count;
	uint64_t woken;

	for (;;) {
		int n = epoll_wait(ep, &ev, 1, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (ev.data.fd == w->wake)
			return read(w->wake, &woken, sizeof(woken)) == sizeof(woken) ? 0 : -errno;
		if (read(uio.irq, &count, sizeof(count)) == sizeof(count))
			return 0;
		if (errno != EINTR && errno != EAGAIN)
			return -errno;
	}
}

static void irq_detach(enum ddekit_irq_source source, unsigned int vector, int ep)
{
	uint64_t one = 1;

	set_intx(0);
	if (write(waiter_of(ep)->wake, &one, sizeof(one)) != sizeof(one))
		ddekit_panic("cannot wake the IRQ thread");
}

static void irq_close(int ep)
{
	struct waiter *w;

	pthread_mutex_lock(&waiters_lock);
	w = waiter_of(ep);
	close(w->wake);
	close(ep);
	w->ep = w->wake = -1;
	pthread_mutex_unlock(&waiters_lock);
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

const struct ddekit_backend *ddekit_uio_backend(const int *fds)
{
	if (fds[0] < 0 || fds[1] < 0)
		return NULL;
	uio.irq = fds[0];
	uio.config = fds[1];
	for (int i = 0; i < DDEKIT_UIO_FDS - 2; i++)
		uio.bar[i] = fds[i + 2];
	return &backend;
}
