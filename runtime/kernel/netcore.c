// SPDX-License-Identifier: GPL-2.0
/*
 * The net core's side of an interface beyond what netdev.c does for
 * every driver: registration under the RTNL, the number of queues in
 * use, freezing the TX queues, the netdevice notifier chain, NAPI
 * instances going away, and the ethtool and MAC-change helpers that
 * drivers with a bus of their own (virtio_net) call.
 *
 * Stands in for Linux's net/core/dev.c, net/ethernet/eth.c and
 * net/ethtool/ioctl.c.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/etherdevice.h>
#include <linux/ethtool.h>
#include <linux/rtnetlink.h>

#include "internal.h"

/* ---- registration ------------------------------------------------------- */

/*
 * register_netdev() without taking the RTNL, which the caller holds. The
 * runtime's register_netdev() takes no lock of its own (the one CPU
 * serialises it), so the two are the same operation. A process runs one
 * interface (docs/design.md §0): a second one is refused, loudly, since
 * it means the driver wants something the process cannot give it (a
 * failover master beside its own interface, say).
 */
int register_netdevice(struct net_device *dev)
{
	struct net_device *first = us_first_netdev();

	if (first) {
		pr_err("%s: cannot register a second interface beside %s: a driver process runs one\n",
		       dev->name, first->name);
		return -EEXIST;
	}
	return register_netdev(dev);
}
EXPORT_SYMBOL(register_netdevice);

/* With a list, the kernel batches the work for unregister_netdevice_many(), which no module here imports. */
void unregister_netdevice_queue(struct net_device *dev, struct list_head *head)
{
	if (WARN_ON(head))
		return;
	unregister_netdev(dev);
}
EXPORT_SYMBOL(unregister_netdevice_queue);

/* ---- queues ------------------------------------------------------------- */

/* How many of the queues allocated are in use: at least one, at most all. */
static int set_in_use(unsigned int *real, unsigned int n, unsigned int allocated)
{
	if (n < 1 || n > allocated)
		return -EINVAL;
	*real = n;
	return 0;
}

int netif_set_real_num_tx_queues(struct net_device *dev, unsigned int txq)
{
	return set_in_use(&dev->real_num_tx_queues, txq, dev->num_tx_queues);
}
EXPORT_SYMBOL(netif_set_real_num_tx_queues);

int netif_set_real_num_rx_queues(struct net_device *dev, unsigned int rxq)
{
	return set_in_use(&dev->real_num_rx_queues, rxq, dev->num_rx_queues);
}
EXPORT_SYMBOL(netif_set_real_num_rx_queues);

/*
 * XPS: which TX queue the stack picks for a CPU's packets. Nothing here
 * picks by CPU -- the host's frames reach the driver from the TX thread,
 * which chooses the queue itself -- so a valid map has no reader and is
 * accepted as is.
 */
int __netif_set_xps_queue(struct net_device *dev, const unsigned long *mask, u16 index,
			  enum xps_map_type type)
{
	return index < dev->num_tx_queues ? 0 : -EINVAL;
}
EXPORT_SYMBOL(__netif_set_xps_queue);

/*
 * Stops every TX queue's sending until netif_tx_unlock(): frozen queues are
 * skipped by the TX thread as by the kernel's qdisc (netdev.c,
 * us_net_wait_tx_queue).
 */
void netif_tx_lock(struct net_device *dev)
{
	spin_lock(&dev->tx_global_lock);
	for (unsigned int i = 0; i < dev->num_tx_queues; i++) {
		struct netdev_queue *txq = netdev_get_tx_queue(dev, i);

		__netif_tx_lock(txq, smp_processor_id());
		set_bit(__QUEUE_STATE_FROZEN, &txq->state);
		__netif_tx_unlock(txq);
	}
}
EXPORT_SYMBOL(netif_tx_lock);

void netif_tx_unlock(struct net_device *dev)
{
	for (unsigned int i = 0; i < dev->num_tx_queues; i++) {
		struct netdev_queue *txq = netdev_get_tx_queue(dev, i);

		clear_bit(__QUEUE_STATE_FROZEN, &txq->state);
		netif_schedule_queue(txq);
	}
	spin_unlock(&dev->tx_global_lock);
}
EXPORT_SYMBOL(netif_tx_unlock);

/* What the kernel waits for here is RCU readers of the net core's lists: synchronize_rcu() covers them. */
void synchronize_net(void)
{
	synchronize_rcu();
}
EXPORT_SYMBOL(synchronize_net);

/* netif_napi_add_weight()'s undoing (napi.c); the instance is disabled already. */
void __netif_napi_del(struct napi_struct *napi)
{
	list_del_init(&napi->dev_list);
	if (napi->skb) {
		kfree_skb(napi->skb);
		napi->skb = NULL;
	}
}
EXPORT_SYMBOL(__netif_napi_del);

/* ---- notifiers ---------------------------------------------------------- */

static struct notifier_block *netdev_chain;

static int notify(struct notifier_block *nb, unsigned long val, struct net_device *dev)
{
	struct netdev_notifier_info info = { .dev = dev };

	return nb->notifier_call(nb, val, &info);
}

/*
 * As the kernel's chain, highest priority first; a new notifier is told of
 * the interface already there (REGISTER, and UP if it is up).
 */
int register_netdevice_notifier(struct notifier_block *nb)
{
	struct notifier_block **p = &netdev_chain;
	struct net_device *dev = us_first_netdev();

	while (*p && (*p)->priority >= nb->priority)
		p = &(*p)->next;
	nb->next = *p;
	*p = nb;
	if (dev) {
		notify(nb, NETDEV_REGISTER, dev);
		if (dev->flags & IFF_UP)
			notify(nb, NETDEV_UP, dev);
	}
	return 0;
}
EXPORT_SYMBOL(register_netdevice_notifier);

int unregister_netdevice_notifier(struct notifier_block *nb)
{
	struct net_device *dev = us_first_netdev();

	for (struct notifier_block **p = &netdev_chain; *p; p = &(*p)->next) {
		if (*p != nb)
			continue;
		*p = nb->next;
		if (dev) {
			if (dev->flags & IFF_UP) {
				notify(nb, NETDEV_GOING_DOWN, dev);
				notify(nb, NETDEV_DOWN, dev);
			}
			notify(nb, NETDEV_UNREGISTER, dev);
		}
		return 0;
	}
	return -ENOENT;
}
EXPORT_SYMBOL(unregister_netdevice_notifier);

int call_netdevice_notifiers(unsigned long val, struct net_device *dev)
{
	int ret = NOTIFY_DONE;

	for (struct notifier_block *nb = netdev_chain; nb; nb = nb->next) {
		ret = notify(nb, val, dev);
		if (ret & NOTIFY_STOP_MASK)
			break;
	}
	return notifier_to_errno(ret);
}
EXPORT_SYMBOL(call_netdevice_notifiers);

/*
 * After a move (virtio's VIRTIO_NET_S_ANNOUNCE), the stack announces the
 * interface's addresses to its peers. The addresses and the stack are the
 * host's: the NOTIFY_PEERS event tells it, and the chain is told as in
 * the kernel.
 */
void netdev_notify_peers(struct net_device *dev)
{
	call_netdevice_notifiers(NETDEV_NOTIFY_PEERS, dev);
	call_netdevice_notifiers(NETDEV_RESEND_IGMP, dev);
	ddekit_event("NOTIFY_PEERS");
}
EXPORT_SYMBOL(netdev_notify_peers);

/* NL_SET_ERR_MSG()'s tracepoint; it is never enabled (there is no tracing in a driver process). */
void do_trace_netlink_extack(const char *msg)
{
}
EXPORT_SYMBOL(do_trace_netlink_extack);

/* ---- MAC address and ethtool helpers ----------------------------------- */

int eth_prepare_mac_addr_change(struct net_device *dev, void *p)
{
	struct sockaddr *addr = p;

	if (!(dev->priv_flags & IFF_LIVE_ADDR_CHANGE) && netif_running(dev))
		return -EBUSY;
	return is_valid_ether_addr(addr->sa_data) ? 0 : -EADDRNOTAVAIL;
}
EXPORT_SYMBOL(eth_prepare_mac_addr_change);

void eth_commit_mac_addr_change(struct net_device *dev, void *p)
{
	struct sockaddr *addr = p;

	eth_hw_addr_set(dev, addr->sa_data);
}
EXPORT_SYMBOL(eth_commit_mac_addr_change);

/* One ETH_GSTRING_LEN entry of a statistics-names table, and on to the next. */
void ethtool_sprintf(u8 **data, const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	vsnprintf(*data, ETH_GSTRING_LEN, fmt, args);
	va_end(args);
	*data += ETH_GSTRING_LEN;
}
EXPORT_SYMBOL(ethtool_sprintf);

/*
 * A virtual device's "link settings" are what it reports and nothing
 * more: a valid speed and duplex are kept, anything that would need
 * hardware (autonegotiation, another port) is refused.
 */
int ethtool_virtdev_set_link_ksettings(struct net_device *dev,
				       const struct ethtool_link_ksettings *cmd,
				       u32 *dev_speed, u8 *dev_duplex)
{
	u32 speed = cmd->base.speed;

	if (cmd->base.port != PORT_OTHER || cmd->base.autoneg != AUTONEG_DISABLE)
		return -EINVAL;
	if (!ethtool_validate_speed(speed) || !ethtool_validate_duplex(cmd->base.duplex))
		return -EINVAL;
	*dev_speed = speed;
	*dev_duplex = cmd->base.duplex;
	return 0;
}
EXPORT_SYMBOL(ethtool_virtdev_set_link_ksettings);

int __ethtool_get_link_ksettings(struct net_device *dev, struct ethtool_link_ksettings *ks)
{
	ASSERT_RTNL();
	if (!dev->ethtool_ops->get_link_ksettings)
		return -EOPNOTSUPP;
	memset(ks, 0, sizeof(*ks));
	return dev->ethtool_ops->get_link_ksettings(dev, ks);
}
EXPORT_SYMBOL(__ethtool_get_link_ksettings);
