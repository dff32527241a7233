/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the executable's main tells ddekit before any kernel code runs.
 * libc-only: the kernel half never sees these.
 */
#ifndef UNDERSTUDY_DDEKIT_SETUP_H
#define UNDERSTUDY_DDEKIT_SETUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The PCI function (docs/design.md §4): a VFIO device fd, or without an
 * IOMMU uio_pci_generic's files -- /dev/uioN, sysfs config, then resource0
 * to resource5 (-1 where a BAR has none). Set up before the process gives
 * up its privileges (its I/O ports need them); named, by its PCI address,
 * when the host says which it is.
 */
#define DDEKIT_UIO_FDS	8
struct ddekit_device_fds {
	int vfio;			/* -1: the device is uio's */
	int uio[DDEKIT_UIO_FDS];
};
int ddekit_setup_device(const struct ddekit_device_fds *fds);
void ddekit_name_device(const char *pci_name);
/*
 * Maps the DMA arena memfd: the packet pool is [0, pool_size), the runtime
 * gets the rest. Without an arena fd (-1), size bytes of anonymous memory
 * stand in (tests).
 */
int ddekit_setup_arena(int arena_fd, uint64_t iova, size_t size, size_t pool_size);
/*
 * Without an IOMMU: the memfd of the arena's device addresses, a u64 per
 * 2 MiB hugepage (arena.c). Before ddekit_setup_arena, which checks that the
 * table covers the arena.
 */
int ddekit_setup_dma_chunks(int fd);
bool ddekit_dma_chunks_fit(size_t arena_size);
/* GS base of every thread that runs kernel code; installs it in the caller. */
int ddekit_setup_percpu(void *block);
/* Between ddekit's files: that block (cpu.c), which thread.c installs in each thread it starts. */
extern void *percpu_block;
/* Who gets received frames without the host's TAP (main's test harness). */
void ddekit_setup_rx(void (*handler)(const void *frame, unsigned int len));
/* Also called with every event line (main watches for CARRIER, ...). */
void ddekit_setup_event_observer(void (*observer)(const char *line));
/* Called each time a thread takes the CPU, with it held (the checker's trace). */
void ddekit_setup_cpu_observer(void (*observer)(void));
/* Called with each BAR mapped for the driver: device memory (the checker's gate). */
void ddekit_setup_device_memory_observer(void (*observer)(void *addr, size_t size));
/*
 * A thread may wait with the CPU held for another process to make progress
 * (the checker, to free ring room or approve a device write): the heartbeat
 * counts that progress as the driver's own, so a driver slowed by its
 * checker is not taken for a hung one. `progress` returns a counter that
 * moves only while such a wait is under way.
 */
void ddekit_setup_waiting_progress(unsigned long long (*progress)(void));
/* Log records at or below this level go to stderr (default 7: all). */
void ddekit_setup_loglevel(int level);

/* ---- the host connection (host.c, docs/protocol.md) ---------------------- */

/* Events and log records also go to the host as messages from now on. */
int ddekit_setup_control(int control_fd);
/* Maps the rings memfd; the arena must be set up already (the pool is in it). */
int ddekit_setup_rings(int rings_fd, uint64_t rings_size, uint32_t ring_size, int kick_fd,
		       int notify_fd, uint32_t pool_buffers, uint32_t buffer_size);
/* One message: header, body, then tail (may be NULL). */
int ddekit_send_message(uint16_t type, uint32_t seq, const void *body, size_t len,
			const void *tail, size_t tail_len);
/*
 * Starts the thread that sends: the tx ring's frames through xmit, in
 * batches (zero copy), then the TAP's through from_tap (which returns how
 * many it read); before each round it calls interrupts, which handles the
 * interrupts of the lines it serves and gives their eventfds to wait on.
 */
struct ddekit_tx_frame;
int ddekit_start_tx(void (*xmit)(struct ddekit_tx_frame *frames, unsigned int n),
		    unsigned int (*from_tap)(void),
		    unsigned int (*interrupts)(int *eventfds, unsigned int max));
void ddekit_host_warn(const char *file, unsigned int line, const char *text);
/*
 * The block class (block.c): maps the rings memfd's two block rings, and
 * starts the thread that hands blk_submit's requests to submit in batches
 * (the kernel half's us_blk_submit).
 */
struct ddekit_blk_request;
struct ddekit_disk;
int ddekit_setup_blk_rings(int rings_fd, uint64_t rings_size, uint32_t ring_size, int kick_fd,
			   int notify_fd, uint32_t pool_buffers, uint32_t buffer_size);
int ddekit_start_blk(void (*submit)(const struct ddekit_blk_request *reqs, unsigned int n));
/* Without the host (stand-alone): each completion and each DISK go to these instead. */
void ddekit_setup_blk_observer(void (*done)(unsigned long cookie, int status),
			       void (*disk)(const struct ddekit_disk *disk));
/*
 * The TX thread polls instead of sleeping for up to window_ns after its
 * last work while the traffic is sparse (tx_poll.c); 0, the default: never.
 */
void ddekit_setup_tx_poll(unsigned long long window_ns);
/* Between ddekit's files: after a TX round that sent frames and served
 * interrupts (events: how many of both), whether to look again rather
 * than sleep. */
bool ddekit_tx_poll(unsigned int events);
/*
 * The driver's queues of the host's TAP (up to US_MAX_QUEUES): the stack's
 * frames are read from them, received frames written to them
 * (docs/protocol.md, "Sending", "Receiving").
 */
int ddekit_setup_tap(const int *fds, unsigned int n);
/* Between ddekit's files: the TAP's state in the rings memfd (tap.c), ... */
struct us_tap_state;
int ddekit_setup_tap_state(struct us_tap_state *state, uint32_t ring_size, int notify_fd);
/*
 * ... the fds the TX thread also waits on, a record freed and each queue
 * (-1: not now), 1 + US_MAX_QUEUES at most, and after it woke, ...
 */
int ddekit_tap_wait_fds(int *fds);
void ddekit_tap_woken(void);
/* ... and log records. */
void ddekit_host_log(int level, const char *text, unsigned long len);

/* For rx_writer.c, which delivers received frames: one to TAP queue `queue`, from any thread. */
struct iovec;
void ddekit_tap_writev(unsigned int queue, const struct iovec *iov, unsigned int n);

#endif /* UNDERSTUDY_DDEKIT_SETUP_H */
