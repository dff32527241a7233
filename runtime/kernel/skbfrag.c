// SPDX-License-Identifier: GPL-2.0
/*
 * skbs as scatter-gather drivers (virtio_net) build and take them apart:
 * receive buffers carved from a page-fragment cache and attached to an skb
 * as fragments, an skb's bytes as a scatterlist for the device, the
 * partial checksum and the headers a device's offload metadata describe.
 *
 * Stands in for Linux's net/core/skbuff.c (fragments), net/core/sock.c
 * (skb_page_frag_refill()), lib/scatterlist.c and net/core/flow_dissector.c.
 */
#include <linux/module.h>
#include <linux/skbuff.h>
#include <linux/scatterlist.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/if_vlan.h>
#include <net/ip.h>
#include <net/flow_dissector.h>
#include <net/dst.h>
#include <linux/netfilter.h>

#include "internal.h"

/* ---- scatterlists ------------------------------------------------------- */

void sg_init_table(struct scatterlist *sgl, unsigned int nents)
{
	memset(sgl, 0, sizeof(*sgl) * nents);
	sg_init_marker(sgl, nents);
}
EXPORT_SYMBOL(sg_init_table);

void sg_init_one(struct scatterlist *sg, const void *buf, unsigned int buflen)
{
	sg_init_table(sg, 1);
	sg_set_buf(sg, buf, buflen);
}
EXPORT_SYMBOL(sg_init_one);

/* How deep chained skbs (frag_list) may nest before the skb is taken as corrupt. */
#define SGVEC_MAX_DEPTH	24

/*
 * Fills sg from [offset, offset + len) of skb's data: its head, its page
 * fragments, its chained skbs. Returns the entries used, or -EMSGSIZE
 * if they would not fit the bytes asked for.
 */
static int fill_sgvec(struct sk_buff *skb, struct scatterlist *sg, int offset, int len, int depth)
{
	int start = skb_headlen(skb), n = 0, chunk;
	struct sk_buff *frag_skb;

	if (depth > SGVEC_MAX_DEPTH)
		return -EMSGSIZE;
	chunk = start - offset;
	if (chunk > 0) {
		chunk = min(chunk, len);
		sg_set_buf(&sg[n++], skb->data + offset, chunk);
		len -= chunk;
		offset += chunk;
	}
	for (int i = 0; len && i < skb_shinfo(skb)->nr_frags; i++) {
		const skb_frag_t *frag = &skb_shinfo(skb)->frags[i];
		int end = start + skb_frag_size(frag);

		if (offset < end) {
			chunk = min(end - offset, len);
			sg_set_page(&sg[n++], skb_frag_page(frag), chunk,
				    skb_frag_off(frag) + offset - start);
			len -= chunk;
			offset += chunk;
		}
		start = end;
	}
	skb_walk_frags(skb, frag_skb) {
		int end = start + frag_skb->len, used;

		if (!len)
			break;
		if (offset < end) {
			chunk = min(end - offset, len);
			used = fill_sgvec(frag_skb, sg + n, offset - start, chunk, depth + 1);
			if (used < 0)
				return used;
			n += used;
			len -= chunk;
			offset += chunk;
		}
		start = end;
	}
	return len ? -EMSGSIZE : n;
}

int skb_to_sgvec(struct sk_buff *skb, struct scatterlist *sg, int offset, int len)
{
	int n = fill_sgvec(skb, sg, offset, len, 0);

	if (n <= 0)
		return n ? n : -EMSGSIZE;
	sg_mark_end(&sg[n - 1]);
	return n;
}
EXPORT_SYMBOL_GPL(skb_to_sgvec);

/* ---- receive fragments -------------------------------------------------- */

void skb_add_rx_frag(struct sk_buff *skb, int i, struct page *page, int off, int size,
		     unsigned int truesize)
{
	skb_fill_page_desc(skb, i, page, off, size);
	skb->len += size;
	skb->data_len += size;
	skb->truesize += truesize;
}
EXPORT_SYMBOL(skb_add_rx_frag);

/* More of the same page continues fragment i. */
void skb_coalesce_rx_frag(struct sk_buff *skb, int i, int size, unsigned int truesize)
{
	skb_frag_size_add(&skb_shinfo(skb)->frags[i], size);
	skb->len += size;
	skb->data_len += size;
	skb->truesize += truesize;
}
EXPORT_SYMBOL(skb_coalesce_rx_frag);

/*
 * Makes room for sz bytes in the fragment cache pfrag: its page again from
 * the start if nobody else holds it any more, the rest of it if sz fits,
 * else a fresh page -- a 32 KiB compound one if the allocator has it, as
 * the kernel prefers, one page otherwise.
 */
bool skb_page_frag_refill(unsigned int sz, struct page_frag *pfrag, gfp_t gfp)
{
	if (pfrag->page) {
		if (page_ref_count(pfrag->page) == 1) {
			pfrag->offset = 0;
			return true;
		}
		if (pfrag->offset + sz <= pfrag->size)
			return true;
		put_page(pfrag->page);
	}
	pfrag->offset = 0;
	if (SKB_FRAG_PAGE_ORDER && sz <= (PAGE_SIZE << SKB_FRAG_PAGE_ORDER)) {
		pfrag->page = alloc_pages((gfp & ~__GFP_DIRECT_RECLAIM) | __GFP_COMP |
					  __GFP_NOWARN | __GFP_NORETRY, SKB_FRAG_PAGE_ORDER);
		if (pfrag->page) {
			pfrag->size = PAGE_SIZE << SKB_FRAG_PAGE_ORDER;
			return true;
		}
	}
	pfrag->page = alloc_page(gfp);
	if (pfrag->page) {
		pfrag->size = PAGE_SIZE;
		return true;
	}
	return false;
}
EXPORT_SYMBOL(skb_page_frag_refill);

/* ---- offload metadata --------------------------------------------------- */

/* A device's "checksum from start, store at start + off": both inside the head. */
bool skb_partial_csum_set(struct sk_buff *skb, u16 start, u16 off)
{
	u32 csum_end = (u32)start + (u32)off + sizeof(__sum16);
	u32 csum_start = skb_headroom(skb) + (u32)start;

	if (unlikely(csum_start > U16_MAX || csum_end > skb_headlen(skb))) {
		net_warn_ratelimited("bad partial csum: csum=%u/%u headroom=%u headlen=%u\n",
				     start, off, skb_headroom(skb), skb_headlen(skb));
		return false;
	}
	skb->ip_summed = CHECKSUM_PARTIAL;
	skb->csum_start = csum_start;
	skb->csum_offset = off;
	skb->transport_header = csum_start;
	return true;
}
EXPORT_SYMBOL_GPL(skb_partial_csum_set);

/*
 * The basic keys (network protocol, transport protocol and offset) that
 * drivers ask for to check a device's segmentation metadata
 * (virtio_net_hdr_to_skb): IPv4 and IPv6 without extension headers, from
 * the network header on. Other dissectors are the stack's, which is the
 * host's.
 */
struct flow_dissector flow_keys_basic_dissector __read_mostly;
EXPORT_SYMBOL(flow_keys_basic_dissector);

static bool dissect_ip(const void *data, int nhoff, int hlen, __be16 proto,
		       struct flow_keys_basic *keys)
{
	keys->basic.n_proto = proto;
	if (proto == htons(ETH_P_IP)) {
		const struct iphdr *ip = data + nhoff;

		if (hlen < nhoff + (int)sizeof(*ip) || ip->ihl < 5 ||
		    hlen < nhoff + ip->ihl * 4 || ip_is_fragment(ip))
			return false;
		keys->basic.ip_proto = ip->protocol;
		keys->control.thoff = nhoff + ip->ihl * 4;
		return true;
	}
	if (proto == htons(ETH_P_IPV6)) {
		const struct ipv6hdr *ip6 = data + nhoff;

		if (hlen < nhoff + (int)sizeof(*ip6))
			return false;
		keys->basic.ip_proto = ip6->nexthdr;
		keys->control.thoff = nhoff + sizeof(*ip6);
		return ip6->nexthdr == IPPROTO_TCP || ip6->nexthdr == IPPROTO_UDP;
	}
	return false;
}

bool __skb_flow_dissect(const struct net *net, const struct sk_buff *skb,
			struct flow_dissector *flow_dissector, void *target_container,
			const void *data, __be16 proto, int nhoff, int hlen, unsigned int flags)
{
	struct flow_keys_basic *keys = target_container;

	if (WARN_ONCE(flow_dissector != &flow_keys_basic_dissector,
		      "only the basic flow keys are dissected in a driver process\n"))
		return false;
	if (!data) {
		data = skb->data;
		proto = proto ? proto : skb_vlan_tag_present(skb) ? skb->vlan_proto : skb->protocol;
		nhoff = skb_network_offset(skb);
		hlen = skb_headlen(skb);
	}
	memset(keys, 0, sizeof(*keys));
	return dissect_ip(data, nhoff, hlen, proto, keys);
}
EXPORT_SYMBOL(__skb_flow_dissect);

/*
 * The stack's routing and connection-tracking state, which skbs in a
 * driver process never carry: the frames come from the host's TAP, bare.
 */
void dst_release(struct dst_entry *dst)
{
	if (dst)
		us_panic("%s: an skb with a route, which a driver process never builds", __func__);
}
EXPORT_SYMBOL(dst_release);

void nf_conntrack_destroy(struct nf_conntrack *nfct)
{
	us_panic("%s: an skb with conntrack state, which a driver process never builds", __func__);
}
EXPORT_SYMBOL(nf_conntrack_destroy);
