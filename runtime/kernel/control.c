// SPDX-License-Identifier: GPL-2.0
/*
 * What the host asks of the network device (docs/protocol.md requests), as
 * the kernel's dev_open(), dev_set_mtu(), dev_set_mac_address(),
 * dev_set_rx_mode(), netdev_update_features() and the ethtool ioctls would
 * do it (transmission is xmit.c's). Called by the executable from threads
 * that do not hold the CPU: each entry point takes it.
 *
 * Stands in for Linux's net/core/dev.c (dev_open(), dev_set_mtu(), ...) and
 * net/ethtool/ioctl.c.
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

	us_trace(US_EV_STOP, 0, dev, US_STOP_CLOSE, 0);
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

/*
 * ethtool -L combined N, as ethtool_set_channels() checks it: within the
 * driver's maximum, the other counts left as they are. A driver without
 * the operations runs one queue pair.
 */
static int do_set_channels(struct net_device *dev, void *arg)
{
	const struct ethtool_ops *ops = dev->ethtool_ops;
	struct ethtool_channels channels = {};
	unsigned int combined = *(unsigned int *)arg;

	if (!ops || !ops->get_channels || !ops->set_channels)
		return combined == 1 ? 0 : -EOPNOTSUPP;
	ops->get_channels(dev, &channels);
	if (combined == channels.combined_count)
		return 0;
	if (!combined || combined > channels.max_combined)
		return -EINVAL;
	channels.combined_count = combined;
	return ops->set_channels(dev, &channels);
}

int us_net_set_channels(unsigned int combined)
{
	return with_rtnl(do_set_channels, &combined);
}
EXPORT_SYMBOL_GPL(us_net_set_channels);

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
