// SPDX-License-Identifier: GPL-2.0
/*
 * Firmware loading from the files a distribution installs (/lib/firmware),
 * read by ddekit. A missing file is -ENOENT, as without the package.
 *
 * Stands in for Linux's drivers/base/firmware_loader/main.c.
 */
#include <linux/module.h>
#include <linux/firmware.h>
#include <linux/device.h>
#include <linux/slab.h>

#include "internal.h"

static const char *const search_path[] = { "/lib/firmware/updates", "/lib/firmware" };

int request_firmware(const struct firmware **firmware_p, const char *name, struct device *device)
{
	struct firmware *fw;
	char path[256];

	*firmware_p = NULL;
	fw = kzalloc(sizeof(*fw), GFP_KERNEL);
	if (!fw)
		return -ENOMEM;
	for (int i = 0; i < ARRAY_SIZE(search_path); i++) {
		long size;
		u8 *data;

		snprintf(path, sizeof(path), "%s/%s", search_path[i], name);
		size = ddekit_file_size(path);
		if (size < 0)
			continue;
		data = kmalloc(size ? size : 1, GFP_KERNEL);
		if (!data)
			break;
		if (ddekit_read_file(path, data, size) != size) {
			kfree(data);
			continue;
		}
		fw->data = data;
		fw->size = size;
		*firmware_p = fw;
		return 0;
	}
	kfree(fw);
	dev_warn(device, "firmware %s not found in /lib/firmware\n", name);
	return -ENOENT;
}
EXPORT_SYMBOL(request_firmware);

void release_firmware(const struct firmware *fw)
{
	if (!fw)
		return;
	kfree(fw->data);
	kfree(fw);
}
EXPORT_SYMBOL(release_firmware);
