// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel's small library functions that modules call out of line:
 * string and memory operations, bit searches, checksums, module
 * parameter operations.
 *
 * Stands in for Linux's lib/string.c, lib/find_bit.c,
 * arch/x86/lib/csum-partial_64.c, lib/crc32.c, lib/kstrtox.c and
 * kernel/params.c.
 */
/* These are the out-of-line string functions fortify-string.h wraps. */
#define __NO_FORTIFY
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/string.h>
#include <linux/bitops.h>
#include <linux/find.h>
#include <linux/moduleparam.h>
#include <linux/crc32.h>
#include <linux/crc32poly.h>
#include <linux/bitrev.h>
#include <net/checksum.h>
#include <net/ip6_checksum.h>
#include <linux/ctype.h>
#include <linux/list.h>
#include <linux/poison.h>
#include <linux/refcount.h>
#include <linux/scatterlist.h>
#include <asm/unaligned.h>

#include "internal.h"

/*
 * String instructions, not C loops: GCC would turn a copy loop back into a
 * call to memcpy, which is this function. Eight bytes a step, then the
 * rest: the same speed as "rep movsb" on a CPU with fast strings, and eight
 * times faster under QEMU's TCG, which emulates each step of a string
 * instruction on its own (docs/notes/bench-net-history.md, "Sending
 * without TSO"; docs/performance.md §6).
 */
void *memcpy(void *dst, const void *src, size_t n)
{
	void *ret = dst;
	size_t words = n / 8, bytes = n % 8;

	/* the checker sees the copy (what it defines), not the string steps */
	us_trace(US_EV_COPY, _RET_IP_, dst, (unsigned long)src, n);
	asm volatile("rep movsq" : "+D"(dst), "+S"(src), "+c"(words) : : "memory");
	asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(bytes) : : "memory");
	return ret;
}
EXPORT_SYMBOL(memcpy);

void *memset(void *s, int c, size_t n)
{
	void *ret = s;
	size_t words = n / 8, bytes = n % 8;
	u64 pattern = 0x0101010101010101ULL * (u8)c;

	us_trace(US_EV_FILL, _RET_IP_, s, 0, n);
	asm volatile("rep stosq" : "+D"(s), "+c"(words) : "a"(pattern) : "memory");
	asm volatile("rep stosb" : "+D"(s), "+c"(bytes) : "a"(pattern) : "memory");
	return ret;
}
EXPORT_SYMBOL(memset);

void *memmove(void *dst, const void *src, size_t n)
{
	void *ret = dst;

	if (dst <= src || (const char *)src + n <= (char *)dst)
		return memcpy(dst, src, n);
	us_trace(US_EV_COPY, _RET_IP_, dst, (unsigned long)src, n);
	dst = (char *)dst + n - 1;
	src = (const char *)src + n - 1;
	asm volatile("std; rep movsb; cld" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
	return ret;
}
EXPORT_SYMBOL(memmove);

int memcmp(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;

	for (; n; n--, x++, y++)
		if (*x != *y)
			return *x - *y;
	return 0;
}
EXPORT_SYMBOL(memcmp);

void *memchr(const void *s, int c, size_t n)
{
	const unsigned char *p = s;

	for (; n; n--, p++)
		if (*p == (unsigned char)c)
			return (void *)p;
	return NULL;
}
EXPORT_SYMBOL(memchr);

size_t strlen(const char *s)
{
	const char *p = s;

	while (*p)
		p++;
	return p - s;
}
EXPORT_SYMBOL(strlen);

size_t strnlen(const char *s, size_t max)
{
	const char *p = s;

	while (max-- && *p)
		p++;
	return p - s;
}
EXPORT_SYMBOL(strnlen);

char *strchr(const char *s, int c)
{
	for (; *s != (char)c; s++)
		if (!*s)
			return NULL;
	return (char *)s;
}
EXPORT_SYMBOL(strchr);

int strcmp(const char *a, const char *b)
{
	for (; *a == *b; a++, b++)
		if (!*a)
			return 0;
	return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
}
EXPORT_SYMBOL(strcmp);

int strncmp(const char *a, const char *b, size_t n)
{
	for (; n; n--, a++, b++) {
		if (*a != *b)
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		if (!*a)
			break;
	}
	return 0;
}
EXPORT_SYMBOL(strncmp);

char *strncpy(char *dst, const char *src, size_t n)
{
	char *d = dst;

	for (; n; n--) {
		*d++ = *src;
		if (*src)
			src++;
	}
	return dst;
}
EXPORT_SYMBOL(strncpy);

ssize_t strscpy(char *dst, const char *src, size_t size)
{
	size_t i;

	if (!size)
		return -E2BIG;
	for (i = 0; i < size; i++) {
		dst[i] = src[i];
		if (!src[i])
			return i;
	}
	dst[size - 1] = '\0';
	return -E2BIG;
}
EXPORT_SYMBOL(strscpy);

size_t strlcpy(char *dst, const char *src, size_t size)
{
	size_t len = strlen(src);

	if (size) {
		size_t n = min(len, size - 1);

		memcpy(dst, src, n);
		dst[n] = '\0';
	}
	return len;
}
EXPORT_SYMBOL(strlcpy);

/* ---- bit searches ------------------------------------------------------- */

static unsigned long find_bit(const unsigned long *addr, unsigned long nbits,
			      unsigned long start, unsigned long invert)
{
	while (start < nbits) {
		unsigned long word = (addr[start / BITS_PER_LONG] ^ invert) >>
				     (start % BITS_PER_LONG);

		if (word)
			return min(nbits, start + __ffs(word));
		start = round_down(start, BITS_PER_LONG) + BITS_PER_LONG;
	}
	return nbits;
}

unsigned long _find_next_bit(const unsigned long *addr, unsigned long nbits,
			     unsigned long start)
{
	return find_bit(addr, nbits, start, 0);
}
EXPORT_SYMBOL(_find_next_bit);

unsigned long _find_next_zero_bit(const unsigned long *addr, unsigned long nbits,
				  unsigned long start)
{
	return find_bit(addr, nbits, start, ~0UL);
}
EXPORT_SYMBOL(_find_next_zero_bit);

unsigned long _find_first_bit(const unsigned long *addr, unsigned long size)
{
	return find_bit(addr, size, 0, 0);
}
EXPORT_SYMBOL(_find_first_bit);

unsigned long _find_first_zero_bit(const unsigned long *addr, unsigned long size)
{
	return find_bit(addr, size, 0, ~0UL);
}
EXPORT_SYMBOL(_find_first_zero_bit);

/* ---- checksums ---------------------------------------------------------- */

/*
 * The one's complement sum of 16-bit words, eight bytes at a time: 2^16 is
 * 1 in this arithmetic, so a 64-bit word adds its four 16-bit words, and
 * each carry out of the 64-bit sum (2^64) counts 1. The sum is byte-order
 * blind; a last odd byte is the low byte of its word.
 */
static u64 add_words(u64 sum, const void *buf, int len)
{
	const u8 *p = buf;
	u64 carries = 0, tail = 0;

	for (; len >= 8; len -= 8, p += 8) {
		u64 word = get_unaligned((const u64 *)p);

		sum += word;
		carries += sum < word;
	}
	if (len > 0)
		memcpy(&tail, p, len);
	sum += tail;
	carries += sum < tail;
	/* 2^32 is 1 too: the halves and the carries, which cannot overflow. */
	return (sum & 0xffffffff) + (sum >> 32) + carries;
}

static u32 fold64(u64 sum)
{
	while (sum >> 32)
		sum = (sum & 0xffffffff) + (sum >> 32);
	return sum;
}

__wsum csum_partial(const void *buf, int len, __wsum sum)
{
	return (__force __wsum)fold64(add_words((__force u32)sum, buf, len));
}
EXPORT_SYMBOL(csum_partial);

/* arch/x86/lib/csum-wrappers_64.c: the folded Internet checksum (t10-pi's IP guard). */
__sum16 ip_compute_csum(const void *buff, int len)
{
	return csum_fold(csum_partial(buff, len, 0));
}
EXPORT_SYMBOL(ip_compute_csum);

__sum16 csum_ipv6_magic(const struct in6_addr *saddr, const struct in6_addr *daddr,
			__u32 len, __u8 proto, __wsum csum)
{
	u64 sum = (__force u32)csum;

	sum = add_words(sum, saddr, sizeof(*saddr));
	sum = add_words(sum, daddr, sizeof(*daddr));
	sum += (__force u32)htonl(len);
	sum += (__force u32)htonl(proto);
	return csum_fold((__force __wsum)fold64(sum));
}
EXPORT_SYMBOL(csum_ipv6_magic);

u32 __pure crc32_le(u32 crc, unsigned char const *p, size_t len)
{
	while (len--) {
		crc ^= *p++;
		for (int i = 0; i < 8; i++)
			crc = (crc >> 1) ^ (crc & 1 ? CRC32_POLY_LE : 0);
	}
	return crc;
}
EXPORT_SYMBOL(crc32_le);

/* ---- module parameters -------------------------------------------------- */

/*
 * The ops a module's __param entries point to; understudy-driver --param
 * sets parameters through them (us_param_set).
 */
static int parse_ll(const char *s, long long *out)
{
	return kstrtoll(s, 0, out);
}

#define DEFINE_PARAM_OPS(name, type, fmt, lo, hi)				\
int param_set_##name(const char *val, const struct kernel_param *kp)		\
{										\
	long long v;								\
	if (!val || parse_ll(val, &v) || v < (lo) || v > (hi))			\
		return -EINVAL;							\
	*(type *)kp->arg = v;							\
	return 0;								\
}										\
EXPORT_SYMBOL(param_set_##name);						\
int param_get_##name(char *buffer, const struct kernel_param *kp)		\
{										\
	return scnprintf(buffer, PAGE_SIZE, fmt "\n", *(type *)kp->arg);	\
}										\
EXPORT_SYMBOL(param_get_##name);						\
const struct kernel_param_ops param_ops_##name = {				\
	.set = param_set_##name,						\
	.get = param_get_##name,						\
};										\
EXPORT_SYMBOL(param_ops_##name)

DEFINE_PARAM_OPS(int, int, "%d", INT_MIN, INT_MAX);
DEFINE_PARAM_OPS(uint, unsigned int, "%u", 0, UINT_MAX);
DEFINE_PARAM_OPS(ushort, unsigned short, "%hu", 0, USHRT_MAX);

int param_set_bool(const char *val, const struct kernel_param *kp)
{
	return kstrtobool(val ? val : "1", kp->arg);
}
EXPORT_SYMBOL(param_set_bool);

int param_get_bool(char *buffer, const struct kernel_param *kp)
{
	return sprintf(buffer, "%c\n", *(bool *)kp->arg ? 'Y' : 'N');
}
EXPORT_SYMBOL(param_get_bool);

const struct kernel_param_ops param_ops_bool = {
	.flags = KERNEL_PARAM_OPS_FL_NOARG,
	.set = param_set_bool,
	.get = param_get_bool,
};
EXPORT_SYMBOL(param_ops_bool);

static int param_array_set(const char *val, const struct kernel_param *kp)
{
	const struct kparam_array *arr = kp->arr;
	struct kernel_param elem = *kp;
	char buf[64];
	unsigned int n = 0;

	while (*val && n < arr->max) {
		size_t len = strcspn(val, ",");
		int err;

		if (len >= sizeof(buf))
			return -ENOSPC;
		memcpy(buf, val, len);
		buf[len] = '\0';
		elem.arg = (char *)arr->elem + n * arr->elemsize;
		err = arr->ops->set(buf, &elem);
		if (err)
			return err;
		n++;
		val += len + (val[len] == ',');
	}
	if (arr->num)
		*arr->num = n;
	return *val ? -EINVAL : 0;
}

static int param_array_get(char *buffer, const struct kernel_param *kp)
{
	const struct kparam_array *arr = kp->arr;
	struct kernel_param elem = *kp;
	unsigned int n = arr->num ? *arr->num : arr->max;
	int off = 0;

	for (unsigned int i = 0; i < n; i++) {
		elem.arg = (char *)arr->elem + i * arr->elemsize;
		off += arr->ops->get(buffer + off, &elem);
		buffer[off - 1] = ',';	/* replaces the element's newline */
	}
	if (off)
		buffer[off - 1] = '\n';
	return off;
}

const struct kernel_param_ops param_array_ops = {
	.set = param_array_set,
	.get = param_array_get,
};
EXPORT_SYMBOL(param_array_ops);

/*
 * Sets a loaded module's parameter as the kernel does from the insmod
 * command line (parse_args): through the parameter's own ops.
 */
int us_param_set(const struct kernel_param *kp, const char *val)
{
	int err;

	us_cpu_enter();
	err = kp->ops->set(val, kp);
	us_cpu_leave();
	return err;
}
EXPORT_SYMBOL_GPL(us_param_set);

/* ---- number parsing ----------------------------------------------------- */

int _kstrtoull(const char *s, unsigned int base, unsigned long long *res)
{
	unsigned long long v = 0;
	bool any = false;

	if (base == 0) {
		base = 10;
		if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && isxdigit(s[2])) {
			base = 16;
			s += 2;
		} else if (s[0] == '0') {
			base = 8;
		}
	} else if (base == 16 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		s += 2;
	}
	for (; *s && *s != '\n'; s++, any = true) {
		unsigned int d = isdigit(*s) ? *s - '0' :
				 isxdigit(*s) ? (_tolower(*s) - 'a' + 10) : 99;

		if (d >= base)
			return -EINVAL;
		if (v > (ULLONG_MAX - d) / base)
			return -ERANGE;
		v = v * base + d;
	}
	if (!any || (s[0] == '\n' && s[1]))
		return -EINVAL;
	*res = v;
	return 0;
}

int kstrtoull(const char *s, unsigned int base, unsigned long long *res)
{
	return _kstrtoull(s[0] == '+' ? s + 1 : s, base, res);
}
EXPORT_SYMBOL(kstrtoull);

int kstrtoll(const char *s, unsigned int base, long long *res)
{
	unsigned long long v;
	int err;

	if (s[0] == '-') {
		err = _kstrtoull(s + 1, base, &v);
		if (err)
			return err;
		if ((long long)-v > 0)
			return -ERANGE;
		*res = -v;
		return 0;
	}
	err = kstrtoull(s, base, &v);
	if (err)
		return err;
	if ((long long)v < 0)
		return -ERANGE;
	*res = v;
	return 0;
}
EXPORT_SYMBOL(kstrtoll);

int kstrtoint(const char *s, unsigned int base, int *res)
{
	long long v;
	int err = kstrtoll(s, base, &v);

	if (err)
		return err;
	if (v != (int)v)
		return -ERANGE;
	*res = v;
	return 0;
}
EXPORT_SYMBOL(kstrtoint);

int kstrtobool(const char *s, bool *res)
{
	switch (s[0]) {
	case 'y': case 'Y': case '1':
		*res = true;
		return 0;
	case 'n': case 'N': case '0':
		*res = false;
		return 0;
	case 'o': case 'O':
		if (s[1] == 'n' || s[1] == 'N') {
			*res = true;
			return 0;
		}
		if (s[1] == 'f' || s[1] == 'F') {
			*res = false;
			return 0;
		}
	}
	return -EINVAL;
}
EXPORT_SYMBOL(kstrtobool);

size_t strcspn(const char *s, const char *reject)
{
	const char *p = s;

	while (*p && !strchr(reject, *p))
		p++;
	return p - s;
}
EXPORT_SYMBOL(strcspn);

int hex_to_bin(unsigned char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch = tolower(ch);
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	return -1;
}
EXPORT_SYMBOL(hex_to_bin);

/* Bit-reversed bytes (lib/bitrev.c): each macro level reverses two more bits. */
#define R2(n) n, n + 2 * 64, n + 1 * 64, n + 3 * 64
#define R4(n) R2(n), R2(n + 2 * 16), R2(n + 1 * 16), R2(n + 3 * 16)
#define R6(n) R4(n), R4(n + 2 * 4), R4(n + 1 * 4), R4(n + 3 * 4)
const u8 byte_rev_table[256] = { R6(0), R6(2), R6(1), R6(3) };
EXPORT_SYMBOL_GPL(byte_rev_table);

const char hex_asc[] = "0123456789abcdef";
EXPORT_SYMBOL(hex_asc);
const char hex_asc_upper[] = "0123456789ABCDEF";
EXPORT_SYMBOL(hex_asc_upper);

/* Latin-1 classes, as lib/ctype.c has them. */
const unsigned char _ctype[256] = {
	[0 ... 8] = _C, ['\t' ... '\r'] = _C | _S, [14 ... 31] = _C,
	[' '] = _S | _SP, ['!' ... '/'] = _P, ['0' ... '9'] = _D, [':' ... '@'] = _P,
	['A' ... 'F'] = _U | _X, ['G' ... 'Z'] = _U, ['[' ... '`'] = _P,
	['a' ... 'f'] = _L | _X, ['g' ... 'z'] = _L, ['{' ... '~'] = _P, [127] = _C,
	[128 ... 159] = _C, [160] = _S | _SP, [161 ... 191] = _P, [192 ... 214] = _U,
	[215] = _P, [216 ... 222] = _U, [223 ... 246] = _L, [247] = _P, [248 ... 255] = _L,
};
EXPORT_SYMBOL(_ctype);

/* CONFIG_DEBUG_LIST checks; with BUG_ON_DATA_CORRUPTION a failure is fatal. */
bool __list_add_valid(struct list_head *new, struct list_head *prev, struct list_head *next)
{
	if (unlikely(next->prev != prev || prev->next != next || new == prev || new == next))
		us_panic("list_add corruption: prev %px next %px new %px, caller %pS",
			 prev, next, new, __builtin_return_address(0));
	return true;
}
EXPORT_SYMBOL(__list_add_valid);

bool __list_del_entry_valid(struct list_head *entry)
{
	struct list_head *prev = entry->prev, *next = entry->next;

	if (unlikely(next == LIST_POISON1 || prev == LIST_POISON2 ||
		     prev->next != entry || next->prev != entry))
		us_panic("list_del corruption: entry %px (prev %px next %px), caller %pS",
			 entry, prev, next, __builtin_return_address(0));
	return true;
}
EXPORT_SYMBOL(__list_del_entry_valid);

void refcount_warn_saturate(refcount_t *r, enum refcount_saturation_type t)
{
	refcount_set(r, REFCOUNT_SATURATED);
	WARN_ONCE(1, "refcount_t %px: misuse of type %d, caller %pS\n", r, t,
		  __builtin_return_address(0));
}
EXPORT_SYMBOL(refcount_warn_saturate);

/* The kernel's entropy pool is the host's: getrandom(2) through ddekit. */
void get_random_bytes(void *buf, size_t len)
{
	ddekit_random(buf, len);
}
EXPORT_SYMBOL(get_random_bytes);

struct scatterlist *sg_next(struct scatterlist *sg)
{
	if (sg_is_last(sg))
		return NULL;
	sg++;
	if (unlikely(sg_is_chain(sg)))
		sg = sg_chain_ptr(sg);
	return sg;
}
EXPORT_SYMBOL(sg_next);
