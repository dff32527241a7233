// SPDX-License-Identifier: GPL-2.0
/*
 * Unit test of the loader on the hand-written modules in fixtures/:
 * per-cpu offsets (module exports and runtime symbols, reached through %gs
 * with PC32 and 32S), exception-table and bug-table lookups driven by real
 * SIGSEGV/SIGILL as the runtime's handlers will be, init/exit entry points,
 * __param, __fentry__, return-thunk and retpoline patching, CRC mismatches
 * and missing imports.
 *
 *	test-loader FIXTURE_DIR
 *
 * Prints one line per check and exits 1 if any failed.
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "loader.h"

static int failures;

#define CHECK(cond, ...) do {						\
	bool passed_ = (cond);						\
									\
	printf("%s: ", passed_ ? "ok" : "FAIL");			\
	printf(__VA_ARGS__);						\
	printf("\n");							\
	failures += !passed_;						\
} while (0)

static struct ko_context *ctx;
static uint64_t runtime_percpu_var;	/* offset the resolver handed out */
static int param_ops_int;		/* stands in for the kernel's object */
static int warnings_seen;

static void fentry_stub(void)
{
}

/* The runtime's thunks (runtime/kernel/thunks.S), as the resolver hands them out. */
__asm__(".text\n"
	"test_return_thunk: ret\n"
	"test_thunk_rax: jmp *%rax\n"
	"test_thunk_r11: jmp *%r11\n");
extern char test_return_thunk[], test_thunk_rax[], test_thunk_r11[];

static const struct {
	const char *name;
	const void *code;
} thunks[] = {
	{ "__x86_return_thunk", test_return_thunk },
	{ "__x86_indirect_thunk_rax", test_thunk_rax },
	{ "__x86_indirect_thunk_r11", test_thunk_r11 },
};

static int resolve(void *arg, const char *name, struct ko_symbol *out)
{
	(void)arg;
	if (!strcmp(name, "__fentry__")) {
		out->value = (uint64_t)fentry_stub;
		out->percpu = false;
		return 0;
	}
	for (size_t i = 0; i < sizeof(thunks) / sizeof(thunks[0]); i++) {
		if (!strcmp(name, thunks[i].name)) {
			out->value = (uint64_t)thunks[i].code;
			out->percpu = false;
			return 0;
		}
	}
	if (!strcmp(name, "param_ops_int")) {
		out->value = (uint64_t)&param_ops_int;
		out->percpu = false;
		return 0;
	}
	if (!strcmp(name, "runtime_percpu_var")) {
		if (!runtime_percpu_var &&
		    ko_percpu_alloc(ctx, sizeof(uint64_t), sizeof(uint64_t),
				    &runtime_percpu_var))
			return -1;
		out->value = runtime_percpu_var;
		out->percpu = true;
		return 0;
	}
	return -1;
}

/* What the runtime's SIGSEGV handler does: continue at the fixup. */
static void on_segv(int sig, siginfo_t *info, void *ucontext)
{
	ucontext_t *uc = ucontext;
	const struct ko_extable_entry *e;

	(void)sig;
	(void)info;
	e = ko_find_exception(ctx, uc->uc_mcontext.gregs[REG_RIP]);
	if (!e)
		abort();
	uc->uc_mcontext.gregs[REG_RIP] = e->fixup;
}

/* What the runtime's SIGILL handler does for WARN: report, skip the ud2. */
static void on_sigill(int sig, siginfo_t *info, void *ucontext)
{
	ucontext_t *uc = ucontext;
	const struct ko_bug_entry *b;

	(void)sig;
	(void)info;
	b = ko_find_bug(ctx, uc->uc_mcontext.gregs[REG_RIP]);
	if (!b || !(b->flags & KO_BUG_WARNING))
		abort();
	warnings_seen++;
	uc->uc_mcontext.gregs[REG_RIP] += 2;
}

static uint64_t export_value(const char *name)
{
	const struct ko_export *e = ko_find_export(ctx, name);

	if (!e) {
		printf("FAIL: no export %s\n", name);
		exit(1);
	}
	return e->value.value;
}

static const struct ko_import *find_import(const struct ko_module *m, const char *name)
{
	for (size_t i = 0; i < m->imports.count; i++)
		if (!strcmp(m->imports.entries[i].name, name))
			return &m->imports.entries[i];
	return NULL;
}

static const struct ko_module *load(const char *dir, const char *file)
{
	char path[4096];
	const struct ko_module *m;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	m = ko_load_file(ctx, path);
	if (!m)
		printf("load %s: %s\n", file, ko_last_error(ctx)->message);
	return m;
}

static void test_percpu(const struct ko_module *provider)
{
	typedef uint64_t (*reader_fn)(void);
	const struct ko_export *counter = ko_find_export(ctx, "fixture_counter");
	reader_fn read_rip = (reader_fn)export_value("user_read_counter_rip");
	reader_fn read_abs = (reader_fn)export_value("user_read_counter_abs");
	reader_fn read_runtime = (reader_fn)export_value("user_read_runtime_var");
	reader_fn call_provider = (reader_fn)export_value("user_call_provider");
	struct ko_percpu_layout layout;
	uint8_t *block;

	CHECK(provider->percpu.size == 16 && provider->percpu.addr >= KO_PERCPU_FIXED_SIZE,
	      "provider's .data..percpu placed at %%gs:0x%" PRIx64 ", past the fixed area",
	      provider->percpu.addr);
	CHECK(counter && counter->value.percpu &&
	      counter->value.value == provider->percpu.addr + 8,
	      "export fixture_counter is per-cpu offset 0x%" PRIx64,
	      counter ? counter->value.value : 0);
	ko_percpu_layout(ctx, &layout);
	CHECK(layout.size >= runtime_percpu_var + 8 &&
	      layout.size >= provider->percpu.addr + provider->percpu.size &&
	      layout.size % layout.align == 0,
	      "per-cpu layout %zu bytes, aligned %zu, covers every variable",
	      layout.size, layout.align);

	block = aligned_alloc(layout.align, layout.size);
	ko_percpu_init_block(ctx, block);
	if (syscall(SYS_arch_prctl, ARCH_SET_GS, block)) {
		CHECK(0, "arch_prctl(ARCH_SET_GS)");
		return;
	}
	CHECK(read_rip() == 0x1122334455667788ULL,
	      "%%gs:fixture_counter(%%rip) (PC32) reads the template value");
	memcpy(block + counter->value.value, &(uint64_t){ 0xabc }, 8);
	CHECK(read_abs() == 0xabc, "%%gs:fixture_counter (32S) reads this CPU's copy");
	CHECK(call_provider() == 0xabc,
	      "provider's own code (local PC32, call through PLT32 import) agrees");
	memcpy(block + runtime_percpu_var, &(uint64_t){ 0x5eed }, 8);
	CHECK(read_runtime() == 0x5eed,
	      "runtime per-cpu symbol resolves to its offset 0x%" PRIx64, runtime_percpu_var);
	free(block);
}

static void test_fault_tables(const struct ko_module *provider)
{
	typedef long (*fault_fn)(const long *p);
	typedef int (*warn_fn)(void);
	uint64_t fault = export_value("fixture_fault");
	uint64_t fixup = export_value("fixture_fault_fixup");
	uint64_t warn = export_value("fixture_warn");
	uint64_t bug = export_value("fixture_bug");
	const struct ko_extable_entry *x = ko_find_exception(ctx, fault);
	const struct ko_bug_entry *w = ko_find_bug(ctx, warn);
	const struct ko_bug_entry *b = ko_find_bug(ctx, bug);
	struct sigaction sa = { .sa_flags = SA_SIGINFO };
	long value = 7;

	CHECK(x && x->insn == fault && x->fixup == fixup && x->data == 3,
	      "__ex_table: faulting insn -> fixup, data 3");
	CHECK(!ko_find_exception(ctx, fault + 1) && !ko_find_exception(ctx, 0x1000) &&
	      !ko_find_exception(ctx, (uint64_t)&value),
	      "__ex_table: no entry for other addresses, inside or outside modules");
	CHECK(w && w->line == 42 && (w->flags & KO_BUG_WARNING) &&
	      !strcmp(w->file, "drivers/net/fixture/provider.c"),
	      "__bug_table: WARN at provider.c:42");
	CHECK(b && b->line == 7 && !(b->flags & KO_BUG_WARNING),
	      "__bug_table: BUG at provider.c:7");
	CHECK(provider->bugs.count == 2 && provider->bugs.entries[0].addr < provider->bugs.entries[1].addr,
	      "__bug_table sorted by address");
	CHECK(!ko_find_bug(ctx, warn + 1), "__bug_table: no entry past the ud2");

	sa.sa_sigaction = on_segv;
	sigaction(SIGSEGV, &sa, NULL);
	sa.sa_sigaction = on_sigill;
	sigaction(SIGILL, &sa, NULL);
	CHECK(((fault_fn)fault)(&value) == 7, "fixture_fault reads a good pointer");
	CHECK(((fault_fn)fault)(NULL) == -14,
	      "fixture_fault(NULL): SIGSEGV handler finds the fixup, returns -EFAULT");
	CHECK(((warn_fn)warn)() == 1 && warnings_seen == 1,
	      "WARN: SIGILL handler finds the entry and skips the ud2");
	signal(SIGSEGV, SIG_DFL);
	signal(SIGILL, SIG_DFL);
}

static void test_module_records(const struct ko_module *provider,
				const struct ko_module *user)
{
	static const uint8_t nop5[5] = { 0x0f, 0x1f, 0x44, 0x00, 0x00 };
	const struct ko_import *counter = find_import(user, "fixture_counter");
	const struct ko_import *read = find_import(user, "fixture_read_counter");
	const struct ko_import *runtime = find_import(user, "runtime_percpu_var");
	const struct ko_param *param = provider->params.entries;

	CHECK(provider->init && ((int (*)(void))provider->init)() == 42 &&
	      provider->init == provider->init_text.addr,
	      "init_module found through struct module, runs, returns 42");
	CHECK(provider->exit && provider->exit >= provider->text.addr &&
	      provider->exit < provider->text.addr + provider->text.size,
	      "cleanup_module found");
	CHECK(user->init == 0 && user->exit == 0, "a module without init/exit has none");
	CHECK(provider->mcount_patched && provider->mcount_sites.count == 1 &&
	      !memcmp((void *)provider->mcount_sites.entries[0], nop5, 5),
	      "call __fentry__ patched to a 5-byte NOP");
	CHECK(provider->params.count == 1 && !strcmp(param->name, "debug") &&
	      param->perm == 0644 && param->level == -1 &&
	      param->ops == (uint64_t)&param_ops_int &&
	      param->arg == export_value("fixture_debug") &&
	      *(int *)param->arg == 5,
	      "__param: debug, 0644, ops and arg resolved");
	CHECK(counter && counter->provider == provider && counter->crc_status == KO_CRC_MATCH &&
	      read && read->provider == provider && read->crc_status == KO_CRC_MATCH,
	      "imports from the provider, CRCs match its __kcrctab");
	CHECK(runtime && !runtime->provider && runtime->crc_status == KO_CRC_UNVERSIONED,
	      "runtime import has no __versions entry");
	CHECK(user->relocs[11] == 1 && user->relocs[2] >= 2 && user->relocs[4] == 1,
	      "relocation counts: 32S 1, PC32 %lu, PLT32 1", user->relocs[2]);
}

static long forty_one(void)
{
	return 41;
}

static long identity(long x)
{
	return x;
}

static void test_thunk_sites(const struct ko_module *provider)
{
	static const uint8_t ret_int3[5] = { 0xc3, 0xcc, 0xcc, 0xcc, 0xcc };
	static const uint8_t call_rax[5] = { 0xff, 0xd0, 0x0f, 0x1f, 0x00 };	/* + 3-byte NOP */
	static const uint8_t jmp_r11[5] = { 0x41, 0xff, 0xe3, 0x66, 0x90 };	/* + 2-byte NOP */
	static const uint8_t call_r11[6] = { 0x41, 0xff, 0xd3, 0x0f, 0x1f, 0x00 };
	long (*call_plus_one)(long (*)(void)) = (void *)export_value("fixture_call_plus_one");
	long (*tail_call)(long, long (*)(long)) = (void *)export_value("fixture_tail_call");
	long (*call_via_r11)(long, long (*)(long)) = (void *)export_value("fixture_call_r11");
	long (*is_nonzero)(long) = (void *)export_value("fixture_is_nonzero");
	const uint8_t *const *ret = (const uint8_t *const *)provider->return_sites.entries;
	const uint8_t *const *ind = (const uint8_t *const *)provider->retpoline_sites.entries;

	CHECK(provider->return_sites.count == 4 && !memcmp(ret[0], ret_int3, 5) &&
	      !memcmp(ret[2], ret_int3, 5) && !memcmp(ret[3], ret_int3, 5),
	      "jmp __x86_return_thunk patched to ret; int3");
	CHECK(provider->return_sites.count == 4 && ret[1][0] == 0x0f && ret[1][1] == 0x84,
	      "a conditional jump to the return thunk left as it is");
	CHECK(provider->retpoline_sites.count == 3 && !memcmp(ind[0], call_rax, 5) &&
	      !memcmp(ind[1], jmp_r11, 5) && !memcmp(ind[2], call_r11, 6),
	      "retpolines patched to call *%%rax, jmp *%%r11 and (CS-prefixed) call *%%r11");
	CHECK(call_plus_one(forty_one) == 42 && tail_call(0, identity) == 0 &&
	      tail_call(7, identity) == 7 && call_via_r11(5, identity) == 5 &&
	      is_nonzero(0) == 0 && is_nonzero(9) == 1,
	      "patched and unpatched sites run");
}

static void test_failures(const char *dir, const struct ko_module *provider)
{
	const struct ko_error *e;
	size_t mismatches = 0, missing = 0;

	CHECK(!load(dir, "provider.ko") &&
	      ko_last_error(ctx)->status == KO_ERR_CONFLICT,
	      "a second fixture_provider is refused");
	CHECK(!load(dir, "badcrc.ko"), "fixture_badcrc is refused");
	e = ko_last_error(ctx);
	for (size_t i = 0; i < e->n_problems; i++) {
		mismatches += e->problems[i].kind == KO_PROBLEM_CRC_MISMATCH;
		missing += e->problems[i].kind == KO_PROBLEM_MISSING &&
			   !strcmp(e->problems[i].symbol, "no_such_function");
	}
	CHECK(e->status == KO_ERR_CRC && mismatches == 2 && missing == 1 &&
	      strstr(e->problems[0].detail, "expects CRC 0xbad00002, fixture_provider has 0xc0ffee02"),
	      "every CRC mismatch and the missing import are listed: %s", e->message);
	CHECK(ko_module_count(ctx) == 2 && ko_find_module(ctx, "fixture_provider") == provider &&
	      !ko_find_module(ctx, "fixture_badcrc"),
	      "failed loads leave the context as it was");
}

int main(int argc, char **argv)
{
	struct ko_options opts = {
		.vermagic = "understudy-fixture",
		.resolve = resolve,
	};
	const struct ko_module *provider, *user;
	char err[256];

	if (argc != 2) {
		fprintf(stderr, "usage: test-loader FIXTURE_DIR\n");
		return 2;
	}
	ctx = ko_context_create(&opts, err, sizeof(err));
	if (!ctx) {
		printf("FAIL: %s\n", err);
		return 1;
	}
	provider = load(argv[1], "provider.ko");
	user = load(argv[1], "user.ko");
	CHECK(provider && user, "fixture_provider and fixture_user load");
	if (!provider || !user)
		return 1;

	test_percpu(provider);
	test_fault_tables(provider);
	test_module_records(provider, user);
	test_thunk_sites(provider);
	test_failures(argv[1], provider);
	ko_context_destroy(ctx);
	printf("%d failed\n", failures);
	return failures ? 1 : 0;
}
