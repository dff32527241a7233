// SPDX-License-Identifier: GPL-2.0
/* The problems list: why a load was refused, one line each (driver.h). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

void problems_add(struct problems *p, const char *fmt, ...)
{
	va_list ap;
	char *line;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&line, fmt, ap);
	va_end(ap);
	if (n < 0)
		die("out of memory");
	for (int i = 0; i < n; i++)	/* one line each, whatever a path holds */
		if ((unsigned char)line[i] < 0x20)
			line[i] = '?';
	p->text = realloc(p->text, p->len + n + 2);
	if (!p->text)
		die("out of memory");
	memcpy(p->text + p->len, line, n);
	p->len += n;
	p->text[p->len++] = '\n';
	p->text[p->len] = '\0';
	p->count++;
	free(line);
}

void problems_clear(struct problems *p)
{
	free(p->text);
	*p = (struct problems){ 0 };
}
