/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The trace region (docs/checking.md): what a driver process running a
 * rewritten module tells the checker, and how the checker answers. It is the
 * contract between runtime/check (the producer) and checker/ (the consumer),
 * in neither world: it includes nothing but <stdint.h>. The checker's mirror
 * is checker/src/trace.rs.
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

/* ---- events ----------------------------------------------------------------- */

enum us_trace_kind {
	/* from the rewritten module's stubs; `site` is the stub call's return address */
	US_EV_ACCESS = 1,     /* addr: effective address (US_EVF_PERCPU: %gs offset) */
	US_EV_STRING = 2,     /* rep string op: addr = %rdi, arg0 = %rsi, arg1 = %rcx; DF: US_EVF_DF */
	US_EV_PORT = 3,       /* in/out: addr = port */
	/* the stack (docs/checking.md, "Stack frames"); their sites have US_SITE_FRAME */
	US_EV_FRAME = 4,      /* addr = the new frame's lowest byte (%rsp after sub $size,%rsp);
			       * the site's size is the frame's: its bytes are undefined */
	US_EV_RETURN = 5,     /* addr = %rsp once the function has returned (ret, or a jump
			       * to another module): this thread's frames below it are dead */
	US_EV_ESCAPE = 6,     /* addr = a stack address the code took (lea/mov from %rsp):
			       * code the checker does not see may write from it to its frame's end */
	/* from the runtime's interposition points; `site` is the caller in the module */
	US_EV_ALLOC = 16,     /* addr, arg0 = size (kmalloc, vmalloc, alloc_pages, skb data...) */
	US_EV_FREE = 17,      /* addr */
	US_EV_DMA_MAP = 18,   /* addr = cpu address, arg0 = size, arg1 = dma address; direction: US_EVF_DIR */
	US_EV_DMA_UNMAP = 19, /* addr = dma address, arg0 = size; direction: US_EVF_DIR */
	US_EV_DMA_SYNC_CPU = 20,    /* dma_sync_*_for_cpu: addr = dma address, arg0 = size */
	US_EV_DMA_SYNC_DEVICE = 21, /* dma_sync_*_for_device: the same */
	US_EV_DMA_ALLOC = 22, /* coherent: addr = cpu address, arg0 = size, arg1 = dma address */
	US_EV_DMA_FREE = 23,  /* coherent: addr = cpu address, arg0 = size */
	US_EV_LOCK = 24,      /* addr = lock; arg0 = US_LOCK_* */
	US_EV_UNLOCK = 25,    /* addr = lock */
	US_EV_IRQ_OFF = 26,   /* local interrupts disabled (local_irq_save, spin_lock_irqsave) */
	US_EV_IRQ_ON = 27,
	US_EV_CONTEXT = 28,   /* the CPU now runs addr = US_CTX_*, arg0 = thread id, arg1 = handler */
	US_EV_COPY = 29,      /* memcpy/memmove by the runtime: addr = dst, arg0 = src, arg1 = size */
	US_EV_FILL = 30,      /* memset by the runtime: addr = dst, arg1 = size */
	US_EV_STOP = 31,      /* arg0 = US_STOP_*: what the driver still has of the device's has leaked */
};

/* Event flags (the high 16 bits of kind_flags). */
#define US_EVF_PERCPU 0x0001u /* ACCESS: addr is an offset from the per-cpu block */
#define US_EVF_DF     0x0002u /* STRING: the direction flag was set: the op walks down */
/* DMA_MAP, DMA_UNMAP: Linux's enum dma_data_direction (0 bidirectional, 1 to
 * device, 2 from device, 3 none) in flag bits 8-9; the event has no room for a
 * fourth argument. */
#define US_EVF_DIR_SHIFT 8u
#define US_EVF_DIR_MASK  0x0300u

enum us_lock_kind {
	US_LOCK_SPIN = 0,
	US_LOCK_SPIN_IRQ = 1, /* spin_lock_irq/irqsave: also excludes hard IRQs */
	US_LOCK_SPIN_BH = 2,  /* spin_lock_bh: also excludes softirqs */
	US_LOCK_MUTEX = 3,
};

/*
 * A STOP's arg0. Closing the interface must give back what the open took
 * (streaming mappings); only the driver's detach (remove, or a failed
 * probe) must give back what the probe took too (coherent rings).
 */
enum us_stop_kind {
	US_STOP_CLOSE = 0,
	US_STOP_DETACH = 1,
};

enum us_context {
	US_CTX_PROCESS = 0,
	US_CTX_HARDIRQ = 1,
	US_CTX_SOFTIRQ = 2, /* NAPI poll, tasklets */
	US_CTX_TIMER = 3,
	US_CTX_WORK = 4,
};

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
