// SPDX-License-Identifier: GPL-2.0
/*
 * The network device core for the driver process: net_device allocation
 * and registration, carrier and queue state, and ethernet helpers (NAPI
 * and receive are napi.c's). Where the kernel would hand packets and state
 * to the stack, this runtime hands them to the host: registration and
 * carrier become ddekit events and taps (docs/design.md §7).
 *
 * Stands in for Linux's net/core/dev.c, net/ethernet/eth.c,
 * net/sched/sch_generic.c and lib/dynamic_queue_limits.c.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/etherdevice.h>
#include <linux/ethtool.h>
#include <linux/dynamic_queue_limits.h>
#include <linux/rtnetlink.h>
#include <linux/slab.h>
#include <linux/if_arp.h>
#include <linux/net_tstamp.h>
#include <net/pkt_sched.h>

#include "internal.h"

DEFINE_PER_CPU_ALIGNED(struct softnet_data, softnet_data);
EXPORT_PER_CPU_SYMBOL(softnet_data);

static struct net_device *registered;

struct net_device *us_first_netdev(void)
{
	return registered;
}

static void event(const char *fmt, ...)
{
	char line[256];
	va_list args;

	va_start(args, fmt);
	vsnprintf(line, sizeof(line), fmt, args);
	va_end(args);
	ddekit_event(line);
}

/* ---- byte queue limits --------------------------------------------------- */

/*
 * BQL bounds the bytes queued in hardware so a qdisc above the driver can
 * keep latency low. There is no qdisc here: the host's TX ring is the
 * queue, and it is bounded already. So the limit stays at its maximum and
 * only the accounting the inline helpers rely on is kept.
 */
void dql_reset(struct dql *dql)
{
	dql->limit = DQL_MAX_LIMIT;
	dql->num_queued = 0;
	dql->num_completed = 0;
	dql->adj_limit = dql->limit;
	dql->last_obj_cnt = 0;
	dql->prev_num_queued = 0;
	dql->prev_last_obj_cnt = 0;
	dql->prev_ovlimit = 0;
	dql->lowest_slack = UINT_MAX;
	dql->slack_start_time = jiffies;
}
EXPORT_SYMBOL(dql_reset);

void dql_init(struct dql *dql, unsigned int hold_time)
{
	dql->max_limit = DQL_MAX_LIMIT;
	dql->min_limit = 0;
	dql->slack_hold_time = hold_time;
	dql_reset(dql);
}
EXPORT_SYMBOL(dql_init);

void dql_completed(struct dql *dql, unsigned int count)
{
	unsigned int completed = dql->num_completed + count;

	/* Completing more than was queued is a driver bug, as in the kernel. */
	if (WARN_ON_ONCE((int)(completed - dql->num_queued) > 0))
		return;
	dql->num_completed = completed;
	dql->adj_limit = dql->limit + completed;
	dql->prev_num_queued = dql->num_queued;
}
EXPORT_SYMBOL(dql_completed);

/* ---- net_device ---------------------------------------------------------- */

void ether_setup(struct net_device *dev)
{
	dev->type = ARPHRD_ETHER;
	dev->hard_header_len = ETH_HLEN;
	dev->min_header_len = ETH_HLEN;
	dev->mtu = ETH_DATA_LEN;
	dev->min_mtu = ETH_MIN_MTU;
	dev->max_mtu = ETH_DATA_LEN;
	dev->addr_len = ETH_ALEN;
	dev->tx_queue_len = DEFAULT_TX_QUEUE_LEN;
	dev->flags = IFF_BROADCAST | IFF_MULTICAST;
	dev->priv_flags |= IFF_TX_SKB_SHARING;
	eth_broadcast_addr(dev->broadcast);
}
EXPORT_SYMBOL(ether_setup);

struct net_device *alloc_netdev_mqs(int sizeof_priv, const char *name,
				    unsigned char name_assign_type,
				    void (*setup)(struct net_device *),
				    unsigned int txqs, unsigned int rxqs)
{
	size_t size = ALIGN(sizeof(struct net_device), NETDEV_ALIGN) + sizeof_priv;
	struct net_device *dev;

	if (!txqs || !rxqs)
		return NULL;
	/* Allocations are aligned to their power-of-two size, >= NETDEV_ALIGN. */
	dev = kzalloc(size, GFP_KERNEL);
	if (!dev)
		return NULL;
	dev->_tx = kcalloc(txqs, sizeof(*dev->_tx), GFP_KERNEL);
	dev->dev_addr = kzalloc(MAX_ADDR_LEN, GFP_KERNEL);
	if (!dev->_tx || !dev->dev_addr)
		goto fail;
	dev->num_tx_queues = txqs;
	dev->real_num_tx_queues = txqs;
	dev->num_rx_queues = rxqs;
	dev->real_num_rx_queues = rxqs;
	for (unsigned int i = 0; i < txqs; i++) {
		struct netdev_queue *q = &dev->_tx[i];

		q->dev = dev;
		spin_lock_init(&q->_xmit_lock);
		q->xmit_lock_owner = -1;
		dql_init(&q->dql, HZ);
	}
	INIT_LIST_HEAD(&dev->napi_list);
	INIT_LIST_HEAD(&dev->uc.list);
	INIT_LIST_HEAD(&dev->mc.list);
	dev->gso_max_size = GSO_LEGACY_MAX_SIZE;
	dev->gso_max_segs = GSO_MAX_SEGS;
	dev->gro_max_size = GRO_LEGACY_MAX_SIZE;
	dev->tso_max_size = TSO_LEGACY_MAX_SIZE;
	dev->tso_max_segs = TSO_MAX_SEGS;
	dev->upper_level = 1;
	dev->lower_level = 1;
	set_bit(__LINK_STATE_PRESENT, &dev->state);
	setup(dev);
	strscpy(dev->name, name, sizeof(dev->name));
	dev->name_assign_type = name_assign_type;
	return dev;
fail:
	kfree(dev->_tx);
	kfree(dev);
	return NULL;
}
EXPORT_SYMBOL(alloc_netdev_mqs);

struct net_device *alloc_etherdev_mqs(int sizeof_priv, unsigned int txqs, unsigned int rxqs)
{
	return alloc_netdev_mqs(sizeof_priv, "eth%d", NET_NAME_ENUM, ether_setup, txqs, rxqs);
}
EXPORT_SYMBOL(alloc_etherdev_mqs);

void free_netdev(struct net_device *dev)
{
	struct napi_struct *n, *next;

	list_for_each_entry_safe(n, next, &dev->napi_list, dev_list)
		list_del_init(&n->dev_list);
	kfree(dev->dev_addr);
	kfree(dev->_tx);
	kfree(dev);
}
EXPORT_SYMBOL(free_netdev);

void dev_addr_mod(struct net_device *dev, unsigned int offset, const void *addr, size_t len)
{
	memcpy((u8 *)dev->dev_addr + offset, addr, len);
	memcpy(dev->dev_addr_shadow + offset, addr, len);
}
EXPORT_SYMBOL(dev_addr_mod);

/*
 * What of the stack's work the host may leave to this driver process
 * (ddekit/host.h): every tx offload, since what the driver's features do not
 * cover the runtime completes in software (checksums in apply_offloads(),
 * segmentation in gso.c), as the kernel's validate_xmit_skb() would; and
 * whether the device checks received checksums.
 */
static unsigned int offloads_of(netdev_features_t features)
{
	unsigned int offloads = DDEKIT_OFFLOAD_CSUM | DDEKIT_OFFLOAD_TSO4 |
				DDEKIT_OFFLOAD_TSO6 | DDEKIT_OFFLOAD_TSO_ECN;

	if (features & NETIF_F_RXCSUM)
		offloads |= DDEKIT_OFFLOAD_RX_CSUM;
	return offloads;
}

/* REGISTERED (and the carrier) for the host: what the net shadow starts from. */
static void announce(struct net_device *dev)
{
	struct ethtool_drvinfo info = {};

	if (dev->ethtool_ops && dev->ethtool_ops->get_drvinfo)
		dev->ethtool_ops->get_drvinfo(dev, &info);
	if (!info.driver[0] && dev->dev.parent)
		strscpy(info.driver, dev_driver_string(dev->dev.parent), sizeof(info.driver));
	ddekit_net_registered(dev->name, info.driver, info.version, dev->perm_addr,
			      dev->dev_addr, dev->mtu, dev->min_mtu, dev->max_mtu,
			      dev->features, dev->hw_features, offloads_of(dev->features),
			      dev->real_num_tx_queues, dev->real_num_rx_queues,
			      netif_carrier_ok(dev));
}

static struct class net_class = { .name = "net" };

int register_netdev(struct net_device *dev)
{
	char *percent = strchr(dev->name, '%');

	if (registered)
		return -EEXIST;	/* one device per driver process */
	if (percent)
		snprintf(percent, sizeof(dev->name) - (percent - dev->name), "%d", 0);
	if (dev->netdev_ops->ndo_init) {
		int err = dev->netdev_ops->ndo_init(dev);

		if (err)
			return err;
	}
	if (dev->addr_assign_type == NET_ADDR_PERM)
		memcpy(dev->perm_addr, dev->dev_addr, dev->addr_len);
	dev->ifindex = 1;
	/* As netdev_register_kobject() names it: dev_info(&dev->dev, ...) says "net eth0: ". */
	dev->dev.kobj.name = dev->name;
	dev->dev.class = &net_class;
	dev->reg_state = NETREG_REGISTERED;
	registered = dev;
	announce(dev);
	return 0;
}
EXPORT_SYMBOL(register_netdev);

/* A process forked from a post-probe template tells the host what it drives. */
void us_net_announce(void)
{
	if (registered)
		announce(registered);
}

void unregister_netdev(struct net_device *dev)
{
	us_netdev_stop(dev);
	if (dev->netdev_ops->ndo_uninit)
		dev->netdev_ops->ndo_uninit(dev);
	dev->reg_state = NETREG_UNREGISTERED;
	if (registered == dev)
		registered = NULL;
	event("UNREGISTERED name=%s", dev->name);
}
EXPORT_SYMBOL(unregister_netdev);

void netif_carrier_on(struct net_device *dev)
{
	if (test_and_clear_bit(__LINK_STATE_NOCARRIER, &dev->state) &&
	    dev->reg_state == NETREG_REGISTERED)
		ddekit_net_carrier(dev->name, 1);
}
EXPORT_SYMBOL(netif_carrier_on);

void netif_carrier_off(struct net_device *dev)
{
	if (!test_and_set_bit(__LINK_STATE_NOCARRIER, &dev->state) &&
	    dev->reg_state == NETREG_REGISTERED)
		ddekit_net_carrier(dev->name, 0);
	us_net_wake_tx_waiter();
}
EXPORT_SYMBOL(netif_carrier_off);

/*
 * The TX thread, while it waits for the driver to wake its stopped queue
 * (or for the link to go): woken alone by the changes it waits for.
 */
static struct task_struct *tx_waiter;

void us_net_wait_tx_queue(struct net_device *dev, struct netdev_queue *txq)
{
	while (netif_xmit_frozen_or_stopped(txq) && netif_running(dev) && netif_carrier_ok(dev)) {
		tx_waiter = current;
		if (us_irq_serving())	/* the interrupts it serves are what wake the queue */
			us_irq_wait_serving();
		else
			us_wait(0);
		tx_waiter = NULL;
	}
}

void us_net_wake_tx_waiter(void)
{
	if (!tx_waiter)
		return;
	us_wake_task(tx_waiter);
	ddekit_tx_rewait();
}

/* The TX thread waits for this (us_net_wait_tx_queue) when the queue is stopped. */
void netif_tx_wake_queue(struct netdev_queue *dev_queue)
{
	if (test_and_clear_bit(__QUEUE_STATE_DRV_XOFF, &dev_queue->state))
		us_net_wake_tx_waiter();
}
EXPORT_SYMBOL(netif_tx_wake_queue);

void netif_schedule_queue(struct netdev_queue *txq)
{
	if (!(txq->state & QUEUE_STATE_ANY_XOFF))
		us_net_wake_tx_waiter();
}
EXPORT_SYMBOL(netif_schedule_queue);

void netif_tx_stop_all_queues(struct net_device *dev)
{
	for (unsigned int i = 0; i < dev->num_tx_queues; i++)
		netif_tx_stop_queue(netdev_get_tx_queue(dev, i));
}
EXPORT_SYMBOL(netif_tx_stop_all_queues);

void netif_device_detach(struct net_device *dev)
{
	if (test_and_clear_bit(__LINK_STATE_PRESENT, &dev->state) && netif_running(dev))
		netif_tx_stop_all_queues(dev);
}
EXPORT_SYMBOL(netif_device_detach);

void netif_device_attach(struct net_device *dev)
{
	if (!test_and_set_bit(__LINK_STATE_PRESENT, &dev->state) && netif_running(dev))
		netif_tx_wake_all_queues(dev);
}
EXPORT_SYMBOL(netif_device_attach);

int eth_validate_addr(struct net_device *dev)
{
	return is_valid_ether_addr(dev->dev_addr) ? 0 : -EADDRNOTAVAIL;
}
EXPORT_SYMBOL(eth_validate_addr);

int eth_mac_addr(struct net_device *dev, void *p)
{
	struct sockaddr *addr = p;

	if (!(dev->priv_flags & IFF_LIVE_ADDR_CHANGE) && netif_running(dev))
		return -EBUSY;
	if (!is_valid_ether_addr(addr->sa_data))
		return -EADDRNOTAVAIL;
	eth_hw_addr_set(dev, addr->sa_data);
	return 0;
}
EXPORT_SYMBOL(eth_mac_addr);

__be16 eth_type_trans(struct sk_buff *skb, struct net_device *dev)
{
	const struct ethhdr *eth;

	skb->dev = dev;
	skb_reset_mac_header(skb);
	eth = (struct ethhdr *)skb->data;
	skb_pull_inline(skb, ETH_HLEN);
	if (unlikely(is_multicast_ether_addr(eth->h_dest))) {
		if (ether_addr_equal(eth->h_dest, dev->broadcast))
			skb->pkt_type = PACKET_BROADCAST;
		else
			skb->pkt_type = PACKET_MULTICAST;
	} else if (unlikely(!ether_addr_equal(eth->h_dest, dev->dev_addr))) {
		skb->pkt_type = PACKET_OTHERHOST;
	}
	if (likely(eth_proto_is_802_3(eth->h_proto)))
		return eth->h_proto;
	/* 802.3 frames: raw IPX or 802.2 LLC, as the kernel tells them apart. */
	if (skb->len >= 2 && *(unsigned short *)skb->data == 0xFFFF)
		return htons(ETH_P_802_3);
	return htons(ETH_P_802_2);
}
EXPORT_SYMBOL(eth_type_trans);

/* ---- ethtool helpers ----------------------------------------------------- */

void ethtool_convert_legacy_u32_to_link_mode(unsigned long *dst, u32 legacy_u32)
{
	bitmap_zero(dst, __ETHTOOL_LINK_MODE_MASK_NBITS);
	dst[0] = legacy_u32;
}
EXPORT_SYMBOL(ethtool_convert_legacy_u32_to_link_mode);

bool ethtool_convert_link_mode_to_legacy_u32(u32 *legacy_u32, const unsigned long *src)
{
	bool lossless = find_next_bit(src, __ETHTOOL_LINK_MODE_MASK_NBITS, 32) ==
			__ETHTOOL_LINK_MODE_MASK_NBITS;

	*legacy_u32 = src[0];
	return lossless;
}
EXPORT_SYMBOL(ethtool_convert_link_mode_to_legacy_u32);

u32 ethtool_op_get_link(struct net_device *dev)
{
	return netif_carrier_ok(dev) ? 1 : 0;
}
EXPORT_SYMBOL(ethtool_op_get_link);

void netdev_stats_to_stats64(struct rtnl_link_stats64 *stats64,
			     const struct net_device_stats *netdev_stats)
{
	const unsigned long *src = (const unsigned long *)netdev_stats;
	u64 *dst = (u64 *)stats64;
	size_t n = min(sizeof(*netdev_stats) / sizeof(unsigned long),
		       sizeof(*stats64) / sizeof(u64));

	BUILD_BUG_ON(n != sizeof(*netdev_stats) / sizeof(unsigned long));
	for (size_t i = 0; i < n; i++)
		dst[i] = READ_ONCE(src[i]);
	memset(dst + n, 0, sizeof(*stats64) - n * sizeof(u64));
}
EXPORT_SYMBOL(netdev_stats_to_stats64);

int ethtool_op_get_ts_info(struct net_device *dev, struct ethtool_ts_info *info)
{
	info->so_timestamping = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_RX_SOFTWARE |
				SOF_TIMESTAMPING_SOFTWARE;
	info->phc_index = -1;
	return 0;
}
EXPORT_SYMBOL(ethtool_op_get_ts_info);

/* The device's counters as the stack reads them, plus the core's drops. */
struct rtnl_link_stats64 *dev_get_stats(struct net_device *dev, struct rtnl_link_stats64 *storage)
{
	const struct net_device_ops *ops = dev->netdev_ops;
	const struct net_device_core_stats __percpu *core = READ_ONCE(dev->core_stats);

	if (ops->ndo_get_stats64) {
		memset(storage, 0, sizeof(*storage));
		ops->ndo_get_stats64(dev, storage);
	} else if (ops->ndo_get_stats) {
		netdev_stats_to_stats64(storage, ops->ndo_get_stats(dev));
	} else {
		netdev_stats_to_stats64(storage, &dev->stats);
	}
	if (core) {
		/* The runtime has one CPU, 0 (docs/design.md §6). */
		const struct net_device_core_stats *c = per_cpu_ptr(core, 0);

		storage->rx_dropped += READ_ONCE(c->rx_dropped);
		storage->tx_dropped += READ_ONCE(c->tx_dropped);
		storage->rx_nohandler += READ_ONCE(c->rx_nohandler);
		storage->rx_otherhost_dropped += READ_ONCE(c->rx_otherhost_dropped);
	}
	return storage;
}
EXPORT_SYMBOL(dev_get_stats);

/* ndo_features_check for a device that takes whatever the stack offers. */
netdev_features_t passthru_features_check(struct sk_buff *skb, struct net_device *dev,
					  netdev_features_t features)
{
	return features;
}
EXPORT_SYMBOL(passthru_features_check);

/*
 * The RSS hash key: one random key per boot (here, per driver process),
 * the same for every device and every caller, as the kernel's.
 */
void netdev_rss_key_fill(void *buffer, size_t len)
{
	static u8 key[NETDEV_RSS_KEY_LEN];
	static bool filled;

	BUG_ON(len > sizeof(key));
	if (!filled) {
		ddekit_random(key, sizeof(key));
		filled = true;
	}
	memcpy(buffer, key, len);
}
EXPORT_SYMBOL(netdev_rss_key_fill);
