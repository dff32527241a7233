/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Received frames, to the host's stack (rx_writer.c).
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_RX_WRITER_H
#define UNDERSTUDY_DDEKIT_RX_WRITER_H

/*
 * A frame the stack above the driver received (netif_receive_skb,
 * napi_gro_receive, ...), for the host's interface: its virtio_net_hdr,
 * which the kernel half fills from <linux/virtio_net.h> (gro.c asserts the
 * layout), and its bytes gathered from parts. Called with the CPU held; the
 * parts are read during the call only.
 */
struct ddekit_rx_meta {
	unsigned char flags;
	unsigned char gso_type;
	unsigned short hdr_len;
	unsigned short gso_size;
	unsigned short csum_start;
	unsigned short csum_offset;
};

struct ddekit_rx_part {
	const void *base;
	unsigned long len;
};

/* The most parts one received frame may have: a GRO merge's, or an skb's head and frags. */
#define DDEKIT_RX_MAX_PARTS 128

void ddekit_net_rx(unsigned int queue, const struct ddekit_rx_meta *meta,
		   const struct ddekit_rx_part *parts, unsigned int n);
/*
 * A NET_RX round is over. A round's first small frame is written at once,
 * the rest of its small frames by a thread of their own (rx_writer.c).
 */
void ddekit_net_rx_round_end(void);

#endif /* UNDERSTUDY_DDEKIT_RX_WRITER_H */
