/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared by the files of the kernel half: the CPU model (docs/design.md
 * §6), memory, and the hooks one subsystem needs from another.
 */
#ifndef UNDERSTUDY_KERNEL_INTERNAL_H
#define UNDERSTUDY_KERNEL_INTERNAL_H

#include <linux/types.h>
#include <linux/sched.h>
#include <linux/netdev_features.h>

#include "../ddekit/ddekit.h"
#include "kernel_api.h"

/*
 * A thread that runs kernel code. The one kernel "CPU" is a lock; whoever
 * holds it runs as its own task with its own preempt count, which are
 * installed in the per-cpu block when the thread takes the CPU and saved
 * when it gives it up (us_cpu_leave or while it waits in us_wait).
 */
struct us_task {
	struct task_struct task;	/* first: current == &us_task->task */
	int saved_preempt_count;
	void *waiter;			/* its thread, for us_wake_task() */
};

/* us_cpu_enter() and us_cpu_leave() take and give up the CPU (kernel_api.h). */
/*
 * Gives up the CPU until something changes (us_wake) or until deadline_ns
 * (CLOCK_MONOTONIC, 0: none); the caller re-checks its condition.
 */
void us_wait(u64 deadline_ns);
/* Wakes every waiter: for a change anyone might be waiting for. */
void us_wake(void);
/* Wakes one task (NULL: none), for a change only it waits for. */
void us_wake_task(struct task_struct *task);
/* Refreshes jiffies from the monotonic clock. */
void us_update_jiffies(void);
u64 us_jiffies_to_deadline(unsigned long expires);
/*
 * Ends the process with a message. A macro around a function objtool does
 * not know as noreturn, with the kernel's own unreachable() annotation.
 */
void us_panic_print(const char *fmt, ...) __printf(1, 2) __cold;
#define us_panic(fmt, ...) do {				\
	us_panic_print(fmt, ##__VA_ARGS__);		\
	unreachable();					\
} while (0)
/* For entry points that exist only behind a static key we never enable. */
#define us_unreachable() us_panic("%s: reached, but the runtime never enables the path to it", __func__)

/*
 * What the checker cannot see through a rewritten module's probes
 * (docs/checking.md, "The trace"): allocations, DMA mappings, locks,
 * contexts. A no-op unless the driver runs under the checker. `site` is
 * the caller in the module, _RET_IP_ of the function the driver called.
 */
static __always_inline void us_trace(unsigned int kind, unsigned long site, const void *addr,
				     unsigned long arg0, unsigned long arg1)
{
	if (unlikely(ddekit_checking))
		ddekit_trace(kind, site, (unsigned long)addr, arg0, arg1);
}

/* A DMA event's kind with the DMA API's direction in its flags (trace-events.h, US_EVF_DIR_SHIFT). */
#define US_TRACE_DMA(kind, dir)	((kind) | ((unsigned int)(dir) & 3) << (16 + US_EVF_DIR_SHIFT))

/* mem.c: every allocation lives in the IOMMU-mapped DMA region. */
int us_mem_init(void);
void *us_alloc(size_t size, gfp_t flags);
/*
 * An allocation the checker counts as site's (a module's call site): for
 * memory the runtime allocates on a driver's behalf, such as devm_kmalloc's.
 */
void *us_alloc_for(size_t size, gfp_t flags, unsigned long site);
void us_free(const void *p);
size_t us_alloc_size(const void *p);
bool us_in_dma_region(const void *p, size_t len);
bool us_in_pool(const void *p);
dma_addr_t us_dma_addr(phys_addr_t phys, size_t len);

/*
 * timer.c / softirq and workqueue.c: the runtime's own threads. park asks
 * the thread to end at the top of its loop (called with the CPU), join
 * waits for it (called without the CPU); start begins a fresh one.
 */
void us_softirq_start(void);
void us_softirq_park(void);
int us_softirq_join(u64 timeout_ns);
void us_raise_net_rx(void);
void us_softirq_on_irq_exit(void);

/* napi.c: one NET_RX round; true if a budget was used up (poll again soon). */
bool us_net_rx_action(void);
struct sk_buff;
/* gro.c: a received frame goes to the host, merged until the round's flush. */
void us_gro_receive(struct sk_buff *skb);
void us_gro_flush(void);

void us_workqueue_start(void);
void us_workqueue_park(void);
int us_workqueue_join(u64 timeout_ns);

/* cpuinfo.c: boot_cpu_data from CPUID. */
void us_cpuinfo_init(void);

/* pci.c */
struct pci_dev;
int us_pci_init(void);
/* pcie.c: the PCI Express capability's offset and flags, its lock. */
void us_pcie_init(struct pci_dev *dev);
/* pm.c: the device's runtime PM state (active, runtime PM disabled). */
struct device;
void us_pm_init(struct device *dev);
/* The process's PCI function (NULL without a device). */
struct pci_dev *us_pci_dev(void);
/*
 * The bound driver's resume callback (dev_pm_ops or legacy pci_driver):
 * whether it has one, and running it as the PM core would after the
 * device was reset (config space is restored by VFIO's reset).
 */
bool us_pci_can_resume(void);
void us_pci_save_for_resume(void);
int us_pci_resume(void);

/* devres.c: the driver detached from dev; returns how many resources were released. */
struct device;
int devres_release_all(struct device *dev);

/*
 * irq.c and msi.c: the irq numbers a driver gets. The INTx line is
 * pci_dev.irq; message-signalled vector v (its MSI-X table entry, or its
 * MSI message) is US_MSI_FIRST_IRQ + v.
 */
#define US_INTX_IRQ		16
#define US_MSI_FIRST_IRQ	32
#define US_NR_IRQS		(US_MSI_FIRST_IRQ + DDEKIT_IRQ_MAX_VECTORS)
/* irq.c: whether the driver holds any interrupt line or vector. */
bool us_irq_held(void);
bool us_irq_serving(void);
void us_irq_wait_serving(void);
/* irq.c: whether a handler is requested on a message-signalled vector. */
bool us_irq_vectors_requested(void);
/*
 * msi.c: the enabled vector irq stands for and its source (DDEKIT_IRQ_MSI
 * or _MSIX), or -EINVAL; whether any vector is enabled.
 */
int us_msi_vector(unsigned int irq, unsigned int *vector);
bool us_msi_enabled(void);

/*
 * dma.c: coherent memory, traced as site's (the module's caller) for the
 * checker's DMA events, whoever allocates or frees it (dmam_* in devres.c).
 */
void *us_dma_alloc_coherent(size_t size, dma_addr_t *dma_handle, gfp_t flag, unsigned long site);
void us_dma_free_coherent(size_t size, void *cpu_addr, unsigned long site);

/* mem.c: the part of the arena the allocator has ever handed out. */
void us_mem_used_extent(unsigned long *offset, unsigned long *len);

/* netdev.c */
struct net_device;
struct sk_buff;
struct net_device *us_first_netdev(void);
struct netdev_queue;
/* Waits (the TX thread) until txq may be used or the link is gone. */
void us_net_wait_tx_queue(struct net_device *dev, struct netdev_queue *txq);
void us_net_wake_tx_waiter(void);
int us_netdev_stop(struct net_device *dev);
/* Reports the registered net_device to the host again (REGISTERED, carrier). */
void us_net_announce(void);
/* skb.c: an skb around a tx frame at the start of its buffer, and freeing one unsent. */
struct sk_buff *us_build_tx_skb(void *buffer, unsigned int len, unsigned int room);
void us_free_unsent_skb(struct sk_buff *skb);

/* gso.c: whether features cover the checksum a CHECKSUM_PARTIAL skb leaves to the device. */
bool us_csum_covered(netdev_features_t features, const struct sk_buff *skb);

#endif /* UNDERSTUDY_KERNEL_INTERNAL_H */
