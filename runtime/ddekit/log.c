// SPDX-License-Identifier: GPL-2.0
/*
 * What kernel code says: its printk records (to stderr up to a level, and
 * to the host), the runtime's event lines on stdout, and a panic, which ends
 * the process.
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h).
 */
#include <stdio.h>
#include <unistd.h>

#include <understudy/protocol.h>

#include "log.h"
#include "setup.h"

static int log_level = 7;
static void (*event_observer)(const char *line);

void ddekit_setup_loglevel(int level)
{
	log_level = level;
}

void ddekit_log(int level, const char *text, unsigned long len)
{
	while (len && text[len - 1] == '\n')
		len--;
	ddekit_host_log(level, text, len);
	if (level > log_level)
		return;
	fprintf(stderr, "<%d>%.*s\n", level, (int)len, text);
}

void ddekit_setup_event_observer(void (*observer)(const char *line))
{
	event_observer = observer;
}

void ddekit_event(const char *line)
{
	printf("%s\n", line);
	fflush(stdout);
	if (event_observer)
		event_observer(line);
}

void ddekit_panic(const char *why)
{
	fprintf(stderr, "understudy-driver: kernel panic: %s\n", why);
	printf("PANIC %s\n", why);
	fflush(stdout);
	_exit(US_EXIT_PANIC);
}
