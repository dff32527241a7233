// SPDX-License-Identifier: GPL-2.0
/*
 * The driver process's fault handlers, over the loaded chain's tables
 * (modules_ctx): a ud2 with a __bug_table entry is a WARN, reported and
 * stepped over as the kernel's report_bug() does, or a BUG, a panic; a page
 * fault or bus error at an instruction with an __ex_table entry goes on at
 * its fixup. Anything else is a panic, as in the kernel.
 */#define _GNU_SOURCE
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include <understudy/protocol.h>

#include "../ddekit/ddekit.h"
#include "../ddekit/setup.h"
#include "../loader/loader.h"
#include "driver.h"

#define EX_TYPE_MASK		0xff
#define EX_TYPE_DEFAULT		1
#define BUGFLAG_DONE_BIT	(1 << 2)

static void write_str(const char *s)
{
	if (write(STDERR_FILENO, s, strlen(s)) < 0)
		_exit(US_EXIT_PANIC);
}

static void on_sigill(int sig, siginfo_t *info, void *uctx)
{
	ucontext_t *uc = uctx;
	uint64_t rip = uc->uc_mcontext.gregs[REG_RIP];
	const struct ko_bug_entry *bug = ko_find_bug(modules_ctx, rip);
	const uint8_t *insn = (const uint8_t *)rip;
	char line[512], where[64];

	ddekit_symbolize(rip, where, sizeof(where));
	if (!bug || insn[0] != 0x0f || insn[1] != 0x0b) {
		snprintf(line, sizeof(line), "PANIC illegal instruction at %s\n", where);
		write_str(line + 6);
		printf("%s", line);
		fflush(stdout);
		_exit(US_EXIT_PANIC);
	}
	if (bug->flags & KO_BUG_WARNING) {
		uint16_t *flags = (uint16_t *)bug->flags_addr;
		bool silent = (bug->flags & KO_BUG_ONCE) && (*flags & BUGFLAG_DONE_BIT);

		if (bug->flags & KO_BUG_ONCE)
			*flags |= BUGFLAG_DONE_BIT;
		if (!silent) {
			snprintf(line, sizeof(line), "WARN file=%s line=%u at=%s",
				 bug->file ? bug->file : "?", bug->line, where);
			ddekit_event(line);
			ddekit_host_warn(bug->file ? bug->file : "?", bug->line, line);
		}
		uc->uc_mcontext.gregs[REG_RIP] = rip + 2;
		return;
	}
	snprintf(line, sizeof(line), "BUG at %s:%u (%s)", bug->file ? bug->file : "?",
		 bug->line, where);
	ddekit_panic(line);
}

static void on_sigsegv(int sig, siginfo_t *info, void *uctx)
{
	ucontext_t *uc = uctx;
	uint64_t rip = uc->uc_mcontext.gregs[REG_RIP];
	const struct ko_extable_entry *ex =
		modules_ctx ? ko_find_exception(modules_ctx, rip) : NULL;
	char line[256], where[64];

	if (ex && (ex->data & EX_TYPE_MASK) == EX_TYPE_DEFAULT) {
		uc->uc_mcontext.gregs[REG_RIP] = ex->fixup;
		return;
	}
	ddekit_symbolize(rip, where, sizeof(where));
	snprintf(line, sizeof(line), "page fault at address %p, rip %s%s", info->si_addr,
		 where, ex ? " (exception-table type not handled)" : "");
	ddekit_panic(line);
}

void install_fault_handlers(void)
{
	struct sigaction sa = { .sa_flags = SA_SIGINFO | SA_NODEFER };

	sigemptyset(&sa.sa_mask);
	sa.sa_sigaction = on_sigill;
	sigaction(SIGILL, &sa, NULL);
	sa.sa_sigaction = on_sigsegv;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
}
