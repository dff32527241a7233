// SPDX-License-Identifier: GPL-2.0
/*
 * The crypto API without algorithms: looking one up fails as it does in a
 * kernel where no module provides it, and the notifier chain that would
 * announce one loading is kept, though nothing loads one here.
 *
 * Stands in for crypto/api.c (crypto_register_notifier(),
 * crypto_destroy_tfm()), crypto/shash.c and kernel/jump_label.c
 * (static_key_disable()).
 *
 * NVMe's chain needs this: crc-t10dif and crc64-rocksoft ask for the
 * "crct10dif" and "crc64-rocksoft" shash algorithms at init and, not
 * finding them, keep their table-driven fallback (a static key that stays
 * enabled), which is what computes their CRCs here. The calls made only
 * with an algorithm in hand cannot be reached (docs/block.md).
 */
#include <crypto/hash.h>
#include <linux/jump_label.h>
#include <linux/notifier.h>

#include "internal.h"

/* The chain, highest priority first (kernel/notifier.c's order); the CPU lock guards it. */
static struct notifier_block *crypto_chain;

int crypto_register_notifier(struct notifier_block *nb)
{
	struct notifier_block **p = &crypto_chain;

	while (*p && (*p)->priority >= nb->priority)
		p = &(*p)->next;
	nb->next = *p;
	*p = nb;
	return 0;
}
EXPORT_SYMBOL_GPL(crypto_register_notifier);

int crypto_unregister_notifier(struct notifier_block *nb)
{
	struct notifier_block **p;

	for (p = &crypto_chain; *p; p = &(*p)->next)
		if (*p == nb) {
			*p = nb->next;
			return 0;
		}
	return -ENOENT;
}
EXPORT_SYMBOL_GPL(crypto_unregister_notifier);

/* No algorithm is registered in a driver process: every lookup fails, as crypto_alg_mod_lookup()'s. */
struct crypto_shash *crypto_alloc_shash(const char *alg_name, u32 type, u32 mask)
{
	return ERR_PTR(-ENOENT);
}
EXPORT_SYMBOL_GPL(crypto_alloc_shash);

/*
 * Freeing nothing is what module exits do (crypto_free_shash() of the
 * transform they never got); a real transform never exists here.
 */
void crypto_destroy_tfm(void *mem, struct crypto_tfm *tfm)
{
	if (IS_ERR_OR_NULL(mem))
		return;
	us_unreachable();
}
EXPORT_SYMBOL_GPL(crypto_destroy_tfm);

int crypto_shash_update(struct shash_desc *desc, const u8 *data, unsigned int len)
{
	us_unreachable();
}
EXPORT_SYMBOL_GPL(crypto_shash_update);

/* crc-t10dif and crc64-rocksoft disable their fallback only once they have an algorithm. */
void static_key_disable(struct static_key *key)
{
	us_unreachable();
}
EXPORT_SYMBOL_GPL(static_key_disable);
