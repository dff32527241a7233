// SPDX-License-Identifier: GPL-2.0
/*
 * Workqueues. One worker thread runs the work items of every workqueue in
 * the order they were queued, in process context (it may sleep). A work
 * item's PENDING bit means what it means in the kernel: queued, or its
 * delayed-work timer is armed; it is cleared just before the item runs.
 *
 * Stands in for Linux's kernel/workqueue.c.
 */
#include <linux/module.h>
#include <linux/workqueue.h>
#include <linux/slab.h>
#include <linux/sched.h>

#include "internal.h"

struct workqueue_struct {
	char name[32];
};

static struct workqueue_struct system_workqueues[] = {
	{ "events" }, { "events_long" }, { "events_unbound" },
	{ "events_freezable" }, { "events_power_efficient" },
};

struct workqueue_struct *system_wq __read_mostly = &system_workqueues[0];
EXPORT_SYMBOL(system_wq);
struct workqueue_struct *system_long_wq __read_mostly = &system_workqueues[1];
EXPORT_SYMBOL(system_long_wq);
struct workqueue_struct *system_unbound_wq __read_mostly = &system_workqueues[2];
EXPORT_SYMBOL(system_unbound_wq);
struct workqueue_struct *system_freezable_wq __read_mostly = &system_workqueues[3];
EXPORT_SYMBOL(system_freezable_wq);
struct workqueue_struct *system_power_efficient_wq __read_mostly = &system_workqueues[4];
EXPORT_SYMBOL(system_power_efficient_wq);

static LIST_HEAD(queued_work);
static struct work_struct *running_work;
static struct task_struct *worker_task;
static unsigned long worker_thread_handle;
static bool worker_parking;

static void enqueue(struct work_struct *work)
{
	list_add_tail(&work->entry, &queued_work);
	us_wake_task(worker_task);	/* nobody else waits for new work */
}

bool queue_work_on(int cpu, struct workqueue_struct *wq, struct work_struct *work)
{
	if (test_and_set_bit(WORK_STRUCT_PENDING_BIT, work_data_bits(work)))
		return false;
	enqueue(work);
	return true;
}
EXPORT_SYMBOL(queue_work_on);

void delayed_work_timer_fn(struct timer_list *t)
{
	struct delayed_work *dwork = from_timer(dwork, t, timer);

	enqueue(&dwork->work);
}
EXPORT_SYMBOL(delayed_work_timer_fn);

static void arm_delayed(struct workqueue_struct *wq, struct delayed_work *dwork,
			unsigned long delay)
{
	dwork->wq = wq;
	dwork->cpu = 0;
	if (!delay) {
		enqueue(&dwork->work);
		return;
	}
	if (dwork->timer.function != delayed_work_timer_fn)
		us_panic("delayed work %ps: timer not set up by INIT_DELAYED_WORK",
			 dwork->work.func);
	mod_timer(&dwork->timer, jiffies + delay);
}

bool queue_delayed_work_on(int cpu, struct workqueue_struct *wq,
			   struct delayed_work *dwork, unsigned long delay)
{
	if (test_and_set_bit(WORK_STRUCT_PENDING_BIT, work_data_bits(&dwork->work)))
		return false;
	arm_delayed(wq, dwork, delay);
	return true;
}
EXPORT_SYMBOL(queue_delayed_work_on);

/* Takes a pending item off its queue or timer; true if it was pending. */
static bool grab_pending(struct work_struct *work, struct delayed_work *dwork)
{
	if (dwork)
		timer_delete(&dwork->timer);
	if (!test_and_clear_bit(WORK_STRUCT_PENDING_BIT, work_data_bits(work)))
		return false;
	list_del_init(&work->entry);
	return true;
}

bool mod_delayed_work_on(int cpu, struct workqueue_struct *wq,
			 struct delayed_work *dwork, unsigned long delay)
{
	bool was_pending = grab_pending(&dwork->work, dwork);

	set_bit(WORK_STRUCT_PENDING_BIT, work_data_bits(&dwork->work));
	arm_delayed(wq, dwork, delay);
	return was_pending;
}
EXPORT_SYMBOL(mod_delayed_work_on);

static void wait_for_work(struct work_struct *work)
{
	while (running_work == work) {
		if (current == worker_task)
			us_panic("work %ps waits for itself", work->func);
		us_wait(0);
	}
}

bool cancel_work_sync(struct work_struct *work)
{
	bool was_pending = grab_pending(work, NULL);

	wait_for_work(work);
	return was_pending;
}
EXPORT_SYMBOL(cancel_work_sync);

bool cancel_delayed_work(struct delayed_work *dwork)
{
	return grab_pending(&dwork->work, dwork);
}
EXPORT_SYMBOL(cancel_delayed_work);

bool cancel_delayed_work_sync(struct delayed_work *dwork)
{
	bool was_pending;

	/* The timer callback may be about to queue the item: stop it first. */
	timer_delete_sync(&dwork->timer);
	was_pending = grab_pending(&dwork->work, dwork);
	wait_for_work(&dwork->work);
	return was_pending;
}
EXPORT_SYMBOL(cancel_delayed_work_sync);

bool flush_work(struct work_struct *work)
{
	bool waited = false;

	while (test_bit(WORK_STRUCT_PENDING_BIT, work_data_bits(work)) ||
	       running_work == work) {
		if (current == worker_task)
			us_panic("work %ps flushed from the worker", work->func);
		us_wait(0);
		waited = true;
	}
	return waited;
}
EXPORT_SYMBOL(flush_work);

bool flush_delayed_work(struct delayed_work *dwork)
{
	if (timer_delete(&dwork->timer))
		enqueue(&dwork->work);
	return flush_work(&dwork->work);
}
EXPORT_SYMBOL(flush_delayed_work);

/* Everything queued before the call has run when it returns. */
void __flush_workqueue(struct workqueue_struct *wq)
{
	while (!list_empty(&queued_work) || running_work)
		us_wait(0);
}
EXPORT_SYMBOL(__flush_workqueue);

struct workqueue_struct *alloc_workqueue(const char *fmt, unsigned int flags,
					 int max_active, ...)
{
	struct workqueue_struct *wq = kzalloc(sizeof(*wq), GFP_KERNEL);
	va_list args;

	if (!wq)
		return NULL;
	va_start(args, max_active);
	vsnprintf(wq->name, sizeof(wq->name), fmt, args);
	va_end(args);
	return wq;
}
EXPORT_SYMBOL(alloc_workqueue);

void destroy_workqueue(struct workqueue_struct *wq)
{
	__flush_workqueue(wq);
	kfree(wq);
}
EXPORT_SYMBOL(destroy_workqueue);

static void worker_thread(void *unused)
{
	us_cpu_enter();
	worker_task = current;
	strscpy(current->comm, "kworker/0", sizeof(current->comm));
	while (!worker_parking) {
		struct work_struct *work;

		if (list_empty(&queued_work)) {
			us_wait(0);
			continue;
		}
		work = list_first_entry(&queued_work, struct work_struct, entry);
		list_del_init(&work->entry);
		clear_bit(WORK_STRUCT_PENDING_BIT, work_data_bits(work));
		running_work = work;
		ddekit_trace_context(US_CTX_WORK, (unsigned long)work->func);
		work->func(work);
		ddekit_trace_context(US_CTX_PROCESS, 0);
		running_work = NULL;
		us_wake();	/* cancel_work_sync() and flushes may be waiting */
	}
	worker_task = NULL;
	us_cpu_leave();
}

void us_workqueue_start(void)
{
	worker_parking = false;
	if (ddekit_thread_start(worker_thread, NULL, "kworker/0", &worker_thread_handle))
		us_panic("cannot start the workqueue thread");
}

/* As us_softirq_park(): queued work stays queued for the next worker. */
void us_workqueue_park(void)
{
	worker_parking = true;
	us_wake();
}

int us_workqueue_join(u64 timeout_ns)
{
	return ddekit_thread_join(worker_thread_handle, timeout_ns);
}
