// SPDX-License-Identifier: GPL-2.0
/*
 * Receive: what the stack above the driver would get goes to the host's
 * interface, the driver process's own queue of the TAP (docs/design.md §5),
 * and consecutive TCP segments of one flow in a NET_RX round go as one GSO
 * frame, as the kernel's GRO merges them before its stack sees them. One
 * write(2), and one pass through the host's stack, per merge instead of per
 * segment.
 *
 * GRO's rules for the common case: IPv4 without options or fragments, TCP
 * with only ACK (PSH ends a merge), the next sequence number, the same
 * acknowledgement, window and options, segments of one size (a shorter one
 * ends a merge) and a valid checksum, checked here where the device did not
 * (QEMU's e1000 checks none; the host's stack would otherwise check each
 * segment). The merged frame carries its segment size and leaves the TCP
 * checksum to the stack's offload path (NEEDS_CSUM, as GRO's
 * CHECKSUM_PARTIAL), so that a forwarded frame is cut up again correctly.
 * Anything else goes as received, in order.
 *
 * Nothing is copied: the skbs are held until their merge is written, the
 * first one's headers fixed up, and the TAP gathers every payload from
 * where the NIC put it -- the rest of an skb's head after the headers, and
 * its fragments (virtio_net's mergeable buffers put most of a segment in
 * one), at most DDEKIT_RX_MAX_PARTS parts in all.
 *
 * Stands in for Linux's net/core/gro.c and net/ipv4/tcp_offload.c.
 */
#include <linux/etherdevice.h>
#include <linux/ip.h>
#include <linux/module.h>
#include <linux/skbuff.h>
#include <linux/tcp.h>
#include <linux/virtio_net.h>
#include <net/checksum.h>
#include <net/ip.h>
#include <net/tcp.h>

#include "internal.h"

static_assert(sizeof(struct ddekit_rx_meta) == sizeof(struct virtio_net_hdr));
static_assert(offsetof(struct ddekit_rx_meta, csum_offset) ==
	      offsetof(struct virtio_net_hdr, csum_offset));

/* Segments merged at most: a NAPI budget's worth. */
#define GRO_MAX_SEGMENTS	64
#define TCP_FLAGS_BYTE		13

/* The merge under way: its skbs, the first one's headers in front. */
static struct {
	struct sk_buff *skb[GRO_MAX_SEGMENTS];
	unsigned int n;
	unsigned int hlen;	/* Ethernet, IP and TCP headers */
	unsigned int ip_len;	/* the merged IP packet's length so far */
	unsigned int gso_size;
	unsigned int parts;	/* at most, for the TAP's write */
	u32 next_seq;
	bool closed;		/* a PSH or a short segment ended it */
} held;

static unsigned long frames_delivered;

/* The parts of a mergeable segment the rules look at. */
struct segment {
	struct iphdr *ip;
	struct tcphdr *tcp;
	unsigned int hlen, payload;
	unsigned int parts;	/* its head and fragments: the most parts its bytes take */
};

/* The Ethernet header's length: eth_type_trans() pulled it. */
static unsigned int mac_len(const struct sk_buff *skb)
{
	return skb->data - skb_mac_header(skb);
}

/*
 * len bytes of the frame from `from` (counted from its MAC header) as parts
 * for the TAP, where they lie: in the skb's head, then in its fragments.
 * At most 1 + nr_frags parts.
 */
static unsigned int span_parts(struct sk_buff *skb, unsigned int from, unsigned int len,
			       struct ddekit_rx_part *parts)
{
	unsigned int head = mac_len(skb) + skb_headlen(skb), at = head, n = 0;

	if (from < head) {
		unsigned int take = min(len, head - from);

		parts[n++] = (struct ddekit_rx_part){ skb_mac_header(skb) + from, take };
		from += take;
		len -= take;
	}
	for (unsigned int i = 0; len && i < skb_shinfo(skb)->nr_frags; i++) {
		const skb_frag_t *frag = &skb_shinfo(skb)->frags[i];
		unsigned int size = skb_frag_size(frag);

		if (from < at + size) {
			unsigned int take = min(len, at + size - from);

			parts[n++] = (struct ddekit_rx_part){ skb_frag_address(frag) + (from - at), take };
			from += take;
			len -= take;
		}
		at += size;
	}
	return n;
}

static bool tcp_checksum_ok(struct sk_buff *skb, const struct segment *s)
{
	struct ddekit_rx_part parts[1 + MAX_SKB_FRAGS];
	unsigned int tcp_len = ntohs(s->ip->tot_len) - sizeof(struct iphdr), done = 0;
	unsigned int n = span_parts(skb, ETH_HLEN + sizeof(struct iphdr), tcp_len, parts);
	__wsum sum = 0;

	for (unsigned int i = 0; i < n; i++) {
		sum = csum_block_add(sum, csum_partial(parts[i].base, parts[i].len, 0), done);
		done += parts[i].len;
	}
	return !csum_tcpudp_magic(s->ip->saddr, s->ip->daddr, tcp_len, IPPROTO_TCP, sum);
}

/*
 * Whether skb is a TCP/IPv4 segment GRO would merge; fills s if so. Its
 * headers are pulled into its head, as GRO pulls them (virtio_net's
 * mergeable buffers leave only the Ethernet header there); its payload may
 * stay in fragments.
 */
static bool parse(struct sk_buff *skb, struct segment *s)
{
	unsigned int total, tcp_hlen;
	u8 flags;

	if (skb_has_frag_list(skb) || skb->protocol != htons(ETH_P_IP) ||
	    mac_len(skb) != ETH_HLEN ||
	    !pskb_may_pull(skb, sizeof(struct iphdr) + sizeof(struct tcphdr)))
		return false;
	tcp_hlen = ((struct tcphdr *)(skb->data + sizeof(struct iphdr)))->doff * 4;
	if (tcp_hlen > sizeof(struct tcphdr) && !pskb_may_pull(skb, sizeof(struct iphdr) + tcp_hlen))
		return false;
	s->ip = (struct iphdr *)skb->data;
	total = ntohs(s->ip->tot_len);
	if (s->ip->version != 4 || s->ip->ihl != 5 || s->ip->frag_off & htons(IP_MF | IP_OFFSET) ||
	    s->ip->protocol != IPPROTO_TCP || total > skb->len)
		return false;
	s->tcp = (struct tcphdr *)(s->ip + 1);
	flags = ((u8 *)s->tcp)[TCP_FLAGS_BYTE];
	if (tcp_hlen < sizeof(struct tcphdr) || sizeof(struct iphdr) + tcp_hlen >= total ||
	    (flags & ~TCPHDR_PSH) != TCPHDR_ACK)
		return false;
	s->hlen = ETH_HLEN + sizeof(struct iphdr) + tcp_hlen;
	s->payload = ETH_HLEN + total - s->hlen;
	s->parts = 1 + skb_shinfo(skb)->nr_frags;
	if (skb->ip_summed != CHECKSUM_UNNECESSARY) {
		if (!tcp_checksum_ok(skb, s))
			return false;
		skb->ip_summed = CHECKSUM_UNNECESSARY;
	}
	return true;
}

/* Whether s is the next segment of the held flow, as GRO decides it. */
static bool continues(const struct segment *s)
{
	struct sk_buff *first = held.skb[0];
	const struct iphdr *ip = (struct iphdr *)first->data;
	const struct tcphdr *tcp = (struct tcphdr *)(ip + 1);

	return !held.closed && held.n < GRO_MAX_SEGMENTS && s->hlen == held.hlen &&
	       held.parts + s->parts <= DDEKIT_RX_MAX_PARTS &&
	       ntohl(s->tcp->seq) == held.next_seq && s->payload <= held.gso_size &&
	       held.ip_len + s->payload <= IP_MAX_MTU &&
	       !memcmp(skb_mac_header(first), (u8 *)s->ip - ETH_HLEN, ETH_HLEN) &&
	       ip->tos == s->ip->tos && ip->ttl == s->ip->ttl &&
	       ip->saddr == s->ip->saddr && ip->daddr == s->ip->daddr &&
	       tcp->source == s->tcp->source && tcp->dest == s->tcp->dest &&
	       tcp->ack_seq == s->tcp->ack_seq && tcp->window == s->tcp->window &&
	       !memcmp(tcp + 1, s->tcp + 1, held.hlen - ETH_HLEN - sizeof(*ip) - sizeof(*tcp));
}

/* One skb's head and fragments as parts, from `from`; false if they do not fit in `room`. */
static bool add_parts(struct sk_buff *skb, const void *from, struct ddekit_rx_part *parts,
		      unsigned int *n, unsigned int room)
{
	if (*n + 1 + skb_shinfo(skb)->nr_frags > room)
		return false;
	if (skb_tail_pointer(skb) > (u8 *)from)
		parts[(*n)++] = (struct ddekit_rx_part){ from, skb_tail_pointer(skb) - (u8 *)from };
	for (unsigned int i = 0; i < skb_shinfo(skb)->nr_frags; i++) {
		const skb_frag_t *frag = &skb_shinfo(skb)->frags[i];

		parts[(*n)++] = (struct ddekit_rx_part){ skb_frag_address(frag), skb_frag_size(frag) };
	}
	return true;
}

/* The device's receive queue of a frame, which the TAP queue it is written to follows. */
static unsigned int rx_queue(const struct sk_buff *skb)
{
	return skb_rx_queue_recorded(skb) ? skb_get_rx_queue(skb) : 0;
}

/*
 * One frame as received, gathered from where it lies -- its head, its
 * fragments and those of the skbs chained to it (a virtio device's GSO
 * frame) -- with what the skb says of itself in the TAP's header: a GSO
 * frame stays one, a checksum left to do or verified says so.
 */
static void deliver_one(struct sk_buff *skb)
{
	static struct ddekit_rx_part parts[DDEKIT_RX_MAX_PARTS];	/* under the runtime's CPU */
	struct virtio_net_hdr hdr;
	struct sk_buff *chained;
	unsigned int n = 0;

	/* The header's offsets count from the frame's first byte. */
	skb_push(skb, mac_len(skb));
	if (virtio_net_hdr_from_skb(skb, &hdr, virtio_legacy_is_little_endian(), true, 0)) {
		net_warn_ratelimited("%s: a received frame of GSO type %#x dropped: the TAP takes no such frame\n",
				     netdev_name(skb->dev), skb_shinfo(skb)->gso_type);
		return;
	}
	if (!add_parts(skb, skb->data, parts, &n, DDEKIT_RX_MAX_PARTS))
		goto too_many_parts;
	skb_walk_frags(skb, chained)
		if (!add_parts(chained, chained->data, parts, &n, DDEKIT_RX_MAX_PARTS))
			goto too_many_parts;
	ddekit_net_rx(rx_queue(skb), (const struct ddekit_rx_meta *)&hdr, parts, n);
	frames_delivered++;
	return;
too_many_parts:
	net_warn_ratelimited("%s: a received frame of %u bytes dropped: more than %u pieces\n",
			     netdev_name(skb->dev), skb->len, DDEKIT_RX_MAX_PARTS);
}

/* Writes the merge under way, if any: one segment as received, several as one GSO frame. */
void us_gro_flush(void)
{
	static struct ddekit_rx_part parts[DDEKIT_RX_MAX_PARTS];
	struct sk_buff *first = held.skb[0];
	struct ddekit_rx_meta meta;
	struct iphdr *ip;
	struct tcphdr *tcp;
	unsigned int n;

	if (held.n <= 1) {
		if (held.n) {
			deliver_one(first);
			consume_skb(first);
		}
		held.n = 0;
		return;
	}
	ip = (struct iphdr *)first->data;
	tcp = (struct tcphdr *)(ip + 1);
	ip->tot_len = htons(held.ip_len);
	ip->check = 0;
	ip->check = ip_fast_csum(ip, ip->ihl);
	/* The pseudo header's sum, uncomplemented: a CHECKSUM_PARTIAL frame's field. */
	tcp->check = ~csum_tcpudp_magic(ip->saddr, ip->daddr, held.ip_len - sizeof(*ip), IPPROTO_TCP, 0);
	meta = (struct ddekit_rx_meta){
		.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM,
		.gso_type = VIRTIO_NET_HDR_GSO_TCPV4,
		.hdr_len = held.hlen,
		.gso_size = held.gso_size,
		.csum_start = ETH_HLEN + sizeof(*ip),
		.csum_offset = offsetof(struct tcphdr, check),
	};
	n = span_parts(first, 0, held.hlen + held.gso_size, parts);
	for (unsigned int i = 1; i < held.n; i++) {
		struct sk_buff *skb = held.skb[i];
		struct iphdr *sip = (struct iphdr *)skb->data;

		/* Every segment's headers are the first one's length (continues()). */
		n += span_parts(skb, held.hlen, ETH_HLEN + ntohs(sip->tot_len) - held.hlen, parts + n);
	}
	ddekit_net_rx(rx_queue(first), &meta, parts, n);
	frames_delivered += held.n;
	for (unsigned int i = 0; i < held.n; i++)
		consume_skb(held.skb[i]);
	held.n = 0;
}

/* A received frame (from its MAC header on): merged into the held flow, or written. */
void us_gro_receive(struct sk_buff *skb)
{
	struct segment s;

	if (!parse(skb, &s) || !s.payload) {
		us_gro_flush();
		deliver_one(skb);
		consume_skb(skb);
		return;
	}
	if (held.n && !continues(&s))
		us_gro_flush();
	if (!held.n) {
		held.hlen = s.hlen;
		held.ip_len = s.hlen - ETH_HLEN;
		held.gso_size = s.payload;
		held.parts = 0;
	} else if (s.tcp->psh) {
		((struct tcphdr *)((struct iphdr *)held.skb[0]->data + 1))->psh = 1;
	}
	held.skb[held.n++] = skb;
	held.parts += s.parts;
	held.ip_len += s.payload;
	held.next_seq = ntohl(s.tcp->seq) + s.payload;
	held.closed = s.tcp->psh || s.payload < held.gso_size;
}

unsigned long us_rx_frames(void)
{
	return frames_delivered;
}
EXPORT_SYMBOL_GPL(us_rx_frames);
