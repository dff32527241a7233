// SPDX-License-Identifier: GPL-2.0
/*
 * Copies across the user/kernel boundary, for a driver's ioctl handlers
 * (SIOCSHWTSTAMP, SIOCGMIIREG, ...). A driver process has one address
 * space: the "user" buffer is the runtime's own, handed in by whoever
 * made the request, so the copy is a copy. Like the kernel's, each returns
 * the number of bytes it could not copy (none).
 *
 * Stands in for Linux's lib/usercopy.c.
 */
#include <linux/module.h>
#include <linux/uaccess.h>

#include "internal.h"

unsigned long _copy_from_user(void *to, const void __user *from, unsigned long n)
{
	memcpy(to, (const void __force *)from, n);
	return 0;
}
EXPORT_SYMBOL(_copy_from_user);

unsigned long _copy_to_user(void __user *to, const void *from, unsigned long n)
{
	memcpy((void __force *)to, from, n);
	return 0;
}
EXPORT_SYMBOL(_copy_to_user);
