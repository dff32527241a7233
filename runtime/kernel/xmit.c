// SPDX-License-Identifier: GPL-2.0
/*
 * Transmission, as __dev_queue_xmit() and validate_xmit_skb() would do it:
 * frames the driver process reads from its queue of the host's TAP and
 * frames the host lends it on the tx ring (docs/protocol.md, "Sending"),
 * in batches, each with its offloads applied or done in software. Called
 * by the executable's TX thread, which does not hold the CPU: each entry
 * point takes it.
 *
 * Several queues: a frame goes to the transmit queue of the TAP queue it
 * came from (the host's steering keeps a flow on one), modulo the queues
 * the driver runs. One thread sends on all of them, as one CPU would: the
 * runtime has one (docs/design.md §6), so threads per queue would only
 * take turns at it.
 *
 * Stands in for Linux's net/core/dev.c (__dev_queue_xmit(),
 * validate_xmit_skb()).
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <linux/tcp.h>
#include <linux/slab.h>

#include "internal.h"

static struct netdev_queue *tx_queue(struct net_device *dev, unsigned int queue)
{
	return netdev_get_tx_queue(dev, queue % dev->real_num_tx_queues);
}

/*
 * __dev_queue_xmit() of one skb to a queue. more is xmit_more: another
 * frame follows at once, so the driver may leave its doorbell (e1000's
 * tail register write, an MMIO exit under emulation and a TX interrupt
 * each) for the last frame of a batch -- or for when it stops the queue,
 * which drivers must flush on, as in the kernel.
 */
static int xmit_one(struct net_device *dev, struct sk_buff *skb, unsigned int queue, bool wait,
		    bool more)
{
	struct netdev_queue *txq = tx_queue(dev, queue);
	int ret;

	skb->dev = dev;
	skb_reset_mac_header(skb);
	skb->protocol = eth_hdr(skb)->h_proto;
	skb_set_queue_mapping(skb, txq - dev->_tx);
	/* A stopped queue holds frames back until the driver wakes it. */
	if (wait)
		us_net_wait_tx_queue(dev, txq);
	if (!netif_running(dev) || !netif_carrier_ok(dev))
		return -ENETDOWN;
	local_bh_disable();
	__netif_tx_lock(txq, smp_processor_id());
	if (netif_xmit_frozen_or_stopped(txq))
		ret = NETDEV_TX_BUSY;
	else
		ret = netdev_start_xmit(skb, dev, txq, more);
	__this_cpu_write(softnet_data.xmit.more, 0);
	__netif_tx_unlock(txq);
	local_bh_enable();
	return ret;
}

/*
 * __dev_queue_xmit() for one frame, copied into a fresh skb (tests, no
 * rings). Returns NETDEV_TX_OK, NETDEV_TX_BUSY, or -errno.
 */
int us_net_xmit(const void *frame, unsigned int len)
{
	struct net_device *dev;
	struct sk_buff *skb;
	int ret = -ENETDOWN;

	if (len < ETH_HLEN)
		return -EINVAL;
	us_cpu_enter();
	dev = us_first_netdev();
	if (!dev)
		goto out;
	ret = -ENOMEM;
	skb = netdev_alloc_skb(dev, len);
	if (!skb)
		goto out;
	skb_put_data(skb, frame, len);
	ret = xmit_one(dev, skb, 0, false, false);
	if (ret != NETDEV_TX_OK)
		kfree_skb(skb);
out:
	us_cpu_leave();
	return ret;
}
EXPORT_SYMBOL_GPL(us_net_xmit);

/*
 * Puts what the host asks of the driver for a frame (the TAP's
 * virtio_net_hdr, docs/protocol.md) on its skb the way the stack hands it
 * to a driver: protocol and header offsets, CHECKSUM_PARTIAL with the
 * checksum's start and offset, gso_size/type/segs. A checksum the driver's
 * features do not cover is computed here, as validate_xmit_skb() does; a
 * GSO frame they do not cover is left for segment_if_needed(). 0 or -errno.
 */
static int apply_offloads(struct net_device *dev, struct sk_buff *skb,
			  const struct ddekit_tx_frame *f)
{
	const struct ethhdr *eth = (const struct ethhdr *)skb->data;
	unsigned int l3 = eth_type_vlan(eth->h_proto) ? VLAN_ETH_HLEN : ETH_HLEN;
	struct skb_shared_info *shinfo = skb_shinfo(skb);
	unsigned int gso = f->flags & (DDEKIT_TX_GSO_TCPV4 | DDEKIT_TX_GSO_TCPV6);
	unsigned int l4_end;

	skb_reset_mac_header(skb);
	skb->protocol = eth->h_proto;
	if (l3 == VLAN_ETH_HLEN && skb->len >= VLAN_ETH_HLEN)
		skb->protocol = ((const struct vlan_ethhdr *)eth)->h_vlan_encapsulated_proto;
	skb_set_network_header(skb, l3);
	if (!(f->flags & DDEKIT_TX_CSUM))
		return gso || (f->flags & DDEKIT_TX_GSO_ECN) ? -EINVAL : 0;
	if (f->csum_start < l3 || f->csum_start + f->csum_offset + sizeof(__sum16) > skb->len)
		return -EINVAL;
	skb->ip_summed = CHECKSUM_PARTIAL;
	skb->csum_start = skb_headroom(skb) + f->csum_start;
	skb->csum_offset = f->csum_offset;
	skb_set_transport_header(skb, f->csum_start);
	if (!gso)
		return us_csum_covered(dev->features, skb) ? 0 : skb_checksum_help(skb);
	if (gso == (DDEKIT_TX_GSO_TCPV4 | DDEKIT_TX_GSO_TCPV6) || !f->gso_size ||
	    f->csum_start + sizeof(struct tcphdr) > skb->len)
		return -EINVAL;
	l4_end = f->csum_start + tcp_hdrlen(skb);
	if (l4_end >= skb->len)
		return -EINVAL;
	shinfo->gso_type = gso == DDEKIT_TX_GSO_TCPV4 ? SKB_GSO_TCPV4 : SKB_GSO_TCPV6;
	if (f->flags & DDEKIT_TX_GSO_ECN)
		shinfo->gso_type |= SKB_GSO_TCP_ECN;
	shinfo->gso_size = f->gso_size;
	shinfo->gso_segs = DIV_ROUND_UP(skb->len - l4_end, f->gso_size);
	return 0;
}

/*
 * The segments of a GSO frame the driver cannot send whole, as
 * validate_xmit_skb() cuts them (gso.c); NULL if it can, or an ERR_PTR.
 */
static struct sk_buff *segment_if_needed(struct net_device *dev, struct sk_buff *skb)
{
	if (!netif_needs_gso(skb, dev->features))
		return NULL;
	return __skb_gso_segment(skb, dev->features, true);
}

/*
 * Sends one frame's segments, xmit_more on all but the last unless more.
 * Once the driver has taken one the frame counts as sent: a later segment
 * it refuses (the link went down meanwhile) is dropped, as the kernel drops
 * what a stopped device's queue held, and TCP sends it again.
 */
static int xmit_segments(struct net_device *dev, struct sk_buff *segs, unsigned int queue,
			 bool more)
{
	bool sent = false;
	int ret = NETDEV_TX_OK;

	while (segs) {
		struct sk_buff *seg = segs;

		segs = seg->next;
		seg->next = NULL;
		ret = xmit_one(dev, seg, queue, true, segs || more);
		if (ret != NETDEV_TX_OK) {
			kfree_skb(seg);
			kfree_skb_list(segs);
			break;
		}
		sent = true;
	}
	return sent ? NETDEV_TX_OK : ret;
}

/*
 * Each taken frame's xmit_more: whether a later frame of the batch goes to
 * the same transmit queue. It is about that queue alone, its doorbell rung
 * by the last frame it gets (a frame of another queue that came after it
 * would leave it unrung, and its flows stalled). One pass from the end,
 * the queues seen so far in a mask: a frame's queue is below the TAP's
 * queues and the host's, at most eight (docs/protocol.md, "Several queues").
 */
static void more_per_queue(struct net_device *dev, const struct ddekit_tx_frame *frames,
			   struct sk_buff *const *skbs, unsigned int n, bool *more)
{
	unsigned long later = 0;

	for (unsigned int i = n; i-- > 0;) {
		unsigned int q;

		if (!skbs[i])
			continue;
		q = tx_queue(dev, frames[i].queue) - dev->_tx;
		if (q >= BITS_PER_LONG)
			us_panic("a tx frame for queue %u", q);
		more[i] = later & BIT(q);
		later |= BIT(q);
	}
}

/*
 * Sends a batch with the CPU held: each frame's skb built around its
 * buffer (the frame at its start), its offloads applied, segmented if the
 * driver cannot take it whole; xmit_more on all but the last the driver
 * gets for each queue. `done` becomes the destructor of each skb the driver
 * takes. Each frame's status: 0 the driver has it (done runs when its skb is freed, or
 * at once for a frame sent as segments, which are copies); otherwise
 * -errno, and the buffer was not used and is still the caller's.
 */
static void xmit_frames(struct net_device *dev, struct ddekit_tx_frame *frames, unsigned int n,
			void (*done)(struct sk_buff *skb))
{
	struct sk_buff *skbs[DDEKIT_TX_BATCH], *segs[DDEKIT_TX_BATCH];
	bool more[DDEKIT_TX_BATCH];
	unsigned int i;

	if (n > DDEKIT_TX_BATCH)
		us_panic("a tx batch of %u frames, more than %u", n, DDEKIT_TX_BATCH);
	/* Skbs first: a frame refused here must not be the one that rings the doorbell. */
	for (i = 0; i < n; i++) {
		struct ddekit_tx_frame *f = &frames[i];

		skbs[i] = segs[i] = NULL;
		f->status = -ENETDOWN;
		if (!dev)
			continue;
		f->status = -EINVAL;
		if (f->len < ETH_HLEN || !us_in_dma_region(f->buffer, f->room))
			continue;
		f->status = -EMSGSIZE;
		skbs[i] = us_build_tx_skb(f->buffer, f->len, f->room);
		if (!skbs[i])
			continue;
		f->status = apply_offloads(dev, skbs[i], f);
		if (!f->status) {
			segs[i] = segment_if_needed(dev, skbs[i]);
			f->status = PTR_ERR_OR_ZERO(segs[i]);
		}
		if (f->status) {
			us_free_unsent_skb(skbs[i]);
			skbs[i] = NULL;
			continue;
		}
		skbs[i]->destructor = done;
	}
	more_per_queue(dev, frames, skbs, n, more);
	for (i = 0; i < n; i++) {
		struct sk_buff *skb = skbs[i];
		int ret;

		if (!skb)
			continue;
		if (segs[i])
			ret = xmit_segments(dev, segs[i], frames[i].queue, more[i]);
		else
			ret = xmit_one(dev, skb, frames[i].queue, true, more[i]);
		if (ret == NETDEV_TX_OK) {
			if (segs[i])
				consume_skb(skb);	/* copied: its buffer is done with now */
			continue;
		}
		us_free_unsent_skb(skb);	/* not taken: the caller reports the drop */
		frames[i].status = ret < 0 ? ret : -EBUSY;
	}
}

static void pool_skb_done(struct sk_buff *skb)
{
	ddekit_net_tx_done((unsigned long)skb->head, 0);
}

/*
 * Frames the host lends on the tx ring, each at the start of its pool
 * buffers, sent in place (zero copy): ddekit_net_tx_done(buffer) follows
 * when its skb is freed. A frame whose status is not 0 was not used.
 */
void us_net_xmit_buffers(struct ddekit_tx_frame *frames, unsigned int n)
{
	unsigned int i;

	us_cpu_enter();
	for (i = 0; i < n; i++)
		if (!us_in_pool(frames[i].buffer))
			us_panic("a tx ring frame at %px, outside the pool", frames[i].buffer);
	xmit_frames(us_first_netdev(), frames, n, pool_skb_done);
	us_cpu_leave();
}
EXPORT_SYMBOL_GPL(us_net_xmit_buffers);

/*
 * A frame read from the TAP is done with. Its head is freed by now (the
 * destructor runs last, skb.c), but its address still names the frame's
 * record: no other block can take that address before this returns, since
 * both run in one entry of the CPU.
 */
static void tap_skb_done(struct sk_buff *skb)
{
	ddekit_tap_done(skb->head, false);
}

/*
 * The TAP's frames are read into blocks that hold the longest a TAP gives
 * (a 64 KiB GSO frame), kept ready between batches; one that fits a small
 * block is copied into one, so that an ACK does not hold 128 KiB while the
 * driver sends it, and its block is read into again.
 */
#define TAP_FRAME_ROOM	(DDEKIT_TX_MAX_FRAME + DDEKIT_TX_TAILROOM)
#define TAP_SMALL_ROOM	2048u
#define TAP_BATCH	16

static void *tap_blocks[TAP_BATCH];

/*
 * Reads up to TAP_BATCH frames into the blocks, without the CPU: the IRQ
 * thread completes frames and takes received ones meanwhile (holding the
 * CPU across these system calls cost e1000's sending a fifth). The queues
 * take turns, a frame each, until every one has come up empty in a row.
 * Each frame is recorded with the host as held at once. Returns how many.
 */
static unsigned int read_tap_frames(struct ddekit_tx_frame *frames)
{
	static unsigned int next_queue;
	unsigned int n = 0, queues = ddekit_tap_queues(), empty = 0;

	while (n < TAP_BATCH && tap_blocks[n] && empty < queues) {
		struct ddekit_tx_frame *f = &frames[n];
		unsigned int queue = next_queue;

		next_queue = (next_queue + 1) % queues;
		if (ddekit_tap_read(queue, tap_blocks[n], TAP_FRAME_ROOM - DDEKIT_TX_TAILROOM, f) <= 0) {
			empty++;
			continue;
		}
		empty = 0;
		f->buffer = tap_blocks[n];
		f->room = TAP_FRAME_ROOM;
		ddekit_tap_hold(f);
		n++;
	}
	return n;
}

/* With the CPU: a frame that fits a small block moves to one; its big block stays for the next read. */
static void settle_tap_frame(struct ddekit_tx_frame *f, unsigned int i)
{
	void *small = NULL;

	if (f->len + DDEKIT_TX_TAILROOM <= TAP_SMALL_ROOM)
		small = kmalloc(TAP_SMALL_ROOM, GFP_ATOMIC);
	if (small) {
		memcpy(small, f->buffer, f->len);
		ddekit_tap_moved(f->buffer, small);
		f->buffer = small;
		f->room = TAP_SMALL_ROOM;
	} else {
		tap_blocks[i] = NULL;
	}
}

/*
 * Frames from the driver's queues of the host's TAP (docs/protocol.md,
 * "Sending"), up to a batch, once the driver's queues run: each read into
 * a block of the arena, recorded with the host as held, and sent from
 * there. Returns how many were read: 0 when the TAP has none, the host's
 * gate is closed or every record is in use.
 */
unsigned int us_net_xmit_tap(void)
{
	struct ddekit_tx_frame frames[TAP_BATCH];
	struct net_device *dev;
	unsigned int i, n;

	us_cpu_enter();
	dev = us_first_netdev();
	for (i = 0; dev && i < dev->real_num_tx_queues; i++)
		us_net_wait_tx_queue(dev, netdev_get_tx_queue(dev, i));
	for (i = 0; i < TAP_BATCH && dev; i++)
		if (!tap_blocks[i])
			tap_blocks[i] = kmalloc(TAP_FRAME_ROOM, GFP_ATOMIC);
	us_cpu_leave();
	n = dev ? read_tap_frames(frames) : 0;
	if (!n)
		return 0;
	us_cpu_enter();
	for (i = 0; i < n; i++)
		settle_tap_frame(&frames[i], i);
	xmit_frames(us_first_netdev(), frames, n, tap_skb_done);
	for (i = 0; i < n; i++) {
		if (!frames[i].status)
			continue;
		ddekit_tap_done(frames[i].buffer, true);
		kfree(frames[i].buffer);
	}
	us_cpu_leave();
	return n;
}
EXPORT_SYMBOL_GPL(us_net_xmit_tap);
