// SPDX-License-Identifier: GPL-2.0
/*
 * Software TCP segmentation (GSO) and checksums, for what a driver's
 * features do not cover.
 *
 * The host's TAP hands every driver process TCP frames of up to 64 KiB with
 * their checksum left to do (docs/protocol.md, "Offloads"): one read(2) per
 * 64 KiB instead of one per 1514 bytes, each of which costs the host tens of
 * microseconds under emulation. A frame the driver cannot send whole is cut
 * here, where the kernel's validate_xmit_skb() cuts it for the same driver.
 * The runtime builds no paged or cloned tx skbs, so the frame is linear and
 * so is each segment: a fresh skb with a copy of the headers and its slice
 * of the payload, its lengths, IPv4 id, sequence number and flags adjusted
 * as the kernel's tcp_gso_segment() adjusts them.
 *
 * Stands in for Linux's net/core/dev.c (__skb_gso_segment()),
 * net/core/skbuff.c (skb_segment()) and net/ipv4/tcp_offload.c.
 */
#include <linux/module.h>
#include <linux/skbuff.h>
#include <linux/netdevice.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/err.h>
#include <net/checksum.h>
#include <net/ip6_checksum.h>

#include "internal.h"

/* Whether features cover the checksum a CHECKSUM_PARTIAL skb leaves to the device. */
bool us_csum_covered(netdev_features_t features, const struct sk_buff *skb)
{
	u8 l4;

	if (features & NETIF_F_HW_CSUM)
		return true;
	if (skb->protocol == htons(ETH_P_IP) && (features & NETIF_F_IP_CSUM))
		l4 = ip_hdr(skb)->protocol;
	else if (skb->protocol == htons(ETH_P_IPV6) && (features & NETIF_F_IPV6_CSUM))
		l4 = ipv6_hdr(skb)->nexthdr;
	else
		return false;
	return l4 == IPPROTO_TCP || l4 == IPPROTO_UDP;
}

/* Whether skb's headers are what its gso_type says: IPv4 or IPv6, then TCP. */
static bool tcp_gso_headers_ok(const struct sk_buff *skb, bool v4)
{
	unsigned int nh = skb_network_offset(skb), th = skb_transport_offset(skb);

	if (skb->ip_summed != CHECKSUM_PARTIAL || skb_is_nonlinear(skb) ||
	    th + sizeof(struct tcphdr) > skb->len || th + tcp_hdrlen(skb) > skb->len ||
	    skb->csum_offset != offsetof(struct tcphdr, check))
		return false;
	if (v4)
		return nh + sizeof(struct iphdr) <= th && ip_hdr(skb)->version == 4 &&
		       nh + ip_hdr(skb)->ihl * 4 == th && ip_hdr(skb)->protocol == IPPROTO_TCP;
	return nh + sizeof(struct ipv6hdr) <= th && ipv6_hdr(skb)->version == 6;
}

/* A segment: skb's first hdr_len bytes, then len bytes of skb from offset. */
static struct sk_buff *cut(const struct sk_buff *skb, unsigned int hdr_len,
			   unsigned int offset, unsigned int len)
{
	struct sk_buff *seg = alloc_skb(NET_SKB_PAD + hdr_len + len, GFP_ATOMIC);

	if (!seg)
		return NULL;
	skb_reserve(seg, NET_SKB_PAD);
	skb_put_data(seg, skb->data, hdr_len);
	skb_put_data(seg, skb->data + offset, len);
	seg->dev = skb->dev;
	seg->protocol = skb->protocol;
	seg->priority = skb->priority;
	seg->queue_mapping = skb->queue_mapping;
	skb_reset_mac_header(seg);
	skb_set_network_header(seg, skb_network_offset(skb));
	skb_set_transport_header(seg, skb_transport_offset(skb));
	return seg;
}

/*
 * A segment's IP length (and IPv4 id and header checksum), TCP sequence
 * number and flags (CWR on the first only, FIN and PSH on the last only),
 * and its TCP checksum: left to the device if features cover it, else
 * computed here.
 */
static void finish(struct sk_buff *seg, netdev_features_t features, bool v4,
		   u16 ip_id, u32 seq, bool first, bool last)
{
	unsigned int tcp_len = seg->len - skb_transport_offset(seg);
	struct tcphdr *th = tcp_hdr(seg);

	if (v4) {
		struct iphdr *iph = ip_hdr(seg);

		iph->tot_len = htons(seg->len - skb_network_offset(seg));
		iph->id = htons(ip_id);
		iph->check = 0;
		iph->check = ip_fast_csum(iph, iph->ihl);
		th->check = ~csum_tcpudp_magic(iph->saddr, iph->daddr, tcp_len, IPPROTO_TCP, 0);
	} else {
		struct ipv6hdr *ip6 = ipv6_hdr(seg);

		ip6->payload_len = htons(seg->len - skb_network_offset(seg) - sizeof(*ip6));
		th->check = ~csum_ipv6_magic(&ip6->saddr, &ip6->daddr, tcp_len, IPPROTO_TCP, 0);
	}
	th->seq = htonl(seq);
	if (!first)
		th->cwr = 0;
	if (!last)
		th->fin = th->psh = 0;
	seg->ip_summed = CHECKSUM_PARTIAL;
	seg->csum_start = skb_transport_header(seg) - seg->head;
	seg->csum_offset = offsetof(struct tcphdr, check);
	if (!us_csum_covered(features, seg))
		skb_checksum_help(seg);
}

/*
 * The kernel's entry point: skb's segments of gso_size payload bytes each,
 * linked through ->next, or an ERR_PTR. skb itself is left as it was, for
 * the caller to free. Only TCP over IPv4 and IPv6 is segmented (the only
 * GSO the host offers); anything else is -EPROTONOSUPPORT.
 */
struct sk_buff *__skb_gso_segment(struct sk_buff *skb, netdev_features_t features, bool tx_path)
{
	unsigned int type = skb_shinfo(skb)->gso_type, mss = skb_shinfo(skb)->gso_size;
	unsigned int hdr_len, offset;
	struct sk_buff *segs = NULL, **tail = &segs;
	bool v4 = type & SKB_GSO_TCPV4;
	u16 ip_id;
	u32 seq;

	if (!(type & (SKB_GSO_TCPV4 | SKB_GSO_TCPV6)) ||
	    (type & ~(SKB_GSO_TCPV4 | SKB_GSO_TCPV6 | SKB_GSO_TCP_ECN | SKB_GSO_DODGY)))
		return ERR_PTR(-EPROTONOSUPPORT);
	if (!mss || !tcp_gso_headers_ok(skb, v4))
		return ERR_PTR(-EINVAL);
	hdr_len = skb_transport_offset(skb) + tcp_hdrlen(skb);
	if (hdr_len >= skb->len)
		return ERR_PTR(-EINVAL);
	ip_id = v4 ? ntohs(ip_hdr(skb)->id) : 0;
	seq = ntohl(tcp_hdr(skb)->seq);
	for (offset = hdr_len; offset < skb->len; offset += mss, ip_id++, seq += mss) {
		unsigned int len = min(mss, skb->len - offset);
		struct sk_buff *seg = cut(skb, hdr_len, offset, len);

		if (!seg) {
			kfree_skb_list(segs);
			return ERR_PTR(-ENOMEM);
		}
		finish(seg, features, v4, ip_id, seq, offset == hdr_len, offset + len == skb->len);
		*tail = seg;
		tail = &seg->next;
	}
	return segs;
}
EXPORT_SYMBOL(__skb_gso_segment);
