// SPDX-License-Identifier: GPL-2.0
/*
 * The PCI Express side of the process's PCI function: the PCI Express
 * Capability's register accessors (drivers/pci/access.c's, through the
 * config-space accessors of pci.c), the extended capabilities, and link
 * power management (ASPM), Advanced Error Reporting and SR-IOV, which
 * belong to the host kernel.
 *
 * Stands in for Linux's drivers/pci/access.c, drivers/pci/pcie/aspm.c,
 * drivers/pci/pcie/aer.c and drivers/pci/iov.c.
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/aer.h>

#include "internal.h"

/* Called once the pci_dev exists: what the PCI core's set_pcie_port_type() caches. */
void us_pcie_init(struct pci_dev *dev)
{
	u32 header;
	u16 flags;

	spin_lock_init(&dev->pcie_cap_lock);
	dev->pcie_cap = pci_find_capability(dev, PCI_CAP_ID_EXP);
	if (!dev->pcie_cap)
		return;
	pci_read_config_word(dev, dev->pcie_cap + PCI_EXP_FLAGS, &flags);
	dev->pcie_flags_reg = flags;
	/* Extended config space, if VFIO shows it (as pci_cfg_space_size() probes it). */
	if (!pci_read_config_dword(dev, PCI_CFG_SPACE_SIZE, &header) && header != ~0U)
		dev->cfg_size = PCI_CFG_SPACE_EXP_SIZE;
}

/* The extended capability of ID cap, from the list at 0x100 of PCI Express config space. */
u16 pci_find_ext_capability(struct pci_dev *dev, int cap)
{
	int pos = PCI_CFG_SPACE_SIZE;
	int ttl = (PCI_CFG_SPACE_EXP_SIZE - PCI_CFG_SPACE_SIZE) / 8;
	u32 header;

	if (dev->cfg_size <= PCI_CFG_SPACE_SIZE)
		return 0;
	while (ttl-- > 0) {
		if (pci_read_config_dword(dev, pos, &header) || !header || header == ~0U)
			return 0;
		if (PCI_EXT_CAP_ID(header) == cap)
			return pos;
		pos = PCI_EXT_CAP_NEXT(header);
		if (pos < PCI_CFG_SPACE_SIZE)
			return 0;
	}
	return 0;
}
EXPORT_SYMBOL_GPL(pci_find_ext_capability);

/*
 * SR-IOV: virtual functions would be PCI functions of their own, which
 * only the host can create and hand out. The process's function is not a
 * physical function as far as its driver can tell (dev->is_physfn 0), and
 * the kernel's answers for such a function follow.
 */
int pci_enable_sriov(struct pci_dev *dev, int nr_virtfn)
{
	return -ENODEV;
}
EXPORT_SYMBOL_GPL(pci_enable_sriov);

void pci_disable_sriov(struct pci_dev *dev)
{
}
EXPORT_SYMBOL_GPL(pci_disable_sriov);

int pci_vfs_assigned(struct pci_dev *dev)
{
	return 0;
}
EXPORT_SYMBOL_GPL(pci_vfs_assigned);

static bool downstream_port(struct pci_dev *dev)
{
	int type = pci_pcie_type(dev);

	return type == PCI_EXP_TYPE_ROOT_PORT || type == PCI_EXP_TYPE_DOWNSTREAM ||
	       type == PCI_EXP_TYPE_PCIE_BRIDGE;
}

static bool has_link(struct pci_dev *dev)
{
	switch (pci_pcie_type(dev)) {
	case PCI_EXP_TYPE_ENDPOINT:
	case PCI_EXP_TYPE_LEG_END:
	case PCI_EXP_TYPE_ROOT_PORT:
	case PCI_EXP_TYPE_UPSTREAM:
	case PCI_EXP_TYPE_DOWNSTREAM:
	case PCI_EXP_TYPE_PCI_BRIDGE:
	case PCI_EXP_TYPE_PCIE_BRIDGE:
		return true;
	default:
		return false;
	}
}

/*
 * Whether the capability has the register at pos: which ones a function
 * has depends on its port type and the capability's version (PCIe r4.0,
 * sec 7.5.3). The others read as 0 and ignore writes.
 */
static bool implemented(struct pci_dev *dev, int pos)
{
	if (!pci_is_pcie(dev))
		return false;
	switch (pos) {
	case PCI_EXP_FLAGS:
	case PCI_EXP_DEVCAP:
	case PCI_EXP_DEVCTL:
	case PCI_EXP_DEVSTA:
		return true;
	case PCI_EXP_LNKCAP:
	case PCI_EXP_LNKCTL:
	case PCI_EXP_LNKSTA:
		return has_link(dev);
	case PCI_EXP_SLTCAP:
	case PCI_EXP_SLTCTL:
	case PCI_EXP_SLTSTA:
		return downstream_port(dev) && (pcie_caps_reg(dev) & PCI_EXP_FLAGS_SLOT);
	case PCI_EXP_RTCTL:
	case PCI_EXP_RTCAP:
	case PCI_EXP_RTSTA:
		return pci_pcie_type(dev) == PCI_EXP_TYPE_ROOT_PORT ||
		       pci_pcie_type(dev) == PCI_EXP_TYPE_RC_EC;
	case PCI_EXP_DEVCAP2:
	case PCI_EXP_DEVCTL2:
	case PCI_EXP_LNKCAP2:
	case PCI_EXP_LNKCTL2:
	case PCI_EXP_LNKSTA2:
		return (pcie_caps_reg(dev) & PCI_EXP_FLAGS_VERS) > 1;
	default:
		return false;
	}
}

/* A slot status a downstream port without a slot reports: always "present". */
static u32 absent_value(struct pci_dev *dev, int pos)
{
	if (pci_is_pcie(dev) && pos == PCI_EXP_SLTSTA && downstream_port(dev))
		return PCI_EXP_SLTSTA_PDS;
	return 0;
}

int pcie_capability_read_word(struct pci_dev *dev, int pos, u16 *val)
{
	int err;

	*val = 0;
	if (pos & 1)
		return PCIBIOS_BAD_REGISTER_NUMBER;
	if (!implemented(dev, pos)) {
		*val = absent_value(dev, pos);
		return 0;
	}
	err = pci_read_config_word(dev, pci_pcie_cap(dev) + pos, val);
	if (err)
		*val = 0;
	return err;
}
EXPORT_SYMBOL(pcie_capability_read_word);

int pcie_capability_read_dword(struct pci_dev *dev, int pos, u32 *val)
{
	int err;

	*val = 0;
	if (pos & 3)
		return PCIBIOS_BAD_REGISTER_NUMBER;
	if (!implemented(dev, pos)) {
		*val = absent_value(dev, pos);
		return 0;
	}
	err = pci_read_config_dword(dev, pci_pcie_cap(dev) + pos, val);
	if (err)
		*val = 0;
	return err;
}
EXPORT_SYMBOL(pcie_capability_read_dword);

int pcie_capability_write_word(struct pci_dev *dev, int pos, u16 val)
{
	if (pos & 1)
		return PCIBIOS_BAD_REGISTER_NUMBER;
	if (!implemented(dev, pos))
		return 0;
	return pci_write_config_word(dev, pci_pcie_cap(dev) + pos, val);
}
EXPORT_SYMBOL(pcie_capability_write_word);

int pcie_capability_write_dword(struct pci_dev *dev, int pos, u32 val)
{
	if (pos & 3)
		return PCIBIOS_BAD_REGISTER_NUMBER;
	if (!implemented(dev, pos))
		return 0;
	return pci_write_config_dword(dev, pci_pcie_cap(dev) + pos, val);
}
EXPORT_SYMBOL(pcie_capability_write_dword);

int pcie_capability_clear_and_set_word_unlocked(struct pci_dev *dev, int pos, u16 clear, u16 set)
{
	u16 v;
	int err = pcie_capability_read_word(dev, pos, &v);

	if (err)
		return err;
	return pcie_capability_write_word(dev, pos, (v & ~clear) | set);
}
EXPORT_SYMBOL(pcie_capability_clear_and_set_word_unlocked);

/* For registers that the PCI core and drivers both change (Link Control, Root Control). */
int pcie_capability_clear_and_set_word_locked(struct pci_dev *dev, int pos, u16 clear, u16 set)
{
	unsigned long flags;
	int err;

	spin_lock_irqsave(&dev->pcie_cap_lock, flags);
	err = pcie_capability_clear_and_set_word_unlocked(dev, pos, clear, set);
	spin_unlock_irqrestore(&dev->pcie_cap_lock, flags);
	return err;
}
EXPORT_SYMBOL(pcie_capability_clear_and_set_word_locked);

int pcie_capability_clear_and_set_dword(struct pci_dev *dev, int pos, u32 clear, u32 set)
{
	u32 v;
	int err = pcie_capability_read_dword(dev, pos, &v);

	if (err)
		return err;
	return pcie_capability_write_dword(dev, pos, (v & ~clear) | set);
}
EXPORT_SYMBOL(pcie_capability_clear_and_set_dword);

/*
 * ASPM is the link's power policy, set by the host kernel for the whole
 * link (both ends: this function and its upstream port, which the process
 * does not have). Here, as in a kernel built without CONFIG_PCIEASPM, there
 * is no ASPM driver to ask: returning 0 changes nothing, and a driver that
 * must have ASPM off checks Link Control itself and clears the bits in its
 * own function's config space (e1000e's __e1000e_disable_aspm() does).
 */
int pci_disable_link_state(struct pci_dev *pdev, int state)
{
	return 0;
}
EXPORT_SYMBOL(pci_disable_link_state);

int pci_disable_link_state_locked(struct pci_dev *pdev, int state)
{
	return 0;
}
EXPORT_SYMBOL(pci_disable_link_state_locked);

/*
 * AER is handled by the host kernel's port service driver on the root
 * port; error reporting is not native to this process (the kernel's
 * pcie_aer_is_native() is false), so, as the kernel does then, enabling
 * and disabling it refuse with -EIO and change nothing.
 */
int pci_enable_pcie_error_reporting(struct pci_dev *dev)
{
	return -EIO;
}
EXPORT_SYMBOL_GPL(pci_enable_pcie_error_reporting);

int pci_disable_pcie_error_reporting(struct pci_dev *dev)
{
	return -EIO;
}
EXPORT_SYMBOL_GPL(pci_disable_pcie_error_reporting);
