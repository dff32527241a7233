// SPDX-License-Identifier: GPL-2.0
/*
 * The host's random source, which stands in for the kernel's entropy pool.
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h).
 */
#include <errno.h>
#include <sys/random.h>
#include <sys/types.h>

#include "log.h"
#include "random.h"

void ddekit_random(void *buf, unsigned long len)
{
	for (unsigned long done = 0; done < len;) {
		ssize_t n = getrandom((char *)buf + done, len - done, 0);

		if (n < 0 && errno != EINTR)
			ddekit_panic("getrandom failed");
		if (n > 0)
			done += n;
	}
}
