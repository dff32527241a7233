/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kernel "CPU" (cpu.c, docs/design.md §6): the lock kernel code runs
 * under, and the per-cpu block.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_CPU_H
#define UNDERSTUDY_DDEKIT_CPU_H

/*
 * One lock: a thread runs kernel code only while it holds it. Waiting
 * releases it, like a sleeping task gives up its CPU. A change only one
 * thread waits for (its queue woke, a timer for the softirq thread, work
 * for the worker) is announced to that thread with ddekit_cpu_wake(); any
 * other change, to all waiters with ddekit_cpu_wake_all(). Both are called
 * with the CPU held.
 */
void ddekit_cpu_lock(void);
void ddekit_cpu_unlock(void);
/* Releases the CPU until woken or until deadline_ns (0: no deadline). */
void ddekit_cpu_wait(unsigned long long deadline_ns);
/* Returns once the CPU is free or has changed hands: the heartbeat's check. */
void ddekit_cpu_await_progress(void);
/* How often the CPU was taken, waking included (the heartbeat's and the tests' count). */
unsigned long ddekit_cpu_entries(void);
void ddekit_cpu_wake_all(void);
/* The calling thread, as ddekit_cpu_wake() names it (valid while it lives). */
void *ddekit_cpu_waiter(void);
void ddekit_cpu_wake(void *waiter);

/* The per-cpu block every thread's GS base points to. */
void *ddekit_percpu_block(void);

#endif /* UNDERSTUDY_DDEKIT_CPU_H */
