/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The driver's queues of the host's TAP (tap.c): the stack's frames, read
 * from them.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_TAP_H
#define UNDERSTUDY_DDEKIT_TAP_H

#include "host.h"	/* struct ddekit_tx_frame */

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

#endif /* UNDERSTUDY_DDEKIT_TAP_H */
