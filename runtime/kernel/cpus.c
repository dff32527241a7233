// SPDX-License-Identifier: GPL-2.0
/*
 * The set of CPUs as drivers see it: one, CPU 0, always online
 * (docs/design.md §6). Debian builds with CONFIG_CPUMASK_OFFSTACK, so a
 * driver's cpumask_var_t is allocated here and nr_cpu_ids bounds the
 * masks' operations. CPU hotplug states (cpuhp) are kept as the kernel
 * keeps them, with their callbacks and instances, and CPU 0's startup
 * callback runs whenever the kernel would run it for an online CPU; no CPU
 * ever comes or goes, so no other callback runs, and cpus_read_lock()
 * has nothing to exclude.
 *
 * Stands in for Linux's kernel/cpu.c and lib/cpumask.c.
 */
#include <linux/module.h>
#include <linux/cpu.h>
#include <linux/cpuhotplug.h>
#include <linux/cpumask.h>
#include <linux/slab.h>

#include "internal.h"

unsigned int nr_cpu_ids = 1;
EXPORT_SYMBOL(nr_cpu_ids);

struct cpumask __cpu_online_mask = { .bits = { 1 } };
EXPORT_SYMBOL(__cpu_online_mask);

atomic_t __num_online_cpus = ATOMIC_INIT(1);
EXPORT_SYMBOL(__num_online_cpus);

/* The whole NR_CPUS-bit mask: inline helpers may look at any of its words. */
bool alloc_cpumask_var_node(cpumask_var_t *mask, gfp_t flags, int node)
{
	*mask = kmalloc(sizeof(struct cpumask), flags);
	return *mask != NULL;
}
EXPORT_SYMBOL(alloc_cpumask_var_node);

void free_cpumask_var(cpumask_var_t mask)
{
	kfree(mask);
}
EXPORT_SYMBOL(free_cpumask_var);

/*
 * The next CPU in mask after n, going round past the last to the first,
 * and ending (nr_cpumask_bits) once the walk that began at start comes
 * back to it.
 */
unsigned int cpumask_next_wrap(int n, const struct cpumask *mask, int start, bool wrap)
{
	for (;;) {
		int next = cpumask_next(n, mask);

		if (wrap && n < start && next >= start)
			return nr_cpumask_bits;
		if (next < nr_cpumask_bits)
			return next;
		if (n == -1)	/* an empty mask */
			return nr_cpumask_bits;
		wrap = true;
		n = -1;
	}
}
EXPORT_SYMBOL(cpumask_next_wrap);

void cpus_read_lock(void)
{
}
EXPORT_SYMBOL_GPL(cpus_read_lock);

void cpus_read_unlock(void)
{
}
EXPORT_SYMBOL_GPL(cpus_read_unlock);

/* ---- hotplug states ----------------------------------------------------- */

struct hp_state {
	const char *name;		/* NULL: free */
	void *startup, *teardown;	/* int (*)(cpu) or, multi, int (*)(cpu, node) */
	bool multi;
	struct hlist_head instances;
};

static struct hp_state states[CPUHP_ONLINE];

/* The state a caller names, which must be one it set up. */
static struct hp_state *set_up(enum cpuhp_state state)
{
	if (WARN(state >= ARRAY_SIZE(states) || !states[state].name,
		 "cpuhp state %d was not set up\n", state))
		return NULL;
	return &states[state];
}

static int call(void *fn, bool multi, struct hlist_node *node)
{
	if (!fn)
		return 0;
	if (multi)
		return ((int (*)(unsigned int, struct hlist_node *))fn)(0, node);
	return ((int (*)(unsigned int))fn)(0);
}

/* A dynamic state is the first free one of its range; the others are fixed. */
static int claim(enum cpuhp_state state)
{
	int first = state, last = state;

	if (state == CPUHP_AP_ONLINE_DYN)
		last = CPUHP_AP_ONLINE_DYN_END;
	else if (state == CPUHP_BP_PREPARE_DYN)
		last = CPUHP_BP_PREPARE_DYN_END;
	for (int s = first; s <= last && s < ARRAY_SIZE(states); s++)
		if (!states[s].name)
			return s;
	return -ENOSPC;
}

int __cpuhp_setup_state(enum cpuhp_state state, const char *name, bool invoke,
			int (*startup)(unsigned int cpu), int (*teardown)(unsigned int cpu),
			bool multi_instance)
{
	int s = claim(state), err;

	if (s < 0)
		return s;
	states[s] = (struct hp_state){ .name = name, .startup = startup, .teardown = teardown,
				       .multi = multi_instance };
	INIT_HLIST_HEAD(&states[s].instances);
	/* A multi-instance state's callbacks run per instance, when one is added. */
	if (invoke && !multi_instance) {
		err = call(startup, false, NULL);
		if (err) {
			states[s].name = NULL;
			return err;
		}
	}
	/* A dynamic state's number is the caller's to keep; a fixed one answers 0. */
	return state == CPUHP_AP_ONLINE_DYN || state == CPUHP_BP_PREPARE_DYN ? s : 0;
}
EXPORT_SYMBOL(__cpuhp_setup_state);

void __cpuhp_remove_state(enum cpuhp_state state, bool invoke)
{
	struct hp_state *st = set_up(state);

	if (!st || WARN(st->multi && !hlist_empty(&st->instances),
			"cpuhp state %d removed with instances\n", state))
		return;
	if (invoke && !st->multi)
		call(st->teardown, false, NULL);
	st->name = NULL;
}
EXPORT_SYMBOL(__cpuhp_remove_state);

int __cpuhp_state_add_instance(enum cpuhp_state state, struct hlist_node *node, bool invoke)
{
	struct hp_state *st = set_up(state);

	if (!st || WARN_ON(!st->multi))
		return -EINVAL;
	if (invoke) {
		int err = call(st->startup, true, node);

		if (err)
			return err;
	}
	hlist_add_head(node, &st->instances);
	return 0;
}
EXPORT_SYMBOL_GPL(__cpuhp_state_add_instance);

int __cpuhp_state_remove_instance(enum cpuhp_state state, struct hlist_node *node, bool invoke)
{
	struct hp_state *st = set_up(state);

	if (!st || WARN_ON(!st->multi))
		return -EINVAL;
	if (invoke)
		call(st->teardown, true, node);
	hlist_del(node);
	return 0;
}
EXPORT_SYMBOL_GPL(__cpuhp_state_remove_instance);
