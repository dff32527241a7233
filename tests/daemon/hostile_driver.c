// SPDX-License-Identifier: GPL-2.0
/*
 * TEST STAND-IN, not a driver: plays the driver process of docs/protocol.md
 * just far enough to get a device "running" under understudyd, then
 * misbehaves the way UNDERSTUDY_TEST_DRIVER_MODE says, so the tests can check
 * that the daemon survives, stops the device and reports why.
 *
 *   sigkill-mid-transfer  waits until it holds a frame from the TAP, then SIGKILLs itself
 *   forged-records        once the gate opens, records frames it never read
 *                         (in the pool, past the arena, longer than a frame)
 *                         as held, then SIGKILLs itself
 *   bad-tx-done           completes a buffer outside the pool on tx_done
 *   bad-message           sends CARRIER with on = 7
 *   garbage-message       sends random bytes as a control message
 *   echo                  behaves: writes every frame it reads from its queue of
 *                         the TAP (or is given on the tx ring) back to that
 *                         queue as a received one (a loopback NIC), so the
 *                         data path can be tested
 *   tap-garbage           first abuses its queue of the TAP once OPEN is
 *                         answered: detaches it (the stack's frames then go
 *                         to the daemon's queue, which nobody reads), writes
 *                         frames no NIC receives (a bare virtio_net_hdr, GSO
 *                         on a runt, headers longer than the frame, a 64 KiB
 *                         frame of zeros), attaches it again and records
 *                         "GARBAGE_TAKEN n"; then behaves as echo
 *   obedient              behaves, drops every frame (a NIC without a cable:
 *                         counted or completed as dropped), receives none
 *   tx-hole               answers every request but never finishes a frame it
 *                         read from the TAP (a stuck transmitter)
 *   log-flood             sends 1000 LOG lines at once ("flood line N")
 *   warn-storm            sends 5 WARNs 600 ms apart (scattered), waits 1.5 s,
 *                         then 5 at once (a storm)
 *   refuse-load           refuses LOAD as the loader does a module with imports
 *                         the runtime lacks, with an escape sequence in the text
 *
 * In every mode a control thread answers the daemon's requests after
 * REGISTERED (OPEN, STOP, SET_*, ETHTOOL, PING), so configuration can be
 * tested. If UNDERSTUDY_TEST_DRIVER_DIR names a directory, it is the test's
 * remote control:
 *   DIR/requests  the stand-in appends one line per request it received
 *                 ("SET_MTU 1400", "SET_RX_MODE 0x1 01005e000001,...", ...);
 *                 PINGs are only counted, in DIR/pings
 *   DIR/refuse    lines "NAME ERRNO": requests of that type are answered
 *                 with -ERRNO (read at every request)
 *   DIR/hang      if it exists, the control loop stops answering at the next
 *                 request, after appending "SILENT <CLOCK_MONOTONIC ns>"
 *
 * Like the real driver it enables bus mastering on the device (pci_set_master),
 * so the tests can see the daemon turn it off.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <net/if.h>
#include <linux/if_tun.h>
#include <linux/vfio.h>
#include <linux/virtio_net.h>

#include <understudy/protocol.h>

static int control_fd = -1, device_fd = -1, rings_fd = -1, notify_fd = -1, kick_fd = -1, arena_fd = -1;
static int tap_fd = -1;
static bool opened;	/* OPEN was answered: the TAP is up and takes frames */

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

static const char *remote_dir;
static char pci_address[US_PCI_ADDR_MAX];

static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...)
{
	char path[512];
	if (!remote_dir)
		return;
	snprintf(path, sizeof path, "%s/requests", remote_dir);
	FILE *f = fopen(path, "a");
	if (!f)
		die("open DIR/requests");
	va_list ap;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fclose(f);
}

static bool remote_file_exists(const char *name)
{
	char path[512];
	if (!remote_dir)
		return false;
	snprintf(path, sizeof path, "%s/%s", remote_dir, name);
	return access(path, F_OK) == 0;
}

/* The status the test wants for requests named `name`: 0 or -errno. */
static int32_t wanted_status(const char *name)
{
	char path[512], line[128], what[64];
	int errno_value;
	int32_t status = 0;
	if (!remote_dir)
		return 0;
	snprintf(path, sizeof path, "%s/refuse", remote_dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "%63s %d", what, &errno_value) == 2 && !strcmp(what, name))
			status = -errno_value;
	fclose(f);
	return status;
}

static void reply(uint32_t seq, int32_t status, const void *data, uint32_t len)
{
	unsigned char body[sizeof(struct us_reply) + US_ETHTOOL_DATA_MAX];
	struct us_reply r = { .status = status, .data_len = status ? 0 : len };
	memcpy(body, &r, sizeof r);
	if (!status)
		memcpy(body + sizeof r, data, len);
	send_msg(US_MSG_REPLY, seq, body, sizeof r + r.data_len);
}

#define N_STATS 20 /* more than one reply holds: the host must page */

static void ethtool(uint32_t seq, const struct us_ethtool *q, int32_t status)
{
	if (q->cmd == US_ETHTOOL_DRVINFO) {
		struct us_ethtool_drvinfo d = { 0 };
		strcpy(d.driver, "hostile-test");
		strcpy(d.version, "0-stand-in");
		strcpy(d.fw_version, "none");
		memcpy(d.bus_info, pci_address, sizeof pci_address - 1);
		reply(seq, status, &d, sizeof d);
	} else if (q->cmd == US_ETHTOOL_LINK) {
		struct us_ethtool_link l = { .speed = 1000, .duplex = 1, .autoneg = 1, .port = 0, .link = 1 };
		reply(seq, status, &l, sizeof l);
	} else if (q->cmd == US_ETHTOOL_STATS) {
		unsigned char data[US_ETHTOOL_DATA_MAX];
		struct us_ethtool_stats h = { .total = N_STATS, .n = 0 };
		for (uint32_t i = q->first; i < N_STATS && h.n < US_ETHTOOL_STATS_PER_REPLY; i++, h.n++) {
			struct us_ethtool_stat st = { .value = 1000 + i };
			snprintf(st.name, sizeof st.name, "stand_in_stat_%02u", i);
			memcpy(data + sizeof h + h.n * sizeof st, &st, sizeof st);
		}
		memcpy(data, &h, sizeof h);
		reply(seq, status, data, sizeof h + h.n * sizeof(struct us_ethtool_stat));
	} else {
		reply(seq, -EOPNOTSUPP, NULL, 0);
	}
}

static const char *request_name(uint16_t type)
{
	switch (type) {
	case US_MSG_OPEN: return "OPEN";
	case US_MSG_STOP: return "STOP";
	case US_MSG_SET_MTU: return "SET_MTU";
	case US_MSG_SET_MAC: return "SET_MAC";
	case US_MSG_SET_RX_MODE: return "SET_RX_MODE";
	case US_MSG_SET_FEATURES: return "SET_FEATURES";
	case US_MSG_ETHTOOL: return "ETHTOOL";
	case US_MSG_PING: return "PING";
	case US_MSG_SPAWN: return "SPAWN";
	default: return NULL;
	}
}

/* Answers the daemon's requests for the rest of the process's life. */
static void *control_loop(void *unused)
{
	unsigned char buf[US_MSG_MAX];
	unsigned long pings = 0;
	(void)unused;
	for (;;) {
		ssize_t n = recv(control_fd, buf, sizeof buf, 0);
		if (n < (ssize_t)sizeof(struct us_msg_header))
			die("recv request");
		if (remote_file_exists("hang")) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			record("SILENT %lld", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
			for (;;)
				pause();
		}
		struct us_msg_header h;
		memcpy(&h, buf, sizeof h);
		const unsigned char *body = buf + sizeof h;
		const char *name = request_name(h.type);
		if (!name) {
			fprintf(stderr, "hostile-driver: unexpected request %u\n", h.type);
			exit(2);
		}
		int32_t status = wanted_status(name);
		uint8_t off = 0, on = 1;
		switch (h.type) {
		case US_MSG_OPEN:
			record("OPEN");
			__atomic_store_n(&opened, true, __ATOMIC_RELEASE);
			reply(h.seq, status, NULL, 0);
			if (!status)
				send_msg(US_MSG_CARRIER, 0, &on, 1);
			break;
		case US_MSG_STOP:
			record("STOP");
			reply(h.seq, status, NULL, 0);
			send_msg(US_MSG_CARRIER, 0, &off, 1);
			break;
		case US_MSG_SET_MTU: {
			struct us_set_mtu m;
			memcpy(&m, body, sizeof m);
			record("SET_MTU %u", m.mtu);
			reply(h.seq, status, NULL, 0);
			break;
		}
		case US_MSG_SET_MAC: {
			const uint8_t *a = body;
			record("SET_MAC %02x:%02x:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3], a[4], a[5]);
			reply(h.seq, status, NULL, 0);
			break;
		}
		case US_MSG_SET_RX_MODE: {
			struct us_set_rx_mode m;
			char list[US_MAX_MC * 13 + 1] = "";
			memcpy(&m, body, sizeof m);
			for (unsigned i = 0; i < m.n_mc && i < US_MAX_MC; i++) {
				const uint8_t *a = body + sizeof m + 6 * i;
				snprintf(list + strlen(list), sizeof list - strlen(list), "%s%02x%02x%02x%02x%02x%02x",
					 i ? "," : "", a[0], a[1], a[2], a[3], a[4], a[5]);
			}
			record("SET_RX_MODE %#x %s", m.flags, m.n_mc ? list : "-");
			reply(h.seq, status, NULL, 0);
			break;
		}
		case US_MSG_ETHTOOL: {
			struct us_ethtool q;
			memcpy(&q, body, sizeof q);
			record("ETHTOOL %u %u", q.cmd, q.first);
			ethtool(h.seq, &q, status);
			break;
		}
		case US_MSG_PING:
			pings++;
			if (remote_dir) {
				char path[512];
				snprintf(path, sizeof path, "%s/pings", remote_dir);
				FILE *f = fopen(path, "w");
				if (f) {
					fprintf(f, "%lu\n", pings);
					fclose(f);
				}
			}
			reply(h.seq, status, NULL, 0);
			break;
		case US_MSG_SPAWN:
			/* A stand-in cannot fork a driver: it goes on as one (its fd was dropped by recv). */
			record("SPAWN");
			reply(h.seq, -EOPNOTSUPP, NULL, 0);
			break;
		default:
			record("%s", name);
			reply(h.seq, status, NULL, 0);
		}
	}
	return NULL;
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

/* A WARN as the runtime reports one: where, then the text. */
static void send_warn(int n)
{
	unsigned char body[sizeof(struct us_warn) + 32];
	struct us_warn w = { .line = 100 + n };
	strcpy(w.file, "hostile_driver.c");
	memcpy(body, &w, sizeof w);
	int len = snprintf((char *)body + sizeof w, 32, "WARN number %d", n);
	send_msg(US_MSG_WARN, 0, body, sizeof w + len);
}

static struct us_tap_state *tap_state(void *rings, struct us_hello *hello)
{
	return (struct us_tap_state *)((char *)rings + us_tap_state_offset(hello->ring_size));
}

static uint64_t next_seq = 1;

/* The next frame from the TAP, if the gate is open and there is one: read
 * to the arena's runtime part, recorded as held in record 0; -1 if none. */
static ssize_t take_tap_frame(struct us_tap_state *st, char *arena, struct us_hello *hello)
{
	struct virtio_net_hdr h;
	struct iovec iov[2] = { { &h, sizeof h }, { arena + hello->pool_size, 65536 } };

	if (!__atomic_load_n(&st->gate, __ATOMIC_ACQUIRE))
		return -1;
	ssize_t n = readv(tap_fd, iov, 2);
	if (n < 0 && errno == EAGAIN)
		return -1;
	if (n < (ssize_t)sizeof h)
		die("read TAP");
	n -= sizeof h;
	st->held[0] = (struct us_held){ .offset = hello->pool_size, .len = n };
	__atomic_store_n(&st->held[0].seq, next_seq++, __ATOMIC_RELEASE);
	__atomic_add_fetch(&st->taken, 1, __ATOMIC_RELEASE);
	return n;
}

/* Record 0's frame is done with: counted, and the host told if it waits. */
static void tap_frame_done(struct us_tap_state *st, bool dropped)
{
	__atomic_store_n(&st->held[0].seq, 0, __ATOMIC_RELEASE);
	__atomic_add_fetch(dropped ? &st->dropped : &st->sent, 1, __ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&st->host_waiting, 0, __ATOMIC_ACQ_REL)) {
		uint64_t one = 1;
		if (write(notify_fd, &one, 8) != 8)
			die("notify");
	}
}

static void complete_tx(struct us_ring *done, uint32_t ring_size, uint32_t buf, uint16_t flags)
{
	done->entries[us_ring_slot(done->head, ring_size)] = (struct us_ring_entry){ .buf = buf, .flags = flags };
	release(&done->head, done->head + 1);
	if (__atomic_exchange_n(&done->consumer_waiting, 0, __ATOMIC_ACQ_REL)) {
		uint64_t one = 1;
		if (write(notify_fd, &one, 8) != 8)
			die("notify");
	}
}

static char *map_arena(struct us_hello *hello)
{
	char *arena = mmap(NULL, hello->arena_size, PROT_READ | PROT_WRITE, MAP_SHARED, arena_fd, 0);
	if (arena == MAP_FAILED)
		die("mmap arena");
	return arena;
}

/* Polls (a stand-in need not sleep properly) the tx ring and the TAP; each
 * frame is written back to the TAP if `loop`, else dropped. */
static void serve(void *rings, struct us_hello *hello, bool loop)
{
	struct us_ring *tx = ring(rings, hello, US_RING_TX), *done = ring(rings, hello, US_RING_TX_DONE);
	struct us_tap_state *st = tap_state(rings, hello);
	uint32_t bs = hello->buffer_size;
	char *arena = map_arena(hello);
	struct virtio_net_hdr none = { 0 };

	for (;;) {
		if (us_ring_used(acquire(&tx->head), tx->tail) != 0) {
			struct us_ring_entry t = tx->entries[us_ring_slot(tx->tail, hello->ring_size)];
			release(&tx->tail, tx->tail + 1);
			struct iovec iov[2] = { { &none, sizeof none }, { arena + (size_t)t.buf * bs, t.len } };
			if (loop && writev(tap_fd, iov, 2) < 0)
				die("write TAP");
			complete_tx(done, hello->ring_size, t.buf, loop ? 0 : US_TX_DONE_DROPPED);
			continue;
		}
		ssize_t n = take_tap_frame(st, arena, hello);
		if (n < 0) {
			usleep(1000);
			continue;
		}
		struct iovec iov[2] = { { &none, sizeof none }, { arena + hello->pool_size, n } };
		if (loop && writev(tap_fd, iov, 2) < 0)
			die("write TAP");
		tap_frame_done(st, !loop);
	}
}

/* Records that name no frame this driver read, for the host to refuse after its death. */
static void forge_records(void *rings, struct us_hello *hello)
{
	struct us_tap_state *st = tap_state(rings, hello);
	struct us_held forged[] = {
		{ .offset = 0, .len = 60 },				/* the pool, the host's */
		{ .offset = hello->arena_size - 4, .len = 100 },	/* past the arena */
		{ .offset = hello->pool_size, .len = 70000 },		/* longer than a frame */
		{ .offset = hello->pool_size, .len = 60, .queue = US_MAX_QUEUES },	/* no such queue */
	};

	while (!__atomic_load_n(&st->gate, __ATOMIC_ACQUIRE))
		usleep(10000);
	for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
		st->held[i] = forged[i];
		__atomic_store_n(&st->held[i].seq, next_seq++, __ATOMIC_RELEASE);
	}
	st->taken = sizeof forged / sizeof forged[0];
	fprintf(stderr, "hostile-driver: forged %zu records, killing myself\n", sizeof forged / sizeof forged[0]);
	raise(SIGKILL);
}

/* What a driver could do to the host's stack through its queue of the TAP:
 * every write the kernel takes or refuses, none of it may hurt the host. */
static void tap_garbage(void)
{
	static unsigned char zeros[65536];
	struct ifreq detach = { .ifr_flags = IFF_DETACH_QUEUE }, attach = { .ifr_flags = IFF_ATTACH_QUEUE };
	struct virtio_net_hdr gso_runt = { .flags = VIRTIO_NET_HDR_F_NEEDS_CSUM,
					   .gso_type = VIRTIO_NET_HDR_GSO_TCPV4, .gso_size = 1,
					   .hdr_len = 54, .csum_start = 34, .csum_offset = 16 };
	struct virtio_net_hdr long_headers = { .hdr_len = 60000, .csum_start = 60000,
					       .flags = VIRTIO_NET_HDR_F_NEEDS_CSUM };
	struct virtio_net_hdr none = { 0 };
	unsigned char runt[20] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0, 0x12, 0x34, 0x56,
				   0x08, 0x00, 0x45 };
	struct { struct virtio_net_hdr *hdr; void *frame; size_t len; } writes[] = {
		{ &none, NULL, 0 },
		{ &gso_runt, runt, sizeof runt },
		{ &long_headers, runt, sizeof runt },
		{ &none, zeros, sizeof zeros },
	};

	while (!__atomic_load_n(&opened, __ATOMIC_ACQUIRE))
		usleep(10000);
	if (ioctl(tap_fd, TUNSETQUEUE, &detach) < 0)
		die("detaching the TAP queue");
	size_t taken = 0;

	for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
		struct iovec iov[2] = { { writes[i].hdr, sizeof(struct virtio_net_hdr) },
					{ writes[i].frame, writes[i].len } };
		ssize_t n = writev(tap_fd, iov, writes[i].len ? 2 : 1);

		fprintf(stderr, "hostile-driver: garbage write %zu: %s\n", i, n < 0 ? strerror(errno) : "taken");
		taken += n >= 0;
	}
	if (ioctl(tap_fd, TUNSETQUEUE, &attach) < 0)
		die("attaching the TAP queue again");
	record("GARBAGE_TAKEN %zu", taken);
}

int main(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i += 2) {
		int fd = atoi(argv[i + 1]);
		if (!strcmp(argv[i], "--control-fd")) control_fd = fd;
		else if (!strcmp(argv[i], "--device-fd")) device_fd = fd;
		else if (!strcmp(argv[i], "--rings-fd")) rings_fd = fd;
		else if (!strcmp(argv[i], "--notify-fd")) notify_fd = fd;
		else if (!strcmp(argv[i], "--kick-fd")) kick_fd = fd;
		else if (!strcmp(argv[i], "--arena-fd")) arena_fd = fd;
		else if (!strcmp(argv[i], "--tap-fd")) tap_fd = fd;
	}
	const char *mode = getenv("UNDERSTUDY_TEST_DRIVER_MODE");
	remote_dir = getenv("UNDERSTUDY_TEST_DRIVER_DIR");
	if (control_fd < 0 || device_fd < 0 || rings_fd < 0 || notify_fd < 0 || kick_fd < 0 || arena_fd < 0 ||
	    tap_fd < 0 || !mode) {
		fprintf(stderr, "hostile-driver: needs the daemon's fds and UNDERSTUDY_TEST_DRIVER_MODE\n");
		return 2;
	}

	unsigned char buf[US_MSG_MAX];
	if (!strcmp(mode, "refuse-load")) {
		/* LOAD's reply as docs/protocol.md gives it: the halves tried, then every problem. */
		static const char text[] =
			"tried 6.1.0-55-amd64: /m/x.ko: 2 unresolved imports (not_in_runtime, also_missing)\n"
			"missing: not_in_runtime (no loaded module exports it and the runtime does not provide it)\n"
			"missing: also_missing \x1b[2K forged line\n";
		unsigned char body[sizeof(struct us_reply) + sizeof text];
		struct us_reply r = { .status = -ENOEXEC, .data_len = sizeof text - 1 };
		struct us_msg_header h;

		if (recv(control_fd, buf, sizeof buf, 0) < (ssize_t)sizeof h)
			die("recv LOAD");
		memcpy(&h, buf, sizeof h);
		memcpy(body, &r, sizeof r);
		memcpy(body + sizeof r, text, r.data_len);
		send_msg(US_MSG_REPLY, h.seq, body, sizeof r + r.data_len);
		pause();	/* the daemon ends it */
	}
	answer(US_MSG_LOAD);	/* nothing to load: the stand-in is its own driver */
	struct us_hello hello;
	ssize_t n = recv(control_fd, buf, sizeof buf, MSG_PEEK);
	if (n != sizeof(struct us_msg_header) + sizeof hello)
		die("HELLO size");
	memcpy(&hello, buf + sizeof(struct us_msg_header), sizeof hello);
	answer(US_MSG_HELLO);
	struct us_probe probe;
	n = recv(control_fd, buf, sizeof buf, MSG_PEEK);
	if (n != sizeof(struct us_msg_header) + sizeof probe)
		die("PROBE size");
	memcpy(&probe, buf + sizeof(struct us_msg_header), sizeof probe);
	memcpy(pci_address, probe.pci_address, sizeof pci_address - 1);
	set_bus_master();

	struct us_registered reg = { .perm_addr = { 0x52, 0x54, 0, 0x12, 0x34, 0x56 },
				     .dev_addr = { 0x52, 0x54, 0, 0x12, 0x34, 0x56 },
				     .mtu = 1500, .min_mtu = 46, .max_mtu = 16110,
				     .n_tx_queues = 1, .n_rx_queues = 1 };
	strcpy(reg.driver, "hostile-test");
	strcpy(reg.version, "0");
	/* As register_netdev() does during the real driver's probe: before PROBE's reply. */
	send_msg(US_MSG_REGISTERED, 0, &reg, sizeof reg);
	answer(US_MSG_PROBE);
	pthread_t control;
	if ((errno = pthread_create(&control, NULL, control_loop, NULL)))
		die("pthread_create");

	void *rings = mmap(NULL, hello.rings_size, PROT_READ | PROT_WRITE, MAP_SHARED, rings_fd, 0);
	if (rings == MAP_FAILED)
		die("mmap rings");
	fprintf(stderr, "hostile-driver: running, mode %s\n", mode);

	if (!strcmp(mode, "sigkill-mid-transfer")) {
		char *arena = map_arena(&hello);
		ssize_t len;
		while ((len = take_tap_frame(tap_state(rings, &hello), arena, &hello)) < 0)
			usleep(10000);
		fprintf(stderr, "hostile-driver: holding a %zd-byte frame from the TAP, killing myself\n", len);
		raise(SIGKILL);
	} else if (!strcmp(mode, "forged-records")) {
		forge_records(rings, &hello);
	} else if (!strcmp(mode, "bad-tx-done")) {
		struct us_ring *done = ring(rings, &hello, US_RING_TX_DONE);
		done->entries[0] = (struct us_ring_entry){ .buf = 0xdead, .len = 60, .flags = 0 };
		__atomic_store_n(&done->head, 1, __ATOMIC_RELEASE);
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
		serve(rings, &hello, true);
	} else if (!strcmp(mode, "tap-garbage")) {
		tap_garbage();
		serve(rings, &hello, true);
	} else if (!strcmp(mode, "log-flood")) {
		for (int i = 0; i < 1000; i++) {
			unsigned char body[sizeof(struct us_log) + 32];
			struct us_log l = { .level = 6 };
			memcpy(body, &l, sizeof l);
			int len = snprintf((char *)body + sizeof l, 32, "flood line %d", i);
			send_msg(US_MSG_LOG, 0, body, sizeof l + len);
		}
	} else if (!strcmp(mode, "warn-storm")) {
		for (int i = 0; i < 10; i++) {
			if (i < 5)
				usleep(600 * 1000);
			else if (i == 5)
				usleep(1500 * 1000);
			send_warn(i);
		}
	} else if (!strcmp(mode, "obedient")) {
		serve(rings, &hello, false);
	} else if (!strcmp(mode, "tx-hole")) {
		/* the control thread answers; the frame read is never finished */
		char *arena = map_arena(&hello);
		while (take_tap_frame(tap_state(rings, &hello), arena, &hello) < 0)
			usleep(10000);
	} else {
		fprintf(stderr, "hostile-driver: unknown mode %s\n", mode);
		return 2;
	}
	for (;;)
		pause();
}
