// SPDX-License-Identifier: GPL-2.0
/*
 * Which kernel half a module chain is loaded with (runtime/README.md, "One
 * kernel half per ABI"): the one --runtime names, or the one built for the
 * first module's ABI, or else the other halves of its kernel version whose
 * CRCs might all match, nearest ABI first.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"

/*
 * A module's vermagic= string, which the loader compares with the kernel
 * half's (after the release, as Linux does for modules with CRCs).
 */
static int read_vermagic(const char *path, char *vermagic, size_t len, struct problems *why)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL, *hit = NULL;
	long size;

	if (!f) {
		problems_add(why, "%s: %s", path, strerror(errno));
		return errno == ENOENT ? -ENOENT : -ENOEXEC;
	}
	if (!fseek(f, 0, SEEK_END) && (size = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) &&
	    (buf = malloc(size + 1)) && fread(buf, 1, size, f) == (size_t)size) {
		buf[size] = '\0';
		hit = memmem(buf, size, "vermagic=", 9);
	}
	fclose(f);
	if (hit)
		snprintf(vermagic, len, "%s", hit + 9);
	else
		problems_add(why, "%s: no vermagic= (not a kernel module?)", path);
	free(buf);
	return hit ? 0 : -ENOEXEC;
}

static int half_at(struct half *h, const char *ko, const char *symvers, struct problems *why)
{
	int err;

	snprintf(h->ko, sizeof(h->ko), "%s", ko);
	snprintf(h->symvers, sizeof(h->symvers), "%s", symvers);
	err = read_vermagic(ko, h->vermagic, sizeof(h->vermagic), why);
	snprintf(h->release, sizeof(h->release), "%.*s", (int)strcspn(h->vermagic, " "),
		 h->vermagic);
	return err;
}

/* "6.1.0-50-amd64": base "6.1.0", number 50, flavour "amd64"; false if not that shape. */
static bool parse_release(const char *release, char *base, int *number, char *flavour)
{
	return sscanf(release, "%31[0-9.]-%d-%31s", base, number, flavour) == 3;
}

/*
 * How far a half's ABI is from a module's: the difference of their ABI
 * numbers, or -1 if they are not of the same kernel version and flavour.
 */
static int abi_distance(const char *half, const char *module)
{
	char base[2][32], flavour[2][32];
	int number[2];

	if (!parse_release(half, base[0], &number[0], flavour[0]) ||
	    !parse_release(module, base[1], &number[1], flavour[1]) ||
	    strcmp(base[0], base[1]) || strcmp(flavour[0], flavour[1]))
		return -1;
	return abs(number[0] - number[1]);
}

static const char *module_release;	/* for compare_halves */

static int compare_halves(const void *a, const void *b)
{
	const struct half *x = a, *y = b;
	int dx = abi_distance(x->release, module_release);
	int dy = abi_distance(y->release, module_release);

	return dx != dy ? dx - dy : strcmp(x->release, y->release);
}

/*
 * The halves to try for a module of ABI release, nearest first, from
 * build/abi/<abi>/ next to this executable: its own ABI's alone if there is
 * one; otherwise every half of the same kernel version and flavour, since
 * with MODVERSIONS Linux lets the CRCs decide, not the release.
 */
static int find_halves(const char *release, struct half *halves, struct problems *why)
{
	char dir[PATH_MAX], ko[PATH_MAX + 128], symvers[PATH_MAX + 128];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 8);
	struct dirent *e;
	DIR *d;
	int count = 0;

	if (n < 0)
		die("readlink /proc/self/exe: %s", strerror(errno));
	dir[n] = '\0';
	strcpy(strrchr(dir, '/') + 1, "abi");
	d = opendir(dir);
	while (d && (e = readdir(d)) && count < MAX_HALVES) {
		struct problems ignored = { 0 };

		if (e->d_name[0] == '.')
			continue;
		snprintf(ko, sizeof(ko), "%s/%.64s/understudy-kernel.ko", dir, e->d_name);
		snprintf(symvers, sizeof(symvers), "%s/%.64s/Module.symvers", dir, e->d_name);
		if (!half_at(&halves[count], ko, symvers, &ignored) && !access(symvers, R_OK) &&
		    abi_distance(halves[count].release, release) >= 0)
			count++;
		problems_clear(&ignored);
	}
	if (d)
		closedir(d);
	for (int i = 0; i < count; i++)
		if (!strcmp(halves[i].release, release)) {
			halves[0] = halves[i];
			return 1;
		}
	problems_add(why, "ABI %s has no kernel half in %s (one is built for each ABI with "
		     "linux-headers, lab/lab.toml [live_update]); %s", release, dir,
		     count ? "tried the others whose CRCs might match, nearest first:"
			   : "there is no other half of its kernel version to try");
	module_release = release;
	qsort(halves, count, sizeof(*halves), compare_halves);
	return count;
}

int choose_halves(const char *runtime, const char *symvers, const char *module,
		  char *release, size_t release_len, struct half *halves, struct problems *why)
{
	char vermagic[256], dir[PATH_MAX], next_to[PATH_MAX + 16];
	int err;

	err = read_vermagic(module, vermagic, sizeof(vermagic), why);
	if (err)
		return err;
	snprintf(release, release_len, "%.*s", (int)strcspn(vermagic, " "), vermagic);
	if (!runtime)
		return find_halves(release, halves, why);
	/* A half is a directory: its ABI's Module.symvers lies next to it. */
	if (!symvers && realpath(runtime, dir)) {
		snprintf(next_to, sizeof(next_to), "%.*s/Module.symvers",
			 (int)(strrchr(dir, '/') - dir), dir);
		symvers = next_to;
	}
	err = half_at(&halves[0], runtime, symvers ? symvers : "", why);
	return err ? err : 1;
}
