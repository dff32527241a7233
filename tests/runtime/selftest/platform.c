// SPDX-License-Identifier: GPL-2.0
/*
 * What the runtime has in place of the machine a driver would run on:
 * time (runtime/kernel/time.c), and the CPU description, MSI, runtime PM,
 * latency QoS, PTP clocks, RSS key and user copies a driver such as
 * e1000e asks for (cpuinfo.c, msi.c, pm.c, ptp.c, netdev.c, uaccess.c).
 * Runtime PM is tried on a device of the test's own set up as pm.c sets
 * up the process's PCI function; pcie.c's accessors need that function
 * and run in the lab (e1000e, tests/runtime/test_nic_lab.py).
 */
#include <linux/device.h>
#include <linux/interrupt.h>
#include <linux/ktime.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/pm_qos.h>
#include <linux/pm_runtime.h>
#include <linux/ptp_clock_kernel.h>
#include <linux/timecounter.h>
#include <linux/uaccess.h>
#include <asm/processor.h>

#include "selftest.h"

static u64 counter;

static u64 read_counter(const struct cyclecounter *cc)
{
	return counter;
}

void test_time(void)
{
	/* 1.5 ns per cycle; a 32-bit counter. */
	struct cyclecounter cc = { .read = read_counter, .mask = CYCLECOUNTER_MASK(32),
				   .mult = 3, .shift = 1 };
	struct timecounter tc;
	struct timespec64 ts;
	u64 mono, real;

	ts = ns_to_timespec64(3 * NSEC_PER_SEC + 7);
	CHECK(ts.tv_sec == 3 && ts.tv_nsec == 7);
	ts = ns_to_timespec64(0);
	CHECK(ts.tv_sec == 0 && ts.tv_nsec == 0);
	ts = ns_to_timespec64(-1);	/* one nanosecond before the epoch */
	CHECK(ts.tv_sec == -1 && ts.tv_nsec == NSEC_PER_SEC - 1);
	ts = ns_to_timespec64(-(s64)NSEC_PER_SEC);
	CHECK(ts.tv_sec == -1 && ts.tv_nsec == 0);

	counter = 100;
	timecounter_init(&tc, &cc, 1000);
	CHECK(tc.cycle_last == 100 && tc.nsec == 1000);
	counter = 110;
	CHECK(timecounter_read(&tc) == 1015);
	counter = 111;			/* 1.5 ns: 1 now, the half kept */
	CHECK(timecounter_read(&tc) == 1016);
	counter = 112;			/* and added to the next */
	CHECK(timecounter_read(&tc) == 1018);
	counter = 0xfffffffe;
	timecounter_init(&tc, &cc, 0);
	counter = 2;			/* wrapped: 4 cycles */
	CHECK(timecounter_read(&tc) == 6);
	CHECK(timecounter_cyc2time(&tc, 6) == 12);	/* after the last read */
	CHECK(timecounter_cyc2time(&tc, 0xfffffffe) == 0);	/* before it, across the wrap */
	CHECK(tc.nsec == 6);		/* cyc2time changes nothing */

	/* The wall clock is the host's: well after 2020, ahead of the monotonic one. */
	mono = ktime_get_ns();
	real = ktime_get_real_ns();
	CHECK(real > 1577836800ULL * NSEC_PER_SEC && real > mono);
	ktime_get_real_ts64(&ts);
	CHECK(timespec64_to_ns(&ts) >= real && timespec64_to_ns(&ts) - real < 5 * NSEC_PER_SEC);
	CHECK(ktime_get_boottime_ns() >= mono);
	CHECK(ktime_get_clocktai_ns() >= real);
}

static irqreturn_t unclaimed(int irq, void *dev_id)
{
	return IRQ_NONE;
}

void test_platform(void)
{
	static struct device dev;	/* static: too big for the stack */
	static struct pci_dev pdev;
	struct msix_entry entries[3] = {};
	struct pm_qos_request req = {};
	u8 key[NETDEV_RSS_KEY_LEN], again[NETDEV_RSS_KEY_LEN], zero[NETDEV_RSS_KEY_LEN] = {};
	char from[8] = "ioctl", to[8] = {};
	u16 v = 0xffff;

	/* The CPU as CPUID says, without the features only the kernel's own setup derives. */
	CHECK(boot_cpu_data.x86_vendor_id[0] && boot_cpu_data.x86 >= 6);
	CHECK(boot_cpu_has(X86_FEATURE_FPU) && boot_cpu_has(X86_FEATURE_TSC));
	CHECK(!boot_cpu_has(X86_FEATURE_ART));
	CHECK(boot_cpu_data.x86_clflush_size >= 32 && cache_line_size() >= 32);

	/*
	 * A function without the MSI and MSI-X capabilities: refused as the PCI
	 * core refuses it, so the driver falls back to its legacy line, which
	 * pci_alloc_irq_vectors gives when one vector will do. (VFIO's vectors
	 * run in the lab: e1000e, tests/runtime/test_nic_lab.py.)
	 */
	CHECK(pci_enable_msi(&pdev) == -EINVAL);
	CHECK(pci_enable_msix_range(&pdev, entries, 1, 3) == -EINVAL);
	CHECK(pci_enable_msix_range(&pdev, entries, 3, 1) == -ERANGE);
	CHECK(pci_alloc_irq_vectors(&pdev, 1, 3, PCI_IRQ_LEGACY) == -ENOSPC);	/* no line */
	pdev.irq = 16;
	CHECK(pci_alloc_irq_vectors(&pdev, 2, 3, PCI_IRQ_ALL_TYPES) == -EINVAL);
	CHECK(pci_alloc_irq_vectors(&pdev, 1, 3, PCI_IRQ_ALL_TYPES | PCI_IRQ_AFFINITY) == 1);
	CHECK(pci_irq_vector(&pdev, 0) == 16 && pci_irq_vector(&pdev, 1) == -EINVAL);
	CHECK(!pdev.msi_enabled && !pdev.msix_enabled);
	pci_free_irq_vectors(&pdev);
	pci_disable_msix(&pdev);
	pci_disable_msi(&pdev);
	/* No vector is enabled, so none can be requested; an unknown irq has no line. */
	CHECK(request_irq(32, unclaimed, 0, "none", &pdev) == -EINVAL);
	CHECK(request_irq(5, unclaimed, 0, "none", &pdev) == -EINVAL);
	CHECK(irq_set_affinity_hint(16, NULL) == 0);	/* one CPU: nothing to move */
	/* Not a PCI Express function: the capability's registers read as 0. */
	CHECK(pcie_capability_read_word(&pdev, PCI_EXP_LNKCTL, &v) == 0 && v == 0);

	/* Runtime PM disabled, device active: resumes say "already", suspends are refused. */
	dev.power.disable_depth = 1;
	dev.power.runtime_status = RPM_ACTIVE;
	spin_lock_init(&dev.power.lock);
	CHECK(pm_runtime_get_sync(&dev) == 1);
	CHECK(atomic_read(&dev.power.usage_count) == 1);
	CHECK(pm_runtime_put(&dev) == -EACCES);
	CHECK(atomic_read(&dev.power.usage_count) == 0);
	CHECK(pm_schedule_suspend(&dev, 5000) == -EACCES);
	CHECK(pm_runtime_active(&dev) && !pm_runtime_suspended(&dev));

	cpu_latency_qos_add_request(&req, PM_QOS_DEFAULT_VALUE);
	CHECK(req.qos);
	cpu_latency_qos_update_request(&req, 55);
	cpu_latency_qos_remove_request(&req);
	CHECK(!req.qos);

	/* No PTP clocks, as without CONFIG_PTP_1588_CLOCK. */
	CHECK(ptp_clock_register(NULL, &dev) == NULL && ptp_clock_index(NULL) == -1);

	/* One random key for everyone. */
	netdev_rss_key_fill(key, sizeof(key));
	netdev_rss_key_fill(again, 10);
	CHECK(memcmp(key, zero, sizeof(key)) && !memcmp(key, again, 10));

	CHECK(copy_to_user((void __user *)to, from, sizeof(from)) == 0 && !strcmp(to, "ioctl"));
	memset(to, 0, sizeof(to));
	CHECK(copy_from_user(to, (const void __user *)from, sizeof(from)) == 0 &&
	      !strcmp(to, "ioctl"));
}
