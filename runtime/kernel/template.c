// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel half's part of a post-probe template (docs/design.md §8;
 * the libc half is driver/template.c). A restart that probes again costs
 * the driver's whole probe (e1000: half a second under TCG). Instead, the
 * process that probed stops here, right after probe, as a template: its
 * own threads end so that it is a single thread, which can be forked
 * safely, and each fork becomes a driver process that starts its threads
 * again and brings the reset device back through the driver's own resume
 * callback -- the path the kernel takes after suspend, which reinitialises
 * the hardware without probing it (as FGFT built device checkpoints from
 * power-management code).
 *
 * Stands in for no Linux file: it is the runtime's own.
 */
#include <linux/module.h>
#include <linux/netdevice.h>

#include "internal.h"

/* How long the runtime's threads get to reach the top of their loops. */
#define PARK_TIMEOUT_NS	(2 * NSEC_PER_SEC)

/*
 * Ends the softirq and workqueue threads. Refused (and nothing stopped)
 * when the state is not one a fresh process can start from: the driver
 * holds its interrupt, its net_device is open, or it has no resume
 * callback to bring a reset device back. Or it has MSI or MSI-X vectors
 * enabled (e1000e does at probe): the daemon's stop takes them from the
 * device, while the driver's state says they are there, and a driver whose
 * resume enables them again (e1000e's does, after its suspend disabled
 * them) would find them enabled -- a resume no kernel would run it into
 * (docs/design.md §13).
 */
int us_template_park(void)
{
	struct net_device *dev;
	int err = 0, softirq, worker;

	us_cpu_enter();
	dev = us_first_netdev();
	if (!dev)
		err = -ENODEV;
	else if (netif_running(dev) || us_irq_held() || us_msi_enabled())
		err = -EBUSY;
	else if (!us_pci_can_resume())
		err = -EOPNOTSUPP;
	if (!err) {
		us_pci_save_for_resume();
		us_softirq_park();
		us_workqueue_park();
	}
	us_cpu_leave();
	if (err)
		return err;
	softirq = us_softirq_join(PARK_TIMEOUT_NS);
	worker = us_workqueue_join(PARK_TIMEOUT_NS);
	if (!softirq && !worker)
		return 0;
	/* A thread busy for seconds: no template; the process goes on driving. */
	us_cpu_enter();
	if (!softirq)
		us_softirq_start();
	if (!worker)
		us_workqueue_start();
	us_cpu_leave();
	return softirq ? softirq : worker;
}
EXPORT_SYMBOL_GPL(us_template_park);

/*
 * In a process forked from the template: fresh runtime threads, the device
 * resumed from its reset, and REGISTERED for the host. The net_device is
 * registered and not open, as it was when the template was taken.
 */
int us_template_resume(void)
{
	int err;

	us_cpu_enter();
	us_softirq_start();
	us_workqueue_start();
	err = us_pci_resume();
	if (!err)
		us_net_announce();
	us_cpu_leave();
	return err;
}
EXPORT_SYMBOL_GPL(us_template_resume);

void us_template_used_memory(unsigned long *offset, unsigned long *len)
{
	us_cpu_enter();
	us_mem_used_extent(offset, len);
	us_cpu_leave();
}
EXPORT_SYMBOL_GPL(us_template_used_memory);
