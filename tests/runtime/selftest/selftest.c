// SPDX-License-Identifier: GPL-2.0
/*
 * understudy-selftest.ko: unit tests of the runtime's kernel half, run in the
 * driver process without a device (understudy-driver --module this.ko).
 * Built by Kbuild against the same headers as a driver, so it exercises the
 * runtime through the kernel API exactly as drivers do. Each test reports
 * "SELFTEST name=... result=ok|fail" (and why) as an event; init_module
 * returns -EINVAL if any failed.
 */
#include <linux/module.h>
#include <linux/etherdevice.h>
#include <linux/netdevice.h>
#include <linux/skbuff.h>
#include <linux/timer.h>
#include <linux/workqueue.h>
#include <linux/delay.h>
#include <linux/interrupt.h>
#include <linux/slab.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/err.h>
#include <net/checksum.h>
#include <net/ip6_checksum.h>

#include "selftest.h"

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("understudy: self-tests of the driver-process kernel runtime");

static bool failed;
static const char *current_test;

void report(const char *fmt, ...)
{
	char line[256];
	int n = snprintf(line, sizeof(line), "SELFTEST name=%s result=fail at=", current_test);
	va_list args;

	va_start(args, fmt);
	vsnprintf(line + n, sizeof(line) - n, fmt, args);
	va_end(args);
	ddekit_event(line);
	failed = true;
}

static void run(const char *name, void (*test)(void))
{
	char line[96];
	bool before = failed;

	failed = false;
	current_test = name;
	test();
	if (!failed) {
		snprintf(line, sizeof(line), "SELFTEST name=%s result=ok", name);
		ddekit_event(line);
	}
	failed |= before;
}

/* ---- per-cpu data and GS: each thread has its own current and counts ---- */

struct peer {
	struct task_struct *task;
	int cpu;
	int preempt_at_start;
	int preempt_after_reentry;
	void *softnet;
	int phase;
};

static void peer_thread(void *arg)
{
	struct peer *p = arg;

	us_cpu_enter();
	p->task = current;
	p->cpu = raw_smp_processor_id();
	p->preempt_at_start = preempt_count();
	p->softnet = this_cpu_ptr(&softnet_data);
	local_bh_disable();	/* this thread's count, saved when it leaves */
	WRITE_ONCE(p->phase, 1);
	us_cpu_leave();
	while (READ_ONCE(p->phase) != 2)
		ddekit_spin_ns(1000000);
	us_cpu_enter();
	p->preempt_after_reentry = preempt_count();
	local_bh_enable();
	WRITE_ONCE(p->phase, 3);
	us_cpu_leave();
}

static void test_percpu(void)
{
	static struct peer p;
	int i;

	CHECK(this_cpu_read(this_cpu_off) == (unsigned long)ddekit_percpu_block());
	CHECK(per_cpu_ptr(&softnet_data, 0) == this_cpu_ptr(&softnet_data));
	CHECK(preempt_count() == 0);
	CHECK(ddekit_thread_create(peer_thread, &p, "selftest-peer") == 0);
	for (i = 0; i < 1000 && READ_ONCE(p.phase) != 1; i++)
		msleep(1);
	CHECK(p.phase == 1);
	CHECK(p.task && p.task != current);
	CHECK(p.cpu == 0 && raw_smp_processor_id() == 0);
	CHECK(p.preempt_at_start == 0);
	CHECK(p.softnet == this_cpu_ptr(&softnet_data));
	/* The peer left the CPU with bottom halves off: that is its count only. */
	CHECK(preempt_count() == 0);
	preempt_disable();
	CHECK(preempt_count() == 1);
	preempt_enable();
	WRITE_ONCE(p.phase, 2);
	for (i = 0; i < 1000 && READ_ONCE(p.phase) != 3; i++)
		msleep(1);
	CHECK(p.phase == 3);
	CHECK(p.preempt_after_reentry == SOFTIRQ_DISABLE_OFFSET);
	CHECK(preempt_count() == 0);
}

/* ---- wakeups: a change one thread waits for wakes that thread alone ------- */

static DEFINE_MUTEX(bystander_lock);
static struct timer_list far_timer;
static bool bystander_done;

/* Waits for bystander_lock, which the test holds: any wakeup is for nothing. */
static void bystander(void *unused)
{
	us_cpu_enter();
	mutex_lock(&bystander_lock);
	bystander_done = true;
	mutex_unlock(&bystander_lock);
	us_cpu_leave();
}

static void far_timer_fn(struct timer_list *t)
{
}

#define REARMS 50

/*
 * Re-arming a timer wakes the softirq thread only when it is due sooner
 * than the one the thread sleeps for, and nobody else: not a thread that
 * waits for a mutex. The test gives up the CPU after each re-arm, so each
 * thread woken takes it once more (ddekit_cpu_entries); a broadcast would
 * add two entries a round, the bystander's and the softirq thread's.
 */
static void test_wakeups(void)
{
	unsigned long before, woken;

	timer_setup(&far_timer, far_timer_fn, 0);
	mutex_lock(&bystander_lock);
	CHECK(ddekit_thread_create(bystander, NULL, "bystander") == 0);
	msleep(20);	/* it runs and waits for the lock */
	before = ddekit_cpu_entries();
	for (int i = 0; i < REARMS; i++) {
		mod_timer(&far_timer, jiffies + 3600 * HZ);
		msleep(1);
	}
	woken = ddekit_cpu_entries() - before;
	timer_delete_sync(&far_timer);
	mutex_unlock(&bystander_lock);
	for (int i = 0; i < 100 && !READ_ONCE(bystander_done); i++)
		msleep(10);
	CHECK(bystander_done);
	/* This thread's own REARMS returns from msleep, a few timer wakeups. */
	CHECK(woken >= REARMS && woken <= REARMS + 5);
}

/* ---- timers --------------------------------------------------------------- */

static struct timer_list timer;
static int timer_fired;
static unsigned long timer_fired_at;
static bool timer_in_softirq;

static void timer_fn(struct timer_list *t)
{
	timer_fired++;
	timer_fired_at = jiffies;
	timer_in_softirq = in_serving_softirq();
}

/* Slack for a loaded machine; a timer that fires early is always wrong. */
#define LATE_JIFFIES	25

static void test_timers(void)
{
	unsigned long expires = jiffies + 10;

	timer_setup(&timer, timer_fn, 0);
	CHECK(!timer_pending(&timer));
	CHECK(mod_timer(&timer, expires) == 0);
	CHECK(timer_pending(&timer));
	msleep(10);
	CHECK(timer_fired == 0 || time_after_eq(jiffies, expires));
	msleep(150);
	CHECK(timer_fired == 1);
	CHECK(time_after_eq(timer_fired_at, expires));
	CHECK(time_before_eq(timer_fired_at, expires + LATE_JIFFIES));
	CHECK(timer_in_softirq);
	CHECK(!timer_pending(&timer));

	/* Re-arming a pending timer moves it; it still fires once. */
	mod_timer(&timer, jiffies + 5);
	expires = jiffies + 30;
	CHECK(mod_timer(&timer, expires) == 1);
	msleep(60);
	CHECK(timer_fired == 1);
	msleep(150);
	CHECK(timer_fired == 2);
	CHECK(time_after_eq(timer_fired_at, expires));

	/* A deleted timer never fires. */
	mod_timer(&timer, jiffies + 5);
	CHECK(del_timer_sync(&timer) == 1);
	CHECK(del_timer_sync(&timer) == 0);
	msleep(100);
	CHECK(timer_fired == 2);
}

/* ---- workqueues ----------------------------------------------------------- */

static struct work_struct work;
static struct delayed_work dwork;
static int work_runs;
static bool work_in_task, work_slow, work_running, work_finished;
static struct task_struct *work_task;

static void work_fn(struct work_struct *w)
{
	work_running = true;
	work_runs++;
	work_in_task = !in_interrupt() && preempt_count() == 0;
	work_task = current;
	if (work_slow)
		msleep(80);
	work_finished = true;
	work_running = false;
}

static void test_workqueues(void)
{
	INIT_WORK(&work, work_fn);
	CHECK(queue_work(system_wq, &work));
	CHECK(!queue_work(system_wq, &work));	/* still pending: one run */
	msleep(50);
	CHECK(work_runs == 1);
	CHECK(work_in_task);
	CHECK(work_task && work_task != current);

	INIT_DELAYED_WORK(&dwork, work_fn);
	CHECK(queue_delayed_work(system_wq, &dwork, 20));
	CHECK(delayed_work_pending(&dwork));
	msleep(20);
	CHECK(work_runs == 1);
	msleep(200);
	CHECK(work_runs == 2);

	CHECK(queue_delayed_work(system_wq, &dwork, 20));
	CHECK(cancel_delayed_work_sync(&dwork));
	CHECK(!delayed_work_pending(&dwork));
	msleep(150);
	CHECK(work_runs == 2);

	/* cancel_work_sync() waits for a running item to finish. */
	work_slow = true;
	work_finished = false;
	queue_work(system_wq, &work);
	msleep(20);
	CHECK(work_running);
	CHECK(!cancel_work_sync(&work));	/* running, no longer pending */
	CHECK(work_finished && !work_running);
	CHECK(work_runs == 3);
	work_slow = false;
}

/* ---- NAPI ----------------------------------------------------------------- */

static struct napi_struct napi;
static int napi_polls, napi_backlog;
static bool napi_in_softirq = true;
/* Polls that found the CPU taken since the one before: NET_RX rounds, roughly. */
static unsigned long napi_cpu_entries;
static int napi_rounds;

static int napi_poll(struct napi_struct *n, int budget)
{
	int done = min(budget, napi_backlog);

	napi_polls++;
	if (ddekit_cpu_entries() != napi_cpu_entries)
		napi_rounds++;
	napi_cpu_entries = ddekit_cpu_entries();
	napi_in_softirq &= !!in_serving_softirq();
	napi_backlog -= done;
	if (done < budget)
		napi_complete_done(n, done);
	return done;
}

static void test_napi(void)
{
	struct net_device *dev = alloc_etherdev(0);

	CHECK(dev);
	netif_napi_add_weight(dev, &napi, napi_poll, 4);
	/* Disabled until napi_enable(): scheduled and "in service". */
	CHECK(READ_ONCE(napi.state) & NAPIF_STATE_SCHED);
	napi_enable(&napi);

	napi_backlog = 10;			/* polls of 4, 4, 2 */
	napi_schedule(&napi);
	msleep(50);
	CHECK(napi_polls == 3);
	CHECK(napi_backlog == 0);
	CHECK(napi_in_softirq);
	CHECK(!(READ_ONCE(napi.state) & NAPIF_STATE_SCHED));

	/* Scheduled again while scheduled: MISSED makes it poll once more. */
	local_bh_disable();
	napi_schedule(&napi);
	napi_schedule(&napi);
	CHECK(READ_ONCE(napi.state) & NAPIF_STATE_MISSED);
	local_bh_enable();
	msleep(50);
	CHECK(napi_polls == 5);

	/*
	 * A NET_RX round polls again while there is work, up to 300 frames
	 * (the kernel's netdev_budget), then lets other threads have the CPU:
	 * 250 polls of 4 take at least 4 rounds, and far fewer than 250.
	 */
	napi_polls = napi_rounds = 0;
	napi_backlog = 1000;
	napi_schedule(&napi);
	msleep(200);
	CHECK(napi_polls == 251);	/* and one that finds nothing */
	CHECK(napi_rounds >= 4 && napi_rounds <= 125);

	napi_disable(&napi);
	CHECK(!napi_schedule_prep(&napi));
	free_netdev(dev);
}

/* ---- sk_buff -------------------------------------------------------------- */

static void test_skb(void)
{
	long live = us_skb_live();
	unsigned long mem = us_mem_in_use();
	struct sk_buff *skb;
	struct page *page;
	u8 *p;

	skb = alloc_skb(128, GFP_KERNEL);
	CHECK(skb);
	CHECK(skb->len == 0 && skb_headroom(skb) == 0 && skb_tailroom(skb) >= 128);
	CHECK(us_skb_live() == live + 1);
	skb_reserve(skb, 16);
	CHECK(skb_headroom(skb) == 16);
	p = skb_put(skb, 50);
	memset(p, 0xab, 50);
	CHECK(skb->len == 50 && skb_tail_pointer(skb) == skb->data + 50);
	CHECK(skb_push(skb, 14) == skb->head + 2 && skb->len == 64);
	skb_pull(skb, 14);
	CHECK(skb->len == 50 && skb->data[49] == 0xab);
	skb_trim(skb, 20);
	CHECK(skb->len == 20 && skb_tail_pointer(skb) == skb->data + 20);
	CHECK(pskb_expand_head(skb, 64, 0, GFP_ATOMIC) == 0);
	CHECK(skb_headroom(skb) == 80 && skb->len == 20 && skb->data[0] == 0xab &&
	      skb->data[19] == 0xab);
	CHECK(skb_padto(skb, 60) == 0);
	CHECK(skb->len == 20 && skb->data[20] == 0 && skb->data[59] == 0);

	/* Paged data: pull part of a fragment into the head, then trim. */
	page = alloc_page(GFP_KERNEL);
	CHECK(page);
	memset(page_address(page), 0xcd, PAGE_SIZE);
	skb_fill_page_desc(skb, 0, page, 0, 100);
	skb->len += 100;
	skb->data_len += 100;
	skb->truesize += PAGE_SIZE;
	CHECK(__pskb_pull_tail(skb, 30));
	CHECK(skb_headlen(skb) == 50 && skb->data_len == 70 && skb->data[49] == 0xcd);
	CHECK(skb_frag_size(&skb_shinfo(skb)->frags[0]) == 70);
	CHECK(pskb_trim(skb, 40) == 0);
	CHECK(skb->len == 40 && skb->data_len == 0 && skb_shinfo(skb)->nr_frags == 0);
	kfree_skb(skb);

	/* Shared sk_buffs are freed by the last reference. */
	skb = alloc_skb(10, GFP_KERNEL);
	skb_get(skb);
	kfree_skb(skb);
	CHECK(us_skb_live() == live + 1);
	consume_skb(skb);

	/* An RX buffer from a page fragment, the way e1000 builds them. */
	p = netdev_alloc_frag(2048);
	CHECK(p);
	skb = build_skb(p, 2048);
	CHECK(skb && skb->head_frag && skb->head == p);
	skb_put(skb, 100);
	consume_skb(skb);

	CHECK(us_skb_live() == live);
	CHECK(us_mem_in_use() == mem);
}

/* ---- receive ---------------------------------------------------------------- */

/* A frame of `len` bytes, as a driver hands it up: eth_type_trans, then the stack. */
static void receive(struct net_device *dev, unsigned int len)
{
	struct sk_buff *skb = netdev_alloc_skb(dev, 64);

	memset(skb_put(skb, len), 0xff, len);	/* broadcast, type 0xffff */
	skb->protocol = eth_type_trans(skb, dev);
	netif_receive_skb(skb);
}

static void test_receive(void)
{
	struct net_device *dev = alloc_etherdev(0);
	unsigned long frames = us_rx_frames();
	long live = us_skb_live();

	CHECK(dev);
	receive(dev, 60);
	CHECK(us_rx_frames() == frames + 1);
	/* Runts the NIC called good go nowhere (i82559er reports length 0). */
	receive(dev, 0);
	receive(dev, ETH_HLEN - 1);
	CHECK(us_rx_frames() == frames + 1);
	receive(dev, ETH_HLEN);
	CHECK(us_rx_frames() == frames + 2);
	CHECK(us_skb_live() == live);
	free_netdev(dev);
}

/* ---- printk formats ------------------------------------------------------- */

static void expect_va(char *buf, const char *fmt, ...)
{
	va_list args;
	struct va_format vaf;

	va_start(args, fmt);
	vaf.fmt = fmt;
	vaf.va = &args;
	snprintf(buf, 64, "[%pV]", &vaf);
	va_end(args);
}

static void test_printk(void)
{
	static const u8 mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };
	static const u8 ip[4] = { 10, 0, 2, 15 };
	char buf[128];

	snprintf(buf, sizeof(buf), "%pM %pI4 %*ph", mac, ip, 3, mac);
	CHECK(!strcmp(buf, "52:54:00:12:34:56 10.0.2.15 52 54 00"));
	snprintf(buf, sizeof(buf), "%-5d|%05x|%+d|%.3s|%lld|%zu|%#x|%c", 42, 0xbeef, 7, "abcdef",
		 -9000000000LL, (size_t)123, 255, 'z');
	CHECK(!strcmp(buf, "42   |0beef|+7|abc|-9000000000|123|0xff|z"));
	expect_va(buf, "%s=%u", "n", 3);
	CHECK(!strcmp(buf, "[n=3]"));
	CHECK(snprintf(buf, 4, "%s", "truncated") == 9 && !strcmp(buf, "tru"));
}

/* ---- WARN: ud2 reported by the driver's SIGILL handler, execution goes on -- */

/* One WARN site, hit twice: reported once, true both times. */
static noinline bool warn_once(int i)
{
	return WARN_ON_ONCE(i >= 0);
}

static void test_warn(void)
{
	CHECK(warn_once(0));
	CHECK(warn_once(1));
}

/*
 * skb_checksum_help(): a checksum the stack left to the hardware
 * (CHECKSUM_PARTIAL: the pseudo-header sum in the field, csum_start and
 * csum_offset set) is completed in software when the driver cannot, as for a
 * frame whose offload the driver's features do not cover. A UDP checksum
 * that folds to 0 is sent as 0xffff (0 means "none" in UDP).
 */
static void test_checksum(void)
{
	static const u8 payload[19] = "understudy checksum";	/* odd, no NUL */
	unsigned int l4 = ETH_HLEN + sizeof(struct iphdr);
	unsigned int len = l4 + sizeof(struct udphdr) + sizeof(payload);
	__be32 saddr = htonl(0x0a00020f), daddr = htonl(0x0a000202);
	struct sk_buff *skb = alloc_skb(len, GFP_KERNEL);
	struct iphdr *ip;
	struct udphdr *udp;

	CHECK(skb);
	memset(skb_put(skb, len), 0, len);
	skb_set_network_header(skb, ETH_HLEN);
	skb_set_transport_header(skb, l4);
	ip = ip_hdr(skb);
	ip->ihl = 5;
	ip->version = 4;
	ip->protocol = IPPROTO_UDP;
	ip->saddr = saddr;
	ip->daddr = daddr;
	udp = udp_hdr(skb);
	udp->len = htons(sizeof(*udp) + sizeof(payload));
	memcpy(udp + 1, payload, sizeof(payload));
	udp->check = ~csum_tcpudp_magic(saddr, daddr, ntohs(udp->len), IPPROTO_UDP, 0);
	skb->ip_summed = CHECKSUM_PARTIAL;
	skb->csum_start = skb_headroom(skb) + l4;
	skb->csum_offset = offsetof(struct udphdr, check);

	CHECK(skb_checksum_help(skb) == 0);
	CHECK(skb->ip_summed == CHECKSUM_NONE);
	CHECK(udp->check != 0);
	/* A receiver's check: pseudo header and segment sum to all ones. */
	CHECK(csum_tcpudp_magic(saddr, daddr, ntohs(udp->len), IPPROTO_UDP,
				csum_partial(udp, ntohs(udp->len), 0)) == 0);
	kfree_skb(skb);
}

/* The one's complement sum the RFC 1071 way: 16-bit words, a last odd byte low. */
static u16 reference_sum(const u8 *p, int len, u32 sum)
{
	for (; len > 1; len -= 2, p += 2)
		sum += p[0] | p[1] << 8;
	if (len)
		sum += p[0];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

/*
 * The runtime's memcpy, memset and csum_partial work a word at a time:
 * they agree with byte-wise references at every length and alignment,
 * including sums whose 64-bit accumulator carries.
 */
static void test_strings(void)
{
	static u8 src[96], dst[112];

	for (int i = 0; i < sizeof(src); i++)
		src[i] = 0xf0 ^ (i * 37);
	for (int off = 0; off < 8; off++) {
		for (int len = 0; len <= 80; len++) {
			u32 seed = len * 0x10001;

			memset(dst, 0x5a, sizeof(dst));
			CHECK(memcpy(dst + off, src + off, len) == dst + off);
			CHECK(memcmp(dst + off, src + off, len) == 0);
			CHECK(dst[off + len] == 0x5a && (off == 0 || dst[off - 1] == 0x5a));
			CHECK(memset(dst + off, 0xc3, len) == dst + off);
			CHECK(len == 0 || (dst[off] == 0xc3 && dst[off + len - 1] == 0xc3));
			CHECK(dst[off + len] == 0x5a);
			CHECK(csum_fold(csum_partial(src + off, len, (__force __wsum)seed)) ==
			      (__force __sum16)(u16)~reference_sum(src + off, len, seed));
		}
	}
	memset(src, 0xff, sizeof(src));
	CHECK(csum_fold(csum_partial(src, sizeof(src), 0)) == 0);
}

/* ---- software segmentation (GSO) --------------------------------------- */

#define GSO_MSS 1000

/* A TCP frame of payload bytes as the host's TAP hands it over for TSO. */
static struct sk_buff *gso_frame(bool v4, unsigned int payload)
{
	unsigned int nh_len = v4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	unsigned int l4 = ETH_HLEN + nh_len, len = l4 + sizeof(struct tcphdr) + payload;
	struct sk_buff *skb = alloc_skb(len, GFP_KERNEL);
	struct tcphdr *th;
	u8 *data;

	if (!skb)
		return NULL;
	data = memset(skb_put(skb, len), 0, len);
	for (unsigned int i = 0; i < payload; i++)
		data[len - payload + i] = i * 7 + i / 251;
	skb_reset_mac_header(skb);
	skb_set_network_header(skb, ETH_HLEN);
	skb_set_transport_header(skb, l4);
	if (v4) {
		struct iphdr *ip = ip_hdr(skb);

		skb->protocol = htons(ETH_P_IP);
		ip->version = 4;
		ip->ihl = 5;
		ip->ttl = 64;
		ip->id = htons(0xfffe);	/* wraps */
		ip->protocol = IPPROTO_TCP;
		ip->saddr = htonl(0x0a00020f);
		ip->daddr = htonl(0x0a000202);
	} else {
		struct ipv6hdr *ip6 = ipv6_hdr(skb);

		skb->protocol = htons(ETH_P_IPV6);
		ip6->version = 6;
		ip6->nexthdr = IPPROTO_TCP;
		ip6->hop_limit = 64;
		ip6->saddr.s6_addr[0] = 0xfd;
		ip6->saddr.s6_addr[15] = 0x0f;
		ip6->daddr.s6_addr[0] = 0xfd;
		ip6->daddr.s6_addr[15] = 0x02;
	}
	((struct ethhdr *)data)->h_proto = skb->protocol;
	th = tcp_hdr(skb);
	th->seq = htonl(0xfffffc00);	/* wraps too */
	th->doff = sizeof(*th) / 4;
	th->ack = th->psh = th->fin = th->cwr = 1;
	skb->ip_summed = CHECKSUM_PARTIAL;
	skb->csum_start = skb_headroom(skb) + l4;
	skb->csum_offset = offsetof(struct tcphdr, check);
	skb_shinfo(skb)->gso_size = GSO_MSS;
	skb_shinfo(skb)->gso_type = v4 ? SKB_GSO_TCPV4 : SKB_GSO_TCPV6;
	return skb;
}

/* Whether a segment's TCP checksum verifies as a receiver checks it. */
static bool tcp_checksum_ok(struct sk_buff *seg, bool v4)
{
	unsigned int len = seg->len - skb_transport_offset(seg);
	__wsum sum = csum_partial(tcp_hdr(seg), len, 0);

	if (v4)
		return csum_tcpudp_magic(ip_hdr(seg)->saddr, ip_hdr(seg)->daddr, len,
					 IPPROTO_TCP, sum) == 0;
	return csum_ipv6_magic(&ipv6_hdr(seg)->saddr, &ipv6_hdr(seg)->daddr, len,
			       IPPROTO_TCP, sum) == 0;
}

/*
 * A frame of 3.5 MSS becomes four segments, each a wire-ready frame:
 * headers copied, IP lengths, IPv4 id and sequence numbers advanced (both
 * wrapping), CWR on the first only, PSH and FIN on the last only, the
 * payload in order; checksums complete without checksum features, left
 * to the device (pseudo-header sum in the field) with them.
 */
static void check_segments(bool v4, netdev_features_t features)
{
	unsigned int payload = 3 * GSO_MSS + GSO_MSS / 2, hdr_len, offset = 0, n = 0;
	struct sk_buff *skb = gso_frame(v4, payload), *segs, *seg;
	const u8 *sent;

	CHECK(skb);
	hdr_len = skb->len - payload;
	sent = skb->data + hdr_len;
	segs = skb_gso_segment(skb, features);
	CHECK(!IS_ERR_OR_NULL(segs));
	for (seg = segs; seg; seg = seg->next, n++) {
		unsigned int len = min(GSO_MSS, payload - offset);
		struct tcphdr *th = tcp_hdr(seg);
		bool last = !seg->next;

		CHECK(seg->len == hdr_len + len && !skb_is_nonlinear(seg));
		CHECK(skb_network_offset(seg) == ETH_HLEN && skb_transport_offset(seg) == hdr_len - sizeof(*th));
		if (v4) {
			CHECK(ntohs(ip_hdr(seg)->tot_len) == seg->len - ETH_HLEN);
			CHECK(ntohs(ip_hdr(seg)->id) == (u16)(0xfffe + n));
			CHECK(ip_fast_csum(ip_hdr(seg), 5) == 0);
		} else {
			CHECK(ntohs(ipv6_hdr(seg)->payload_len) == len + sizeof(*th));
		}
		CHECK(ntohl(th->seq) == 0xfffffc00 + offset);
		CHECK(th->cwr == (n == 0) && th->psh == last && th->fin == last && th->ack);
		CHECK(memcmp(seg->data + hdr_len, sent + offset, len) == 0);
		if (features) {
			CHECK(seg->ip_summed == CHECKSUM_PARTIAL);
			CHECK(skb_checksum_start_offset(seg) == skb_transport_offset(seg));
			CHECK(skb_checksum_help(seg) == 0);
		}
		CHECK(seg->ip_summed == CHECKSUM_NONE && tcp_checksum_ok(seg, v4));
		offset += len;
	}
	CHECK(n == 4 && offset == payload);
	kfree_skb_list(segs);
	kfree_skb(skb);
}

/* What the host's TAP offers every driver is cut for one without TSO. */
static void test_gso(void)
{
	long live = us_skb_live();
	unsigned long mem = us_mem_in_use();
	struct sk_buff *skb;

	check_segments(true, 0);
	check_segments(true, NETIF_F_IP_CSUM);
	check_segments(false, 0);
	check_segments(false, NETIF_F_HW_CSUM);
	CHECK(us_skb_live() == live);
	/* Only TCP is segmented; a frame whose headers are not what it says is refused. */
	skb = gso_frame(true, 2 * GSO_MSS);
	CHECK(skb);
	skb_shinfo(skb)->gso_type = SKB_GSO_UDP_L4;
	CHECK(PTR_ERR(skb_gso_segment(skb, 0)) == -EPROTONOSUPPORT);
	skb_shinfo(skb)->gso_type = SKB_GSO_TCPV6;
	CHECK(PTR_ERR(skb_gso_segment(skb, 0)) == -EINVAL);
	kfree_skb(skb);
	CHECK(us_skb_live() == live);
	CHECK(us_mem_in_use() == mem);
}

/* ---- vmalloc ---------------------------------------------------------------- */

/*
 * vmalloc areas are page-aligned and zeroed, lie outside the DMA arena,
 * count in the runtime's memory use and are freed by vfree and kvfree
 * alike; running off the end of one faults (crash=4).
 */
static void test_vmalloc(void)
{
	unsigned long mem = us_mem_in_use();
	u8 *small = vzalloc(100), *big = vmalloc(3 * PAGE_SIZE);
	void *block = kmalloc(64, GFP_KERNEL);

	CHECK(small && big && block);
	CHECK(PAGE_ALIGNED(small) && PAGE_ALIGNED(big));
	CHECK(small[0] == 0 && small[PAGE_SIZE - 1] == 0);
	CHECK(is_vmalloc_addr(small) && is_vmalloc_addr(big + 3 * PAGE_SIZE - 1));
	CHECK(!is_vmalloc_addr(big + 3 * PAGE_SIZE) && !is_vmalloc_addr(block));
	memset(big, 0x5a, 3 * PAGE_SIZE);
	CHECK(us_mem_in_use() == mem + 4 * PAGE_SIZE + 64);
	vfree(small);
	kvfree(big);
	kvfree(block);
	CHECK(us_mem_in_use() == mem);
	CHECK(!is_vmalloc_addr(small));
}

/*
 * crash=N: instead of the tests, do what a broken driver does; the runtime
 * must end the process with the reason (understudy-driver exits 70).
 */
static int crash;
module_param(crash, int, 0);
MODULE_PARM_DESC(crash, "1 BUG(), 2 a spinlock taken twice, 3 msleep with a spinlock held, "
		 "4 a store past the end of a vmalloc area");

static DEFINE_SPINLOCK(crash_lock);

static int do_crash(void)
{
	switch (crash) {
	case 1:
		BUG();
	case 2:
		spin_lock(&crash_lock);
		spin_lock(&crash_lock);
		break;
	case 3:
		spin_lock(&crash_lock);
		msleep(1);
		break;
	case 4: {
		/* As e1000 with a corrupt ring index: its RX buffer_info is one page. */
		u64 *buffer_info = vzalloc(PAGE_SIZE);

		WRITE_ONCE(buffer_info[PAGE_SIZE / sizeof(*buffer_info)], 0);
		break;
	}
	}
	return -EINVAL;	/* still alive: the runtime missed it */
}

static int __init selftest_init(void)
{
	if (crash)
		return do_crash();
	run("percpu", test_percpu);
	run("timers", test_timers);
	run("wakeups", test_wakeups);
	run("workqueues", test_workqueues);
	run("napi", test_napi);
	run("skb", test_skb);
	run("receive", test_receive);
	run("vmalloc", test_vmalloc);
	run("checksum", test_checksum);
	run("strings", test_strings);
	run("gso", test_gso);
	run("printk", test_printk);
	run("warn", test_warn);
	run("devres", test_devres);
	run("time", test_time);
	run("platform", test_platform);
	return failed ? -EINVAL : 0;
}
module_init(selftest_init);
