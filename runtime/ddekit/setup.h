/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the executable's main tells ddekit before any kernel code runs.
 * libc-only: the kernel half never sees these.
 */
#ifndef UNDERSTUDY_DDEKIT_SETUP_H
#define UNDERSTUDY_DDEKIT_SETUP_H

#include <stddef.h>
#include <stdint.h>

/* The VFIO device fd and the PCI address it belongs to. */
int ddekit_setup_device(int device_fd, const char *pci_name);
/*
 * Maps the DMA arena memfd; the runtime gets [runtime_offset, size).
 * Without an arena fd (-1), size bytes of anonymous memory stand in (tests).
 */
int ddekit_setup_arena(int arena_fd, uint64_t iova, size_t size, size_t runtime_offset);
/* GS base of every thread that runs kernel code; installs it in the caller. */
int ddekit_setup_percpu(void *block);
/* Who gets received frames (main's test harness or the rings). */
void ddekit_setup_rx(void (*handler)(const void *frame, unsigned int len));
/* Also called with every event line (main watches for CARRIER, ...). */
void ddekit_setup_event_observer(void (*observer)(const char *line));
/* Log records at or below this level go to stderr (default 7: all). */
void ddekit_setup_loglevel(int level);

#endif /* UNDERSTUDY_DDEKIT_SETUP_H */
