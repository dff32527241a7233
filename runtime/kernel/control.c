// SPDX-License-Identifier: GPL-2.0
/*
 * What the host asks of the network device (docs/protocol.md requests), as
 * the kernel's dev_open(), dev_set_mtu(), dev_set_mac_address(),
 * dev_set_rx_mode(), netdev_update_features(), the ethtool ioctls and
 * __dev_queue_xmit() would do it. Called by the executable from threads
 * that do not hold the CPU: each entry point takes it.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <linux/tcp.h>
#include <linux/ethtool.h>
#include <linux/rtnetlink.h>
#include <linux/slab.h>

#include "internal.h"

/* Runs fn(dev, arg) with the CPU and the RTNL held; -ENODEV without a device. */
static int with_rtnl(int (*fn)(struct net_device *dev, void *arg), void *arg)
{
	struct net_device *dev;
	int err = -ENODEV;

	us_cpu_enter();
	rtnl_lock();
	dev = us_first_netdev();
	if (dev)
		err = fn(dev, arg);
	rtnl_unlock();
	us_cpu_leave();
	return err;
}

/*
 * dev_watchdog() (net/sched/sch_generic.c): a queue the driver stopped and
 * has not sent from for watchdog_timeo is a hung transmitter, and the
 * driver's ndo_tx_timeout resets it (e1000 schedules its reset task).
 */
static void tx_watchdog(struct timer_list *t)
{
	struct net_device *dev = from_timer(dev, t, watchdog_timer);

	if (!netif_running(dev) || !netif_carrier_ok(dev) || !netif_device_present(dev))
		goto rearm;
	for (unsigned int i = 0; i < dev->real_num_tx_queues; i++) {
		struct netdev_queue *txq = netdev_get_tx_queue(dev, i);

		if (netif_xmit_stopped(txq) &&
		    time_after(jiffies, READ_ONCE(txq->trans_start) + dev->watchdog_timeo)) {
			netdev_warn(dev, "transmit queue %u timed out\n", i);
			dev->netdev_ops->ndo_tx_timeout(dev, i);
			break;
		}
	}
rearm:
	if (netif_running(dev))
		mod_timer(&dev->watchdog_timer, round_jiffies(jiffies + dev->watchdog_timeo));
}

/* The latest transmission on any of the device's queues (net/sched/sch_generic.c). */
unsigned long dev_trans_start(struct net_device *dev)
{
	unsigned long res = READ_ONCE(netdev_get_tx_queue(dev, 0)->trans_start);

	for (unsigned int i = 1; i < dev->num_tx_queues; i++) {
		unsigned long val = READ_ONCE(netdev_get_tx_queue(dev, i)->trans_start);

		if (val && time_after(val, res))
			res = val;
	}
	return res;
}
EXPORT_SYMBOL(dev_trans_start);

static int do_open(struct net_device *dev, void *unused)
{
	int err;

	if (netif_running(dev))
		return 0;
	set_bit(__LINK_STATE_START, &dev->state);
	err = dev->netdev_ops->ndo_open(dev);
	if (err) {
		clear_bit(__LINK_STATE_START, &dev->state);
		return err;
	}
	dev->flags |= IFF_UP;
	if (dev->netdev_ops->ndo_set_rx_mode)
		dev->netdev_ops->ndo_set_rx_mode(dev);
	if (dev->netdev_ops->ndo_tx_timeout) {
		if (dev->watchdog_timeo <= 0)
			dev->watchdog_timeo = 5 * HZ;
		timer_setup(&dev->watchdog_timer, tx_watchdog, 0);
		mod_timer(&dev->watchdog_timer, round_jiffies(jiffies + dev->watchdog_timeo));
	}
	return 0;
}

int us_net_open(void)
{
	return with_rtnl(do_open, NULL);
}
EXPORT_SYMBOL_GPL(us_net_open);

/* dev_close(): also what unregister_netdev() does to a running device. */
int us_netdev_stop(struct net_device *dev)
{
	int err = 0;

	if (!netif_running(dev))
		return 0;
	clear_bit(__LINK_STATE_START, &dev->state);
	us_net_wake_tx_waiter();
	if (dev->netdev_ops->ndo_tx_timeout)
		timer_delete_sync(&dev->watchdog_timer);
	if (dev->netdev_ops->ndo_stop)
		err = dev->netdev_ops->ndo_stop(dev);
	dev->flags &= ~IFF_UP;
	return err;
}

/*
 * The host's stop. What the driver still has mapped for streaming now has
 * leaked; its coherent rings may stay until remove, which is judged once
 * remove and the managed resources' release are over (pci.c, unbind_cleanup).
 */
static int do_stop(struct net_device *dev, void *unused)
{
	int err = us_netdev_stop(dev);

	us_trace(DDEKIT_EV_STOP, 0, dev, DDEKIT_STOP_CLOSE, 0);
	return err;
}

int us_net_stop(void)
{
	return with_rtnl(do_stop, NULL);
}
EXPORT_SYMBOL_GPL(us_net_stop);

static int do_set_mtu(struct net_device *dev, void *arg)
{
	unsigned int mtu = *(unsigned int *)arg;

	if (mtu < dev->min_mtu || mtu > dev->max_mtu)
		return -EINVAL;
	if (dev->netdev_ops->ndo_change_mtu)
		return dev->netdev_ops->ndo_change_mtu(dev, mtu);
	dev->mtu = mtu;
	return 0;
}

int us_net_set_mtu(unsigned int mtu)
{
	return with_rtnl(do_set_mtu, &mtu);
}
EXPORT_SYMBOL_GPL(us_net_set_mtu);

static int do_set_mac(struct net_device *dev, void *arg)
{
	struct sockaddr sa = { .sa_family = dev->type };

	if (!dev->netdev_ops->ndo_set_mac_address)
		return -EOPNOTSUPP;
	memcpy(sa.sa_data, arg, ETH_ALEN);
	if (!is_valid_ether_addr((u8 *)sa.sa_data))
		return -EADDRNOTAVAIL;
	return dev->netdev_ops->ndo_set_mac_address(dev, &sa);
}

int us_net_set_mac(const u8 *mac)
{
	return with_rtnl(do_set_mac, (void *)mac);
}
EXPORT_SYMBOL_GPL(us_net_set_mac);

struct rx_mode {
	u32 flags;
	unsigned int n_mc;
	const u8 *mc;
};

static void free_mc_list(struct net_device *dev)
{
	struct netdev_hw_addr *ha, *next;

	list_for_each_entry_safe(ha, next, &dev->mc.list, list) {
		list_del(&ha->list);
		kfree(ha);
	}
	dev->mc.count = 0;
}

static int do_set_rx_mode(struct net_device *dev, void *arg)
{
	const struct rx_mode *mode = arg;

	free_mc_list(dev);
	for (unsigned int i = 0; i < mode->n_mc; i++) {
		struct netdev_hw_addr *ha = kzalloc(sizeof(*ha), GFP_KERNEL);

		if (!ha) {
			free_mc_list(dev);
			return -ENOMEM;
		}
		memcpy(ha->addr, mode->mc + i * ETH_ALEN, ETH_ALEN);
		ha->type = NETDEV_HW_ADDR_T_MULTICAST;
		ha->refcount = 1;
		ha->global_use = true;
		list_add_tail(&ha->list, &dev->mc.list);
		dev->mc.count++;
	}
	dev->flags &= ~(IFF_PROMISC | IFF_ALLMULTI);
	if (mode->flags & DDEKIT_RX_MODE_PROMISC)
		dev->flags |= IFF_PROMISC;
	if (mode->flags & DDEKIT_RX_MODE_ALLMULTI)
		dev->flags |= IFF_ALLMULTI;
	if (netif_running(dev) && dev->netdev_ops->ndo_set_rx_mode) {
		netif_addr_lock_bh(dev);
		dev->netdev_ops->ndo_set_rx_mode(dev);
		netif_addr_unlock_bh(dev);
	}
	return 0;
}

int us_net_set_rx_mode(u32 flags, unsigned int n_mc, const u8 *mc)
{
	struct rx_mode mode = { flags, n_mc, mc };

	return with_rtnl(do_set_rx_mode, &mode);
}
EXPORT_SYMBOL_GPL(us_net_set_rx_mode);

/* __netdev_update_features(): only hw_features can change, fixed up by the driver. */
static int do_set_features(struct net_device *dev, void *arg)
{
	netdev_features_t wanted = (dev->features & ~dev->hw_features) |
				   (*(u64 *)arg & dev->hw_features);
	int err = 0;

	if (dev->netdev_ops->ndo_fix_features)
		wanted = dev->netdev_ops->ndo_fix_features(dev, wanted);
	if (wanted == dev->features)
		return 0;
	if (dev->netdev_ops->ndo_set_features)
		err = dev->netdev_ops->ndo_set_features(dev, wanted);
	if (!err)
		dev->features = wanted;
	return err;
}

int us_net_set_features(u64 features)
{
	return with_rtnl(do_set_features, &features);
}
EXPORT_SYMBOL_GPL(us_net_set_features);

/* ---- ethtool -------------------------------------------------------------- */

struct drvinfo_out {
	char *driver, *version, *fw_version, *bus_info;
	unsigned int len;
};

static int do_drvinfo(struct net_device *dev, void *arg)
{
	struct drvinfo_out *out = arg;
	struct ethtool_drvinfo info = {};

	if (dev->ethtool_ops && dev->ethtool_ops->get_drvinfo)
		dev->ethtool_ops->get_drvinfo(dev, &info);
	if (!info.driver[0] && dev->dev.parent)
		strscpy(info.driver, dev_driver_string(dev->dev.parent), sizeof(info.driver));
	if (!info.bus_info[0] && dev->dev.parent)
		strscpy(info.bus_info, dev_name(dev->dev.parent), sizeof(info.bus_info));
	strscpy(out->driver, info.driver, out->len);
	strscpy(out->version, info.version, out->len);
	strscpy(out->fw_version, info.fw_version, out->len);
	strscpy(out->bus_info, info.bus_info, out->len);
	return 0;
}

int us_net_drvinfo(char *driver, char *version, char *fw_version, char *bus_info,
		   unsigned int len)
{
	struct drvinfo_out out = { driver, version, fw_version, bus_info, len };

	return with_rtnl(do_drvinfo, &out);
}
EXPORT_SYMBOL_GPL(us_net_drvinfo);

struct link_out {
	u32 *speed;
	u8 *duplex, *autoneg, *port, *link;
};

static int do_link(struct net_device *dev, void *arg)
{
	struct link_out *out = arg;
	const struct ethtool_ops *ops = dev->ethtool_ops;
	struct ethtool_link_ksettings ks = {};
	int err = -EOPNOTSUPP;

	if (ops && ops->get_link_ksettings)
		err = ops->get_link_ksettings(dev, &ks);
	if (err) {
		ks.base.speed = SPEED_UNKNOWN;
		ks.base.duplex = DUPLEX_UNKNOWN;
	}
	*out->speed = ks.base.speed;
	*out->duplex = ks.base.duplex;
	*out->autoneg = ks.base.autoneg;
	*out->port = ks.base.port;
	*out->link = ops && ops->get_link ? ops->get_link(dev) : netif_carrier_ok(dev);
	return 0;
}

int us_net_link(u32 *speed, u8 *duplex, u8 *autoneg, u8 *port, u8 *link)
{
	struct link_out out = { speed, duplex, autoneg, port, link };

	return with_rtnl(do_link, &out);
}
EXPORT_SYMBOL_GPL(us_net_link);

struct stats_out {
	u32 first, max, *total;
	char (*names)[ETH_GSTRING_LEN];
	u64 *values;
};

/* Statistics [first, first + max) of get_ethtool_stats; returns how many. */
static int do_stats(struct net_device *dev, void *arg)
{
	struct stats_out *out = arg;
	const struct ethtool_ops *ops = dev->ethtool_ops;
	struct ethtool_stats estats = {};
	u8 *strings;
	u64 *data;
	int total, n;

	if (!ops || !ops->get_sset_count || !ops->get_strings || !ops->get_ethtool_stats)
		return -EOPNOTSUPP;
	total = ops->get_sset_count(dev, ETH_SS_STATS);
	if (total < 0)
		return total;
	*out->total = total;
	if (out->first >= total)
		return 0;
	strings = kcalloc(total, ETH_GSTRING_LEN, GFP_KERNEL);
	data = kcalloc(total, sizeof(u64), GFP_KERNEL);
	if (!strings || !data) {
		kfree(strings);
		kfree(data);
		return -ENOMEM;
	}
	ops->get_strings(dev, ETH_SS_STATS, strings);
	estats.n_stats = total;
	ops->get_ethtool_stats(dev, &estats, data);
	n = min_t(int, out->max, total - out->first);
	for (int i = 0; i < n; i++) {
		strscpy(out->names[i], strings + (out->first + i) * ETH_GSTRING_LEN,
			ETH_GSTRING_LEN);
		out->values[i] = data[out->first + i];
	}
	kfree(strings);
	kfree(data);
	return n;
}

int us_net_stats(u32 first, u32 max, u32 *total, char (*names)[ETH_GSTRING_LEN], u64 *values)
{
	struct stats_out out = { first, max, total, names, values };

	return with_rtnl(do_stats, &out);
}
EXPORT_SYMBOL_GPL(us_net_stats);

/* ---- transmit ------------------------------------------------------------- */

/*
 * __dev_queue_xmit() of one skb to queue 0. more is xmit_more: another
 * frame follows at once, so the driver may leave its doorbell (e1000's
 * tail register write, an MMIO exit under emulation and a TX interrupt
 * each) for the last frame of a batch -- or for when it stops the queue,
 * which drivers must flush on, as in the kernel.
 */
static int xmit_one(struct net_device *dev, struct sk_buff *skb, bool wait, bool more)
{
	struct netdev_queue *txq = netdev_get_tx_queue(dev, 0);
	int ret;

	skb->dev = dev;
	skb_reset_mac_header(skb);
	skb->protocol = eth_hdr(skb)->h_proto;
	skb_set_queue_mapping(skb, 0);
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
	us_net_tx_queue_check(txq);
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
	ret = xmit_one(dev, skb, false, false);
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

static void pool_skb_done(struct sk_buff *skb)
{
	ddekit_net_tx_done((unsigned long)skb->head, 0);
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
static int xmit_segments(struct net_device *dev, struct sk_buff *segs, bool more)
{
	bool sent = false;
	int ret = NETDEV_TX_OK;

	while (segs) {
		struct sk_buff *seg = segs;

		segs = seg->next;
		seg->next = NULL;
		ret = xmit_one(dev, seg, true, segs || more);
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
 * Zero-copy transmit of a batch of frames, each at the start of a host pool
 * buffer, with one entry into the CPU for all of them and xmit_more set on
 * all but the last one the driver gets. Each frame's status: 0 the driver
 * has it, and ddekit_net_tx_done(buffer) follows when its skb is freed (for
 * a frame sent as segments, copies, as soon as they are sent); otherwise
 * -errno and the buffer was not used.
 */
void us_net_xmit_buffers(struct ddekit_tx_frame *frames, unsigned int n)
{
	struct sk_buff *skbs[DDEKIT_TX_BATCH], *segs[DDEKIT_TX_BATCH];
	struct net_device *dev;
	unsigned int i, last = 0;

	if (n > DDEKIT_TX_BATCH)
		us_panic("a tx batch of %u frames, more than %u", n, DDEKIT_TX_BATCH);
	us_cpu_enter();
	dev = us_first_netdev();
	/* Skbs first: a frame refused here must not be the one that rings the doorbell. */
	for (i = 0; i < n; i++) {
		struct ddekit_tx_frame *f = &frames[i];

		skbs[i] = segs[i] = NULL;
		f->status = -ENETDOWN;
		if (!dev)
			continue;
		f->status = -EINVAL;
		if (f->len < ETH_HLEN || !us_in_pool(f->buffer))
			continue;
		f->status = -EMSGSIZE;
		skbs[i] = us_build_pool_skb(f->buffer, f->len, f->room);
		if (!skbs[i])
			continue;
		f->status = apply_offloads(dev, skbs[i], f);
		if (!f->status) {
			segs[i] = segment_if_needed(dev, skbs[i]);
			f->status = PTR_ERR_OR_ZERO(segs[i]);
		}
		if (f->status) {
			kfree_skb(skbs[i]);
			skbs[i] = NULL;
			continue;
		}
		skbs[i]->destructor = pool_skb_done;
		last = i;
	}
	for (i = 0; i < n; i++) {
		struct sk_buff *skb = skbs[i];
		int ret;

		if (!skb)
			continue;
		if (segs[i])
			ret = xmit_segments(dev, segs[i], i < last);
		else
			ret = xmit_one(dev, skb, true, i < last);
		if (ret == NETDEV_TX_OK) {
			if (segs[i])
				consume_skb(skb);	/* copied: its buffers go back now */
			continue;
		}
		skb->destructor = NULL;	/* not taken: the caller reports the drop */
		kfree_skb(skb);
		frames[i].status = ret < 0 ? ret : -EBUSY;
	}
	us_cpu_leave();
}
EXPORT_SYMBOL_GPL(us_net_xmit_buffers);
