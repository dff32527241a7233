// SPDX-License-Identifier: GPL-2.0
/*
 * Interrupts: the function's legacy INTx line, delivered by VFIO through an
 * eventfd. An IRQ thread waits on it without the CPU, takes the CPU, runs
 * the handler in hard-IRQ context (HARDIRQ_OFFSET in the preempt count),
 * then the NET_RX softirq it raised (irq_exit()), and unmasks the line,
 * which VFIO masked when it fired.
 *
 * While another thread holds the CPU no handler can run, which is exactly
 * local_irq_disable() on a uniprocessor; disable_irq() additionally keeps
 * the handler from running until enable_irq().
 */
#include <linux/module.h>
#include <linux/interrupt.h>
#include <linux/hardirq.h>
#include <linux/slab.h>

#include "internal.h"

struct us_irq {
	unsigned int irq;
	irq_handler_t handler;
	irq_handler_t thread_fn;
	void *dev_id;
	const char *name;
	int disable_depth;
	int eventfd;
	bool freed;
	unsigned long count;
};

/* One line per process: the one PCI function's INTx. */
static struct us_irq *line;

/* The primary handler of a threaded-only request: wake the thread. */
static irqreturn_t irq_default_primary_handler(int irq, void *dev_id)
{
	return IRQ_WAKE_THREAD;
}

static void irq_thread(void *arg)
{
	struct us_irq *desc = arg;

	ddekit_thread_runs_interrupts();
	for (;;) {
		irqreturn_t ret;

		if (ddekit_irq_wait(desc->eventfd))
			us_panic("IRQ %u: cannot wait for the interrupt eventfd", desc->irq);
		us_cpu_enter();
		while (desc->disable_depth && !desc->freed)
			us_wait(0);
		if (desc->freed) {
			us_cpu_leave();
			break;
		}
		desc->count++;
		__irq_enter_raw();
		ddekit_trace_context(DDEKIT_CTX_HARDIRQ, (unsigned long)desc->handler);
		ret = desc->handler(desc->irq, desc->dev_id);
		ddekit_trace_context(DDEKIT_CTX_PROCESS, 0);
		__irq_exit_raw();
		us_softirq_on_irq_exit();
		if (ret == IRQ_WAKE_THREAD && desc->thread_fn)
			desc->thread_fn(desc->irq, desc->dev_id);
		us_cpu_leave();
		ddekit_irq_unmask();
	}
	ddekit_irq_close(desc->eventfd);
	us_cpu_enter();
	kfree(desc);
	us_cpu_leave();
}

int request_threaded_irq(unsigned int irq, irq_handler_t handler, irq_handler_t thread_fn,
			 unsigned long flags, const char *name, void *dev_id)
{
	struct us_irq *desc;
	int err;

	if (line)
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
	desc->handler = handler;
	desc->thread_fn = thread_fn;
	desc->dev_id = dev_id;
	desc->name = name;
	desc->disable_depth = flags & IRQF_NO_AUTOEN ? 1 : 0;
	desc->eventfd = ddekit_irq_attach();
	if (desc->eventfd < 0) {
		err = desc->eventfd;
		kfree(desc);
		return err;
	}
	err = ddekit_thread_create(irq_thread, desc, "irq");
	if (err) {
		ddekit_irq_detach(desc->eventfd);
		ddekit_irq_close(desc->eventfd);
		kfree(desc);
		return err;
	}
	line = desc;
	return 0;
}
EXPORT_SYMBOL(request_threaded_irq);

const void *free_irq(unsigned int irq, void *dev_id)
{
	const char *name;

	if (!line || line->dev_id != dev_id) {
		WARN(1, "free_irq(%u): not requested with this dev_id\n", irq);
		return NULL;
	}
	name = line->name;
	line->freed = true;
	ddekit_irq_detach(line->eventfd);	/* the IRQ thread frees the descriptor */
	line = NULL;
	us_wake();
	return name;
}
EXPORT_SYMBOL(free_irq);

static struct us_irq *lookup(unsigned int irq)
{
	if (!line || line->irq != irq)
		us_panic("irq %u was never requested", irq);
	return line;
}

void disable_irq_nosync(unsigned int irq)
{
	us_trace(DDEKIT_EV_IRQ_OFF, _RET_IP_, NULL, irq, 0);
	lookup(irq)->disable_depth++;
}
EXPORT_SYMBOL(disable_irq_nosync);

/* No handler runs while the caller holds the CPU, so nothing to wait for. */
void disable_irq(unsigned int irq)
{
	us_trace(DDEKIT_EV_IRQ_OFF, _RET_IP_, NULL, irq, 0);
	lookup(irq)->disable_depth++;
}
EXPORT_SYMBOL(disable_irq);

bool disable_hardirq(unsigned int irq)
{
	us_trace(DDEKIT_EV_IRQ_OFF, _RET_IP_, NULL, irq, 0);
	lookup(irq)->disable_depth++;
	return true;
}
EXPORT_SYMBOL(disable_hardirq);

void enable_irq(unsigned int irq)
{
	struct us_irq *desc = lookup(irq);

	if (WARN(!desc->disable_depth, "unbalanced enable_irq(%u)\n", irq))
		return;
	us_trace(DDEKIT_EV_IRQ_ON, _RET_IP_, NULL, irq, 0);
	if (!--desc->disable_depth)
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
	return line && !line->freed;
}

/* Count of handled interrupts, for the driver's main and the tests. */
unsigned long us_irq_count(void)
{
	return line ? line->count : 0;
}
EXPORT_SYMBOL_GPL(us_irq_count);
