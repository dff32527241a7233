// SPDX-License-Identifier: GPL-2.0
/*
 * TEST STAND-IN, not a driver: plays the driver process of docs/protocol.md
 * just far enough to get a device "running" under understudyd, then
 * misbehaves the way UNDERSTUDY_TEST_DRIVER_MODE says, so the tests can check
 * that the daemon survives, stops the device and reports why.
 *
 *   sigkill-mid-transfer  waits until it holds a tx buffer, then SIGKILLs itself
 *   bad-rx-index          publishes an rx entry whose buffer is outside the pool
 *   bad-message           sends CARRIER with on = 7
 *   garbage-message       sends random bytes as a control message
 *   echo                  behaves: returns every transmitted frame as a received
 *                         one (a loopback NIC), so the data path can be tested
 *
 * Like the real driver it enables bus mastering on the device (pci_set_master),
 * so the tests can see the daemon turn it off.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <linux/vfio.h>

#include "../../runtime/ddekit/protocol.h"

static int control_fd = -1, device_fd = -1, rings_fd = -1, notify_fd = -1, arena_fd = -1;

static void die(const char *what)
{
	fprintf(stderr, "hostile-driver: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void send_msg(uint16_t type, uint32_t seq, const void *body, size_t len)
{
	unsigned char buf[US_MSG_MAX];
	struct us_msg_header h = { .type = type, .flags = 0, .seq = seq };
	memcpy(buf, &h, sizeof h);
	memcpy(buf + sizeof h, body, len);
	if (send(control_fd, buf, sizeof h + len, MSG_NOSIGNAL) < 0)
		die("send");
}

/* Waits for one request of `type` and answers it with status 0. */
static void answer(uint16_t type)
{
	unsigned char buf[US_MSG_MAX];
	struct us_msg_header h;
	ssize_t n = recv(control_fd, buf, sizeof buf, 0);
	if (n < (ssize_t)sizeof h)
		die("recv request");
	memcpy(&h, buf, sizeof h);
	if (h.type != type) {
		fprintf(stderr, "hostile-driver: expected request %u, got %u\n", type, h.type);
		exit(2);
	}
	struct us_reply r = { .status = 0, .data_len = 0 };
	send_msg(US_MSG_REPLY, h.seq, &r, sizeof r);
}

static void set_bus_master(void)
{
	struct vfio_region_info reg = { .argsz = sizeof reg, .index = VFIO_PCI_CONFIG_REGION_INDEX };
	uint16_t cmd;
	if (ioctl(device_fd, VFIO_DEVICE_GET_REGION_INFO, &reg) < 0)
		die("VFIO_DEVICE_GET_REGION_INFO");
	if (pread(device_fd, &cmd, 2, reg.offset + 4) != 2)
		die("read PCI_COMMAND");
	cmd |= 0x6; /* memory space, bus master */
	if (pwrite(device_fd, &cmd, 2, reg.offset + 4) != 2)
		die("write PCI_COMMAND");
	fprintf(stderr, "hostile-driver: bus mastering on (PCI_COMMAND %#x)\n", cmd);
}

static struct us_ring *ring(void *base, struct us_hello *hello, int i)
{
	return (struct us_ring *)((char *)base + i * us_ring_stride(hello->ring_size));
}

static uint32_t acquire(uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void release(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

/* Polls (a stand-in need not sleep properly): each tx frame is copied into an
 * rx_fill buffer and published on rx, its tx buffer returned on tx_done. */
static void echo(void *rings, struct us_hello *hello)
{
	struct us_ring *tx = ring(rings, hello, US_RING_TX), *done = ring(rings, hello, US_RING_TX_DONE);
	struct us_ring *fill = ring(rings, hello, US_RING_RX_FILL), *rx = ring(rings, hello, US_RING_RX);
	uint32_t mask = hello->ring_size - 1, bs = hello->buffer_size;
	char *arena = mmap(NULL, hello->arena_size, PROT_READ | PROT_WRITE, MAP_SHARED, arena_fd, 0);
	if (arena == MAP_FAILED)
		die("mmap arena");
	for (;;) {
		if (acquire(&tx->head) == tx->tail || acquire(&fill->head) == fill->tail) {
			usleep(1000);
			continue;
		}
		struct us_ring_entry t = tx->entries[tx->tail & mask];
		struct us_ring_entry f = fill->entries[fill->tail & mask];
		release(&fill->tail, fill->tail + 1);
		release(&tx->tail, tx->tail + 1);
		memcpy(arena + (size_t)f.buf * bs, arena + (size_t)t.buf * bs, t.len);
		rx->entries[rx->head & mask] = (struct us_ring_entry){ .buf = f.buf, .len = t.len };
		release(&rx->head, rx->head + 1);
		done->entries[done->head & mask] = (struct us_ring_entry){ .buf = t.buf, .len = t.len };
		release(&done->head, done->head + 1);
		if (__atomic_exchange_n(&rx->consumer_waiting, 0, __ATOMIC_ACQ_REL) |
		    __atomic_exchange_n(&done->consumer_waiting, 0, __ATOMIC_ACQ_REL)) {
			uint64_t one = 1;
			if (write(notify_fd, &one, 8) != 8)
				die("notify");
		}
	}
}

int main(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i += 2) {
		int fd = atoi(argv[i + 1]);
		if (!strcmp(argv[i], "--control-fd")) control_fd = fd;
		else if (!strcmp(argv[i], "--device-fd")) device_fd = fd;
		else if (!strcmp(argv[i], "--rings-fd")) rings_fd = fd;
		else if (!strcmp(argv[i], "--notify-fd")) notify_fd = fd;
		else if (!strcmp(argv[i], "--arena-fd")) arena_fd = fd;
	}
	const char *mode = getenv("UNDERSTUDY_TEST_DRIVER_MODE");
	if (control_fd < 0 || device_fd < 0 || rings_fd < 0 || notify_fd < 0 || arena_fd < 0 || !mode) {
		fprintf(stderr, "hostile-driver: needs the daemon's fds and UNDERSTUDY_TEST_DRIVER_MODE\n");
		return 2;
	}

	unsigned char buf[US_MSG_MAX];
	struct us_hello hello;
	ssize_t n = recv(control_fd, buf, sizeof buf, MSG_PEEK);
	if (n != sizeof(struct us_msg_header) + sizeof hello)
		die("HELLO size");
	memcpy(&hello, buf + sizeof(struct us_msg_header), sizeof hello);
	answer(US_MSG_HELLO);
	answer(US_MSG_PROBE);
	set_bus_master();

	struct us_registered reg = { .perm_addr = { 0x52, 0x54, 0, 0x12, 0x34, 0x56 },
				     .dev_addr = { 0x52, 0x54, 0, 0x12, 0x34, 0x56 },
				     .mtu = 1500, .min_mtu = 46, .max_mtu = 16110,
				     .n_tx_queues = 1, .n_rx_queues = 1 };
	strcpy(reg.driver, "hostile-test");
	strcpy(reg.version, "0");
	send_msg(US_MSG_REGISTERED, 0, &reg, sizeof reg);
	uint8_t on = 1;
	send_msg(US_MSG_CARRIER, 0, &on, 1);
	answer(US_MSG_OPEN);

	void *rings = mmap(NULL, hello.rings_size, PROT_READ | PROT_WRITE, MAP_SHARED, rings_fd, 0);
	if (rings == MAP_FAILED)
		die("mmap rings");
	fprintf(stderr, "hostile-driver: running, mode %s\n", mode);

	if (!strcmp(mode, "sigkill-mid-transfer")) {
		struct us_ring *tx = ring(rings, &hello, US_RING_TX);
		while (__atomic_load_n(&tx->head, __ATOMIC_ACQUIRE) == tx->tail)
			usleep(10000);
		fprintf(stderr, "hostile-driver: holding tx buffer %u, killing myself\n", tx->entries[0].buf);
		raise(SIGKILL);
	} else if (!strcmp(mode, "bad-rx-index")) {
		struct us_ring *rx = ring(rings, &hello, US_RING_RX);
		rx->entries[0] = (struct us_ring_entry){ .buf = 0xdead, .len = 60, .flags = 0 };
		__atomic_store_n(&rx->head, 1, __ATOMIC_RELEASE);
		uint64_t one = 1;
		if (write(notify_fd, &one, 8) != 8)
			die("notify");
	} else if (!strcmp(mode, "bad-message")) {
		uint8_t seven = 7;
		send_msg(US_MSG_CARRIER, 0, &seven, 1);
	} else if (!strcmp(mode, "garbage-message")) {
		unsigned char junk[37];
		for (size_t i = 0; i < sizeof junk; i++)
			junk[i] = (unsigned char)(i * 151 + 7);
		if (send(control_fd, junk, sizeof junk, MSG_NOSIGNAL) < 0)
			die("send");
	} else if (!strcmp(mode, "echo")) {
		echo(rings, &hello);
	} else {
		fprintf(stderr, "hostile-driver: unknown mode %s\n", mode);
		return 2;
	}
	for (;;)
		pause();
}
