/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kernel half's upward API: the entry points through which the libc
 * half (runtime/driver, runtime/ddekit) calls into understudy-kernel.ko,
 * listed once. Entry X(name, type, (parameters)) is the kernel half's
 * export us_<name>: its definitions are checked against the prototypes
 * below (internal.h includes this header in every kernel half file), and
 * understudy-driver's struct kernel_api (driver/driver.h) and its binding
 * by name (driver/modules.c) are generated from the same list, so the
 * two sides cannot disagree on a signature and still compile.
 *
 * It lives here, beside its implementation, as ddekit.h, the contract in
 * the other direction, lives in runtime/ddekit: a contract between the two
 * halves of the driver process (docs/design.md §2). include/understudy/
 * holds the contracts between processes; its headers include <stdint.h>,
 * which Kbuild's -nostdinc does not provide, and the kernel half is built
 * without that include path. So this header, like ddekit.h, uses builtin
 * C types only: the kernel's u8, u32 and u64 are unsigned char, unsigned
 * int and unsigned long long.
 */
#ifndef UNDERSTUDY_KERNEL_API_H
#define UNDERSTUDY_KERNEL_API_H

struct ddekit_tx_frame;
struct ddekit_blk_request;
struct kernel_param;

/* The kernel's ETH_GSTRING_LEN (us_net_stats is defined with it): one statistic's name. */
#define US_KERNEL_API_STAT_NAME_LEN	32

#define US_KERNEL_API(X)							\
	/* The CPU (docs/design.md §6) and boot (cpu.c). */			\
	X(boot, int, (void))							\
	X(cpu_enter, void, (void))						\
	X(cpu_leave, void, (void))						\
	/* The net_device's open and stop (control.c); TX: one copied frame,	\
	 * the host's tx ring, the host's TAP (xmit.c). */			\
	X(net_open, int, (void))						\
	X(net_stop, int, (void))						\
	X(net_xmit, int, (const void *frame, unsigned int len))		\
	X(net_xmit_buffers, void, (struct ddekit_tx_frame *frames, unsigned int n)) \
	X(net_xmit_tap, unsigned int, (void))					\
	/* The interrupts the TX thread waits on and serves (irq.c). */				\
	X(irq_serve, unsigned int, (int *eventfds, unsigned int max))		\
	/* The host's settings and ethtool queries (control.c). */		\
	X(net_set_mtu, int, (unsigned int mtu))				\
	X(net_set_mac, int, (const unsigned char *mac))			\
	X(net_set_rx_mode, int, (unsigned int flags, unsigned int n_mc,	\
				 const unsigned char *mc))			\
	X(net_set_features, int, (unsigned long long features))		\
	X(net_set_channels, int, (unsigned int combined))			\
	X(net_drvinfo, int, (char *driver, char *version, char *fw_version,	\
			     char *bus_info, unsigned int len))		\
	X(net_link, int, (unsigned int *speed, unsigned char *duplex,		\
			  unsigned char *autoneg, unsigned char *port,		\
			  unsigned char *link))				\
	X(net_stats, int, (unsigned int first, unsigned int max, unsigned int *total, \
			   char (*names)[US_KERNEL_API_STAT_NAME_LEN],		\
			   unsigned long long *values))				\
	/* The host's block requests, each to its hardware queue (blk-core.c). */ \
	X(blk_submit, void, (const struct ddekit_blk_request *reqs, unsigned int n)) \
	/* A module parameter, through its kernel_param_ops (lib.c). */	\
	X(param_set, int, (const struct kernel_param *kp, const char *val))	\
	/* Counters for the stand-alone run and the tests (irq.c, gro.c, skb.c). */ \
	X(irq_count, unsigned long, (void))					\
	X(rx_frames, unsigned long, (void))					\
	X(skb_live, long, (void))						\
	/* Tag sets, queues and block majors alive (genhd.c): 0 after rmmod. */ \
	X(blk_live, long, (void))						\
	/* The post-probe template (template.c, docs/design.md §8). */		\
	X(template_park, int, (void))						\
	X(template_resume, int, (void))					\
	X(template_used_memory, void, (unsigned long *offset, unsigned long *len))

/* Entry name's symbol in the kernel half, and that symbol's name as a string. */
#define US_KERNEL_API_SYMBOL(name)		us_##name
#define US_KERNEL_API_SYMBOL_NAME(name)		US_KERNEL_API_STRING(US_KERNEL_API_SYMBOL(name))
#define US_KERNEL_API_STRING(symbol)		US_KERNEL_API_QUOTE(symbol)
#define US_KERNEL_API_QUOTE(text)		#text

/*
 * The definitions' prototypes, for the kernel half only: the executable
 * reaches these functions through struct kernel_api, never by linking.
 */
#ifdef __KERNEL__
#define US_KERNEL_API_PROTOTYPE(name, type, parameters) \
	type US_KERNEL_API_SYMBOL(name) parameters;
US_KERNEL_API(US_KERNEL_API_PROTOTYPE)
#undef US_KERNEL_API_PROTOTYPE
#endif

#endif /* UNDERSTUDY_KERNEL_API_H */
