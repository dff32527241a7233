// SPDX-License-Identifier: GPL-2.0
/*
 * swifi-poke: writes a few bytes into the text of a loaded module, the
 * in-kernel half of the lab's fault injection (lab/swifi/inject.py).
 *
 *	insmod swifi-poke.ko addr=0xffffffffc0a01234 old=4885c0 new=31c090
 *	rmmod swifi_poke
 *
 * Module text is mapped read-only, so the bytes are written through a
 * writable alias of the same page (vmalloc_to_page + vmap with PAGE_KERNEL),
 * the way Rio's and Nooks' injectors changed the running extension's code.
 * The bytes at addr must be `old` (checked for the whole range before
 * anything is written): a patch computed from the module file is never
 * applied over code the kernel rewrote at load time. Everything happens in
 * module init; the module does nothing afterwards and is removed at once.
 *
 * The write is not synchronised with other CPUs executing those bytes (the
 * kernel's text_poke_bp() is not exported): a CPU may run the old or the new
 * instruction, as with the original injectors.
 */
#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/string.h>
#include <linux/vmalloc.h>
#include <asm/pgtable.h>

#define SWIFI_MAX 16

static unsigned long addr;
static char *old_hex = "";
static char *new_hex = "";

module_param(addr, ulong, 0);
MODULE_PARM_DESC(addr, "where to write: an address inside a loaded module's text");
module_param_named(old, old_hex, charp, 0);
MODULE_PARM_DESC(old, "the bytes expected there, in hex");
module_param_named(new, new_hex, charp, 0);
MODULE_PARM_DESC(new, "the bytes to write, in hex (as many as old)");

static int parse(const char *hex, u8 *out, size_t *len)
{
	size_t n = strlen(hex);

	if (!n || n % 2 || n / 2 > SWIFI_MAX)
		return -EINVAL;
	*len = n / 2;
	return hex2bin(out, hex, *len);
}

/* Writes len bytes at a module-text address through a writable alias of its page. */
static int poke(unsigned long at, const u8 *bytes, size_t len)
{
	struct page *page = vmalloc_to_page((void *)at);
	u8 *alias;

	if (!page)
		return -EFAULT;
	alias = vmap(&page, 1, VM_MAP, PAGE_KERNEL);
	if (!alias)
		return -ENOMEM;
	memcpy(alias + offset_in_page(at), bytes, len);
	vunmap(alias);
	return 0;
}

static int __init swifi_poke_init(void)
{
	u8 old[SWIFI_MAX], new[SWIFI_MAX];
	size_t old_len, new_len, done;
	int ret;

	if (parse(old_hex, old, &old_len) || parse(new_hex, new, &new_len) || old_len != new_len) {
		pr_err("swifi: old= and new= must be hex strings of the same length (at most %d bytes)\n",
		       SWIFI_MAX);
		return -EINVAL;
	}
	if (addr < MODULES_VADDR || addr + old_len > MODULES_END) {
		pr_err("swifi: %#lx is not in the module area\n", addr);
		return -ERANGE;
	}
	if (memcmp((void *)addr, old, old_len)) {
		pr_err("swifi: the bytes at %pS are %*phN, not %*phN: not written\n",
		       (void *)addr, (int)old_len, (void *)addr, (int)old_len, old);
		return -ESTALE;
	}
	/* A patch may straddle a page boundary: one alias per page. */
	for (done = 0; done < old_len; ) {
		unsigned long at = addr + done;
		size_t chunk = min_t(size_t, old_len - done, PAGE_SIZE - offset_in_page(at));

		ret = poke(at, new + done, chunk);
		if (ret) {
			pr_err("swifi: cannot write at %pS: %d (%zu of %zu bytes written)\n",
			       (void *)at, ret, done, old_len);
			return ret;
		}
		done += chunk;
	}
	pr_info("swifi: wrote %*phN at %pS (was %*phN)\n", (int)new_len, new, (void *)addr,
		(int)old_len, old);
	return 0;
}

static void __exit swifi_poke_exit(void)
{
}

module_init(swifi_poke_init);
module_exit(swifi_poke_exit);
MODULE_DESCRIPTION("understudy lab: write bytes into a loaded module's text (fault injection)");
MODULE_LICENSE("GPL");
