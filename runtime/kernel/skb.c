// SPDX-License-Identifier: GPL-2.0
/*
 * sk_buff: allocation, building around RX buffers, the linear-area
 * operations drivers call out of line, trimming and pulling paged data,
 * and freeing. Layouts are the kernel's own (this file is built against
 * its headers); heads and fragments live in the DMA arena like all memory.
 * Clones and frag lists are not provided: no caller the runtime serves
 * creates them, and skb_clone is not exported, so a module needing it
 * fails to load instead of misbehaving.
 *
 * Stands in for Linux's net/core/skbuff.c.
 */
#include <linux/module.h>
#include <linux/skbuff.h>
#include <linux/netdevice.h>
#include <linux/slab.h>
#include <linux/highmem.h>
#include <net/checksum.h>

#include "internal.h"

static long live_skbs;

/* sk_buffs alive now (self-tests check that every one is freed). */
long us_skb_live(void)
{
	return live_skbs;
}
EXPORT_SYMBOL_GPL(us_skb_live);

static void build_around(struct sk_buff *skb, void *data, unsigned int size)
{
	struct skb_shared_info *shinfo;

	size -= SKB_DATA_ALIGN(sizeof(struct skb_shared_info));
	memset(skb, 0, offsetof(struct sk_buff, tail));
	skb->truesize = SKB_TRUESIZE(size);
	refcount_set(&skb->users, 1);
	skb->head = data;
	skb->data = data;
	skb_reset_tail_pointer(skb);
	skb_set_end_offset(skb, size);
	skb->mac_header = (typeof(skb->mac_header))~0U;
	skb->transport_header = (typeof(skb->transport_header))~0U;
	shinfo = skb_shinfo(skb);
	memset(shinfo, 0, offsetof(struct skb_shared_info, dataref));
	atomic_set(&shinfo->dataref, 1);
	live_skbs++;
}

struct sk_buff *__alloc_skb(unsigned int size, gfp_t gfp_mask, int flags, int node)
{
	struct sk_buff *skb = kmalloc(sizeof(*skb), gfp_mask & ~__GFP_ZERO);
	void *data;

	if (!skb)
		return NULL;
	size = SKB_DATA_ALIGN(size) + SKB_DATA_ALIGN(sizeof(struct skb_shared_info));
	data = kmalloc(size, gfp_mask & ~__GFP_ZERO);
	if (!data) {
		kfree(skb);
		return NULL;
	}
	build_around(skb, data, size);
	return skb;
}
EXPORT_SYMBOL(__alloc_skb);

/*
 * An skb around a frame at the start of `buffer` (host pool buffers, or a
 * block a TAP frame was read into), sent from there: no headroom,
 * skb_shared_info at the end of the `room` bytes, which leave
 * DDEKIT_TX_TAILROOM for it.
 */
struct sk_buff *us_build_tx_skb(void *buffer, unsigned int len, unsigned int room)
{
	struct sk_buff *skb = kmalloc(sizeof(*skb), GFP_ATOMIC);

	BUILD_BUG_ON(SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) > DDEKIT_TX_TAILROOM);
	if (!skb)
		return NULL;
	build_around(skb, buffer, room);
	if (len > skb_tailroom(skb)) {
		kfree(skb);
		live_skbs--;
		return NULL;
	}
	__skb_put(skb, len);
	return skb;
}

/*
 * Frees an skb us_build_tx_skb() made that the driver never took, but not
 * its buffer: the caller, which owns that, reports the frame dropped.
 */
void us_free_unsent_skb(struct sk_buff *skb)
{
	if (skb_shinfo(skb)->nr_frags || skb_shinfo(skb)->frag_list)
		us_panic("an unsent tx skb %px grew fragments", skb);
	kfree(skb);
	live_skbs--;
}

struct sk_buff *build_skb(void *data, unsigned int frag_size)
{
	struct sk_buff *skb = kmalloc(sizeof(*skb), GFP_ATOMIC);

	if (!skb)
		return NULL;
	build_around(skb, data, frag_size ? frag_size : ksize(data));
	skb->head_frag = frag_size != 0;
	return skb;
}
EXPORT_SYMBOL(build_skb);

struct sk_buff *napi_build_skb(void *data, unsigned int frag_size)
{
	return build_skb(data, frag_size);
}
EXPORT_SYMBOL(napi_build_skb);

struct sk_buff *__netdev_alloc_skb(struct net_device *dev, unsigned int len, gfp_t gfp_mask)
{
	struct sk_buff *skb = __alloc_skb(len + NET_SKB_PAD, gfp_mask, SKB_ALLOC_RX, NUMA_NO_NODE);

	if (!skb)
		return NULL;
	skb_reserve(skb, NET_SKB_PAD);
	skb->dev = dev;
	return skb;
}
EXPORT_SYMBOL(__netdev_alloc_skb);

struct sk_buff *__napi_alloc_skb(struct napi_struct *napi, unsigned int len, gfp_t gfp_mask)
{
	struct sk_buff *skb = __alloc_skb(len + NET_SKB_PAD + NET_IP_ALIGN, gfp_mask,
					  SKB_ALLOC_RX, NUMA_NO_NODE);

	if (!skb)
		return NULL;
	skb_reserve(skb, NET_SKB_PAD + NET_IP_ALIGN);
	skb->dev = napi->dev;
	return skb;
}
EXPORT_SYMBOL(__napi_alloc_skb);

/* ---- freeing ------------------------------------------------------------ */

static void free_head(struct sk_buff *skb)
{
	/* A pool buffer goes back to the host from the skb's destructor. */
	if (us_in_pool(skb->head))
		return;
	if (skb->head_frag)
		page_frag_free(skb->head);
	else
		kfree(skb->head);
}

static void release_data(struct sk_buff *skb)
{
	struct skb_shared_info *shinfo = skb_shinfo(skb);

	if (!atomic_dec_and_test(&shinfo->dataref))
		return;
	for (int i = 0; i < shinfo->nr_frags; i++)
		__skb_frag_unref(&shinfo->frags[i], false);
	if (shinfo->frag_list)
		us_panic("sk_buff %px has a frag list, which the runtime never builds", skb);
	free_head(skb);
}

/*
 * The destructor last, unlike the kernel: a pool skb's destructor hands its
 * buffers back to the host, which may fill them with its next frame at
 * once, skb_shared_info (read by release_data) included.
 */
static void free_skb(struct sk_buff *skb)
{
	release_data(skb);
	if (skb->destructor)
		skb->destructor(skb);
	kfree(skb);
	live_skbs--;
}

void kfree_skb_reason(struct sk_buff *skb, enum skb_drop_reason reason)
{
	if (skb && skb_unref(skb))
		free_skb(skb);
}
EXPORT_SYMBOL(kfree_skb_reason);

void consume_skb(struct sk_buff *skb)
{
	if (skb && skb_unref(skb))
		free_skb(skb);
}
EXPORT_SYMBOL(consume_skb);

/* A list linked through ->next, as __skb_gso_segment() returns. */
void kfree_skb_list_reason(struct sk_buff *segs, enum skb_drop_reason reason)
{
	while (segs) {
		struct sk_buff *next = segs->next;

		kfree_skb_reason(segs, reason);
		segs = next;
	}
}
EXPORT_SYMBOL(kfree_skb_list_reason);

void napi_consume_skb(struct sk_buff *skb, int budget)
{
	consume_skb(skb);
}
EXPORT_SYMBOL(napi_consume_skb);

/* Freeing never sleeps here, so there is no need to defer it from IRQs. */
void __dev_kfree_skb_irq(struct sk_buff *skb, enum skb_free_reason reason)
{
	consume_skb(skb);
}
EXPORT_SYMBOL(__dev_kfree_skb_irq);

void __dev_kfree_skb_any(struct sk_buff *skb, enum skb_free_reason reason)
{
	consume_skb(skb);
}
EXPORT_SYMBOL(__dev_kfree_skb_any);

/* ---- the linear area ---------------------------------------------------- */

void *skb_put(struct sk_buff *skb, unsigned int len)
{
	void *tmp = skb_tail_pointer(skb);

	SKB_LINEAR_ASSERT(skb);
	skb->tail += len;
	skb->len += len;
	if (unlikely(skb->tail > skb->end))
		us_panic("skb_put(%u) over the end of sk_buff %px from %pS", len, skb,
			 __builtin_return_address(0));
	return tmp;
}
EXPORT_SYMBOL(skb_put);

void *skb_push(struct sk_buff *skb, unsigned int len)
{
	skb->data -= len;
	skb->len += len;
	if (unlikely(skb->data < skb->head))
		us_panic("skb_push(%u) under the head of sk_buff %px from %pS", len, skb,
			 __builtin_return_address(0));
	return skb->data;
}
EXPORT_SYMBOL(skb_push);

void *skb_pull(struct sk_buff *skb, unsigned int len)
{
	return skb_pull_inline(skb, len);
}
EXPORT_SYMBOL(skb_pull);

void skb_trim(struct sk_buff *skb, unsigned int len)
{
	if (skb->len > len)
		__skb_trim(skb, len);
}
EXPORT_SYMBOL(skb_trim);

int ___pskb_trim(struct sk_buff *skb, unsigned int len)
{
	struct skb_shared_info *shinfo = skb_shinfo(skb);
	unsigned int offset = skb_headlen(skb);
	int kept = 0;

	if (skb_cloned(skb))
		us_panic("___pskb_trim of a cloned sk_buff");
	for (int i = 0; i < shinfo->nr_frags; i++) {
		skb_frag_t *frag = &shinfo->frags[i];
		unsigned int end = offset + skb_frag_size(frag);

		if (offset >= len) {
			__skb_frag_unref(frag, false);
			continue;
		}
		if (end > len)
			skb_frag_size_set(frag, len - offset);
		shinfo->frags[kept++] = *frag;
		offset = end;
	}
	shinfo->nr_frags = kept;
	if (len < skb_headlen(skb)) {
		skb->data_len = 0;
		skb->len = len;
		skb_set_tail_pointer(skb, len);
	} else {
		skb->len = len;
		skb->data_len = len - skb_headlen(skb);
	}
	return 0;
}
EXPORT_SYMBOL(___pskb_trim);

int skb_copy_bits(const struct sk_buff *skb, int offset, void *to, int len)
{
	int headlen = skb_headlen(skb);
	int pos;

	if (offset < 0 || len < 0 || offset > (int)skb->len - len)
		return -EFAULT;
	if (offset < headlen) {
		int n = min(len, headlen - offset);

		memcpy(to, skb->data + offset, n);
		offset += n;
		to += n;
		len -= n;
	}
	pos = headlen;
	for (int i = 0; len && i < skb_shinfo(skb)->nr_frags; i++) {
		const skb_frag_t *frag = &skb_shinfo(skb)->frags[i];
		int size = skb_frag_size(frag);

		if (offset < pos + size) {
			int n = min(len, pos + size - offset);

			memcpy(to, skb_frag_address(frag) + offset - pos, n);
			offset += n;
			to += n;
			len -= n;
		}
		pos += size;
	}
	return len ? -EFAULT : 0;
}
EXPORT_SYMBOL(skb_copy_bits);

int pskb_expand_head(struct sk_buff *skb, int nhead, int ntail, gfp_t gfp_mask)
{
	unsigned int size = nhead + skb_end_offset(skb) + ntail;
	unsigned int alloc = SKB_DATA_ALIGN(size) + SKB_DATA_ALIGN(sizeof(struct skb_shared_info));
	struct skb_shared_info *old = skb_shinfo(skb);
	long off;
	u8 *data;

	if (nhead < 0 || skb_shared(skb) || skb_cloned(skb))
		us_panic("pskb_expand_head(%d) of a shared or cloned sk_buff", nhead);
	data = kmalloc(alloc, gfp_mask & ~__GFP_ZERO);
	if (!data)
		return -ENOMEM;
	size = SKB_WITH_OVERHEAD(alloc);
	memcpy(data + nhead, skb->head, skb_tail_pointer(skb) - skb->head);
	memcpy((struct skb_shared_info *)(data + size), old,
	       offsetof(struct skb_shared_info, frags[old->nr_frags]));
	/* The fragments moved to the new shinfo with their references. */
	free_head(skb);
	off = (data + nhead) - skb->head;
	skb->head = data;
	skb->head_frag = 0;
	skb->data += off;
	skb_set_end_offset(skb, size);
	/* tail and the header fields are offsets from head: they move by nhead. */
	skb->tail += nhead;
	if (skb->ip_summed == CHECKSUM_PARTIAL)
		skb->csum_start += nhead;
	skb->transport_header += nhead;
	skb->network_header += nhead;
	if (skb_mac_header_was_set(skb))
		skb->mac_header += nhead;
	skb->inner_transport_header += nhead;
	skb->inner_network_header += nhead;
	skb->inner_mac_header += nhead;
	atomic_set(&skb_shinfo(skb)->dataref, 1);
	return 0;
}
EXPORT_SYMBOL(pskb_expand_head);

void *__pskb_pull_tail(struct sk_buff *skb, int delta)
{
	struct skb_shared_info *shinfo;
	int eat = (skb->tail + delta) - skb->end;
	int kept = 0;

	if (eat > 0 && pskb_expand_head(skb, 0, eat + 128, GFP_ATOMIC))
		return NULL;
	if (skb_copy_bits(skb, skb_headlen(skb), skb_tail_pointer(skb), delta))
		us_panic("__pskb_pull_tail(%d): sk_buff %px is shorter", delta, skb);
	shinfo = skb_shinfo(skb);
	eat = delta;
	for (int i = 0; i < shinfo->nr_frags; i++) {
		skb_frag_t *frag = &shinfo->frags[i];
		int size = skb_frag_size(frag);

		if (size <= eat) {
			eat -= size;
			__skb_frag_unref(frag, false);
			continue;
		}
		if (eat) {
			skb_frag_off_add(frag, eat);
			skb_frag_size_sub(frag, eat);
			eat = 0;
		}
		shinfo->frags[kept++] = *frag;
	}
	shinfo->nr_frags = kept;
	skb->tail += delta;
	skb->data_len -= delta;
	return skb_tail_pointer(skb);
}
EXPORT_SYMBOL(__pskb_pull_tail);

int __skb_pad(struct sk_buff *skb, int pad, bool free_on_error)
{
	int ntail;

	if (!skb_cloned(skb) && skb_tailroom(skb) >= pad) {
		memset(skb->data + skb->len, 0, pad);
		return 0;
	}
	ntail = skb->data_len + pad - (skb->end - skb->tail);
	if (ntail > 0 && pskb_expand_head(skb, 0, ntail, GFP_ATOMIC))
		goto fail;
	if (skb_is_nonlinear(skb) && !__pskb_pull_tail(skb, skb->data_len))
		goto fail;
	memset(skb->data + skb->len, 0, pad);
	return 0;
fail:
	if (free_on_error)
		kfree_skb(skb);
	return -ENOMEM;
}
EXPORT_SYMBOL(__skb_pad);

/*
 * Copies a frame to a device buffer, completing a checksum the stack left
 * for the hardware (CHECKSUM_PARTIAL) on the way, as 8139too needs.
 */
void skb_copy_and_csum_dev(const struct sk_buff *skb, u8 *to)
{
	unsigned int start = skb->ip_summed == CHECKSUM_PARTIAL ?
			     skb_checksum_start_offset(skb) : skb_headlen(skb);

	if (start > skb->len || skb_copy_bits(skb, 0, to, skb->len))
		us_panic("skb_copy_and_csum_dev: bad sk_buff %px", skb);
	if (skb->ip_summed == CHECKSUM_PARTIAL) {
		__sum16 *field = (__sum16 *)(to + start + skb->csum_offset);

		*field = csum_fold(csum_partial(to + start, skb->len - start, 0));
	}
}
EXPORT_SYMBOL(skb_copy_and_csum_dev);

/*
 * Completes, in software, a checksum the stack left to the hardware
 * (CHECKSUM_PARTIAL): for a frame the driver's features do not cover.
 */
int skb_checksum_help(struct sk_buff *skb)
{
	unsigned int start = skb_checksum_start_offset(skb);
	__sum16 *field;

	if (skb->ip_summed != CHECKSUM_PARTIAL)
		return 0;
	/* The runtime builds no paged tx skbs, so the checksummed part is linear. */
	if (skb_is_nonlinear(skb) || start + skb->csum_offset + sizeof(__sum16) > skb->len)
		return -EINVAL;
	field = (__sum16 *)(skb->data + start + skb->csum_offset);
	*field = csum_fold(csum_partial(skb->data + start, skb->len - start, 0)) ?: CSUM_MANGLED_0;
	skb->ip_summed = CHECKSUM_NONE;
	return 0;
}
EXPORT_SYMBOL(skb_checksum_help);

/*
 * Timestamps go to the sending socket's error queue; frames here come from
 * the host's rings, not from sockets, so there is nobody to tell.
 */
void skb_tstamp_tx(struct sk_buff *orig_skb, struct skb_shared_hwtstamps *hwtstamps)
{
}
EXPORT_SYMBOL(skb_tstamp_tx);

/* PHY timestamping needs a PHY driver with mii_ts; none is ever attached. */
void skb_clone_tx_timestamp(struct sk_buff *skb)
{
}
EXPORT_SYMBOL(skb_clone_tx_timestamp);

/* The receive side of the same: no PHY takes a frame to timestamp it later. */
bool skb_defer_rx_timestamp(struct sk_buff *skb)
{
	return false;
}
EXPORT_SYMBOL(skb_defer_rx_timestamp);
