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
 * The write happens under stop_machine(): every other CPU waits in its
 * stopper thread meanwhile, so none executes a half-written instruction (a
 * torn `jmp .` is a jump into the middle of other code, a different fault).
 * The kernel's own text_poke_bp() is not exported to modules.
 */
#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/stop_machine.h>
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

struct swifi_patch {
	u8 old[SWIFI_MAX];
	u8 new[SWIFI_MAX];
	size_t len;
	/* Writable aliases of the one or two pages the patch covers. */
	u8 *alias[2];
};

/* A writable alias of the module-text page holding at (vmap may sleep: done before stopping CPUs). */
static u8 *map_page(unsigned long at)
{
	struct page *page = vmalloc_to_page((void *)at);

	return page ? vmap(&page, 1, VM_MAP, PAGE_KERNEL) : NULL;
}

/* Runs with every other CPU stopped: nothing executes the bytes meanwhile. */
static int write_patch(void *data)
{
	struct swifi_patch *p = data;
	unsigned long first_page = addr & PAGE_MASK;
	size_t i;

	if (memcmp((void *)addr, p->old, p->len))
		return -ESTALE;
	for (i = 0; i < p->len; i++) {
		unsigned long at = addr + i;

		p->alias[(at & PAGE_MASK) != first_page][offset_in_page(at)] = p->new[i];
	}
	return 0;
}

static int __init swifi_poke_init(void)
{
	static struct swifi_patch patch;
	u8 *old = patch.old, *new = patch.new;
	size_t old_len, new_len;
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
	patch.len = old_len;
	patch.alias[0] = map_page(addr);
	if (((addr + old_len - 1) & PAGE_MASK) != (addr & PAGE_MASK))
		patch.alias[1] = map_page(addr + old_len - 1);
	else
		patch.alias[1] = patch.alias[0];
	if (!patch.alias[0] || !patch.alias[1]) {
		pr_err("swifi: cannot map the page(s) at %pS writable\n", (void *)addr);
		ret = -ENOMEM;
	} else {
		ret = stop_machine(write_patch, &patch, NULL);
		if (ret == -ESTALE)
			pr_err("swifi: the bytes at %pS are %*phN, not %*phN: not written\n",
			       (void *)addr, (int)old_len, (void *)addr, (int)old_len, old);
	}
	if (patch.alias[1] && patch.alias[1] != patch.alias[0])
		vunmap(patch.alias[1]);
	if (patch.alias[0])
		vunmap(patch.alias[0]);
	if (ret)
		return ret;
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
