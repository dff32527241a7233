/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ddekit's randomness (random.c): the host's random source.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_RANDOM_H
#define UNDERSTUDY_DDEKIT_RANDOM_H

/* Fills buf from the host's random source (getrandom()); dies if it cannot. */
void ddekit_random(void *buf, unsigned long len);

#endif /* UNDERSTUDY_DDEKIT_RANDOM_H */
