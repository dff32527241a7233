// SPDX-License-Identifier: GPL-2.0
/*
 * PTP hardware clocks: not provided. A PHC is a character device
 * (/dev/ptpN) and a clock id for clock_gettime() in the kernel that owns
 * the device; a driver process has neither to offer the host yet. So these
 * behave as in a kernel built without CONFIG_PTP_1588_CLOCK: registering
 * gives NULL ("no clock", which drivers accept and carry on without one:
 * e1000e keeps adapter->ptp_clock NULL and reports no PHC index), and the
 * calls about a clock have nothing to act on.
 *
 * Stands in for Linux's drivers/ptp/ptp_clock.c.
 */
#include <linux/module.h>
#include <linux/ptp_clock_kernel.h>

#include "internal.h"

struct ptp_clock *ptp_clock_register(struct ptp_clock_info *info, struct device *parent)
{
	return NULL;
}
EXPORT_SYMBOL(ptp_clock_register);

int ptp_clock_unregister(struct ptp_clock *ptp)
{
	return 0;
}
EXPORT_SYMBOL(ptp_clock_unregister);

int ptp_clock_index(struct ptp_clock *ptp)
{
	return -1;
}
EXPORT_SYMBOL(ptp_clock_index);
