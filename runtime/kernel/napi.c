// SPDX-License-Identifier: GPL-2.0
/*
 * NAPI and receive for the driver process: the poll list and the NET_RX
 * round that polls it, and the entry points of the frames a poll delivers,
 * which go to the host's interface instead of a stack (gro.c).
 *
 * Stands in for Linux's net/core/dev.c (NAPI, netif_receive_skb(),
 * net_rx_action()).
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/etherdevice.h>
#include <linux/if_vlan.h>

#include "internal.h"

static LIST_HEAD(poll_list);

void netif_napi_add_weight(struct net_device *dev, struct napi_struct *napi,
			   int (*poll)(struct napi_struct *, int), int weight)
{
	INIT_LIST_HEAD(&napi->poll_list);
	napi->poll = poll;
	napi->weight = weight;
	napi->dev = dev;
	napi->skb = NULL;
	/* Scheduled and "in service" until napi_enable(), as in the kernel. */
	set_bit(NAPI_STATE_SCHED, &napi->state);
	set_bit(NAPI_STATE_NPSVC, &napi->state);
	list_add(&napi->dev_list, &dev->napi_list);
}
EXPORT_SYMBOL(netif_napi_add_weight);

void napi_enable(struct napi_struct *n)
{
	n->state &= ~(NAPIF_STATE_SCHED | NAPIF_STATE_NPSVC);
}
EXPORT_SYMBOL(napi_enable);

void napi_disable(struct napi_struct *n)
{
	set_bit(NAPI_STATE_DISABLE, &n->state);
	while (test_and_set_bit(NAPI_STATE_SCHED, &n->state))
		us_wait(ddekit_now_ns() + NSEC_PER_MSEC);
	set_bit(NAPI_STATE_NPSVC, &n->state);
	list_del_init(&n->poll_list);
	clear_bit(NAPI_STATE_DISABLE, &n->state);
}
EXPORT_SYMBOL(napi_disable);

bool napi_schedule_prep(struct napi_struct *n)
{
	unsigned long val, new;

	do {
		val = READ_ONCE(n->state);
		if (unlikely(val & NAPIF_STATE_DISABLE))
			return false;
		new = val | NAPIF_STATE_SCHED;
		/* Already scheduled: remember to poll once more (MISSED). */
		if (val & NAPIF_STATE_SCHED)
			new |= NAPIF_STATE_MISSED;
	} while (cmpxchg(&n->state, val, new) != val);
	return !(val & NAPIF_STATE_SCHED);
}
EXPORT_SYMBOL(napi_schedule_prep);

void __napi_schedule(struct napi_struct *n)
{
	if (list_empty(&n->poll_list))
		list_add_tail(&n->poll_list, &poll_list);
	us_raise_net_rx();
}
EXPORT_SYMBOL(__napi_schedule);

void __napi_schedule_irqoff(struct napi_struct *n)
{
	__napi_schedule(n);
}
EXPORT_SYMBOL(__napi_schedule_irqoff);

bool napi_complete_done(struct napi_struct *n, int work_done)
{
	unsigned long val, new;

	if (unlikely(n->state & (NAPIF_STATE_NPSVC | NAPIF_STATE_IN_BUSY_POLL)))
		return false;
	list_del_init(&n->poll_list);
	do {
		val = READ_ONCE(n->state);
		new = val & ~(NAPIF_STATE_MISSED | NAPIF_STATE_SCHED |
			      NAPIF_STATE_SCHED_THREADED | NAPIF_STATE_PREFER_BUSY_POLL);
		if (val & NAPIF_STATE_MISSED)
			new |= NAPIF_STATE_SCHED;
	} while (cmpxchg(&n->state, val, new) != val);
	if (unlikely(val & NAPIF_STATE_MISSED)) {
		__napi_schedule(n);
		return false;
	}
	return true;
}
EXPORT_SYMBOL(napi_complete_done);

/*
 * NET_RX_SOFTIRQ, as the kernel's net_rx_action: polls the scheduled
 * instances, an instance that used up its budget again at the back of the
 * list, until NET_RX_BUDGET frames or NET_RX_BUDGET_NS have gone by (the
 * kernel's netdev_budget and netdev_budget_usecs defaults), then returns so
 * that the caller lets the process's other threads have the CPU. The
 * round's frames go to the host as they are polled, merged where GRO would
 * merge them (gro.c), and the last merge when the round ends. Writing a
 * frame to the TAP runs the host's stack on it in this thread, as the
 * kernel's stack runs in the poll, so a host that falls behind slows the
 * poll down and the frames wait in the NIC's own ring.
 */
#define NET_RX_BUDGET		300
#define NET_RX_BUDGET_NS	(2 * NSEC_PER_MSEC)

static bool in_net_rx;

bool us_net_rx_action(void)
{
	u64 deadline = ddekit_now_ns() + NET_RX_BUDGET_NS;
	int budget = NET_RX_BUDGET;
	LIST_HEAD(list);
	bool more;

	in_net_rx = true;
	for (;;) {
		struct napi_struct *n;
		int work = 0;

		if (list_empty(&list)) {
			if (list_empty(&poll_list) || budget <= 0 || ddekit_now_ns() >= deadline)
				break;
			list_splice_init(&poll_list, &list);
		}
		n = list_first_entry(&list, struct napi_struct, poll_list);
		list_del_init(&n->poll_list);
		if (test_bit(NAPI_STATE_SCHED, &n->state)) {
			int outer = ddekit_trace_context(US_CTX_SOFTIRQ, (unsigned long)n->poll);

			work = n->poll(n, n->weight);
			ddekit_trace_context(outer, 0);
		}
		if (WARN_ONCE(work > n->weight, "%ps returned %d, exceeding its budget of %d\n",
			      n->poll, work, n->weight))
			work = n->weight;
		budget -= work;
		if (work < n->weight)
			continue;
		/* Budget used up: the instance stays scheduled. */
		if (unlikely(napi_disable_pending(n)))
			napi_complete(n);
		else if (list_empty(&n->poll_list))
			list_add_tail(&n->poll_list, &poll_list);
	}
	us_gro_flush();
	ddekit_net_rx_round_end();
	in_net_rx = false;
	more = !list_empty(&list) || !list_empty(&poll_list);
	list_splice_tail_init(&list, &poll_list);
	return more;
}

/* ---- receive ------------------------------------------------------------- */

/*
 * A received frame (from its MAC header on) for the host: merged within a
 * NET_RX round, written at once outside one.
 */
static void us_net_deliver(struct sk_buff *skb)
{
	if (!skb_mac_header_was_set(skb))
		us_panic("received sk_buff %px without eth_type_trans()", skb);
	if (unlikely(skb->data - skb_mac_header(skb) + skb->len < ETH_HLEN)) {
		/*
		 * A runt the NIC reported as good (QEMU's i82559er does, under
		 * load, with a length of 0): eth_type_trans() could not pull a
		 * header, and the stack would drop it; the host would take it for
		 * a broken driver.
		 */
		kfree_skb_reason(skb, SKB_DROP_REASON_PKT_TOO_SMALL);
		return;
	}
	us_gro_receive(skb);
	if (!in_net_rx) {
		us_gro_flush();
		ddekit_net_rx_round_end();
	}
}

gro_result_t napi_gro_receive(struct napi_struct *napi, struct sk_buff *skb)
{
	us_net_deliver(skb);
	return GRO_NORMAL;
}
EXPORT_SYMBOL(napi_gro_receive);

int netif_receive_skb(struct sk_buff *skb)
{
	us_net_deliver(skb);
	return NET_RX_SUCCESS;
}
EXPORT_SYMBOL(netif_receive_skb);

int netif_rx(struct sk_buff *skb)
{
	us_net_deliver(skb);
	return NET_RX_SUCCESS;
}
EXPORT_SYMBOL(netif_rx);

/* The head napi_get_frags() allocates, as net/core/gro.c sizes it. */
#define GRO_MAX_HEAD (MAX_HEADER + 128)

struct sk_buff *napi_get_frags(struct napi_struct *napi)
{
	if (!napi->skb)
		napi->skb = napi_alloc_skb(napi, GRO_MAX_HEAD);
	return napi->skb;
}
EXPORT_SYMBOL(napi_get_frags);

/* The frame is all in fragments: pull the ethernet header into the head. */
gro_result_t napi_gro_frags(struct napi_struct *napi)
{
	struct sk_buff *skb = napi->skb;

	napi->skb = NULL;
	if (skb_headlen(skb) < ETH_HLEN &&
	    !__pskb_pull_tail(skb, ETH_HLEN - skb_headlen(skb))) {
		kfree_skb(skb);
		return GRO_CONSUMED;
	}
	skb->protocol = eth_type_trans(skb, napi->dev);
	us_net_deliver(skb);
	return GRO_NORMAL;
}
EXPORT_SYMBOL(napi_gro_frags);
