/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The host connection (host.c, docs/protocol.md): what the host learns from
 * the driver, and the TX thread, which sends the host's frames and serves
 * interrupt lines.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_HOST_H
#define UNDERSTUDY_DDEKIT_HOST_H

/*
 * What the host learns from the driver (docs/design.md §7): each becomes
 * an event line on stdout and, with a control socket, a protocol message.
 */
/*
 * Offloads a driver takes (REGISTERED), what a tx frame asks of it,
 * SET_RX_MODE's flags and the room a tx frame's span
 * leaves after it for skb_shared_info: the US_<name> of
 * include/understudy/protocol.h as DDEKIT_<name>. That header includes
 * <stdint.h>, which this one may not, so the values are repeated in this one
 * table; host.c asserts every entry equal to the protocol's at compile time.
 */
#define DDEKIT_PROTOCOL_CONSTANTS(X)	\
	X(OFFLOAD_CSUM,		0x0001)	\
	X(OFFLOAD_TSO4,		0x0002)	\
	X(OFFLOAD_TSO6,		0x0004)	\
	X(OFFLOAD_TSO_ECN,	0x0008)	\
	X(OFFLOAD_RX_CSUM,	0x0010)	\
	X(TX_CSUM,		0x0001)	\
	X(TX_GSO_TCPV4,		0x0002)	\
	X(TX_GSO_TCPV6,		0x0004)	\
	X(TX_GSO_ECN,		0x0008)	\
	X(RX_MODE_PROMISC,	0x0001)	\
	X(RX_MODE_ALLMULTI,	0x0002)	\
	X(TX_TAILROOM,		512)	\
	X(TX_MAX_FRAME,		65554)

#define DDEKIT_PROTOCOL_CONSTANT(name, value) DDEKIT_##name = value,
enum { DDEKIT_PROTOCOL_CONSTANTS(DDEKIT_PROTOCOL_CONSTANT) };
#undef DDEKIT_PROTOCOL_CONSTANT

void ddekit_net_registered(const char *name, const char *driver, const char *version,
			   const unsigned char *perm_addr, const unsigned char *dev_addr,
			   unsigned int mtu, unsigned int min_mtu, unsigned int max_mtu,
			   unsigned long long features, unsigned long long hw_features,
			   unsigned int offloads, unsigned int n_tx_queues,
			   unsigned int n_rx_queues, int carrier);
void ddekit_net_carrier(const char *name, int on);
/* A frame handed over with us_net_xmit_buffers() is done with (sent or not). */
void ddekit_net_tx_done(unsigned long cookie, int dropped);

/*
 * The tx ring's frames go to the kernel half in batches of up to this many
 * (us_net_xmit_buffers): one CPU entry and one doorbell per batch. Bounded
 * so that the TX thread never keeps the CPU from interrupts for long (an IRQ
 * thread's, or the line it serves itself between batches).
 */
#define DDEKIT_TX_BATCH 32

struct ddekit_tx_frame {
	void *buffer;		/* the frame at its start: pool buffers, or a TAP frame's block */
	unsigned int len;
	unsigned int room;	/* bytes from buffer the skb may use (a pool frame's span) */
	unsigned short flags;	/* DDEKIT_TX_* */
	unsigned short gso_size;
	unsigned short csum_start;
	unsigned short csum_offset;
	unsigned short queue;	/* the TAP queue it was read from: its transmit queue */
	int status;		/* out: 0 the driver took it, else -errno (dropped) */
};

/*
 * The TX thread serves the interrupt lines the kernel half hands it (irq.c,
 * docs/design.md §6): once it runs, it waits on their eventfds beside the
 * TAP and handles what arrived between its batches. rewait wakes it to wait
 * again (a line was added) or to look again (its stopped queue woke: it
 * waits for that in ddekit_tx_wait_interrupts, serving the lines' interrupts,
 * which are what wake the queue).
 */
int ddekit_tx_serves_interrupts(void);
int ddekit_on_tx_thread(void);
void ddekit_tx_rewait(void);
void ddekit_tx_wait_interrupts(const int *eventfds, unsigned int n);

#endif /* UNDERSTUDY_DDEKIT_HOST_H */
