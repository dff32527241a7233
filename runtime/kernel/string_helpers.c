// SPDX-License-Identifier: GPL-2.0
/*
 * String helpers block drivers use for their messages and sysfs
 * attributes: sizes in human units, matching a written value against a
 * list, and a show()'s output into its page.
 *
 * Stands in for lib/string_helpers.c (string_get_size()), lib/string.c
 * (__sysfs_match_string()) and fs/sysfs/file.c (sysfs_emit()).
 */
#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/string.h>
#include <linux/string_helpers.h>
#include <linux/sysfs.h>

#include "internal.h"

/*
 * size * blk_size bytes with three significant digits, as Linux prints
 * them ("8.00 MiB", "1.07 GB"): only ever a log message here.
 */
void string_get_size(u64 size, u64 blk_size, const enum string_size_units units, char *buf,
		     int len)
{
	static const char *const units_10[] = { "B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB" };
	static const char *const units_2[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB" };
	const char *const *names = units == STRING_UNITS_10 ? units_10 : units_2;
	unsigned int divisor = units == STRING_UNITS_10 ? 1000 : 1024, i = 0;
	u64 whole, rem = 0, frac, bytes;

	/* Scale whichever factor allows first, so that the product fits 64 bits. */
	while (blk_size >= divisor && !(blk_size % divisor) && i < ARRAY_SIZE(units_10) - 1) {
		blk_size /= divisor;
		i++;
	}
	while (blk_size && size > U64_MAX / blk_size && i < ARRAY_SIZE(units_10) - 1) {
		size /= divisor;
		i++;
	}
	bytes = size * blk_size;
	whole = bytes;
	while (whole >= divisor && i < ARRAY_SIZE(units_10) - 1) {
		rem = whole % divisor;
		whole /= divisor;
		i++;
	}
	frac = rem * 100 / divisor;
	if (!i)
		snprintf(buf, len, "%llu %s", whole, names[i]);
	else if (whole >= 100)
		snprintf(buf, len, "%llu %s", whole, names[i]);
	else if (whole >= 10)
		snprintf(buf, len, "%llu.%llu %s", whole, frac / 10, names[i]);
	else
		snprintf(buf, len, "%llu.%02llu %s", whole, frac, names[i]);
}
EXPORT_SYMBOL(string_get_size);

/* sysfs_streq(): equal, a trailing newline on either side aside. */
static bool streq_newline(const char *a, const char *b)
{
	while (*a && *a == *b) {
		a++;
		b++;
	}
	if (*a == *b)
		return true;
	if (*a == '\n' && !a[1] && !*b)
		return true;
	return *b == '\n' && !b[1] && !*a;
}

int __sysfs_match_string(const char * const *array, size_t n, const char *str)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (!array[i])
			break;
		if (streq_newline(array[i], str))
			return i;
	}
	return -EINVAL;
}
EXPORT_SYMBOL(__sysfs_match_string);

int sysfs_emit(char *buf, const char *fmt, ...)
{
	va_list args;
	int len;

	if (WARN(!buf || offset_in_page(buf), "invalid sysfs_emit: buf:%p\n", buf))
		return 0;
	va_start(args, fmt);
	len = vscnprintf(buf, PAGE_SIZE, fmt, args);
	va_end(args);
	return len;
}
EXPORT_SYMBOL_GPL(sysfs_emit);
