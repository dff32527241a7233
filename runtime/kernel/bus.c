// SPDX-License-Identifier: GPL-2.0
/*
 * The driver model for buses other than PCI (docs/design.md §3, "The
 * driver model"): a bus keeps its devices and drivers, and whenever one of
 * them is added it is matched against the others with the bus's match()
 * and bound through the bus's (or driver's) probe(), as the driver core's
 * bus_probe_device() and driver_attach() do. virtio is such a bus: the PCI
 * driver virtio_pci registers a virtio device on it, and virtio_net's
 * virtio driver binds to that device.
 *
 * The process's PCI function is not on a bus list: pci.c binds it to the
 * one PCI driver that claims it. Its struct device is initialised here all
 * the same, so that reference counting and managed resources work on it.
 *
 * Everything runs on the one kernel CPU (docs/design.md §6): registering
 * and removing happen from module init and exit, under the CPU lock, so
 * the lists need no lock of their own.
 *
 * Stands in for Linux's drivers/base/bus.c, driver.c and core.c.
 */
#include <linux/module.h>
#include <linux/device.h>
#include <linux/device/bus.h>
#include <linux/kobject.h>
#include <linux/slab.h>

#include "internal.h"

/* What the driver core keeps private (drivers/base/base.h): only the lists. */
struct subsys_private {
	struct list_head devices;	/* device_private.bus_node */
	struct list_head drivers;	/* driver_private.bus_node */
};

struct device_private {
	struct list_head bus_node;
	struct device *device;
};

struct driver_private {
	struct list_head bus_node;
	struct device_driver *driver;
};

int bus_register(struct bus_type *bus)
{
	struct subsys_private *p = kzalloc(sizeof(*p), GFP_KERNEL);

	if (!p)
		return -ENOMEM;
	INIT_LIST_HEAD(&p->devices);
	INIT_LIST_HEAD(&p->drivers);
	bus->p = p;
	return 0;
}
EXPORT_SYMBOL_GPL(bus_register);

/* Its devices and drivers have gone first: their modules' exits ran before the bus's. */
void bus_unregister(struct bus_type *bus)
{
	if (!list_empty(&bus->p->devices) || !list_empty(&bus->p->drivers))
		pr_warn("bus %s unregistered with devices or drivers on it\n", bus->name);
	kfree(bus->p);
	bus->p = NULL;
}
EXPORT_SYMBOL_GPL(bus_unregister);

/* ---- binding ------------------------------------------------------------ */

/*
 * The driver left dev (probe failed, remove ran): its managed resources go,
 * newest first, as device_unbind_cleanup() does.
 */
static void unbind_cleanup(struct device *dev, const char *driver)
{
	char event[128];
	int released = devres_release_all(dev);

	dev->driver = NULL;
	snprintf(event, sizeof(event), "UNBOUND driver=%s device=%s bus=%s released=%d",
		 driver, dev_name(dev), dev->bus->name, released);
	ddekit_event(event);
}

/*
 * really_probe(): the bus's probe if it has one (virtio's checks features
 * and then calls the driver's), else the driver's. A PROBE event says how
 * it went, as for the PCI function.
 */
static int probe(struct device *dev, struct device_driver *drv)
{
	char event[128];
	int ret;

	dev->driver = drv;
	if (dev->bus->probe)
		ret = dev->bus->probe(dev);
	else
		ret = drv->probe ? drv->probe(dev) : 0;
	if (ret)
		unbind_cleanup(dev, drv->name);
	snprintf(event, sizeof(event), "PROBE driver=%s device=%s bus=%s result=%d",
		 drv->name, dev_name(dev), dev->bus->name, ret);
	ddekit_event(event);
	return ret;
}

/* A match of 0 is no match; a negative one (-EPROBE_DEFER) nothing here can satisfy later. */
static bool matches(struct device *dev, struct device_driver *drv)
{
	return !dev->bus->match || dev->bus->match(dev, drv) > 0;
}

static void unbind(struct device *dev)
{
	struct device_driver *drv = dev->driver;

	if (!drv)
		return;
	if (dev->bus->remove)
		dev->bus->remove(dev);
	else if (drv->remove)
		drv->remove(dev);
	unbind_cleanup(dev, drv->name);
}

/* ---- drivers ------------------------------------------------------------ */

int driver_register(struct device_driver *drv)
{
	struct bus_type *bus = drv->bus;
	struct driver_private *p;
	struct device_private *d;

	if (!bus || !bus->p) {
		pr_err("driver %s: its bus is not registered\n", drv->name);
		return -EINVAL;
	}
	p = kzalloc(sizeof(*p), GFP_KERNEL);
	if (!p)
		return -ENOMEM;
	p->driver = drv;
	drv->p = p;
	list_add_tail(&p->bus_node, &bus->p->drivers);
	/* driver_attach(): every device still without a driver that it claims. */
	list_for_each_entry(d, &bus->p->devices, bus_node)
		if (!d->device->driver && matches(d->device, drv))
			probe(d->device, drv);
	return 0;
}
EXPORT_SYMBOL_GPL(driver_register);

void driver_unregister(struct device_driver *drv)
{
	struct device_private *d;

	if (!drv->p)
		return;
	list_for_each_entry(d, &drv->bus->p->devices, bus_node)
		if (d->device->driver == drv)
			unbind(d->device);
	list_del(&drv->p->bus_node);
	kfree(drv->p);
	drv->p = NULL;
}
EXPORT_SYMBOL_GPL(driver_unregister);

/* ---- devices ------------------------------------------------------------ */

void device_initialize(struct device *dev)
{
	kref_init(&dev->kobj.kref);
	INIT_LIST_HEAD(&dev->devres_head);
	spin_lock_init(&dev->devres_lock);
	mutex_init(&dev->mutex);
	us_pm_init(dev);
}
EXPORT_SYMBOL_GPL(device_initialize);

/* The name is the device's own allocation, freed with the device (release()). */
int dev_set_name(struct device *dev, const char *fmt, ...)
{
	va_list args;
	char *name;
	int len;

	va_start(args, fmt);
	len = vsnprintf(NULL, 0, fmt, args);
	va_end(args);
	name = kmalloc(len + 1, GFP_KERNEL);
	if (!name)
		return -ENOMEM;
	va_start(args, fmt);
	vsnprintf(name, len + 1, fmt, args);
	va_end(args);
	kfree(dev->kobj.name);
	dev->kobj.name = name;
	return 0;
}
EXPORT_SYMBOL_GPL(dev_set_name);

/* The name device_add() gives: init_name if set, else the bus's dev_name and the id. */
static int name_device(struct device *dev)
{
	if (dev->init_name) {
		int err = dev_set_name(dev, "%s", dev->init_name);

		dev->init_name = NULL;
		return err;
	}
	if (!dev_name(dev) && dev->bus && dev->bus->dev_name)
		return dev_set_name(dev, "%s%u", dev->bus->dev_name, dev->id);
	return dev_name(dev) ? 0 : -EINVAL;
}

/* device_add() then bus_probe_device(): the first registered driver that claims it. */
int device_add(struct device *dev)
{
	struct device_private *p;
	struct driver_private *drv;
	int err;

	dev = get_device(dev);
	if (!dev)
		return -EINVAL;
	err = name_device(dev);
	if (err)
		goto fail;
	if (!dev->bus)
		return 0;
	if (!dev->bus->p) {
		err = -EINVAL;
		goto fail;
	}
	p = kzalloc(sizeof(*p), GFP_KERNEL);
	if (!p) {
		err = -ENOMEM;
		goto fail;
	}
	p->device = dev;
	dev->p = p;
	list_add_tail(&p->bus_node, &dev->bus->p->devices);
	list_for_each_entry(drv, &dev->bus->p->drivers, bus_node) {
		if (matches(dev, drv->driver)) {
			probe(dev, drv->driver);
			break;
		}
	}
	return 0;
fail:
	put_device(dev);
	return err;
}
EXPORT_SYMBOL_GPL(device_add);

int device_register(struct device *dev)
{
	device_initialize(dev);
	return device_add(dev);
}
EXPORT_SYMBOL_GPL(device_register);

/* Unbinds it and takes it off its bus; the reference device_add took goes. */
void device_del(struct device *dev)
{
	unbind(dev);
	if (dev->p) {
		list_del(&dev->p->bus_node);
		kfree(dev->p);
		dev->p = NULL;
	}
	put_device(dev);
}
EXPORT_SYMBOL_GPL(device_del);

void device_unregister(struct device *dev)
{
	device_del(dev);
	put_device(dev);
}
EXPORT_SYMBOL_GPL(device_unregister);

/* ---- references --------------------------------------------------------- */

struct device *get_device(struct device *dev)
{
	if (dev)
		kref_get(&dev->kobj.kref);
	return dev;
}
EXPORT_SYMBOL_GPL(get_device);

/*
 * The last reference: the device's release, from the device, its type or
 * its class, as device_release() looks for it. One without any is a bug
 * the kernel warns about too (the memory would leak).
 */
static void release(struct kref *kref)
{
	struct device *dev = container_of(kref, struct device, kobj.kref);
	const char *name = dev->kobj.name;

	if (dev->release)
		dev->release(dev);
	else if (dev->type && dev->type->release)
		dev->type->release(dev);
	else if (dev->class && dev->class->dev_release)
		dev->class->dev_release(dev);
	else
		WARN(1, "device '%s' has no release() function\n", name);
	kfree(name);
}

void put_device(struct device *dev)
{
	if (dev)
		kref_put(&dev->kobj.kref, release);
}
EXPORT_SYMBOL_GPL(put_device);

/*
 * A bus's uevent() adds its variables (virtio's MODALIAS) with this. There
 * is no udev in a driver process, but the environment is built as the
 * kernel builds it, so a bus callback sees the same limits.
 */
int add_uevent_var(struct kobj_uevent_env *env, const char *format, ...)
{
	va_list args;
	int len;

	if (env->envp_idx >= ARRAY_SIZE(env->envp))
		return -ENOMEM;
	va_start(args, format);
	len = vsnprintf(&env->buf[env->buflen], sizeof(env->buf) - env->buflen, format, args);
	va_end(args);
	if (len >= sizeof(env->buf) - env->buflen)
		return -ENOMEM;
	env->envp[env->envp_idx++] = &env->buf[env->buflen];
	env->buflen += len + 1;
	return 0;
}
EXPORT_SYMBOL_GPL(add_uevent_var);
