// SPDX-License-Identifier: GPL-2.0
/*
 * XDP as a driver process has it: a driver registers each receive queue's
 * XDP information when it opens (virtio_net does, program or not), which
 * is kept as the kernel keeps it. Nothing can attach an XDP program -- the
 * runtime never calls a driver's ndo_bpf -- so everything that runs a
 * program, redirects or returns its frames, or traces its exceptions is
 * behind a program that is never there (or a static key never enabled),
 * and panics with the reason if reached.
 *
 * Stands in for Linux's net/core/xdp.c, net/core/filter.c and
 * kernel/bpf/syscall.c.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/filter.h>
#include <linux/bpf.h>
#include <linux/static_call_types.h>
#include <linux/tracepoint-defs.h>
#include <net/xdp.h>

#include "internal.h"

/* The registration states, as net/core/xdp.c numbers them (private to it there too). */
enum {
	REG_STATE_NEW,
	REG_STATE_REGISTERED,
	REG_STATE_UNREGISTERED,
	REG_STATE_UNUSED,
};

#define us_no_xdp() us_panic("%s: reached without an XDP program, which a driver process never has", __func__)

int __xdp_rxq_info_reg(struct xdp_rxq_info *xdp_rxq, struct net_device *dev, u32 queue_index,
		       unsigned int napi_id, u32 frag_size)
{
	if (!dev)
		return -ENODEV;
	memset(xdp_rxq, 0, sizeof(*xdp_rxq));
	xdp_rxq->dev = dev;
	xdp_rxq->queue_index = queue_index;
	xdp_rxq->napi_id = napi_id;
	xdp_rxq->frag_size = frag_size;
	xdp_rxq->reg_state = REG_STATE_REGISTERED;
	return 0;
}
EXPORT_SYMBOL_GPL(__xdp_rxq_info_reg);

void xdp_rxq_info_unreg(struct xdp_rxq_info *xdp_rxq)
{
	if (xdp_rxq->reg_state == REG_STATE_UNUSED)
		return;
	WARN(xdp_rxq->reg_state != REG_STATE_REGISTERED, "Driver BUG");
	xdp_rxq->reg_state = REG_STATE_UNREGISTERED;
	xdp_rxq->dev = NULL;
}
EXPORT_SYMBOL_GPL(xdp_rxq_info_unreg);

/* Page-shared and page-order-0 frames are freed as pages; a page pool would be a program's. */
int xdp_rxq_info_reg_mem_model(struct xdp_rxq_info *xdp_rxq, enum xdp_mem_type type,
			       void *allocator)
{
	if (xdp_rxq->reg_state != REG_STATE_REGISTERED)
		return -EFAULT;
	if (type != MEM_TYPE_PAGE_SHARED && type != MEM_TYPE_PAGE_ORDER0)
		return -EOPNOTSUPP;
	xdp_rxq->mem.type = type;
	return 0;
}
EXPORT_SYMBOL_GPL(xdp_rxq_info_reg_mem_model);

/* Behind a program: running it, its verdicts and its frames. */
unsigned int bpf_dispatcher_xdp_func(const void *ctx, const struct bpf_insn *insnsi,
				     bpf_func_t bpf_func)
{
	us_no_xdp();
}
EXPORT_SYMBOL(bpf_dispatcher_xdp_func);

void bpf_prog_add(struct bpf_prog *prog, int i)
{
	us_no_xdp();
}
EXPORT_SYMBOL_GPL(bpf_prog_add);

void bpf_prog_sub(struct bpf_prog *prog, int i)
{
	us_no_xdp();
}
EXPORT_SYMBOL_GPL(bpf_prog_sub);

void bpf_prog_put(struct bpf_prog *prog)
{
	us_no_xdp();
}
EXPORT_SYMBOL_GPL(bpf_prog_put);

void bpf_warn_invalid_xdp_action(struct net_device *dev, struct bpf_prog *prog, u32 act)
{
	us_no_xdp();
}
EXPORT_SYMBOL_GPL(bpf_warn_invalid_xdp_action);

int xdp_do_redirect(struct net_device *dev, struct xdp_buff *xdp, struct bpf_prog *xdp_prog)
{
	us_no_xdp();
}
EXPORT_SYMBOL_GPL(xdp_do_redirect);

void xdp_do_flush(void)
{
	us_no_xdp();
}
EXPORT_SYMBOL_GPL(xdp_do_flush);

u32 xdp_master_redirect(struct xdp_buff *xdp)
{
	us_no_xdp();
}
EXPORT_SYMBOL_GPL(xdp_master_redirect);

void xdp_return_frame(struct xdp_frame *xdpf)
{
	us_no_xdp();
}
EXPORT_SYMBOL_GPL(xdp_return_frame);

void xdp_return_frame_rx_napi(struct xdp_frame *xdpf)
{
	us_no_xdp();
}
EXPORT_SYMBOL_GPL(xdp_return_frame_rx_napi);

struct xdp_frame *xdp_convert_zc_to_xdp_frame(struct xdp_buff *xdp)
{
	us_no_xdp();
}
EXPORT_SYMBOL_GPL(xdp_convert_zc_to_xdp_frame);

void xdp_warn(const char *msg, const char *func, const int line)
{
	us_no_xdp();
}
EXPORT_SYMBOL_GPL(xdp_warn);

/* Static keys drivers test inline; never enabled, so their branches are never taken. */
DEFINE_STATIC_KEY_FALSE(bpf_master_redirect_enabled_key);
EXPORT_SYMBOL_GPL(bpf_master_redirect_enabled_key);
DEFINE_STATIC_KEY_FALSE(bpf_stats_enabled_key);
EXPORT_SYMBOL(bpf_stats_enabled_key);

/* A redirect's target, per CPU: written only by a program's bpf_redirect(). */
DEFINE_PER_CPU(struct bpf_redirect_info, bpf_redirect_info);
EXPORT_PER_CPU_SYMBOL_GPL(bpf_redirect_info);

/*
 * The xdp_exception tracepoint: its key stays off, so a driver's
 * trace_xdp_exception() never calls through the static call.
 */
struct tracepoint __tracepoint_xdp_exception = {
	.name = "xdp_exception",
	.key = STATIC_KEY_INIT_FALSE,
};
EXPORT_SYMBOL_GPL(__tracepoint_xdp_exception);
struct static_call_key __SCK__tp_func_xdp_exception;
EXPORT_SYMBOL_GPL(__SCK__tp_func_xdp_exception);

void __SCT__tp_func_xdp_exception(void)
{
	us_unreachable();
}
EXPORT_SYMBOL_GPL(__SCT__tp_func_xdp_exception);
