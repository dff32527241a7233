// SPDX-License-Identifier: GPL-2.0
/*
 * The PCI core for the one PCI function a driver process owns: its pci_dev
 * (built from the VFIO device's config space and regions), driver
 * registration, probe and remove, config space, enabling and power. Its
 * BARs and I/O are iomap.c's, its managed resources devres.c's.
 *
 * Stands in for Linux's drivers/pci/pci.c, pci-driver.c, probe.c and
 * access.c.
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/pm_wakeup.h>
#include <linux/ctype.h>

#include "internal.h"

static struct pci_dev *the_pdev;
static struct pci_bus the_bus;
/*
 * The device the function hangs off (the kernel's dev->parent, its bus's
 * bridge): the host's upstream port, which is not the process's. It stands
 * in for it, active with runtime PM disabled (the host keeps the link up
 * while the function is assigned), for drivers that look at their parent's
 * power state (e1000e's pm_runtime_suspended(dev->parent)).
 */
static struct device the_bridge;
static char the_bridge_name[16];

struct pci_dev *us_pci_dev(void)
{
	return the_pdev;
}

struct bus_type pci_bus_type = {
	.name = "pci",
};
EXPORT_SYMBOL(pci_bus_type);

const char *dev_driver_string(const struct device *dev)
{
	struct device_driver *drv = READ_ONCE(dev->driver);

	if (drv)
		return drv->name;
	if (dev->bus)
		return dev->bus->name;
	return dev->class ? dev->class->name : "";
}
EXPORT_SYMBOL(dev_driver_string);

/* Wake-up from system sleep is the host's platform policy; nothing to arm. */
int device_set_wakeup_enable(struct device *dev, bool enable)
{
	return 0;
}
EXPORT_SYMBOL(device_set_wakeup_enable);

/* ---- config space ------------------------------------------------------- */

static int config_read(int where, void *val, int len)
{
	return ddekit_pci_config_read(where, val, len) ? PCIBIOS_DEVICE_NOT_FOUND : 0;
}

static int config_write(int where, const void *val, int len)
{
	ddekit_check_gate(_RET_IP_);	/* a device write: the checker's gate applies */
	return ddekit_pci_config_write(where, val, len) ? PCIBIOS_DEVICE_NOT_FOUND : 0;
}

#define DEFINE_CONFIG_ACCESS(size, type)					\
int pci_read_config_##size(const struct pci_dev *dev, int where, type *val)	\
{										\
	int err = config_read(where, val, sizeof(type));			\
	if (err)								\
		*val = (type)~0;						\
	return err;								\
}										\
EXPORT_SYMBOL(pci_read_config_##size);						\
int pci_write_config_##size(const struct pci_dev *dev, int where, type val)	\
{										\
	return config_write(where, &val, sizeof(type));				\
}										\
EXPORT_SYMBOL(pci_write_config_##size)

DEFINE_CONFIG_ACCESS(byte, u8);
DEFINE_CONFIG_ACCESS(word, u16);
DEFINE_CONFIG_ACCESS(dword, u32);

static void update_command(u16 set, u16 clear)
{
	u16 cmd;

	pci_read_config_word(the_pdev, PCI_COMMAND, &cmd);
	pci_write_config_word(the_pdev, PCI_COMMAND, (cmd & ~clear) | set);
}

/* The capability list from the pointer at pos on: the first entry of ID cap. */
static u8 find_capability_from(struct pci_dev *dev, u8 pos, int cap)
{
	u8 id;
	int ttl = 48;	/* a looping list ends too */

	pci_read_config_byte(dev, pos, &pos);
	while (pos >= 0x40 && ttl--) {
		pos &= ~3;
		pci_read_config_byte(dev, pos + PCI_CAP_LIST_ID, &id);
		if (id == 0xff)
			break;
		if (id == cap)
			return pos;
		pci_read_config_byte(dev, pos + PCI_CAP_LIST_NEXT, &pos);
	}
	return 0;
}

u8 pci_find_capability(struct pci_dev *dev, int cap)
{
	u16 status;

	pci_read_config_word(dev, PCI_STATUS, &status);
	if (!(status & PCI_STATUS_CAP_LIST))
		return 0;
	return find_capability_from(dev, PCI_CAPABILITY_LIST, cap);
}
EXPORT_SYMBOL(pci_find_capability);

/* The next capability of ID cap after the one at pos (virtio's several vendor capabilities). */
u8 pci_find_next_capability(struct pci_dev *dev, u8 pos, int cap)
{
	return find_capability_from(dev, pos + PCI_CAP_LIST_NEXT, cap);
}
EXPORT_SYMBOL_GPL(pci_find_next_capability);

/* Whether the function still answers: a surprise removal reads all ones. */
bool pci_device_is_present(struct pci_dev *pdev)
{
	u32 v;

	return !pci_read_config_dword(pdev, PCI_VENDOR_ID, &v) && v != ~0U;
}
EXPORT_SYMBOL_GPL(pci_device_is_present);

int pcix_get_mmrbc(struct pci_dev *dev)
{
	int cap = pci_find_capability(dev, PCI_CAP_ID_PCIX);
	u32 stat;

	if (!cap)
		return -EINVAL;
	if (pci_read_config_dword(dev, cap + PCI_X_STATUS, &stat))
		return -EINVAL;
	return 512 << ((stat & PCI_X_STATUS_MAX_READ) >> 21);
}
EXPORT_SYMBOL(pcix_get_mmrbc);

int pcix_set_mmrbc(struct pci_dev *dev, int mmrbc)
{
	int cap = pci_find_capability(dev, PCI_CAP_ID_PCIX);
	u16 cmd;
	int v;

	if (mmrbc < 512 || mmrbc > 4096 || !is_power_of_2(mmrbc))
		return -EINVAL;
	if (!cap || pci_read_config_word(dev, cap + PCI_X_CMD, &cmd))
		return -EINVAL;
	v = ffs(mmrbc) - 10;
	cmd = (cmd & ~PCI_X_CMD_MAX_READ) | v << 2;
	return pci_write_config_word(dev, cap + PCI_X_CMD, cmd) ? -EIO : 0;
}
EXPORT_SYMBOL(pcix_set_mmrbc);

/* ---- enabling, power, state --------------------------------------------- */

static int enable(struct pci_dev *dev, unsigned long flags)
{
	u16 set = 0;

	for (int i = 0; i < PCI_STD_NUM_BARS; i++) {
		if (dev->resource[i].flags & flags & IORESOURCE_IO)
			set |= PCI_COMMAND_IO;
		if (dev->resource[i].flags & flags & IORESOURCE_MEM)
			set |= PCI_COMMAND_MEMORY;
	}
	update_command(set, 0);
	atomic_inc(&dev->enable_cnt);
	dev->current_state = PCI_D0;
	return 0;
}

int pci_enable_device(struct pci_dev *dev)
{
	return enable(dev, IORESOURCE_MEM | IORESOURCE_IO);
}
EXPORT_SYMBOL(pci_enable_device);

int pci_enable_device_mem(struct pci_dev *dev)
{
	return enable(dev, IORESOURCE_MEM);
}
EXPORT_SYMBOL(pci_enable_device_mem);

void pci_disable_device(struct pci_dev *dev)
{
	if (atomic_dec_return(&dev->enable_cnt) == 0) {
		update_command(0, PCI_COMMAND_MASTER);
		dev->is_busmaster = 0;
	}
}
EXPORT_SYMBOL(pci_disable_device);

void pci_set_master(struct pci_dev *dev)
{
	update_command(PCI_COMMAND_MASTER, 0);
	dev->is_busmaster = 1;
}
EXPORT_SYMBOL(pci_set_master);

void pci_clear_master(struct pci_dev *dev)
{
	update_command(0, PCI_COMMAND_MASTER);
	dev->is_busmaster = 0;
}
EXPORT_SYMBOL(pci_clear_master);

int pci_set_mwi(struct pci_dev *dev)
{
	update_command(PCI_COMMAND_INVALIDATE, 0);
	return 0;
}
EXPORT_SYMBOL(pci_set_mwi);

void pci_clear_mwi(struct pci_dev *dev)
{
	update_command(0, PCI_COMMAND_INVALIDATE);
}
EXPORT_SYMBOL(pci_clear_mwi);

int pci_set_power_state(struct pci_dev *dev, pci_power_t state)
{
	u16 pmcsr;

	if (state < PCI_D0 || state > PCI_D3hot)
		return -EINVAL;
	if (!dev->pm_cap) {
		dev->current_state = PCI_D0;
		return state == PCI_D0 ? 0 : -EIO;
	}
	pci_read_config_word(dev, dev->pm_cap + PCI_PM_CTRL, &pmcsr);
	pmcsr = (pmcsr & ~PCI_PM_CTRL_STATE_MASK) | state;
	pci_write_config_word(dev, dev->pm_cap + PCI_PM_CTRL, pmcsr);
	dev->current_state = state;
	return 0;
}
EXPORT_SYMBOL(pci_set_power_state);

/* PME wake-up arms the platform for system sleep, which is the host's. */
int pci_enable_wake(struct pci_dev *dev, pci_power_t state, bool enable)
{
	return 0;
}
EXPORT_SYMBOL(pci_enable_wake);

int pci_wake_from_d3(struct pci_dev *dev, bool enable)
{
	return 0;
}
EXPORT_SYMBOL(pci_wake_from_d3);

/* PME and sleep states are system power management, which the host owns. */
int pci_prepare_to_sleep(struct pci_dev *dev)
{
	return 0;
}
EXPORT_SYMBOL(pci_prepare_to_sleep);

void pci_pme_active(struct pci_dev *dev, bool enable)
{
}
EXPORT_SYMBOL(pci_pme_active);

int pci_save_state(struct pci_dev *dev)
{
	for (int i = 0; i < 16; i++)
		pci_read_config_dword(dev, i * 4, &dev->saved_config_space[i]);
	dev->state_saved = true;
	return 0;
}
EXPORT_SYMBOL(pci_save_state);

void pci_restore_state(struct pci_dev *dev)
{
	if (!dev->state_saved)
		return;
	/* Header fields after the command/status word, then the command. */
	for (int i = 15; i >= 2; i--)
		pci_write_config_dword(dev, i * 4, dev->saved_config_space[i]);
	pci_write_config_word(dev, PCI_COMMAND, dev->saved_config_space[1] & 0xffff);
	dev->state_saved = false;
}
EXPORT_SYMBOL(pci_restore_state);

/* ---- the device and its driver ------------------------------------------ */

/* "dddd:bb:ss.f" */
static int parse_pci_name(const char *s, unsigned int *domain, unsigned int *bus,
			  unsigned int *slot, unsigned int *fn)
{
	unsigned int *fields[] = { domain, bus, slot, fn };
	const char seps[] = { ':', ':', '.', '\0' };

	for (int i = 0; i < ARRAY_SIZE(fields); i++) {
		int digits = 0;

		for (*fields[i] = 0; isxdigit(*s); s++, digits++)
			*fields[i] = *fields[i] * 16 + hex_to_bin(*s);
		if (!digits || *s != seps[i])
			return -EINVAL;
		s++;
	}
	return 0;
}

int us_pci_init(void)
{
	struct pci_dev *pdev;
	unsigned int domain, bus, slot, fn;
	u32 class_rev;

	if (!ddekit_pci_present())
		return 0;
	pdev = kzalloc(sizeof(*pdev), GFP_KERNEL);
	if (!pdev)
		return -ENOMEM;
	if (parse_pci_name(ddekit_pci_name(), &domain, &bus, &slot, &fn))
		return -EINVAL;
	the_bus.number = bus;
	INIT_LIST_HEAD(&the_bus.devices);
	snprintf(the_bridge_name, sizeof(the_bridge_name), "pci%04x:%02x", domain, bus);
	the_bridge.kobj.name = the_bridge_name;
	us_pm_init(&the_bridge);
	the_bus.bridge = &the_bridge;
	pdev->bus = &the_bus;
	pdev->devfn = PCI_DEVFN(slot, fn);
	pci_read_config_word(pdev, PCI_VENDOR_ID, &pdev->vendor);
	pci_read_config_word(pdev, PCI_DEVICE_ID, &pdev->device);
	pci_read_config_word(pdev, PCI_SUBSYSTEM_VENDOR_ID, &pdev->subsystem_vendor);
	pci_read_config_word(pdev, PCI_SUBSYSTEM_ID, &pdev->subsystem_device);
	pci_read_config_dword(pdev, PCI_CLASS_REVISION, &class_rev);
	pdev->class = class_rev >> 8;
	pdev->revision = class_rev & 0xff;
	pci_read_config_byte(pdev, PCI_HEADER_TYPE, &pdev->hdr_type);
	pdev->hdr_type &= 0x7f;
	pdev->cfg_size = PCI_CFG_SPACE_SIZE;
	pdev->current_state = PCI_D0;
	/* Not 0: pci_channel_offline() would call the device gone (e1000's stats). */
	pdev->error_state = pci_channel_io_normal;
	pdev->pm_cap = pci_find_capability(pdev, PCI_CAP_ID_PM);
	us_pcie_init(pdev);
	/* A name for request_irq(); the interrupt itself is VFIO's INTx (irq.c). */
	pdev->irq = US_INTX_IRQ;
	/* What MSI and MSI-X look for, as the PCI core's pci_msi_init() finds them. */
	pdev->msi_cap = pci_find_capability(pdev, PCI_CAP_ID_MSI);
	pdev->msix_cap = pci_find_capability(pdev, PCI_CAP_ID_MSIX);
	pdev->dma_mask = DMA_BIT_MASK(32);
	pdev->dev.dma_mask = &pdev->dma_mask;
	pdev->dev.coherent_dma_mask = DMA_BIT_MASK(32);
	pdev->dev.bus = &pci_bus_type;
	pdev->dev.parent = &the_bridge;
	pdev->dev.kobj.name = kstrdup(ddekit_pci_name(), GFP_KERNEL);
	/* Its references, lock and managed resources (bus.c); held by the process for good. */
	device_initialize(&pdev->dev);
	for (int i = 0; i < PCI_STD_NUM_BARS; i++) {
		struct resource *r = &pdev->resource[i];
		unsigned long long start, size;
		unsigned int flags;

		if (ddekit_pci_bar(i, &start, &size, &flags) || !size)
			continue;
		r->name = pdev->dev.kobj.name;
		r->start = start;
		r->end = start + size - 1;
		r->flags = flags & DDEKIT_BAR_IO ? IORESOURCE_IO : IORESOURCE_MEM;
		if (flags & DDEKIT_BAR_64BIT)
			r->flags |= IORESOURCE_MEM_64;
		if (flags & DDEKIT_BAR_PREFETCH)
			r->flags |= IORESOURCE_PREFETCH;
	}
	the_pdev = pdev;
	return 0;
}

static const struct pci_device_id *match_id(const struct pci_device_id *ids,
					    const struct pci_dev *dev)
{
	for (; ids->vendor || ids->subvendor || ids->class_mask; ids++) {
		if ((ids->vendor == PCI_ANY_ID || ids->vendor == dev->vendor) &&
		    (ids->device == PCI_ANY_ID || ids->device == dev->device) &&
		    (ids->subvendor == PCI_ANY_ID || ids->subvendor == dev->subsystem_vendor) &&
		    (ids->subdevice == PCI_ANY_ID || ids->subdevice == dev->subsystem_device) &&
		    !((ids->class ^ dev->class) & ids->class_mask))
			return ids;
	}
	return NULL;
}

/*
 * Whether a device matching ids is present. The process knows one device,
 * its own: drivers ask this about other devices of the machine for their
 * quirks (tulip: the Intel Saturn and SiS 496 host bridges of 486 boards,
 * which need a shorter burst), and a driver process sees none of them.
 */
int pci_dev_present(const struct pci_device_id *ids)
{
	return the_pdev && match_id(ids, the_pdev);
}
EXPORT_SYMBOL(pci_dev_present);

/*
 * The driver detached, its probe failed or its remove ran: its managed
 * resources are released, newest first, as the driver core's
 * device_unbind_cleanup() does. What it still has mapped for the device or
 * allocated coherent after that has leaked, which the checker is told
 * (docs/checking.md, "The trace": STOP). UNBOUND says how many managed
 * resources there were.
 */
static void unbind_cleanup(struct pci_dev *pdev)
{
	char event[96];
	int released = devres_release_all(&pdev->dev);

	snprintf(event, sizeof(event), "UNBOUND driver=%s device=%04x:%04x released=%d",
		 pdev->dev.driver->name, pdev->vendor, pdev->device, released);
	pdev->dev.driver = NULL;
	us_trace(US_EV_STOP, 0, pdev, US_STOP_DETACH, 0);
	ddekit_event(event);
}

/*
 * Registering the driver probes the process's device if the driver claims
 * it, as driver core would. The probe's result is reported as an event, and
 * registration itself succeeds either way, as in the kernel.
 */
int __pci_register_driver(struct pci_driver *drv, struct module *owner, const char *mod_name)
{
	const struct pci_device_id *id;
	char event[96];
	int ret;

	drv->driver.name = drv->name;
	drv->driver.owner = owner;
	drv->driver.mod_name = mod_name;
	drv->driver.bus = &pci_bus_type;
	if (!the_pdev || the_pdev->dev.driver || !drv->id_table)
		return 0;
	id = match_id(drv->id_table, the_pdev);
	if (!id)
		return 0;
	the_pdev->dev.driver = &drv->driver;
	ret = drv->probe(the_pdev, id);
	if (ret)
		unbind_cleanup(the_pdev);
	snprintf(event, sizeof(event), "PROBE driver=%s device=%04x:%04x result=%d",
		 drv->name, the_pdev->vendor, the_pdev->device, ret);
	ddekit_event(event);
	return 0;
}
EXPORT_SYMBOL(__pci_register_driver);

static struct pci_driver *bound_driver(void)
{
	return the_pdev && the_pdev->dev.driver ? to_pci_driver(the_pdev->dev.driver) : NULL;
}

bool us_pci_can_resume(void)
{
	struct pci_driver *drv = bound_driver();

	return drv && ((drv->driver.pm && drv->driver.pm->resume) || drv->resume);
}

/*
 * The PCI core's half of suspend and resume, which a template stands in
 * for: the config space as probe left it (command register, BARs, cache
 * line, interrupt line) is saved when the template is taken, and written
 * back in each fork before the driver's resume callback runs. The daemon's
 * reset cleared it, and drivers such as pcnet32, whose resume only reopens
 * the interface, leave restoring it to the core, as the kernel's
 * pci_pm_resume_noirq() does.
 */
void us_pci_save_for_resume(void)
{
	pci_save_state(the_pdev);
}

int us_pci_resume(void)
{
	struct pci_driver *drv = bound_driver();

	if (!drv)
		return -ENODEV;
	pci_restore_state(the_pdev);
	if (drv->driver.pm && drv->driver.pm->resume)
		return drv->driver.pm->resume(&the_pdev->dev);
	if (drv->resume)
		return drv->resume(the_pdev);
	return -EOPNOTSUPP;
}

void pci_unregister_driver(struct pci_driver *drv)
{
	if (the_pdev && the_pdev->dev.driver == &drv->driver) {
		if (drv->remove)
			drv->remove(the_pdev);
		unbind_cleanup(the_pdev);
	}
}
EXPORT_SYMBOL(pci_unregister_driver);
