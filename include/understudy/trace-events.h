/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What an event of the trace region says (docs/checking.md, "The trace"):
 * its kinds, its flags and the values of its arguments. Part of the trace
 * contract, include/understudy/trace.h, which includes it; it includes
 * nothing, so that both the driver's kernel half (runtime/kernel, through
 * runtime/ddekit/checking.h) and its libc half name the events the same way.
 */
#ifndef UNDERSTUDY_TRACE_EVENTS_H
#define UNDERSTUDY_TRACE_EVENTS_H

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

#endif /* UNDERSTUDY_TRACE_EVENTS_H */
