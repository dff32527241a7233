// SPDX-License-Identifier: GPL-2.0
/*
 * Locking on the one kernel "CPU". Every thread runs kernel code only while
 * holding the CPU, and gives it up only when it sleeps, so the right model
 * is the kernel's uniprocessor one: a spinlock is preempt_disable() plus a
 * held flag (taken twice means a deadlock, reported rather than hung), and
 * disabling interrupts is implicit (an IRQ thread needs the CPU to run its
 * handler). Sleeping locks wait on the CPU, which releases it.
 *
 * Stands in for Linux's kernel/locking/spinlock.c, kernel/locking/mutex.c,
 * kernel/rcu/ and net/core/rtnetlink.c (the RTNL).
 */
#include <linux/module.h>
#include <linux/spinlock.h>
#include <linux/mutex.h>
#include <linux/rtnetlink.h>
#include <linux/bottom_half.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>

#include "internal.h"

/*
 * ip: the lock's caller, for the report (no frame pointers to walk) and
 * the checker; kind: what else the lock excludes (US_LOCK_*).
 */
static void take(raw_spinlock_t *lock, unsigned long ip, unsigned int kind)
{
	preempt_disable();
	if (atomic_read(&lock->raw_lock.val))
		us_panic("spinlock %px taken twice (deadlock), caller %pS", lock, (void *)ip);
	atomic_set(&lock->raw_lock.val, _Q_LOCKED_VAL);
	us_trace(US_EV_LOCK, ip, lock, kind, 0);
}

static void release(raw_spinlock_t *lock, unsigned long ip)
{
	if (!atomic_read(&lock->raw_lock.val))
		us_panic("spinlock %px released but not held, caller %pS", lock, (void *)ip);
	us_trace(US_EV_UNLOCK, ip, lock, 0, 0);
	atomic_set(&lock->raw_lock.val, 0);
	preempt_enable();
}

void __lockfunc _raw_spin_lock(raw_spinlock_t *lock)
{
	take(lock, _RET_IP_, US_LOCK_SPIN);
}
EXPORT_SYMBOL(_raw_spin_lock);

void __lockfunc _raw_spin_unlock(raw_spinlock_t *lock)
{
	release(lock, _RET_IP_);
}
EXPORT_SYMBOL(_raw_spin_unlock);

int __lockfunc _raw_spin_trylock(raw_spinlock_t *lock)
{
	if (atomic_read(&lock->raw_lock.val))
		return 0;
	take(lock, _RET_IP_, US_LOCK_SPIN);
	return 1;
}
EXPORT_SYMBOL(_raw_spin_trylock);

/*
 * The saved "flags" say interrupts were enabled: no IRQ handler can run
 * while this thread holds the CPU, with or without the irq variants.
 */
unsigned long __lockfunc _raw_spin_lock_irqsave(raw_spinlock_t *lock)
{
	take(lock, _RET_IP_, US_LOCK_SPIN_IRQ);
	return X86_EFLAGS_IF;
}
EXPORT_SYMBOL(_raw_spin_lock_irqsave);

void __lockfunc _raw_spin_unlock_irqrestore(raw_spinlock_t *lock, unsigned long flags)
{
	release(lock, _RET_IP_);
}
EXPORT_SYMBOL(_raw_spin_unlock_irqrestore);

void __lockfunc _raw_spin_lock_irq(raw_spinlock_t *lock)
{
	take(lock, _RET_IP_, US_LOCK_SPIN_IRQ);
}
EXPORT_SYMBOL(_raw_spin_lock_irq);

void __lockfunc _raw_spin_unlock_irq(raw_spinlock_t *lock)
{
	release(lock, _RET_IP_);
}
EXPORT_SYMBOL(_raw_spin_unlock_irq);

void __lockfunc _raw_spin_lock_bh(raw_spinlock_t *lock)
{
	__preempt_count_add(SOFTIRQ_DISABLE_OFFSET);
	take(lock, _RET_IP_, US_LOCK_SPIN_BH);
}
EXPORT_SYMBOL(_raw_spin_lock_bh);

void __lockfunc _raw_spin_unlock_bh(raw_spinlock_t *lock)
{
	release(lock, _RET_IP_);
	__local_bh_enable_ip(_RET_IP_, SOFTIRQ_DISABLE_OFFSET);
}
EXPORT_SYMBOL(_raw_spin_unlock_bh);

/*
 * Softirqs run on the softirq thread, which gets the CPU when this thread
 * gives it up (the ksoftirqd model), so enabling bottom halves only drops
 * the count; whoever raised a softirq already woke that thread.
 */
void __local_bh_enable_ip(unsigned long ip, unsigned int cnt)
{
	__preempt_count_sub(cnt);
}
EXPORT_SYMBOL(__local_bh_enable_ip);

/* ---- mutexes ------------------------------------------------------------ */

void __mutex_init(struct mutex *lock, const char *name, struct lock_class_key *key)
{
	atomic_long_set(&lock->owner, 0);
	raw_spin_lock_init(&lock->wait_lock);
	INIT_LIST_HEAD(&lock->wait_list);
}
EXPORT_SYMBOL(__mutex_init);

void mutex_lock(struct mutex *lock)
{
	if (atomic_long_read(&lock->owner) == (long)current)
		us_panic("mutex %px locked twice by %s", lock, current->comm);
	while (atomic_long_read(&lock->owner))
		us_wait(0);
	atomic_long_set(&lock->owner, (long)current);
	us_trace(US_EV_LOCK, _RET_IP_, lock, US_LOCK_MUTEX, 0);
}
EXPORT_SYMBOL(mutex_lock);

int mutex_lock_interruptible(struct mutex *lock)
{
	mutex_lock(lock);	/* no signals reach kernel tasks here */
	return 0;
}
EXPORT_SYMBOL(mutex_lock_interruptible);

int mutex_trylock(struct mutex *lock)
{
	if (atomic_long_read(&lock->owner))
		return 0;
	atomic_long_set(&lock->owner, (long)current);
	us_trace(US_EV_LOCK, _RET_IP_, lock, US_LOCK_MUTEX, 0);
	return 1;
}
EXPORT_SYMBOL(mutex_trylock);

void mutex_unlock(struct mutex *lock)
{
	if (atomic_long_read(&lock->owner) != (long)current)
		us_panic("mutex %px unlocked by %s, which does not hold it", lock, current->comm);
	us_trace(US_EV_UNLOCK, _RET_IP_, lock, 0, 0);
	atomic_long_set(&lock->owner, 0);
	us_wake();
}
EXPORT_SYMBOL(mutex_unlock);

bool mutex_is_locked(struct mutex *lock)
{
	return atomic_long_read(&lock->owner) != 0;
}
EXPORT_SYMBOL(mutex_is_locked);

static DEFINE_MUTEX(rtnl_mutex);

void rtnl_lock(void)
{
	mutex_lock(&rtnl_mutex);
}
EXPORT_SYMBOL(rtnl_lock);

void rtnl_unlock(void)
{
	mutex_unlock(&rtnl_mutex);
}
EXPORT_SYMBOL(rtnl_unlock);

int rtnl_is_locked(void)
{
	return mutex_is_locked(&rtnl_mutex);
}
EXPORT_SYMBOL(rtnl_is_locked);

/* ---- RCU ---------------------------------------------------------------- */

/*
 * Readers may not sleep, and they run only while holding the CPU; a thread
 * that can call synchronize_rcu() holds the CPU itself, so no reader is in
 * a critical section and the grace period is already over.
 */
void synchronize_rcu(void)
{
	if (current->rcu_read_lock_nesting)
		us_panic("synchronize_rcu() inside an RCU read-side critical section");
}
EXPORT_SYMBOL(synchronize_rcu);

void __rcu_read_lock(void)
{
	current->rcu_read_lock_nesting++;
}
EXPORT_SYMBOL(__rcu_read_lock);

void __rcu_read_unlock(void)
{
	current->rcu_read_lock_nesting--;
}
EXPORT_SYMBOL(__rcu_read_unlock);
