// SPDX-License-Identifier: GPL-2.0
/*
 * The host's files kernel code reads (request_firmware, firmware.c).
 *
 * Built with -mincoming-stack-boundary=3 (see ddekit.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

long ddekit_file_size(const char *path)
{
	struct stat st;

	if (stat(path, &st))
		return -errno;
	return S_ISREG(st.st_mode) ? st.st_size : -EINVAL;
}

long ddekit_read_file(const char *path, void *buf, unsigned long len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	unsigned long done = 0;

	if (fd < 0)
		return -errno;
	while (done < len) {
		ssize_t n = read(fd, (char *)buf + done, len - done);

		if (n <= 0)
			break;
		done += n;
	}
	close(fd);
	return done;
}
