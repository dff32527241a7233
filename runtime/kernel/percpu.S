/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Per-cpu variables the headers declare "read mostly". A C definition would
 * have to repeat that section, .data..percpu..read_mostly, which a module's
 * per-cpu area does not include (only .data..percpu is per-cpu in a .ko),
 * so they are defined here, directly in .data..percpu.
 */
	.section .data..percpu, "aw"
	.balign 8
	.globl this_cpu_off
this_cpu_off:
	.quad 0
	.globl cpu_number
cpu_number:
	.long 0
