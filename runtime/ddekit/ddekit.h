/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ddekit: the libc half of the driver-process runtime, as seen from the
 * kernel half (runtime/kernel) and from the executable's main.
 *
 * The kernel half sees the whole downward interface through this one file;
 * each part's contract is in its own header, beside the file that
 * implements it.
 *
 * They are included by Kbuild-compiled kernel code and by ordinary libc
 * code, so they use nothing but builtin C types: no libc header, no Linux
 * kernel header (Genode's rule). The kernel half's undefined symbols
 * resolve to these functions through the loader's resolver callback.
 *
 * Calling convention: kernel code keeps its stack only 8-byte aligned
 * (-mpreferred-stack-boundary=3), so every ddekit object file is compiled
 * with -mincoming-stack-boundary=3 and realigns on entry. None of these
 * functions is variadic, because kernel code leaves %al undefined.
 */
#ifndef UNDERSTUDY_DDEKIT_H
#define UNDERSTUDY_DDEKIT_H

#include "log.h"
#include "time.h"
#include "random.h"
#include "cpu.h"
#include "thread.h"
#include "arena.h"
#include "memory.h"
#include "file.h"
#include "device.h"
#include "checking.h"
#include "host.h"
#include "tap.h"
#include "rx_writer.h"
#include "block.h"

#endif /* UNDERSTUDY_DDEKIT_H */
