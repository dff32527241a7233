// SPDX-License-Identifier: GPL-2.0
/*
 * Timers, delays and the softirq thread. One thread plays ksoftirqd: it
 * expires timers (TIMER_SOFTIRQ) and polls NAPI instances (NET_RX_SOFTIRQ)
 * in softirq context, and sleeps until the next timer is due or someone
 * raises a softirq.
 *
 * Stands in for Linux's kernel/time/timer.c, arch/x86/lib/delay.c and
 * kernel/softirq.c.
 */
#include <linux/module.h>
#include <linux/timer.h>
#include <linux/jiffies.h>
#include <linux/delay.h>
#include <linux/sched.h>
#include <linux/hardirq.h>

#include "internal.h"

static HLIST_HEAD(pending_timers);
static struct timer_list *running_timer;
static struct task_struct *softirq_task;
static unsigned long softirq_thread_handle;
static bool softirq_parking;
static bool net_rx_raised;
/*
 * Until when the softirq thread sleeps (0 while it runs): a timer due
 * sooner wakes it; and whether timers changed since it last ran them.
 */
static u64 softirq_sleeps_until;
static bool timers_changed;

void init_timer_key(struct timer_list *timer, void (*func)(struct timer_list *),
		    unsigned int flags, const char *name, struct lock_class_key *key)
{
	timer->entry.pprev = NULL;
	timer->entry.next = NULL;
	timer->function = func;
	timer->flags = flags;
}
EXPORT_SYMBOL(init_timer_key);

static bool detach(struct timer_list *timer)
{
	if (!timer_pending(timer))
		return false;
	hlist_del(&timer->entry);
	timer->entry.pprev = NULL;
	return true;
}

int mod_timer(struct timer_list *timer, unsigned long expires)
{
	bool was_pending = detach(timer);

	timer->expires = expires;
	hlist_add_head(&timer->entry, &pending_timers);
	timers_changed = true;
	if (softirq_sleeps_until && us_jiffies_to_deadline(expires) < softirq_sleeps_until)
		us_wake_task(softirq_task);
	return was_pending;
}
EXPORT_SYMBOL(mod_timer);

void add_timer(struct timer_list *timer)
{
	if (timer_pending(timer))
		us_panic("add_timer(%ps) of a pending timer", timer->function);
	mod_timer(timer, timer->expires);
}
EXPORT_SYMBOL(add_timer);

int timer_delete(struct timer_list *timer)
{
	return detach(timer);
}
EXPORT_SYMBOL(timer_delete);

int try_to_del_timer_sync(struct timer_list *timer)
{
	if (running_timer == timer)
		return -1;
	return detach(timer);
}
EXPORT_SYMBOL(try_to_del_timer_sync);

/* Waits for a running callback, unless the caller is that callback. */
int timer_delete_sync(struct timer_list *timer)
{
	int ret;

	while ((ret = try_to_del_timer_sync(timer)) < 0) {
		if (current == softirq_task)
			us_panic("timer_delete_sync(%ps) from its own callback", timer->function);
		us_wait(0);
	}
	return ret;
}
EXPORT_SYMBOL(timer_delete_sync);

unsigned long round_jiffies(unsigned long j)
{
	return roundup(j, HZ);
}
EXPORT_SYMBOL(round_jiffies);

unsigned long round_jiffies_relative(unsigned long j)
{
	unsigned long now = jiffies;

	return round_jiffies(now + j) - now;
}
EXPORT_SYMBOL(round_jiffies_relative);

unsigned long __msecs_to_jiffies(const unsigned int m)
{
	return DIV_ROUND_UP((unsigned long)m * HZ, MSEC_PER_SEC);
}
EXPORT_SYMBOL(__msecs_to_jiffies);

unsigned long __usecs_to_jiffies(const unsigned int u)
{
	return DIV_ROUND_UP((unsigned long)u * HZ, USEC_PER_SEC);
}
EXPORT_SYMBOL(__usecs_to_jiffies);

unsigned int jiffies_to_usecs(const unsigned long j)
{
	return (USEC_PER_SEC / HZ) * j;
}
EXPORT_SYMBOL(jiffies_to_usecs);

/* ---- delays ------------------------------------------------------------- */

/* udelay() keeps the CPU, as busy-waiting does in the kernel. */
void __udelay(unsigned long usecs)
{
	ddekit_spin_ns((u64)usecs * NSEC_PER_USEC);
}
EXPORT_SYMBOL(__udelay);

void __ndelay(unsigned long nsecs)
{
	ddekit_spin_ns(nsecs);
}
EXPORT_SYMBOL(__ndelay);

/* xloops = usecs * 2^32 / 10^6 (udelay's 0x10c7 multiplier) */
void __const_udelay(unsigned long xloops)
{
	ddekit_spin_ns(((u64)xloops * NSEC_PER_USEC) >> 32);
}
EXPORT_SYMBOL(__const_udelay);

static void sleep_until(u64 deadline)
{
	while (ddekit_now_ns() < deadline)
		us_wait(deadline);
}

void msleep(unsigned int msecs)
{
	sleep_until(ddekit_now_ns() + (u64)msecs * NSEC_PER_MSEC);
}
EXPORT_SYMBOL(msleep);

/* No signals reach kernel tasks here, so the sleep is never cut short. */
unsigned long msleep_interruptible(unsigned int msecs)
{
	msleep(msecs);
	return 0;
}
EXPORT_SYMBOL(msleep_interruptible);

void usleep_range_state(unsigned long min, unsigned long max, unsigned int state)
{
	sleep_until(ddekit_now_ns() + (u64)min * NSEC_PER_USEC);
}
EXPORT_SYMBOL(usleep_range_state);

signed long schedule_timeout(signed long timeout)
{
	unsigned long expires = jiffies + timeout;

	if (timeout == MAX_SCHEDULE_TIMEOUT)
		us_panic("schedule_timeout(MAX_SCHEDULE_TIMEOUT) without a wait queue");
	sleep_until(us_jiffies_to_deadline(expires));
	return 0;
}
EXPORT_SYMBOL(schedule_timeout);

/* No signals reach kernel tasks here: the task states sleep alike. */
signed long schedule_timeout_uninterruptible(signed long timeout)
{
	return schedule_timeout(timeout);
}
EXPORT_SYMBOL(schedule_timeout_uninterruptible);

signed long schedule_timeout_interruptible(signed long timeout)
{
	return schedule_timeout(timeout);
}
EXPORT_SYMBOL(schedule_timeout_interruptible);

/* ---- the softirq thread ------------------------------------------------- */

void us_raise_net_rx(void)
{
	net_rx_raised = true;
	/*
	 * From a hard-IRQ handler (napi_schedule in the interrupt, nearly
	 * every interrupt) the thread that ran the handler polls at irq exit
	 * (us_softirq_on_irq_exit): waking the CPU's sleepers here only made
	 * ksoftirqd and kworker run, find nothing and sleep again, two
	 * context switches per interrupt.
	 */
	if (!in_hardirq())
		us_wake_task(softirq_task);
}

/*
 * NET_RX at the end of a hard interrupt, as irq_exit() runs pending
 * softirqs: the frames the interrupt announced are polled on the IRQ
 * thread, without a hand-over to the softirq thread. What one round leaves
 * (budget used up) stays raised for the softirq thread, like ksoftirqd.
 */
void us_softirq_on_irq_exit(void)
{
	if (!net_rx_raised || in_interrupt())
		return;
	net_rx_raised = false;
	__local_bh_disable_ip(_THIS_IP_, SOFTIRQ_OFFSET);
	if (us_net_rx_action())
		us_raise_net_rx();
	__local_bh_enable_ip(_THIS_IP_, SOFTIRQ_OFFSET);
}

/* Runs due timers; returns the deadline of the next one, 0 if none. */
static u64 run_timers(void)
{
	struct timer_list *timer;
	struct hlist_node *next;
	u64 deadline = 0;

restart:
	hlist_for_each_entry_safe(timer, next, &pending_timers, entry) {
		if (time_after(timer->expires, jiffies)) {
			u64 due = us_jiffies_to_deadline(timer->expires);

			if (!deadline || due < deadline)
				deadline = due;
			continue;
		}
		detach(timer);
		running_timer = timer;
		__local_bh_disable_ip(_THIS_IP_, SOFTIRQ_OFFSET);
		ddekit_trace_context(US_CTX_TIMER, (unsigned long)timer->function);
		timer->function(timer);
		ddekit_trace_context(US_CTX_PROCESS, 0);
		__local_bh_enable_ip(_THIS_IP_, SOFTIRQ_OFFSET);
		running_timer = NULL;
		us_wake();	/* timer_delete_sync() may be waiting */
		/* The callback may have added or removed any timer. */
		deadline = 0;
		goto restart;
	}
	return deadline;
}

static void softirq_thread(void *unused)
{
	ddekit_thread_runs_interrupts();
	us_cpu_enter();
	softirq_task = current;
	strscpy(current->comm, "ksoftirqd/0", sizeof(current->comm));
	while (!softirq_parking) {
		u64 next_timer;

		us_update_jiffies();
		next_timer = run_timers();
		timers_changed = false;
		if (net_rx_raised) {
			net_rx_raised = false;
			__local_bh_disable_ip(_THIS_IP_, SOFTIRQ_OFFSET);
			net_rx_raised |= us_net_rx_action();
			__local_bh_enable_ip(_THIS_IP_, SOFTIRQ_OFFSET);
		}
		if (net_rx_raised) {
			/*
			 * Budget used up: let other threads run, then poll again.
			 * A deadline already past still sleeps until
			 * the timer interrupt that expires it (356 us on average in
			 * the lab): a nap that lets frames gather in the NIC's ring.
			 * A yield without it polled more often for fewer frames,
			 * with three times the interrupts, and received less
			 * (docs/notes/bench-net-history.md, "the softirq's nap").
			 */
			us_wait(ddekit_now_ns());
			continue;
		}
		if (timers_changed)	/* by NET_RX: next_timer may be late */
			continue;
		softirq_sleeps_until = next_timer ?: U64_MAX;
		us_wait(next_timer);
		softirq_sleeps_until = 0;
	}
	softirq_task = NULL;
	us_cpu_leave();
}

void us_softirq_start(void)
{
	softirq_parking = false;
	if (ddekit_thread_start(softirq_thread, NULL, "ksoftirqd/0", &softirq_thread_handle))
		us_panic("cannot start the softirq thread");
}

/*
 * Asks the softirq thread to end at the top of its loop (pending timers and
 * a raised NET_RX stay pending for the next one); the CPU holder calls this
 * and then, without the CPU, us_softirq_join().
 */
void us_softirq_park(void)
{
	softirq_parking = true;
	us_wake();
}

int us_softirq_join(u64 timeout_ns)
{
	return ddekit_thread_join(softirq_thread_handle, timeout_ns);
}
