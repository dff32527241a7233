// SPDX-License-Identifier: GPL-2.0
/*
 * What copying and checksumming a megabyte costs in the lab guest, where
 * QEMU's TCG emulates each step of a string instruction on its own and runs
 * vector code slowly (docs/performance.md §6 and §7; the measurements in
 * docs/notes/bench-net-history.md, "Sending without TSO"). Two shapes: one
 * 64 KiB copy (a GSO frame), and 1448-byte pieces across 1 MiB (the
 * payloads of received frames). Prints one JSON line per way of doing it:
 * microseconds per 64 KiB and milliseconds per MB.
 *
 *   cc -O2 -static -o /tmp/copy-cost lab/experiments/copy_cost.c
 *   python3 -m lab boot --devices '' -- /tmp/copy-cost
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define BIG	(64 * 1024)
#define AREA	(1024 * 1024)
#define PIECE	1448
#define STRIDE	2048
#define ROUNDS	50

/*
 * Source and destination an odd number of pages apart: TCG's software TLB is
 * indexed by page number, and two buffers a power of two apart would evict
 * each other's entry at every byte (22 ns a byte for rep movsb, not 1.5).
 */
static unsigned char memory[2 * AREA + 17 * 4096 + 64];
static unsigned char *const src = memory, *const dst = memory + AREA + 17 * 4096;
static volatile uint64_t sink;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void copy_movsb(void *d, const void *s, size_t n)
{
	asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

static void copy_movsq(void *d, const void *s, size_t n)
{
	size_t words = n / 8, bytes = n % 8;

	asm volatile("rep movsq" : "+D"(d), "+S"(s), "+c"(words) : : "memory");
	asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(bytes) : : "memory");
}

/* Through a pointer, so the compiler calls glibc's (SSE) memcpy. */
static void *(*volatile copy_libc)(void *, const void *, size_t) = memcpy;

static void copy_glibc(void *d, const void *s, size_t n)
{
	copy_libc(d, s, n);
}

static void sum_pairs(void *unused, const void *s, size_t n)
{
	const unsigned char *p = s;
	uint64_t sum = 0;

	for (; n > 1; n -= 2, p += 2)
		sum += p[0] | p[1] << 8;
	sink += sum;
}

static void sum_words(void *unused, const void *s, size_t n)
{
	const unsigned char *p = s;
	uint64_t sum = 0, carries = 0;

	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		sum += w;
		carries += sum < w;
	}
	sink += sum + carries;
}

static const struct {
	const char *name;
	void (*fn)(void *, const void *, size_t);
} ways[] = {
	{ "rep movsb", copy_movsb }, { "rep movsq", copy_movsq }, { "glibc memcpy", copy_glibc },
	{ "checksum, 16-bit pairs", sum_pairs }, { "checksum, 64-bit words", sum_words },
};

static void report(const char *way, const char *shape, double seconds, double bytes)
{
	printf("{\"way\": \"%s\", \"shape\": \"%s\", \"us_per_64k\": %.1f, \"ms_per_mb\": %.2f}\n",
	       way, shape, seconds / bytes * BIG * 1e6, seconds / bytes * 1e9);
}

int main(void)
{
	memset(memory, 0x5a, sizeof(memory));
	for (size_t w = 0; w < sizeof(ways) / sizeof(ways[0]); w++) {
		double t = now();

		for (int r = 0; r < ROUNDS; r++)
			ways[w].fn(dst, src, BIG);
		report(ways[w].name, "one 64 KiB", now() - t, (double)ROUNDS * BIG);
		t = now();
		for (int r = 0; r < ROUNDS; r++)
			for (size_t o = 0; o + STRIDE <= AREA; o += STRIDE)
				ways[w].fn(dst + o, src + o + 2, PIECE);
		report(ways[w].name, "1448-byte pieces", now() - t, (double)ROUNDS * (AREA / STRIDE) * PIECE);
	}
	return 0;
}
