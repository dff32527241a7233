// SPDX-License-Identifier: GPL-2.0
/*
 * Power management of the process's device as far as the driver sees it:
 * runtime PM, wake-up, CPU latency QoS and the system-sleep flags. The
 * device never suspends: system sleep belongs to the host, and runtime PM
 * is disabled for it (power.disable_depth 1, status active), the state
 * drivers/base/power/runtime.c answers for as below. Nothing here touches
 * the device; what the kernel would do is a no-op for a device that cannot
 * suspend.
 *
 * Stands in for Linux's drivers/base/power/runtime.c,
 * drivers/base/power/wakeup.c and kernel/power/qos.c.
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/pm_runtime.h>
#include <linux/pm_qos.h>
#include <linux/pm_wakeup.h>
#include <linux/suspend.h>

#include "internal.h"

/* From pci.c when the pci_dev is built: active, with runtime PM disabled. */
void us_pm_init(struct device *dev)
{
	spin_lock_init(&dev->power.lock);
	atomic_set(&dev->power.usage_count, 0);
	dev->power.disable_depth = 1;
	dev->power.runtime_status = RPM_ACTIVE;
	dev->power.last_status = RPM_ACTIVE;
}

/* ---- runtime PM ---------------------------------------------------------- */

/* Why the device may not be suspended now (always, here: runtime PM is disabled). */
static int suspend_refused(struct device *dev)
{
	if (dev->power.runtime_error)
		return -EINVAL;
	if (dev->power.disable_depth > 0)
		return -EACCES;
	return -EAGAIN;
}

/* pm_runtime_put*() and pm_runtime_idle(): drop a use; with none left, an idle check that refuses. */
int __pm_runtime_idle(struct device *dev, int rpmflags)
{
	if ((rpmflags & RPM_GET_PUT) && !atomic_dec_and_test(&dev->power.usage_count))
		return 0;
	return suspend_refused(dev);
}
EXPORT_SYMBOL_GPL(__pm_runtime_idle);

/* pm_runtime_get*() and pm_runtime_resume(): the device is already active (1). */
int __pm_runtime_resume(struct device *dev, int rpmflags)
{
	if (rpmflags & RPM_GET_PUT)
		atomic_inc(&dev->power.usage_count);
	if (dev->power.runtime_error)
		return -EINVAL;
	return dev->power.runtime_status == RPM_ACTIVE ? 1 : -EACCES;
}
EXPORT_SYMBOL_GPL(__pm_runtime_resume);

int pm_schedule_suspend(struct device *dev, unsigned int delay)
{
	return suspend_refused(dev);
}
EXPORT_SYMBOL_GPL(pm_schedule_suspend);

/*
 * Whether the device can signal wake-up (PME) from a runtime-suspended
 * state: that would be the reason to allow runtime suspend, and the PME
 * path goes through the host's root port. No.
 */
bool pci_dev_run_wake(struct pci_dev *dev)
{
	return false;
}
EXPORT_SYMBOL_GPL(pci_dev_run_wake);

/* ---- wake-up and system sleep --------------------------------------------- */

/* Wake-up from system sleep is the host's platform policy (as pci.c's device_set_wakeup_enable). */
int device_wakeup_enable(struct device *dev)
{
	return 0;
}
EXPORT_SYMBOL_GPL(device_wakeup_enable);

/* How the last system suspend was done: there is none in a driver process. */
unsigned int pm_suspend_global_flags;
EXPORT_SYMBOL_GPL(pm_suspend_global_flags);

/* ---- CPU latency QoS --------------------------------------------------------- */

/*
 * A driver's bound on CPU wake-up latency constrains the cpuidle governor
 * of the machine, which is the host's: the request is kept (so that
 * updating and removing it behave, and misuse warns, as in the kernel)
 * but constrains nothing.
 */
static struct pm_qos_constraints cpu_latency_constraints;

static bool request_active(struct pm_qos_request *req)
{
	return req->qos == &cpu_latency_constraints;
}

void cpu_latency_qos_add_request(struct pm_qos_request *req, s32 value)
{
	if (!req)
		return;
	if (WARN(request_active(req), "%s called for an already added request\n", __func__))
		return;
	req->qos = &cpu_latency_constraints;
	req->node.prio = value;
}
EXPORT_SYMBOL_GPL(cpu_latency_qos_add_request);

void cpu_latency_qos_update_request(struct pm_qos_request *req, s32 new_value)
{
	if (!req)
		return;
	if (WARN(!request_active(req), "%s called for an unknown request\n", __func__))
		return;
	req->node.prio = new_value;
}
EXPORT_SYMBOL_GPL(cpu_latency_qos_update_request);

void cpu_latency_qos_remove_request(struct pm_qos_request *req)
{
	if (!req)
		return;
	if (WARN(!request_active(req), "%s called for an unknown request\n", __func__))
		return;
	memset(req, 0, sizeof(*req));
}
EXPORT_SYMBOL_GPL(cpu_latency_qos_remove_request);
