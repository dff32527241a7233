// SPDX-License-Identifier: GPL-2.0
/*
 * The one kernel "CPU" of a driver process: its per-cpu variables, the tasks
 * that take turns on it, jiffies, and the architecture symbols modules
 * import (thunks, static-call trampolines, stack protector).
 *
 * Stands in for Linux's mm/percpu.c, kernel/sched/core.c,
 * kernel/time/jiffies.c, kernel/panic.c and arch/x86/lib/retpoline.S.
 */
#include <linux/module.h>
#include <linux/jiffies.h>
#include <linux/percpu.h>
#include <linux/preempt.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/kernel.h>
#include <asm/nospec-branch.h>

#include "internal.h"

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("understudy: the kernel half of the driver-process runtime");

/*
 * The per-cpu variables kernel code reaches through %gs. The loader places
 * them in the per-cpu block after its reserved head (the canary at %gs:40).
 */
DEFINE_PER_CPU(struct task_struct *, current_task) ____cacheline_aligned;
EXPORT_PER_CPU_SYMBOL(current_task);
DEFINE_PER_CPU(int, __preempt_count) = INIT_PREEMPT_COUNT;
EXPORT_PER_CPU_SYMBOL(__preempt_count);
/* Defined in percpu.S, see there why. */
EXPORT_PER_CPU_SYMBOL(cpu_number);
EXPORT_PER_CPU_SYMBOL(this_cpu_off);

unsigned long __per_cpu_offset[NR_CPUS] __read_mostly;
EXPORT_SYMBOL(__per_cpu_offset);

enum system_states system_state __read_mostly = SYSTEM_RUNNING;
EXPORT_SYMBOL(system_state);

unsigned long volatile __cacheline_aligned_in_smp jiffies = INITIAL_JIFFIES;
EXPORT_SYMBOL(jiffies);

static u64 boot_ns;

#define NSEC_PER_JIFFY	(NSEC_PER_SEC / HZ)

void us_update_jiffies(void)
{
	jiffies = INITIAL_JIFFIES + (ddekit_now_ns() - boot_ns) / NSEC_PER_JIFFY;
}

/* The monotonic time at which jiffies reaches expires. */
u64 us_jiffies_to_deadline(unsigned long expires)
{
	return boot_ns + (u64)(expires - INITIAL_JIFFIES) * NSEC_PER_JIFFY;
}

static struct us_task *new_task(const char *comm)
{
	static pid_t next_pid = 1;
	struct us_task *t = kzalloc(sizeof(*t), GFP_KERNEL);

	if (!t)
		us_panic("no memory for a task");
	strscpy(t->task.comm, comm, sizeof(t->task.comm));
	t->task.pid = next_pid++;
	t->task.tgid = 1;
	t->saved_preempt_count = PREEMPT_ENABLED;
	t->waiter = ddekit_cpu_waiter();
	return t;
}

static void install(struct us_task *t)
{
	this_cpu_write(current_task, &t->task);
	raw_cpu_write_4(__preempt_count, t->saved_preempt_count);
}

static struct us_task *save(void)
{
	struct us_task *t = container_of(this_cpu_read(current_task), struct us_task, task);

	t->saved_preempt_count = raw_cpu_read_4(__preempt_count);
	return t;
}

/*
 * Takes the CPU for the calling thread. A thread that has never run kernel
 * code gets its task here (allocation needs the CPU, so it happens after
 * the lock is taken and before current is used).
 */
void us_cpu_enter(void)
{
	struct us_task *t;

	ddekit_cpu_lock();
	t = ddekit_thread_data();
	if (!t) {
		t = new_task("understudy");
		ddekit_thread_set_data(t);
	}
	install(t);
	us_update_jiffies();
}
EXPORT_SYMBOL_GPL(us_cpu_enter);

void us_cpu_leave(void)
{
	save();
	ddekit_cpu_unlock();
}
EXPORT_SYMBOL_GPL(us_cpu_leave);

void us_wait(u64 deadline_ns)
{
	struct us_task *t;

	if (preempt_count())
		us_panic("%s sleeps in atomic context (preempt count %#x), caller %pS",
			 current->comm, preempt_count(), __builtin_return_address(0));
	t = save();

	ddekit_cpu_wait(deadline_ns);
	install(t);
	us_update_jiffies();
}

void us_wake(void)
{
	ddekit_cpu_wake_all();
}

void us_wake_task(struct task_struct *task)
{
	if (task)
		ddekit_cpu_wake(container_of(task, struct us_task, task)->waiter);
}

static void __noreturn stop(const char *fmt, va_list args)
{
	static char why[256];

	vsnprintf(why, sizeof(why), fmt, args);
	ddekit_panic(why);
	for (;;)
		cpu_relax();
}

void us_panic_print(const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	stop(fmt, args);
}

/* The kernel's panic(): a module gave up (virtio's core on a broken invariant). */
void panic(const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	stop(fmt, args);
}
EXPORT_SYMBOL(panic);

void __stack_chk_fail(void)
{
	us_panic("stack protector: canary overwritten in %pS", __builtin_return_address(0));
}
EXPORT_SYMBOL(__stack_chk_fail);

void fortify_panic(const char *name)
{
	us_panic("detected buffer overflow in %s", name);
}
EXPORT_SYMBOL(fortify_panic);

/*
 * Assembly symbols of thunks.S. Retpolines and return thunks become plain
 * indirect jumps and returns: the driver process is an ordinary user
 * process, and speculation hardening is the host kernel's business.
 */
void __fentry__(void);
EXPORT_SYMBOL(__fentry__);
EXPORT_SYMBOL(__x86_return_thunk);
#define EXPORT_THUNK(reg) EXPORT_SYMBOL(__x86_indirect_thunk_ ## reg)
EXPORT_THUNK(rax);
EXPORT_THUNK(rbx);
EXPORT_THUNK(rcx);
EXPORT_THUNK(rdx);
EXPORT_THUNK(rsi);
EXPORT_THUNK(rdi);
EXPORT_THUNK(rbp);
EXPORT_THUNK(r8);
EXPORT_THUNK(r9);
EXPORT_THUNK(r10);
EXPORT_THUNK(r11);
EXPORT_THUNK(r12);
EXPORT_THUNK(r13);
EXPORT_THUNK(r14);
EXPORT_THUNK(r15);
/* Static-call trampolines, see thunks.S for why they do what they do. */
EXPORT_SYMBOL(__SCT__cond_resched);
EXPORT_SYMBOL(__SCT__might_resched);
void __SCT__preempt_schedule(void);
EXPORT_SYMBOL(__SCT__preempt_schedule);
void __SCT__preempt_schedule_notrace(void);
EXPORT_SYMBOL(__SCT__preempt_schedule_notrace);

/*
 * Entry point for the executable, before any module's init: makes this
 * thread the boot task on CPU 0 and starts the softirq/timer and workqueue
 * threads. The caller has installed the per-cpu block as its GS base.
 */
int us_boot(void)
{
	void *block = ddekit_percpu_block();
	struct us_task *boot;
	int err;

	ddekit_cpu_lock();
	boot_ns = ddekit_now_ns();
	__per_cpu_offset[0] = (unsigned long)block;
	this_cpu_write(this_cpu_off, (unsigned long)block);
	this_cpu_write(cpu_number, 0);
	raw_cpu_write_4(__preempt_count, PREEMPT_ENABLED);
	err = us_mem_init();
	if (err) {
		ddekit_cpu_unlock();
		return err;
	}
	boot = new_task("understudy-main");
	ddekit_thread_set_data(boot);
	install(boot);
	us_update_jiffies();
	us_cpuinfo_init();
	err = us_pci_init();
	if (!err) {
		us_softirq_start();
		us_workqueue_start();
	}
	us_cpu_leave();
	return err;
}
EXPORT_SYMBOL_GPL(us_boot);
