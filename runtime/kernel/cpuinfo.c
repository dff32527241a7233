// SPDX-License-Identifier: GPL-2.0
/*
 * boot_cpu_data, the kernel's description of the CPU, filled from CPUID
 * as the kernel's early identification does for the words that are CPUID
 * registers verbatim. The Linux-defined words (scattered and synthetic
 * features such as X86_FEATURE_ART, which the kernel derives from its own
 * setup and calibration) stay clear: the runtime derives none of them, so
 * it claims none of them, and a driver takes the path for a CPU without.
 * And the platform's: no confidential computing.
 *
 * Stands in for Linux's arch/x86/kernel/cpu/common.c and
 * arch/x86/coco/core.c.
 */
#include <linux/module.h>
#include <linux/cc_platform.h>
#include <asm/processor.h>
#include <asm/cpufeature.h>
#include <xen/xen.h>

#include "internal.h"

struct cpuinfo_x86 boot_cpu_data __read_mostly;
EXPORT_SYMBOL(boot_cpu_data);

/* The instruction itself (cpuid() would go through paravirt ops, which a process has not). */
static void leaf(unsigned int op, unsigned int count, unsigned int *eax, unsigned int *ebx,
		 unsigned int *ecx, unsigned int *edx)
{
	*eax = op;
	*ecx = count;
	native_cpuid(eax, ebx, ecx, edx);
}

static void vendor(struct cpuinfo_x86 *c)
{
	static const struct { const char *id; u8 vendor; } known[] = {
		{ "GenuineIntel", X86_VENDOR_INTEL },
		{ "AuthenticAMD", X86_VENDOR_AMD },
		{ "HygonGenuine", X86_VENDOR_HYGON },
		{ "CentaurHauls", X86_VENDOR_CENTAUR },
		{ "  Shanghai  ", X86_VENDOR_ZHAOXIN },
	};

	c->x86_vendor = X86_VENDOR_UNKNOWN;
	for (int i = 0; i < ARRAY_SIZE(known); i++)
		if (!strcmp(c->x86_vendor_id, known[i].id))
			c->x86_vendor = known[i].vendor;
}

void us_cpuinfo_init(void)
{
	struct cpuinfo_x86 *c = &boot_cpu_data;
	unsigned int eax, ebx, ecx, edx;

	leaf(0, 0, &eax, &ebx, &ecx, &edx);
	c->cpuid_level = eax;
	memcpy(c->x86_vendor_id + 0, &ebx, 4);
	memcpy(c->x86_vendor_id + 4, &edx, 4);
	memcpy(c->x86_vendor_id + 8, &ecx, 4);
	vendor(c);
	c->x86_clflush_size = 64;
	c->x86_cache_alignment = 64;
	if (c->cpuid_level >= 1) {
		leaf(1, 0, &eax, &ebx, &ecx, &edx);
		/* Family, model and stepping, with the extended fields where they count. */
		c->x86 = (eax >> 8) & 0xf;
		c->x86_model = (eax >> 4) & 0xf;
		c->x86_stepping = eax & 0xf;
		if (c->x86 == 0xf)
			c->x86 += (eax >> 20) & 0xff;
		if (c->x86 >= 6)
			c->x86_model += ((eax >> 16) & 0xf) << 4;
		c->x86_capability[CPUID_1_EDX] = edx;
		c->x86_capability[CPUID_1_ECX] = ecx;
		if (edx & (1 << 19))	/* CLFSH: the line size is in EBX[15:8], in quadwords */
			c->x86_clflush_size = ((ebx >> 8) & 0xff) * 8;
		c->x86_cache_alignment = c->x86_clflush_size;
	}
	if (c->cpuid_level >= 7) {
		leaf(7, 0, &eax, &ebx, &ecx, &edx);
		c->x86_capability[CPUID_7_0_EBX] = ebx;
		c->x86_capability[CPUID_7_ECX] = ecx;
		c->x86_capability[CPUID_7_EDX] = edx;
	}
	leaf(0x80000000, 0, &eax, &ebx, &ecx, &edx);
	c->extended_cpuid_level = eax;
	if (c->extended_cpuid_level >= 0x80000001) {
		leaf(0x80000001, 0, &eax, &ebx, &ecx, &edx);
		c->x86_capability[CPUID_8000_0001_ECX] = ecx;
		c->x86_capability[CPUID_8000_0001_EDX] = edx;
	}
	if (c->extended_cpuid_level >= 0x80000004) {
		unsigned int *v = (unsigned int *)c->x86_model_id;

		for (int i = 0; i < 3; i++)
			leaf(0x80000002 + i, 0, &v[4 * i], &v[4 * i + 1], &v[4 * i + 2], &v[4 * i + 3]);
		c->x86_model_id[48] = 0;
	}
	c->x86_phys_bits = 36;
	c->x86_virt_bits = 48;
	if (c->extended_cpuid_level >= 0x80000008) {
		leaf(0x80000008, 0, &eax, &ebx, &ecx, &edx);
		c->x86_phys_bits = eax & 0xff;
		c->x86_virt_bits = (eax >> 8) & 0xff;
	}
	c->x86_max_cores = 1;
	c->initialized = 1;
}

/*
 * Confidential computing (SEV, TDX): a driver process is an ordinary
 * process, whatever the machine, so no attribute holds. x86's string port
 * I/O helpers ask, inlined into modules such as ne2k-pci: a SEV guest must
 * unroll `rep insw`, which its hypervisor cannot emulate.
 */
bool cc_platform_has(enum cc_attr attr)
{
	return false;
}
EXPORT_SYMBOL_GPL(cc_platform_has);

/* Nor is it a Xen domain, whose grant-table DMA virtio_ring would otherwise use. */
enum xen_domain_type xen_domain_type = XEN_NATIVE;
EXPORT_SYMBOL_GPL(xen_domain_type);
