// SPDX-License-Identifier: GPL-2.0
/*
 * Interrupts: the function's legacy INTx line or its MSI/MSI-X vectors
 * (msi.c), each delivered by VFIO through an eventfd. A requested line or
 * vector has its IRQ thread (but see below for INTx), which waits on the
 * eventfd without the CPU, takes the CPU, runs the handler in hard-IRQ
 * context (HARDIRQ_OFFSET in the preempt count), then the NET_RX softirq it
 * raised (irq_exit()). INTx is level triggered: VFIO masked it when it
 * fired, and the thread unmasks it. A
 * message-signalled vector is an edge, never masked: one that arrives while
 * its handler runs is counted in the eventfd and handled next.
 *
 * While another thread holds the CPU no handler can run, which is exactly
 * local_irq_disable() on a uniprocessor; disable_irq() additionally keeps
 * the handler from running until enable_irq().
 *
 * An INTx line requested once the TX thread runs (at open, as the Nooks-era
 * NICs request theirs) gets no thread of its own: the TX thread serves it
 * (us_irq_serve), waiting on its eventfd beside the TAP and handling what
 * came between its batches, as one CPU would take the interrupt between two
 * transmits. An IRQ thread would preempt the TX thread, find the CPU held
 * by it and sleep until its unlock: two switches and a futex hand-off per
 * interrupt, on the driver's one vCPU (docs/design.md §6).
 *
 * Stands in for Linux's kernel/irq/manage.c and kernel/softirq.c
 * (irq_exit()).
 */
#include <linux/module.h>
#include <linux/interrupt.h>
#include <linux/hardirq.h>
#include <linux/slab.h>

#include "internal.h"

struct us_irq {
	unsigned int irq;
	enum ddekit_irq_source source;
	unsigned int vector;
	irq_handler_t handler;
	irq_handler_t thread_fn;
	void *dev_id;
	const char *name;
	int disable_depth;
	int eventfd;
	bool freed;
	bool served;			/* by the TX thread, not an IRQ thread */
	bool masked_while_disabled;	/* a served line fired while disabled */
	unsigned long count;
};

/* The requested lines by irq number: INTx and the message-signalled vectors. */
static struct us_irq *lines[US_NR_IRQS];

/* The lines the TX thread serves, freed ones too until it has closed them. */
static struct us_irq *served[US_NR_IRQS];
static unsigned int n_served;

/* The primary handler of a threaded-only request: wake the thread. */
static irqreturn_t irq_default_primary_handler(int irq, void *dev_id)
{
	return IRQ_WAKE_THREAD;
}

/* One interrupt, with the CPU: the handler in hard-IRQ context, then irq_exit()'s softirq. */
static void handle(struct us_irq *desc)
{
	irqreturn_t ret;

	desc->count++;
	__irq_enter_raw();
	ddekit_trace_context(US_CTX_HARDIRQ, (unsigned long)desc->handler);
	ret = desc->handler(desc->irq, desc->dev_id);
	ddekit_trace_context(US_CTX_PROCESS, 0);
	__irq_exit_raw();
	us_softirq_on_irq_exit();
	if (ret == IRQ_WAKE_THREAD && desc->thread_fn)
		desc->thread_fn(desc->irq, desc->dev_id);
}

static void irq_thread(void *arg)
{
	struct us_irq *desc = arg;

	ddekit_thread_runs_interrupts();
	for (;;) {
		if (ddekit_irq_wait(desc->eventfd))
			us_panic("IRQ %u: cannot wait for the interrupt eventfd", desc->irq);
		us_cpu_enter();
		while (desc->disable_depth && !desc->freed)
			us_wait(0);
		if (desc->freed) {
			us_cpu_leave();
			break;
		}
		handle(desc);
		us_cpu_leave();
		if (desc->source == DDEKIT_IRQ_INTX)
			ddekit_irq_unmask();
	}
	ddekit_irq_close(desc->eventfd);
	us_cpu_enter();
	kfree(desc);
	us_cpu_leave();
}

/*
 * The TX thread's turn at the lines it serves, each round: handles an
 * interrupt that came on each (one that came while the line was disabled
 * waits, masked, for enable_irq), closes the lines freed since, and fills
 * eventfds with those to wait on. Returns how many.
 *
 * An interrupt is taken off its eventfd after its handler has run: the
 * line stays masked until the unmask below, so no other can come in
 * between, and a reply the handler delivers does not wait for that
 * system call (docs/performance.md §8).
 */
unsigned int us_irq_serve(int *eventfds, unsigned int max)
{
	bool unmask = false;
	unsigned int i = 0, n = 0;

	if (!READ_ONCE(n_served))
		return 0;
	us_cpu_enter();
	while (i < n_served) {
		struct us_irq *desc = served[i];
		int pending;

		if (desc->freed) {
			served[i] = served[--n_served];
			ddekit_irq_close(desc->eventfd);
			kfree(desc);
			continue;
		}
		pending = ddekit_irq_pending(desc->eventfd);
		if (pending < 0)
			us_panic("IRQ %u: cannot poll the interrupt eventfd (%d)", desc->irq, pending);
		if (pending && desc->disable_depth) {
			desc->masked_while_disabled = true;
		} else if (pending) {
			handle(desc);
			unmask = true;
		}
		if (pending && ddekit_irq_wait(desc->eventfd))
			us_panic("IRQ %u: cannot read the interrupt eventfd", desc->irq);
		if (n < max)
			eventfds[n++] = desc->eventfd;
		i++;
	}
	us_cpu_leave();
	if (unmask)
		ddekit_irq_unmask();
	return n;
}
EXPORT_SYMBOL_GPL(us_irq_serve);

/* Whether the calling thread serves interrupt lines: it must not sleep without serving them. */
bool us_irq_serving(void)
{
	return n_served && ddekit_on_tx_thread();
}

/*
 * us_wait(0) for the thread that serves interrupts (its stopped queue, which
 * only they complete): sleeps on the lines' eventfds and the TX thread's
 * rewait, then serves what came. Called and returns with the CPU held.
 */
void us_irq_wait_serving(void)
{
	int eventfds[US_NR_IRQS];
	unsigned int n = 0;

	for (unsigned int i = 0; i < n_served; i++)
		if (!served[i]->freed)
			eventfds[n++] = served[i]->eventfd;
	us_cpu_leave();
	ddekit_tx_wait_interrupts(eventfds, n);
	us_irq_serve(eventfds, 0);
	us_cpu_enter();
}

/*
 * What VFIO delivers irq from: an enabled MSI/MSI-X vector, or the INTx
 * line. Any other number has no interrupt behind it, as an irq without a
 * descriptor in the kernel.
 */
static int line_source(unsigned int irq, unsigned int *vector)
{
	int source = us_msi_vector(irq, vector);

	if (source >= 0)
		return source;
	*vector = 0;
	return irq == US_INTX_IRQ ? DDEKIT_IRQ_INTX : -EINVAL;
}

int request_threaded_irq(unsigned int irq, irq_handler_t handler, irq_handler_t thread_fn,
			 unsigned long flags, const char *name, void *dev_id)
{
	struct us_irq *desc;
	char thread_name[16];
	unsigned int vector;
	int source = line_source(irq, &vector);
	int err;

	if (source < 0)
		return source;
	if (lines[irq])
		return -EBUSY;	/* IRQF_SHARED has nobody to share with */
	if (!handler) {
		if (!thread_fn)
			return -EINVAL;
		handler = irq_default_primary_handler;
	}
	desc = kzalloc(sizeof(*desc), GFP_KERNEL);
	if (!desc)
		return -ENOMEM;
	desc->irq = irq;
	desc->source = source;
	desc->vector = vector;
	desc->handler = handler;
	desc->thread_fn = thread_fn;
	desc->dev_id = dev_id;
	desc->name = name;
	desc->disable_depth = flags & IRQF_NO_AUTOEN ? 1 : 0;
	desc->eventfd = ddekit_irq_attach(source, vector);
	if (desc->eventfd < 0) {
		err = desc->eventfd;
		kfree(desc);
		return err;
	}
	if (source == DDEKIT_IRQ_INTX && !thread_fn && ddekit_tx_serves_interrupts() &&
	    n_served < ARRAY_SIZE(served)) {
		desc->served = true;
		served[n_served++] = desc;
		lines[irq] = desc;
		ddekit_tx_rewait();
		return 0;
	}
	snprintf(thread_name, sizeof(thread_name), "irq/%u", irq);
	err = ddekit_thread_create(irq_thread, desc, thread_name);
	if (err) {
		ddekit_irq_detach(source, vector, desc->eventfd);
		ddekit_irq_close(desc->eventfd);
		kfree(desc);
		return err;
	}
	lines[irq] = desc;
	return 0;
}
EXPORT_SYMBOL(request_threaded_irq);

/*
 * IRQ_FREED tells how many interrupts the line took while it was
 * requested: which of a driver's vectors carried its traffic.
 */
const void *free_irq(unsigned int irq, void *dev_id)
{
	struct us_irq *desc = irq < US_NR_IRQS ? lines[irq] : NULL;
	const char *name;
	char event[96];

	if (!desc || desc->dev_id != dev_id) {
		WARN(1, "free_irq(%u): not requested with this dev_id\n", irq);
		return NULL;
	}
	snprintf(event, sizeof(event), "IRQ_FREED irq=%u handled=%lu name=%s",
		 irq, desc->count, desc->name);
	ddekit_event(event);
	name = desc->name;
	desc->freed = true;
	/* The IRQ thread, or for a served line the TX thread, frees desc. */
	ddekit_irq_detach(desc->source, desc->vector, desc->eventfd);
	lines[irq] = NULL;
	us_wake();
	return name;
}
EXPORT_SYMBOL(free_irq);

static struct us_irq *lookup(unsigned int irq)
{
	if (irq >= US_NR_IRQS || !lines[irq])
		us_panic("irq %u was never requested", irq);
	return lines[irq];
}

void disable_irq_nosync(unsigned int irq)
{
	us_trace(US_EV_IRQ_OFF, _RET_IP_, NULL, irq, 0);
	lookup(irq)->disable_depth++;
}
EXPORT_SYMBOL(disable_irq_nosync);

/* No handler runs while the caller holds the CPU, so nothing to wait for. */
void disable_irq(unsigned int irq)
{
	us_trace(US_EV_IRQ_OFF, _RET_IP_, NULL, irq, 0);
	lookup(irq)->disable_depth++;
}
EXPORT_SYMBOL(disable_irq);

bool disable_hardirq(unsigned int irq)
{
	us_trace(US_EV_IRQ_OFF, _RET_IP_, NULL, irq, 0);
	lookup(irq)->disable_depth++;
	return true;
}
EXPORT_SYMBOL(disable_hardirq);

void enable_irq(unsigned int irq)
{
	struct us_irq *desc = lookup(irq);

	if (WARN(!desc->disable_depth, "unbalanced enable_irq(%u)\n", irq))
		return;
	us_trace(US_EV_IRQ_ON, _RET_IP_, NULL, irq, 0);
	if (--desc->disable_depth)
		return;
	if (desc->masked_while_disabled) {
		/* Level-triggered: still asserted, it fires again for the TX thread. */
		desc->masked_while_disabled = false;
		ddekit_irq_unmask();
	}
	us_wake();
}
EXPORT_SYMBOL(enable_irq);

/*
 * A hard-IRQ handler never sleeps, so it cannot be half-way through while
 * the caller holds the CPU: it has either finished or not started.
 */
void synchronize_irq(unsigned int irq)
{
}
EXPORT_SYMBOL(synchronize_irq);

/*
 * ISA IRQ autoprobing (pcnet32's VLB path): a driver process owns one PCI
 * function and no ISA lines, so no probe ever finds an interrupt.
 */
unsigned long probe_irq_on(void)
{
	return 0;
}
EXPORT_SYMBOL(probe_irq_on);

int probe_irq_off(unsigned long val)
{
	return 0;
}
EXPORT_SYMBOL(probe_irq_off);

bool us_irq_held(void)
{
	for (unsigned int irq = 0; irq < US_NR_IRQS; irq++) {
		if (lines[irq])
			return true;
	}
	return false;
}

bool us_irq_vectors_requested(void)
{
	for (unsigned int irq = US_MSI_FIRST_IRQ; irq < US_NR_IRQS; irq++) {
		if (lines[irq])
			return true;
	}
	return false;
}

/* Count of handled interrupts on every line, for the driver's main and the tests. */
unsigned long us_irq_count(void)
{
	unsigned long count = 0;

	for (unsigned int irq = 0; irq < US_NR_IRQS; irq++) {
		if (lines[irq])
			count += lines[irq]->count;
	}
	return count;
}
EXPORT_SYMBOL_GPL(us_irq_count);
