/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ddekit's files (file.c): what kernel code reads from the host's files.
 *
 * Part of ddekit's interface to the kernel half: builtin C types only
 * (ddekit.h).
 */
#ifndef UNDERSTUDY_DDEKIT_FILE_H
#define UNDERSTUDY_DDEKIT_FILE_H

/* Files (firmware): size in bytes, or how many bytes were read; -errno. */
long ddekit_file_size(const char *path);
long ddekit_read_file(const char *path, void *buf, unsigned long len);

#endif /* UNDERSTUDY_DDEKIT_FILE_H */
