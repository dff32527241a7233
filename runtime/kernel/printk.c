// SPDX-License-Identifier: GPL-2.0
/*
 * printk and its relatives. The formatter understands the conversions
 * kernel code uses, including the %p extensions NIC drivers print with
 * (%pM, %pI4, %pS, %pV, %pa, %pad, %ph, %pR, %px); unknown %p extensions
 * print the pointer. Records go to ddekit_log() with their KERN_* level.
 *
 * Stands in for Linux's kernel/printk/printk.c, lib/vsprintf.c and
 * lib/hexdump.c.
 */
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/printk.h>
#include <linux/device.h>
#include <linux/netdevice.h>
#include <linux/ratelimit.h>
#include <linux/ioport.h>
#include <linux/dynamic_debug.h>

#include "internal.h"

struct out {
	char *buf;
	size_t size;
	size_t len;		/* what would have been written */
};

static void put(struct out *o, char c)
{
	if (o->len + 1 < o->size)
		o->buf[o->len] = c;
	o->len++;
}

static void puts_n(struct out *o, const char *s, size_t n)
{
	while (n--)
		put(o, *s++);
}

struct spec {
	bool left, zero, plus, space, alt;
	int width;
	int precision;		/* -1: none */
};

static void pad(struct out *o, int n, char c)
{
	while (n-- > 0)
		put(o, c);
}

static void emit_str(struct out *o, const char *s, const struct spec *sp)
{
	size_t n;

	if (!s)
		s = "(null)";
	n = sp->precision >= 0 ? strnlen(s, sp->precision) : strlen(s);
	if (!sp->left)
		pad(o, sp->width - (int)n, ' ');
	puts_n(o, s, n);
	if (sp->left)
		pad(o, sp->width - (int)n, ' ');
}

static void emit_num(struct out *o, unsigned long long v, bool negative,
		     unsigned int base, bool upper, const struct spec *sp)
{
	const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
	char tmp[24], sign = 0;
	const char *prefix = "";
	int n = 0, zeros, total;

	do {
		tmp[n++] = digits[v % base];
		v /= base;
	} while (v);
	if (negative)
		sign = '-';
	else if (sp->plus)
		sign = '+';
	else if (sp->space)
		sign = ' ';
	if (sp->alt && base == 16)
		prefix = upper ? "0X" : "0x";
	else if (sp->alt && base == 8 && tmp[n - 1] != '0')
		prefix = "0";
	zeros = sp->precision > n ? sp->precision - n : 0;
	total = n + zeros + !!sign + (int)strlen(prefix);
	if (sp->zero && !sp->left && sp->precision < 0 && sp->width > total) {
		zeros += sp->width - total;
		total = sp->width;
	}
	if (!sp->left)
		pad(o, sp->width - total, ' ');
	if (sign)
		put(o, sign);
	puts_n(o, prefix, strlen(prefix));
	pad(o, zeros, '0');
	while (n)
		put(o, tmp[--n]);
	if (sp->left)
		pad(o, sp->width - total, ' ');
}

static void emit_hex_bytes(struct out *o, const u8 *p, int n, char sep)
{
	for (int i = 0; i < n; i++) {
		if (i && sep)
			put(o, sep);
		put(o, hex_asc_hi(p[i]));
		put(o, hex_asc_lo(p[i]));
	}
}

static void emit_ptr_hex(struct out *o, unsigned long long v)
{
	struct spec sp = { .zero = true, .width = 16, .precision = -1 };

	emit_num(o, v, false, 16, false, &sp);
}

/* %p with an extension; returns how many extension characters it used. */
static int emit_pointer(struct out *o, const char *ext, void *p, const struct spec *sp)
{
	char buf[128];
	struct spec plain = { .precision = -1 };

	switch (ext[0]) {
	case 'M':
	case 'm':
		if (!p)
			break;
		emit_hex_bytes(o, p, 6, ext[0] == 'm' ? 0 : (ext[1] == 'F' ? '-' : ':'));
		return 1 + (ext[1] == 'F' || ext[1] == 'R');
	case 'I':
	case 'i':
		if (!p)
			break;
		if (ext[1] == '4') {
			const u8 *a = p;

			for (int i = 0; i < 4; i++) {
				if (i)
					put(o, '.');
				emit_num(o, a[i], false, 10, false, &plain);
			}
			return 2;
		}
		if (ext[1] == '6') {
			emit_hex_bytes(o, p, 16, ':');
			return 2 + (ext[2] == 'c');
		}
		break;
	case 'S':
	case 's':
	case 'B':
		ddekit_symbolize((unsigned long)p, buf, sizeof(buf));
		emit_str(o, buf, &plain);
		return 1 + (ext[1] == 'R' || ext[1] == 'b');
	case 'V': {
		struct va_format *vaf = p;
		va_list va;

		va_copy(va, *vaf->va);
		o->len += vsnprintf(o->buf + min(o->len, o->size),
				    o->size > o->len ? o->size - o->len : 0, vaf->fmt, va);
		va_end(va);
		return 1;
	}
	case 'a':
		if (!p)
			break;
		put(o, '0');
		put(o, 'x');
		if (ext[1] == 'd') {
			emit_ptr_hex(o, *(dma_addr_t *)p);
			return 2;
		}
		emit_ptr_hex(o, *(phys_addr_t *)p);
		return 1 + (ext[1] == 'p');
	case 'h': {
		char sep = ext[1] == 'C' ? ':' : ext[1] == 'D' ? '-' : ext[1] == 'N' ? 0 : ' ';

		if (p)
			emit_hex_bytes(o, p, sp->width > 0 ? min(sp->width, 64) : 1, sep);
		return 1 + (sep != ' ');
	}
	case 'R':
	case 'r': {
		const struct resource *r = p;

		if (!r)
			break;
		puts_n(o, r->flags & IORESOURCE_IO ? "[io  0x" : "[mem 0x", 7);
		emit_ptr_hex(o, r->start);
		puts_n(o, "-0x", 3);
		emit_ptr_hex(o, r->end);
		put(o, ']');
		return 1;
	}
	case 'e': {
		long err = PTR_ERR(p);

		emit_num(o, err < 0 ? -err : err, err < 0, 10, false, &plain);
		return 1;
	}
	case 'x':
		emit_ptr_hex(o, (unsigned long)p);
		return 1;
	}
	if (!p) {
		emit_str(o, "(null)", sp);
		return isalnum(ext[0]) ? 1 : 0;
	}
	emit_ptr_hex(o, (unsigned long)p);
	/* Skip an unknown extension's letters as the kernel does. */
	return isalnum(ext[0]) ? 1 : 0;
}

int vsnprintf(char *buf, size_t size, const char *fmt, va_list args)
{
	struct out o = { .buf = buf, .size = size };

	while (*fmt) {
		struct spec sp = { .precision = -1 };
		int length = 0;		/* 'h' -1, 'H' -2, 'l' 1, 'L' 2, 'z' 3 */
		unsigned long long v;
		bool negative = false;
		unsigned int base = 10;

		if (*fmt != '%') {
			put(&o, *fmt++);
			continue;
		}
		fmt++;
		for (;; fmt++) {
			if (*fmt == '-')
				sp.left = true;
			else if (*fmt == '0')
				sp.zero = true;
			else if (*fmt == '+')
				sp.plus = true;
			else if (*fmt == ' ')
				sp.space = true;
			else if (*fmt == '#')
				sp.alt = true;
			else
				break;
		}
		if (*fmt == '*') {
			sp.width = va_arg(args, int);
			if (sp.width < 0) {
				sp.left = true;
				sp.width = -sp.width;
			}
			fmt++;
		} else {
			while (isdigit(*fmt))
				sp.width = sp.width * 10 + (*fmt++ - '0');
		}
		if (*fmt == '.') {
			fmt++;
			sp.precision = 0;
			if (*fmt == '*') {
				sp.precision = max(va_arg(args, int), -1);
				fmt++;
			} else {
				while (isdigit(*fmt))
					sp.precision = sp.precision * 10 + (*fmt++ - '0');
			}
		}
		for (;; fmt++) {
			if (*fmt == 'h')
				length = length == -1 ? -2 : -1;
			else if (*fmt == 'l')
				length = length == 1 ? 2 : 1;
			else if (*fmt == 'L' || *fmt == 'q')
				length = 2;
			else if (*fmt == 'z' || *fmt == 'Z' || *fmt == 't' || *fmt == 'j')
				length = 3;
			else
				break;
		}
		switch (*fmt) {
		case '%':
			put(&o, '%');
			fmt++;
			continue;
		case 'c': {
			char c = (char)va_arg(args, int);

			if (!sp.left)
				pad(&o, sp.width - 1, ' ');
			put(&o, c);
			if (sp.left)
				pad(&o, sp.width - 1, ' ');
			fmt++;
			continue;
		}
		case 's':
			emit_str(&o, va_arg(args, const char *), &sp);
			fmt++;
			continue;
		case 'p':
			fmt++;
			fmt += emit_pointer(&o, fmt, va_arg(args, void *), &sp);
			continue;
		case 'd':
		case 'i': {
			long long s;

			if (length >= 2)
				s = va_arg(args, long long);
			else if (length >= 1)
				s = va_arg(args, long);
			else
				s = va_arg(args, int);
			if (length == -1)
				s = (short)s;
			else if (length == -2)
				s = (signed char)s;
			negative = s < 0;
			v = negative ? -(unsigned long long)s : s;
			emit_num(&o, v, negative, 10, false, &sp);
			fmt++;
			continue;
		}
		case 'o':
			base = 8;
			break;
		case 'x':
		case 'X':
			base = 16;
			break;
		case 'u':
			break;
		default:
			/* An unknown conversion: print it verbatim, like the kernel. */
			put(&o, '%');
			if (*fmt)
				put(&o, *fmt++);
			continue;
		}
		if (length >= 2)
			v = va_arg(args, unsigned long long);
		else if (length >= 1)
			v = va_arg(args, unsigned long);
		else
			v = va_arg(args, unsigned int);
		if (length == -1)
			v = (unsigned short)v;
		else if (length == -2)
			v = (unsigned char)v;
		emit_num(&o, v, false, base, *fmt == 'X', &sp);
		fmt++;
	}
	if (size)
		buf[min(o.len, size - 1)] = '\0';
	return o.len;
}
EXPORT_SYMBOL(vsnprintf);

int snprintf(char *buf, size_t size, const char *fmt, ...)
{
	va_list args;
	int n;

	va_start(args, fmt);
	n = vsnprintf(buf, size, fmt, args);
	va_end(args);
	return n;
}
EXPORT_SYMBOL(snprintf);

int vscnprintf(char *buf, size_t size, const char *fmt, va_list args)
{
	int n = vsnprintf(buf, size, fmt, args);

	if (likely(n < size))
		return n;
	return size ? size - 1 : 0;
}
EXPORT_SYMBOL(vscnprintf);

int scnprintf(char *buf, size_t size, const char *fmt, ...)
{
	va_list args;
	int n;

	va_start(args, fmt);
	n = vscnprintf(buf, size, fmt, args);
	va_end(args);
	return n;
}
EXPORT_SYMBOL(scnprintf);

int sprintf(char *buf, const char *fmt, ...)
{
	va_list args;
	int n;

	va_start(args, fmt);
	n = vsnprintf(buf, INT_MAX, fmt, args);
	va_end(args);
	return n;
}
EXPORT_SYMBOL(sprintf);

/* ---- printk ------------------------------------------------------------- */

static int log_record(int default_level, const char *prefix, const char *fmt, va_list args)
{
	static char record[1024];
	int level = default_level, n;

	while (fmt[0] == KERN_SOH_ASCII && fmt[1]) {
		if (fmt[1] >= '0' && fmt[1] <= '7')
			level = fmt[1] - '0';
		fmt += 2;
	}
	n = scnprintf(record, sizeof(record), "%s", prefix);
	n += vscnprintf(record + n, sizeof(record) - n, fmt, args);
	ddekit_log(level, record, n);
	return n;
}

int vprintk(const char *fmt, va_list args)
{
	/* Records without a level get the kernel's default message level. */
	return log_record(CONFIG_MESSAGE_LOGLEVEL_DEFAULT, "", fmt, args);
}
EXPORT_SYMBOL(vprintk);

int _printk(const char *fmt, ...)
{
	va_list args;
	int n;

	va_start(args, fmt);
	n = vprintk(fmt, args);
	va_end(args);
	return n;
}
EXPORT_SYMBOL(_printk);

void __warn_printk(const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	log_record(4, "WARNING: ", fmt, args);
	va_end(args);
}
EXPORT_SYMBOL(__warn_printk);

static void dev_log(int level, const struct device *dev, const char *fmt, va_list args)
{
	char prefix[96];

	if (dev)
		scnprintf(prefix, sizeof(prefix), "%s %s: ", dev_driver_string(dev), dev_name(dev));
	else
		scnprintf(prefix, sizeof(prefix), "(NULL device *): ");
	log_record(level, prefix, fmt, args);
}

#define DEFINE_DEV_LOG(fn, level)					\
void fn(const struct device *dev, const char *fmt, ...)		\
{									\
	va_list args;							\
	va_start(args, fmt);						\
	dev_log(level, dev, fmt, args);					\
	va_end(args);							\
}									\
EXPORT_SYMBOL(fn)

DEFINE_DEV_LOG(_dev_emerg, 0);
DEFINE_DEV_LOG(_dev_alert, 1);
DEFINE_DEV_LOG(_dev_crit, 2);
DEFINE_DEV_LOG(_dev_err, 3);
DEFINE_DEV_LOG(_dev_warn, 4);
DEFINE_DEV_LOG(_dev_notice, 5);
DEFINE_DEV_LOG(_dev_info, 6);

void _dev_printk(const char *level, const struct device *dev, const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	dev_log(printk_get_level(level) - '0', dev, fmt, args);
	va_end(args);
}
EXPORT_SYMBOL(_dev_printk);

static void netdev_log(int level, const struct net_device *dev, const char *fmt, va_list args)
{
	char prefix[128];

	if (dev && dev->dev.parent)
		scnprintf(prefix, sizeof(prefix), "%s %s %s: ", dev_driver_string(dev->dev.parent),
			  dev_name(dev->dev.parent), netdev_name(dev));
	else if (dev)
		scnprintf(prefix, sizeof(prefix), "%s: ", netdev_name(dev));
	else
		scnprintf(prefix, sizeof(prefix), "(NULL net_device): ");
	log_record(level, prefix, fmt, args);
}

#define DEFINE_NETDEV_LOG(fn, level)					\
void fn(const struct net_device *dev, const char *fmt, ...)		\
{									\
	va_list args;							\
	va_start(args, fmt);						\
	netdev_log(level, dev, fmt, args);				\
	va_end(args);							\
}									\
EXPORT_SYMBOL(fn)

DEFINE_NETDEV_LOG(netdev_emerg, 0);
DEFINE_NETDEV_LOG(netdev_alert, 1);
DEFINE_NETDEV_LOG(netdev_crit, 2);
DEFINE_NETDEV_LOG(netdev_err, 3);
DEFINE_NETDEV_LOG(netdev_warn, 4);
DEFINE_NETDEV_LOG(netdev_notice, 5);
DEFINE_NETDEV_LOG(netdev_info, 6);

void netdev_printk(const char *level, const struct net_device *dev, const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	netdev_log(printk_get_level(level) - '0', dev, fmt, args);
	va_end(args);
}
EXPORT_SYMBOL(netdev_printk);

/* Reached only for pr_debug sites someone enabled (their static key). */
void __dynamic_netdev_dbg(struct _ddebug *descriptor, const struct net_device *dev,
			  const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	netdev_log(7, dev, fmt, args);
	va_end(args);
}
EXPORT_SYMBOL(__dynamic_netdev_dbg);

void __dynamic_dev_dbg(struct _ddebug *descriptor, const struct device *dev,
		       const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	dev_log(7, dev, fmt, args);
	va_end(args);
}
EXPORT_SYMBOL(__dynamic_dev_dbg);

void __dynamic_pr_debug(struct _ddebug *descriptor, const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	log_record(7, "", fmt, args);
	va_end(args);
}
EXPORT_SYMBOL(__dynamic_pr_debug);

void print_hex_dump(const char *level, const char *prefix_str, int prefix_type,
		    int rowsize, int groupsize, const void *buf, size_t len, bool ascii)
{
	char line[200];
	const u8 *p = buf;

	if (rowsize != 16 && rowsize != 32)
		rowsize = 16;
	for (size_t i = 0; i < len; i += rowsize) {
		size_t n = min_t(size_t, rowsize, len - i);
		int pos;

		if (prefix_type == DUMP_PREFIX_ADDRESS)
			pos = scnprintf(line, sizeof(line), "%s%px: ", prefix_str, p + i);
		else if (prefix_type == DUMP_PREFIX_OFFSET)
			pos = scnprintf(line, sizeof(line), "%s%.8zx: ", prefix_str, i);
		else
			pos = scnprintf(line, sizeof(line), "%s", prefix_str);
		for (size_t j = 0; j < n; j++)
			pos += scnprintf(line + pos, sizeof(line) - pos, "%02x ", p[i + j]);
		if (ascii)
			for (size_t j = 0; j < n; j++)
				pos += scnprintf(line + pos, sizeof(line) - pos, "%c",
						 isprint(p[i + j]) ? p[i + j] : '.');
		ddekit_log(printk_get_level(level) ? printk_get_level(level) - '0' : 7, line, pos);
	}
}
EXPORT_SYMBOL(print_hex_dump);

/* 10 messages per 5 seconds, the kernel's net.core.message_{burst,cost}. */
static DEFINE_RATELIMIT_STATE(net_ratelimit_state, 5 * HZ, 10);

int net_ratelimit(void)
{
	unsigned long now = jiffies;
	struct ratelimit_state *rs = &net_ratelimit_state;

	if (!rs->begin || time_is_before_jiffies(rs->begin + rs->interval)) {
		rs->begin = now;
		rs->printed = 0;
	}
	if (rs->printed >= rs->burst)
		return 0;
	rs->printed++;
	return 1;
}
EXPORT_SYMBOL(net_ratelimit);
