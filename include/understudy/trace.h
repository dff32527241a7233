/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The trace region (docs/checking.md): what a driver process running a
 * rewritten module tells the checker, and how the checker answers. It is the
 * contract between runtime/check (the producer) and checker/ (the consumer),
 * in neither world: it includes nothing but <stdint.h> and trace-events.h,
 * what an event says, which includes nothing at all so that the kernel half
 * (runtime/kernel, whose Kbuild has no <stdint.h>) takes its event kinds
 * from there too.
 *
 * The host's mirror of both is host/trace (the crate understudy-trace, which
 * the checker and understudyd use); its tests/layout.rs reads these files,
 * lists every US_* constant, every member of every struct us_* and fails
 * unless the crate declares the same names with the same values, sizes and
 * offsets. Keep the files as regular as they are (one #define, enum member
 * or struct member per declaration): a construct that test's reader does
 * not know fails it.
 *
 * understudyd creates the region (a memfd of US_TRACE_REGION_SIZE bytes,
 * zero-filled) and hands it to both processes. The driver process writes
 * the header, the module table and the site table before the module runs
 * and sets `ready`; from then on it appends events to the ring and the
 * checker consumes them. Everything the driver writes is untrusted: the
 * checker validates every index and length it reads.
 *
 * The event ring has one producer: the driver's single kernel "CPU" (the CPU
 * lock, runtime/README.md), so its order is the order in which the driver's
 * code ran. `head` and `approved` count events since the start; an event
 * lives in slot (index & (ring_entries - 1)).
 *
 * Little-endian (x86_64); every struct is naturally aligned and has no
 * padding, so it needs no packing.
 */
#ifndef UNDERSTUDY_TRACE_H
#define UNDERSTUDY_TRACE_H

#include <stdint.h>

#include "trace-events.h"

#define US_TRACE_MAGIC        0x55535452u /* "RTSU" */
#define US_TRACE_VERSION      2u
#define US_TRACE_REGION_SIZE  (64u << 20)
#define US_TRACE_RING_ENTRIES (1u << 20)  /* 32 MiB of events */
#define US_TRACE_MAX_MODULES  8u
#define US_TRACE_MAX_SITES    (1u << 19)  /* 8 MiB of sites */

/* ---- the gate's modes (docs/checking.md, "The gate") ---------------------- */

enum us_gate_mode {
	US_GATE_TRIAGE = 0,     /* writes flow; findings are only reported */
	US_GATE_PERMISSIVE = 1, /* writes flow; a fatal verdict stops the next one */
	US_GATE_STRINGENT = 2,  /* each device write waits until all before it is approved */
};

/* ---- events (their kinds, flags and arguments: trace-events.h) ------------ */

/* One event: 32 bytes. kind_flags = kind | flags << 16. */
struct us_trace_event {
	uint32_t kind_flags;
	uint32_t site;      /* a code address below 2 GiB */
	uint64_t addr;
	uint64_t arg0;
	uint64_t arg1;
};

/* ---- sites: what each stub call in the rewritten module stands for --------- */

/* access flags of a site */
#define US_SITE_READ   0x01u
#define US_SITE_WRITE  0x02u
#define US_SITE_PERCPU 0x04u /* %gs-relative */
#define US_SITE_STACK  0x08u /* %rsp-based: the thread's own stack */
#define US_SITE_ATOMIC 0x10u /* lock-prefixed or xchg */
#define US_SITE_STRING 0x20u /* rep movs/stos/cmps/scas/lods; size is the element size */
#define US_SITE_PORT   0x40u /* in/out; READ = in, WRITE = out */
#define US_SITE_FRAME  0x80u /* a FRAME, RETURN or ESCAPE probe */

/* Sorted by ret; ret is the address the stub call returns to. */
struct us_trace_site {
	uint32_t ret;
	uint32_t offset;   /* the instruction's offset in its section of the original .ko */
	uint16_t module;   /* index in us_trace_header.modules */
	uint16_t section;  /* section index in the original .ko */
	uint16_t size;     /* bytes accessed (element size for strings; a FRAME's bytes; 0: unknown) */
	uint8_t flags;     /* US_SITE_* */
	uint8_t reserved;
};

struct us_trace_module {
	char path[240];    /* the .ko the driver process loaded, NUL-terminated */
	uint64_t text;     /* where its image starts (for the runtime's own call sites) */
	uint64_t text_size;
};

/* ---- the region's header ----------------------------------------------------- */

/* Each line written by one side only. */
struct us_trace_header {
	/* written by the driver process before `ready` */
	uint32_t magic;
	uint32_t version;
	uint32_t ring_entries;    /* a power of two */
	uint32_t gate_mode;       /* enum us_gate_mode */
	uint64_t ring_offset;     /* from the region's start */
	uint64_t sites_offset;
	uint32_t nsites;
	uint32_t nmodules;
	uint64_t percpu_base;     /* the per-cpu block, for US_EVF_PERCPU */
	uint64_t arena;           /* the DMA arena's cpu address, dma address and size */
	uint64_t arena_iova;
	uint64_t arena_size;
	uint32_t ready;           /* set last: everything above is valid */
	uint32_t pad0[13];
	/* the producer's line */
	uint64_t head;            /* events published */
	uint32_t producer_waiting; /* the driver sleeps on `approved` (futex) */
	uint32_t pad1[13];
	/* the checker's line */
	uint64_t approved;        /* events checked; all before it are approved */
	uint64_t verdict_at;      /* 1 + index of the first fatal event; 0: none */
	uint32_t checker_waiting; /* the checker sleeps on `head` (futex, low word) */
	uint32_t checker_pid;
	uint32_t pad2[10];
	struct us_trace_module modules[US_TRACE_MAX_MODULES];
};

_Static_assert(sizeof(struct us_trace_event) == 32, "event layout");
_Static_assert(sizeof(struct us_trace_site) == 16, "site layout");
_Static_assert(sizeof(struct us_trace_header) == 256 + US_TRACE_MAX_MODULES * 256,
	       "header layout");

#define US_TRACE_SITES_OFFSET 4096u
#define US_TRACE_RING_OFFSET  (US_TRACE_SITES_OFFSET + US_TRACE_MAX_SITES * 16u)
_Static_assert(US_TRACE_RING_OFFSET + US_TRACE_RING_ENTRIES * 32ull <= US_TRACE_REGION_SIZE,
	       "region layout");

#endif /* UNDERSTUDY_TRACE_H */
