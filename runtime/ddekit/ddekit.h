/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ddekit: the libc half of the driver-process runtime, as seen from the
 * kernel half (runtime/kernel) and from the executable's main.
 *
 * This header is included by Kbuild-compiled kernel code and by ordinary
 * libc code, so it uses nothing but builtin C types: no libc header, no
 * Linux kernel header (Genode's rule). The kernel half's undefined symbols
 * resolve to these functions through the loader's resolver callback.
 *
 * Calling convention: kernel code keeps its stack only 8-byte aligned
 * (-mpreferred-stack-boundary=3), so every ddekit object file is compiled
 * with -mincoming-stack-boundary=3 and realigns on entry. None of these
 * functions is variadic, because kernel code leaves %al undefined.
 */
#ifndef UNDERSTUDY_DDEKIT_H
#define UNDERSTUDY_DDEKIT_H

/* ---- logging ---------------------------------------------------------- */

/* One preformatted printk record; level is the KERN_* digit (0..7). */
void ddekit_log(int level, const char *text, unsigned long len);
/* A line of the runtime's machine-readable event stream (stdout). */
void ddekit_event(const char *line);
/* "module+0xoffset" for a code address, for %pS; implemented by main. */
void ddekit_symbolize(unsigned long addr, char *buf, unsigned long len);
/*
 * Ends the process after printing why (BUG, stack smash, fortify, ...).
 * Not declared noreturn to kernel code: objtool only knows the kernel's own
 * noreturn functions, so the kernel half follows the call with a loop.
 */
#ifdef __KERNEL__
void ddekit_panic(const char *why);
#else
void ddekit_panic(const char *why) __attribute__((noreturn));
#endif

/* ---- time ------------------------------------------------------------- */

unsigned long long ddekit_now_ns(void);		/* CLOCK_MONOTONIC */
/* The host's other clocks, for the kernel's ktime_get_real() and its offsets. */
enum ddekit_clock { DDEKIT_CLOCK_REALTIME, DDEKIT_CLOCK_BOOTTIME, DDEKIT_CLOCK_TAI };
unsigned long long ddekit_clock_ns(enum ddekit_clock clock);
void ddekit_spin_ns(unsigned long long ns);	/* busy wait, keeps the CPU */

/* ---- randomness --------------------------------------------------------- */

/* Fills buf from the host's random source (getrandom()); dies if it cannot. */
void ddekit_random(void *buf, unsigned long len);

/* ---- the kernel "CPU" (docs/design.md §6) ---------------------------- */

/*
 * One lock: a thread runs kernel code only while it holds it. Waiting
 * releases it, like a sleeping task gives up its CPU. A change only one
 * thread waits for (its queue woke, a timer for the softirq thread, work
 * for the worker) is announced to that thread with ddekit_cpu_wake(); any
 * other change, to all waiters with ddekit_cpu_wake_all(). Both are called
 * with the CPU held.
 */
void ddekit_cpu_lock(void);
void ddekit_cpu_unlock(void);
/* Releases the CPU until woken or until deadline_ns (0: no deadline). */
void ddekit_cpu_wait(unsigned long long deadline_ns);
/* Returns once the CPU is free or has changed hands: the heartbeat's check. */
void ddekit_cpu_await_progress(void);
/* How often the CPU was taken, waking included (the heartbeat's and the tests' count). */
unsigned long ddekit_cpu_entries(void);
void ddekit_cpu_wake_all(void);
/* The calling thread, as ddekit_cpu_wake() names it (valid while it lives). */
void *ddekit_cpu_waiter(void);
void ddekit_cpu_wake(void *waiter);

/* The per-cpu block every thread's GS base points to. */
void *ddekit_percpu_block(void);

/* ---- threads ---------------------------------------------------------- */

/* Starts fn(arg) on a new thread whose GS base is the per-cpu block. */
int ddekit_thread_create(void (*fn)(void *), void *arg, const char *name);
/*
 * The same, for a thread that can be ended and joined (*handle): the
 * threads a post-probe template stops before it forks (driver/template.c).
 */
int ddekit_thread_start(void (*fn)(void *), void *arg, const char *name,
			unsigned long *handle);
/*
 * The calling thread runs what interrupt and softirq context run in the
 * kernel (the IRQ handler, NAPI polls, timers): it gets a larger share of
 * the CPU than the application threads it competes with.
 */
void ddekit_thread_runs_interrupts(void);
/* Waits up to timeout_ns for the thread to return; 0 or -errno. */
int ddekit_thread_join(unsigned long handle, unsigned long long timeout_ns);
/* One pointer of thread-local storage for the kernel half (its task). */
void *ddekit_thread_data(void);
void ddekit_thread_set_data(void *data);

/* ---- memory ----------------------------------------------------------- */

/*
 * The DMA arena: [va, va + size) is IOMMU-mapped at iova; its first
 * pool_size bytes are the host's packet pool, the rest is the runtime's.
 * Without an arena fd (self-test mode) iova is 0 and nothing is mapped.
 */
void ddekit_arena(void **va, unsigned long long *iova, unsigned long *size,
		  unsigned long *pool_size);
/*
 * The device's address of [offset, offset + len) of the arena (bus.c): its
 * IOVA, or without an IOMMU its physical address; DDEKIT_DMA_NONE if the
 * range is outside the arena or crosses into a hugepage that is not its
 * physical neighbour. ddekit_dma_limit: one past the highest address.
 */
#define DDEKIT_DMA_NONE	(~0ULL)
unsigned long long ddekit_dma_address(unsigned long offset, unsigned long len);
unsigned long long ddekit_dma_limit(void);
/* Zeroed memory the device never sees (runtime bookkeeping). */
void *ddekit_zalloc(unsigned long size);
/*
 * vmalloc: zeroed, page-aligned memory the device never sees, with a
 * no-access page on each side as the kernel's vmalloc areas have, so a
 * driver that runs off the end of an array faults here as it would in the
 * kernel instead of silently corrupting what lies next to it. It is private
 * to the process: a template's fork starts from the template's copy.
 * ddekit_vfree returns the bytes the area held, 0 if addr starts none.
 */
void *ddekit_vmalloc(unsigned long size);
unsigned long ddekit_vfree(const void *addr);
int ddekit_is_vmalloc(const void *addr);

/* Files (firmware): size in bytes, or how many bytes were read; -errno. */
long ddekit_file_size(const char *path);
long ddekit_read_file(const char *path, void *buf, unsigned long len);

/* ---- the PCI function, through VFIO or uio_pci_generic (device.c) ------ */

int ddekit_pci_present(void);
const char *ddekit_pci_name(void);		/* "0000:00:03.0" */
int ddekit_pci_config_read(unsigned int offset, void *buf, unsigned int len);
int ddekit_pci_config_write(unsigned int offset, const void *buf, unsigned int len);

#define DDEKIT_BAR_MMIO		1
#define DDEKIT_BAR_IO		2
#define DDEKIT_BAR_64BIT	4
#define DDEKIT_BAR_PREFETCH	8
/*
 * Size, bus address (what the BAR register holds) and DDEKIT_BAR_* flags.
 * Every thread may use in/out on I/O BARs: they are granted at set-up.
 */
int ddekit_pci_bar(int bar, unsigned long long *start, unsigned long long *size,
		   unsigned int *flags);
/* Maps a memory BAR (cached per BAR); NULL if it cannot be mapped. */
void *ddekit_pci_bar_map(int bar);

/*
 * Interrupts through VFIO (docs/design.md §3): the legacy INTx line, or the
 * function's MSI or MSI-X vectors. Each source delivers through eventfds,
 * one per line or vector, that the kernel signals on each interrupt.
 */
enum ddekit_irq_source { DDEKIT_IRQ_INTX, DDEKIT_IRQ_MSI, DDEKIT_IRQ_MSIX };
/* The most message-signalled vectors the runtime enables for one function. */
#define DDEKIT_IRQ_MAX_VECTORS	32
/* How many vectors VFIO offers for source (its capability's size); 0: none. */
int ddekit_irq_vectors(enum ddekit_irq_source source);
/*
 * Enables MSI or MSI-X vectors [0, count) with no eventfd attached yet;
 * 0 or -errno. Disabling takes every vector of source away again.
 */
int ddekit_irq_enable_vectors(enum ddekit_irq_source source, unsigned int count);
void ddekit_irq_disable_vectors(enum ddekit_irq_source source);
/*
 * An eventfd for the INTx line (vector 0), which this enables, or for an
 * enabled MSI/MSI-X vector. VFIO masks INTx when it fires, until
 * ddekit_irq_unmask(); message-signalled vectors are never masked. detach
 * stops the signalling and wakes the waiter once more, so it can see it was
 * detached; the waiter then closes the eventfd.
 */
int ddekit_irq_attach(enum ddekit_irq_source source, unsigned int vector);
/* Blocks (without the CPU) until an interrupt or the detach wake-up, and takes it. */
int ddekit_irq_wait(int eventfd);
/*
 * Whether one of those has come (1) or not (0), or -errno, without taking
 * it: ddekit_irq_wait() then takes it without blocking.
 */
int ddekit_irq_pending(int eventfd);
void ddekit_irq_unmask(void);
void ddekit_irq_detach(enum ddekit_irq_source source, unsigned int vector, int eventfd);
void ddekit_irq_close(int eventfd);

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

/* ---- checking (docs/checking.md) --------------------------------------- */

/*
 * Nonzero when the driver's modules run rewritten under the checker: the
 * kernel half's interposition points then report what the probes cannot
 * see (allocations, DMA mappings, locks, contexts, copies) as events, each
 * with `site`, the caller in the module. Call with the CPU held: the CPU
 * lock makes the trace one ordered stream.
 */
extern int ddekit_checking;
void ddekit_trace(unsigned int kind, unsigned long site, unsigned long addr,
		  unsigned long arg0, unsigned long arg1);
/*
 * The thread now runs kernel code of context `kind` (US_CTX_*): the
 * handler `handler` (0 for process context). Returns the previous kind.
 */
int ddekit_trace_context(int kind, unsigned long handler);
/* A device write the runtime does for the driver (config space): the gate applies. */
void ddekit_check_gate(unsigned long site);

/*
 * The events' kinds and arguments (US_EV_*, US_LOCK_*, US_STOP_*, US_CTX_*):
 * the trace contract's header that includes nothing, so that this one may
 * include it. The path is relative to this file, for Kbuild has no -I of
 * the repository's include/ (runtime/Makefile links ddekit/ beside each
 * kernel half's tree).
 */
#include "../../include/understudy/trace-events.h"

/* ---- network taps ----------------------------------------------------- */

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
 * The stack's frames, from the driver's queues of the host's TAP
 * (docs/protocol.md, "Sending"): the next one of queue `queue` into
 * buffer (at most size bytes), its length and offloads into f; 0 if the TAP
 * has none, the host's gate is closed or every record of a held frame is in
 * use. ddekit_tap_hold(f) then records it where it is (f->buffer, a block
 * of the arena), ddekit_tap_moved() where it was copied to, and
 * ddekit_tap_done(f->buffer, dropped) ends the record once the driver is
 * done with it. Only ddekit_tap_done() needs the CPU held.
 */
int ddekit_tap_read(unsigned int queue, void *buffer, unsigned int size, struct ddekit_tx_frame *f);
/* How many queues of the TAP the process has (0 without a host). */
unsigned int ddekit_tap_queues(void);
void ddekit_tap_hold(const struct ddekit_tx_frame *f);
void ddekit_tap_moved(const void *from, const void *to);
void ddekit_tap_done(const void *buffer, int dropped);

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

#endif /* UNDERSTUDY_DDEKIT_H */
