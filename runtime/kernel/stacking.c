// SPDX-License-Identifier: GPL-2.0
/*
 * Stacked interfaces: what failover and net_failover import to make a
 * failover master over a primary and a standby interface (virtio_net with
 * VIRTIO_NET_F_STANDBY). Linking them, steering their receive path,
 * syncing their address lists and VLAN filters and sending through a
 * lower interface all need two or three net_devices in one process; the
 * runtime runs one (docs/design.md §0), and register_netdevice() refuses
 * the second (netcore.c), before any of these can be reached. They are
 * here so that the chain virtio_net depends on loads as modules.dep says;
 * each panics with the reason if the refusal is ever bypassed, rather
 * than pretending to stack.
 *
 * Stands in for Linux's net/core/dev.c (upper and lower devices),
 * net/core/dev_addr_lists.c and net/8021q/vlan_core.c.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/if_vlan.h>

#include "internal.h"

#define us_not_stacked() us_panic("%s: interfaces cannot be stacked in a driver process (one net_device)", __func__)

int netdev_master_upper_dev_link(struct net_device *dev, struct net_device *upper_dev,
				 void *upper_priv, void *upper_info, struct netlink_ext_ack *extack)
{
	us_not_stacked();
}
EXPORT_SYMBOL(netdev_master_upper_dev_link);

void netdev_upper_dev_unlink(struct net_device *dev, struct net_device *upper_dev)
{
	us_not_stacked();
}
EXPORT_SYMBOL(netdev_upper_dev_unlink);

void netdev_lower_state_changed(struct net_device *lower_dev, void *lower_state_info)
{
	us_not_stacked();
}
EXPORT_SYMBOL(netdev_lower_state_changed);

int netdev_rx_handler_register(struct net_device *dev, rx_handler_func_t *rx_handler,
			       void *rx_handler_data)
{
	us_not_stacked();
}
EXPORT_SYMBOL_GPL(netdev_rx_handler_register);

void netdev_rx_handler_unregister(struct net_device *dev)
{
	us_not_stacked();
}
EXPORT_SYMBOL_GPL(netdev_rx_handler_unregister);

/* Opening, closing and resizing a lower interface from its master. */
int dev_open(struct net_device *dev, struct netlink_ext_ack *extack)
{
	us_not_stacked();
}
EXPORT_SYMBOL(dev_open);

void dev_close(struct net_device *dev)
{
	us_not_stacked();
}
EXPORT_SYMBOL(dev_close);

int dev_set_mtu(struct net_device *dev, int new_mtu)
{
	us_not_stacked();
}
EXPORT_SYMBOL(dev_set_mtu);

/* A master's address lists pushed to its lower interfaces. */
int dev_uc_sync_multiple(struct net_device *to, struct net_device *from)
{
	us_not_stacked();
}
EXPORT_SYMBOL(dev_uc_sync_multiple);

void dev_uc_unsync(struct net_device *to, struct net_device *from)
{
	us_not_stacked();
}
EXPORT_SYMBOL(dev_uc_unsync);

int dev_mc_sync_multiple(struct net_device *to, struct net_device *from)
{
	us_not_stacked();
}
EXPORT_SYMBOL(dev_mc_sync_multiple);

void dev_mc_unsync(struct net_device *to, struct net_device *from)
{
	us_not_stacked();
}
EXPORT_SYMBOL(dev_mc_unsync);

/* A master's VLAN filters copied to its lower interfaces. */
bool vlan_uses_dev(const struct net_device *dev)
{
	us_not_stacked();
}
EXPORT_SYMBOL(vlan_uses_dev);

int vlan_vid_add(struct net_device *dev, __be16 proto, u16 vid)
{
	us_not_stacked();
}
EXPORT_SYMBOL(vlan_vid_add);

void vlan_vid_del(struct net_device *dev, __be16 proto, u16 vid)
{
	us_not_stacked();
}
EXPORT_SYMBOL(vlan_vid_del);

int vlan_vids_add_by_dev(struct net_device *dev, const struct net_device *by_dev)
{
	us_not_stacked();
}
EXPORT_SYMBOL(vlan_vids_add_by_dev);

void vlan_vids_del_by_dev(struct net_device *dev, const struct net_device *by_dev)
{
	us_not_stacked();
}
EXPORT_SYMBOL(vlan_vids_del_by_dev);

/* A master recomputing its features from its lower interfaces'. */
void netdev_change_features(struct net_device *dev)
{
	us_not_stacked();
}
EXPORT_SYMBOL(netdev_change_features);

netdev_features_t netdev_increment_features(netdev_features_t all, netdev_features_t one,
					    netdev_features_t mask)
{
	us_not_stacked();
}
EXPORT_SYMBOL(netdev_increment_features);

/* A master sending through a lower interface's queue. */
u16 netdev_pick_tx(struct net_device *dev, struct sk_buff *skb, struct net_device *sb_dev)
{
	us_not_stacked();
}
EXPORT_SYMBOL(netdev_pick_tx);

int __dev_queue_xmit(struct sk_buff *skb, struct net_device *sb_dev)
{
	us_not_stacked();
}
EXPORT_SYMBOL(__dev_queue_xmit);

/* A master's drop counters (dev_core_stats_*_inc on a master that has none yet). */
struct net_device_core_stats __percpu *netdev_core_stats_alloc(struct net_device *dev)
{
	us_not_stacked();
}
EXPORT_SYMBOL(netdev_core_stats_alloc);
