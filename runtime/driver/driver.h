/* SPDX-License-Identifier: GPL-2.0 */
/* Shared by the files of understudy-driver. */
#ifndef UNDERSTUDY_DRIVER_H
#define UNDERSTUDY_DRIVER_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../kernel/kernel_api.h"

/*
 * The kernel half's entry points (kernel/kernel_api.h), bound by name to
 * its exports by run_modules (modules.c).
 */
#define KERNEL_API_POINTER(name, type, parameters) type (*name)parameters;
struct kernel_api {
	US_KERNEL_API(KERNEL_API_POINTER)
};
#undef KERNEL_API_POINTER

extern struct kernel_api kernel;

/*
 * The loaded chain (modules.c): the kernel half and the driver's modules in
 * one loader context, NULL until load_modules has succeeded; checked:
 * --trace-fd, the modules are loaded rewritten under the checker.
 */
struct ko_context;
extern struct ko_context *modules_ctx;
extern bool checked;

/* "understudy-driver: " and the message on stderr, then exit status 2 (main.c). */
void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* SIGILL, SIGSEGV and SIGBUS: BUG/WARN and exception-table fixups (faults.c). */
void install_fault_handlers(void);

/*
 * Why a load was refused, one line each (docs/protocol.md, "LOAD"): the
 * host gets them in LOAD's reply, stand-alone runs on stderr.
 */
struct problems {
	char *text;		/* NUL-terminated lines, each ending in '\n' */
	size_t len;
	unsigned int count;
};

void problems_add(struct problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void problems_clear(struct problems *p);

/* A kernel half: its module and its ABI's CRCs (runtime/README.md, "One kernel half per ABI"). */
struct half {
	char ko[PATH_MAX];
	char symvers[PATH_MAX];
	char vermagic[256];
	char release[64];	/* vermagic's first word, e.g. 6.1.0-50-amd64 */
};

#define MAX_HALVES 32

/*
 * The halves to load a chain whose first module is module with, in the
 * order to try them (halves.c): runtime's alone if given (symvers NULL: the
 * Module.symvers next to it); else the half of the module's ABI, from
 * abi/<abi>/ next to this executable, or failing that every half of its
 * kernel version, nearest ABI first. Returns how many (0: none to try, why
 * says so), with the module's release in release, or -ENOENT/-ENOEXEC and
 * the reason in why.
 */
int choose_halves(const char *runtime, const char *symvers, const char *module,
		  char *release, size_t release_len, struct half *halves, struct problems *why);
/*
 * Loads a kernel half and the module chain and checks them (relocations,
 * CRCs, imports), running none of them. runtime NULL: the half of the first
 * module's ABI (its vermagic), from abi/<abi>/ next to this executable, or
 * else the first other half whose CRCs all match, nearest ABI first
 * (runtime/README.md, "One kernel half per ABI"); symvers NULL: the
 * Module.symvers next to runtime. Returns 0 and "abi=... half=..." in used,
 * or -ENOENT (a module file is missing) or -ENOEXEC with every reason in why.
 */
int load_modules(const char *runtime, const char *symvers, const char *const *modules,
		 int n_modules, char *used, size_t used_len, struct problems *why);
/*
 * After load_modules: 0 if an entry of some module's PCI device table
 * matches the device, as the PCI core's pci_match_id would; -ENODEV and the
 * tables' sizes in why if none does.
 */
int pci_table_match(uint16_t vendor, uint16_t device, uint16_t subvendor, uint16_t subdevice,
		    uint32_t class, struct problems *why);
/*
 * After load_modules: boots the kernel half and runs every module's init.
 * params are "module.name=value" settings applied before the inits, as
 * insmod's arguments. 0, or -errno if a parameter could not be set (a
 * PARAM_FAILED line). *init_status: the first failed init's result, 0 if
 * all succeeded.
 */
int run_modules(const char *const *params, int n_params, int *init_status);
/* load_modules (its problems on stderr and a LOAD_FAILED line), then run_modules. */
int start_runtime(const char *runtime, const char *symvers, const char *const *modules,
		  int n_modules, const char *const *params, int n_params, int *init_status);
/*
 * rmmod of the chain, last module first, as delete_module() would: a
 * module with an init but no exit cannot be unloaded (-EBUSY). A PCI
 * driver's exit unregisters it, which removes the device: its remove, then
 * its managed resources (UNBOUND). Returns whether every module went.
 */
bool remove_modules(void);
/*
 * Tells gdb (JIT interface) where a loaded module's sections are, and perf
 * (/tmp/perf-PID.map) where its functions are if UNDERSTUDY_PERF_MAP is set.
 */
struct ko_module;
void debugger_register_module(const struct ko_module *m);
/* UNDERSTUDY_PERF_MAP asks for a perf map. */
bool debugger_perf_map_wanted(void);
/* In a fork of the template: the template's perf map becomes the fork's too. */
void debugger_follow_fork(pid_t parent);

/* Every event line, in both modes (main.c): run_modules installs it. */
void watch_events(const char *line);
/* Whether the driver registered its net_device (a REGISTERED event). */
bool netdev_registered(void);
/* Whether the driver added its disk (a DISK event). */
bool disk_registered(void);

/* The stand-alone run's block actions (blk_actions.c). */
void blk_actions_setup(void);
void blk_action_add(const char *option, const char *arg);
bool blk_actions_wanted(void);
bool blk_actions_run(void);

/*
 * Makes this process a post-probe template (first call) and forks a driver
 * process from it, whose control socket is child_control; the fork is the
 * daemon's child (CLONE_PARENT). Returns the fork's pid in the template,
 * 0 in the fork (which has resumed the device and announced its
 * net_device), or -errno in the template -- which, if it never became one,
 * goes on as the driver.
 */
int template_spawn(int template_control, int child_control);
bool template_taken(void);

/* Serves the host's requests on the control socket until it closes. */
int control_loop(int control_fd, int arena_fd, int rings_fd, int kick_fd, int notify_fd,
		 const char *runtime, const char *symvers);

/*
 * The sandbox (sandbox.c): prepared from the command line -- root given up
 * for `uid`:`gid` unless `keep_root` (perf reads only a map written by root
 * or by itself) -- and entered, if prepared, before the kernel world runs;
 * a process that cannot enter it dies.
 */
void sandbox_prepare(uid_t uid, gid_t gid, bool keep_root);
void sandbox_enter(void);

#endif /* UNDERSTUDY_DRIVER_H */
