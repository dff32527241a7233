/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The driver process's side of checking (docs/checking.md): the trace
 * producer, the probes' stubs (stubs.S) and the gate. The other side is
 * the checker process (checker/); the contract is
 * include/understudy/trace.h.
 */
#ifndef UNDERSTUDY_CHECK_H
#define UNDERSTUDY_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include <understudy/trace.h>

struct ko_module;

/* "triage", "permissive", "stringent"; -1 for anything else. */
int check_gate_mode(const char *name);

/* Maps the trace region (a memfd of US_TRACE_REGION_SIZE bytes); 0 or -1 with err. */
int check_setup(int trace_fd, enum us_gate_mode mode, char *err, size_t errlen);

/* Adds a rewritten module's sites and its entry in the module table; 0 or -1 with err. */
int check_add_module(const struct ko_module *m, char *err, size_t errlen);

/*
 * Everything the checker needs is written: the per-cpu block, the DMA
 * arena; the checker may start. From here on the stubs trace.
 */
void check_start(void *percpu_block, void *arena, uint64_t arena_iova, uint64_t arena_size);

/* A mapped BAR: device memory, whose writes pass the gate. */
void check_device_memory(void *addr, size_t size);

#endif /* UNDERSTUDY_CHECK_H */
