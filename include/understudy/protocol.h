/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The host <-> driver-process protocol (docs/protocol.md): the contract
 * between understudyd and a driver process, in neither world. It includes
 * nothing but <stdint.h>, so the driver's libc half (runtime/ddekit,
 * runtime/driver) and the tests' stand-ins build against it without Linux or
 * host headers; the kernel half does not include it (runtime/ddekit/host.h
 * says how its copies of the flags are checked).
 *
 * understudyd's mirror is host/protocol/src/lib.rs. host/protocol/tests/layout.rs
 * reads this file, lists every US_* constant (#define or enum member), every
 * member of every struct us_* and sample calls of every static inline us_*(),
 * and fails unless the Rust crate declares the same constants, structs and
 * members with the same values, sizes and offsets. Keep the file as regular
 * as it is (one #define, enum member or struct member per declaration): a
 * construct that test's reader does not know fails it.
 *
 * Everything is little-endian (x86_64) and packed: these structs are wire and
 * shared-memory formats, never handed to kernel code.
 */
#ifndef UNDERSTUDY_PROTOCOL_H
#define UNDERSTUDY_PROTOCOL_H

#include <stdint.h>

#define US_PROTOCOL_VERSION 6u

/* ---- DMA arena and packet pool (defaults; HELLO carries the real values) -- */

#define US_ARENA_SIZE    (64u << 20)
#define US_ARENA_IOVA    0x10000000ull
#define US_POOL_BUFFERS  4096u
#define US_BUFFER_SIZE   2048u
#define US_RING_SIZE     512u

/* The most queues of the TAP a driver process is given (--tap-fd, once
 * each): the device's transmit queue of a frame is the index of the TAP
 * queue it was read from, modulo the queues the driver runs. */
#define US_MAX_QUEUES    8u

/* ---- rings ---------------------------------------------------------------- */

/* The two rings, in this order, in the rings memfd, then the TAP's state.
 * The stack's frames reach the driver through its queue of the TAP, not the
 * rings, and it writes received ones there: the rings carry only what the
 * host itself sends (a predecessor's frames, announcements). */
enum us_ring_id {
	US_RING_TX = 0,      /* host -> driver: frames to transmit    */
	US_RING_TX_DONE = 1, /* driver -> host: transmitted buffers   */
	US_RING_COUNT = 2,
};

/*
 * One ring entry. A tx frame that does not fit one buffer (with
 * US_TX_TAILROOM to spare) continues in the buffers after `buf`: it occupies
 * us_tx_span() consecutive buffers, and its tx_done names the first.
 */
struct us_ring_entry {
	uint32_t buf;         /* pool buffer index (a tx span's first) */
	uint32_t len;         /* frame length in bytes */
	uint16_t flags;       /* US_TX_* in tx, US_TX_DONE_* in tx_done */
	uint16_t gso_size;    /* tx with a US_TX_GSO_* flag: TCP payload bytes per segment */
	uint16_t csum_start;  /* tx with US_TX_CSUM: checksum the bytes from here to the end */
	uint16_t csum_offset; /* ... and store it at csum_start + csum_offset */
	uint16_t queue;       /* tx: the transmit queue, < US_MAX_QUEUES; 0 in tx_done */
	uint16_t reserved;    /* 0 */
} __attribute__((packed));

/*
 * tx flags: the offloads of a virtio_net_hdr (the TAP hands the host its
 * frames with one). The host sets only what REGISTERED's offloads allow.
 */
#define US_TX_CSUM      0x0001u /* the L4 checksum is left to the driver */
#define US_TX_GSO_TCPV4 0x0002u /* a TCP/IPv4 frame to cut into gso_size segments */
#define US_TX_GSO_TCPV6 0x0004u /* the same over IPv6 */
#define US_TX_GSO_ECN   0x0008u /* with GSO: the first segment carries TCP's CWR */
#define US_TX_DONE_DROPPED 0x0001u

/* Room a tx span leaves after its frame: the driver builds its skb in place,
 * skb_shared_info at the span's end (320 bytes on 6.1, checked at build). */
#define US_TX_TAILROOM 512u
/* The longest tx frame: a 64 KiB GSO frame with a VLAN-tagged header. */
#define US_TX_MAX_FRAME (65536u + 18u)

static inline uint32_t us_tx_span(uint32_t len, uint32_t buffer_size)
{
	return (len + US_TX_TAILROOM + buffer_size - 1) / buffer_size;
}

/* REGISTERED's offloads: what the driver's features let the host pass on. */
#define US_OFFLOAD_CSUM    0x0001u /* US_TX_CSUM (IPv4 and IPv6, TCP and UDP) */
#define US_OFFLOAD_TSO4    0x0002u /* US_TX_GSO_TCPV4 */
#define US_OFFLOAD_TSO6    0x0004u /* US_TX_GSO_TCPV6 */
#define US_OFFLOAD_TSO_ECN 0x0008u /* US_TX_GSO_ECN */
#define US_OFFLOAD_RX_CSUM 0x0010u /* the device verifies received L4 checksums */

/* Each counter on its own cache line: producer and consumer never share one.
 * Not packed (its layout has no padding anyway): the counters stay naturally
 * aligned, so &ring->head can be handed to __atomic builtins. */
struct us_ring {
	uint32_t head;             /* written by the producer */
	uint8_t pad0[60];
	uint32_t tail;             /* written by the consumer */
	uint8_t pad1[60];
	uint32_t consumer_waiting; /* consumer sets 1 before sleeping */
	uint8_t pad2[60];
	struct us_ring_entry entries[]; /* ring_size of them */
};

#define US_RING_ENTRIES_OFFSET 192u
_Static_assert(sizeof(struct us_ring) == US_RING_ENTRIES_OFFSET, "ring header layout");
_Static_assert(sizeof(struct us_ring_entry) == 20, "ring entry layout");
#define US_PAGE_SIZE 4096u

/*
 * The arithmetic of both ends (docs/protocol.md, "Rings"): head and tail
 * count entries since the start and wrap at 2^32; ring_size is a power of
 * two. The driver's ends call these (runtime/ddekit/host.c), the host's call
 * host/protocol's twins (host/shm/src/ring.rs), and host/protocol's layout
 * test holds the two against each other.
 */

/* The slot of the entry a counter names. */
static inline uint32_t us_ring_slot(uint32_t counter, uint32_t ring_size)
{
	return counter & (ring_size - 1);
}

/* The entries published and not yet consumed, modulo 2^32: more than
 * ring_size says the other end broke the ring. */
static inline uint32_t us_ring_used(uint32_t head, uint32_t tail)
{
	return head - tail;
}

/* Ring i starts at i * us_ring_stride(ring_size) in the rings memfd: each ring
 * is rounded up to whole pages. */
static inline uint64_t us_ring_stride(uint32_t ring_size)
{
	uint64_t bytes = US_RING_ENTRIES_OFFSET + (uint64_t)ring_size * sizeof(struct us_ring_entry);
	return (bytes + US_PAGE_SIZE - 1) & ~(uint64_t)(US_PAGE_SIZE - 1);
}

/* ---- the block class's rings (docs/protocol.md, "Block devices") ----------- */

/* What a device is, from its PCI class code unless the admin says: it
 * decides what the rings memfd holds (HELLO's device_class). */
enum us_device_class {
	US_CLASS_NET = 1,   /* the two rings above and the TAP's state */
	US_CLASS_BLOCK = 2, /* the two block rings below, nothing else */
};

/* A block device's rings memfd: these two rings, each us_blk_ring_stride()
 * bytes, with the header of struct us_ring and entries of struct
 * us_blk_entry. Both directions use the same entry: a completion is its
 * request sent back with `status` set. */
enum us_blk_ring_id {
	US_BLK_RING_SUBMIT = 0, /* host -> driver: requests */
	US_BLK_RING_DONE = 1,   /* driver -> host: completed requests */
	US_BLK_RING_COUNT = 2,
};

/*
 * One block request. Its data lies in us_blk_span(len) consecutive pool
 * buffers from `buf`: the device reads a write's data from there, and a
 * read's data is copied there by the driver process before it completes the
 * request (the pool stays read-only to the device). The host checks that a
 * completion's tag names a request the driver holds and that every other
 * field is the request's own; `status` is the only thing the driver says.
 */
struct us_blk_entry {
	uint64_t tag;    /* the host's name for the request; a completion echoes it */
	uint64_t sector; /* the first 512-byte sector */
	uint32_t len;    /* bytes, a multiple of the logical block size; 0 for a flush */
	uint32_t buf;    /* the data's first pool buffer; 0 without data */
	uint16_t op;     /* US_BLK_OP_* */
	uint16_t flags;  /* US_BLK_FUA */
	int16_t status;  /* in done: 0 or a negative errno; 0 in submit */
	uint16_t queue;  /* the hardware queue, < DISK's n_queues */
} __attribute__((packed));

_Static_assert(sizeof(struct us_blk_entry) == 32, "block entry layout");

#define US_BLK_OP_READ         0u
#define US_BLK_OP_WRITE        1u
#define US_BLK_OP_FLUSH        2u /* the device's volatile cache to media */
#define US_BLK_OP_DISCARD      3u /* no data: the sectors' contents become undefined */
#define US_BLK_OP_WRITE_ZEROES 4u /* no data: the sectors read as zeroes */
/* A write that is on media when it completes (REQ_FUA). */
#define US_BLK_FUA 0x0001u

/* Consecutive pool buffers a request's `len` bytes of data occupy. */
static inline uint32_t us_blk_span(uint32_t len, uint32_t buffer_size)
{
	return (len + buffer_size - 1) / buffer_size;
}

/* A block ring: struct us_ring's header, then ring_size block entries, in
 * whole pages; ring i starts at i * us_blk_ring_stride(ring_size). */
static inline uint64_t us_blk_ring_stride(uint32_t ring_size)
{
	uint64_t bytes = US_RING_ENTRIES_OFFSET + (uint64_t)ring_size * sizeof(struct us_blk_entry);
	return (bytes + US_PAGE_SIZE - 1) & ~(uint64_t)(US_PAGE_SIZE - 1);
}

static inline uint64_t us_blk_rings_size(uint32_t ring_size)
{
	return US_BLK_RING_COUNT * us_blk_ring_stride(ring_size);
}

/* ---- the TAP's state: after the rings in the rings memfd ------------------ */

/*
 * A frame the driver read from its queue of the TAP and has not yet sent
 * (or dropped): where it lies in the arena, for the host to give a successor
 * if this driver dies. Written before the frame goes to the driver's
 * kernel half, `seq` last; `seq` set to 0 once it is done.
 */
struct us_held {
	uint64_t seq;         /* 0: the slot is free; else the order frames were read in, from 1 */
	uint32_t offset;      /* the frame's first byte, from the arena's start */
	uint32_t len;         /* frame length in bytes */
	uint16_t flags;       /* US_TX_*, as a tx entry's, from the TAP's virtio_net_hdr */
	uint16_t gso_size;
	uint16_t csum_start;
	uint16_t csum_offset;
	uint16_t queue;       /* the TAP queue it was read from, < US_MAX_QUEUES */
	uint8_t pad[6];
} __attribute__((packed));

struct us_tap_state {
	uint32_t gate;           /* host: 1 while the driver may read its queue of the TAP */
	uint8_t pad0[60];
	uint32_t taken;          /* driver: frames read from the TAP (free-running) */
	uint32_t sent;           /* driver: of those, sent ... */
	uint32_t dropped;        /* ... and dropped */
	uint32_t pad_sent;
	uint64_t last_sent_ns;   /* driver: CLOCK_MONOTONIC_COARSE when it last counted one sent */
	uint8_t pad1[40];
	uint32_t host_waiting;   /* host sets 1: signal notify at the next completion */
	uint8_t pad2[60];
	struct us_held held[];   /* ring_size of them */
};

#define US_HELD_OFFSET 192u
_Static_assert(sizeof(struct us_tap_state) == US_HELD_OFFSET, "TAP state layout");
_Static_assert(sizeof(struct us_held) == 32, "held frame layout");

/* Where the TAP's state starts in the rings memfd, and the memfd's size. */
static inline uint64_t us_tap_state_offset(uint32_t ring_size)
{
	return US_RING_COUNT * us_ring_stride(ring_size);
}

static inline uint64_t us_rings_size(uint32_t ring_size)
{
	uint64_t bytes = US_HELD_OFFSET + (uint64_t)ring_size * sizeof(struct us_held);

	return us_tap_state_offset(ring_size) + ((bytes + US_PAGE_SIZE - 1) & ~(uint64_t)(US_PAGE_SIZE - 1));
}

/* ---- exit statuses (docs/protocol.md, "Control messages") ----------------- */

/* The driver process panicked as a kernel would: a BUG, a fault nothing
 * fixes up, a broken invariant of the runtime (sysexits.h's EX_SOFTWARE). */
#define US_EXIT_PANIC   70
/* The driver's gate stopped it at its checker's fatal verdict, before a
 * device write (docs/checking.md, "The gate"). */
#define US_EXIT_VERDICT 3

/* ---- control messages (SOCK_SEQPACKET, one message per packet) ------------ */

enum us_msg_type {
	/* host -> driver requests, each answered by US_MSG_REPLY */
	US_MSG_HELLO = 1,
	US_MSG_PROBE = 2,
	US_MSG_OPEN = 3,
	US_MSG_STOP = 4,
	US_MSG_SET_MTU = 5,
	US_MSG_SET_MAC = 6,
	US_MSG_SET_RX_MODE = 7,
	US_MSG_SET_FEATURES = 8,
	US_MSG_ETHTOOL = 9,
	US_MSG_PING = 10,
	/* a control socket travels with it (SCM_RIGHTS); the reply's data is the pid */
	US_MSG_SPAWN = 11,
	/* before HELLO: load and check modules, run nothing; the reply's data is text */
	US_MSG_LOAD = 12,
	US_MSG_SET_CHANNELS = 13,
	/* driver -> host */
	US_MSG_REPLY = 64,
	US_MSG_REGISTERED = 65,
	US_MSG_CARRIER = 66,
	/* 67 was TX_QUEUE (protocol 3): the driver reads the TAP itself now */
	US_MSG_LOG = 68,
	US_MSG_WARN = 69,
	US_MSG_DISK = 70,
};

/* Every message starts with this. `flags` is reserved and must be 0. */
struct us_msg_header {
	uint16_t type;
	uint16_t flags;
	uint32_t seq;
} __attribute__((packed));

/* The largest message either side sends or accepts (a receive buffer this
 * big never truncates a valid message). */
#define US_MSG_MAX 4096u

#define US_MAX_MODULES 8u
#define US_PATH_MAX 256u
#define US_PCI_ADDR_MAX 16u
#define US_NAME_MAX 32u
#define US_TEXT_MAX 1024u
#define US_MAX_MC 64u
#define US_ETHTOOL_DATA_MAX 512u
#define US_SERIAL_MAX 64u
#define US_WWID_MAX 192u

struct us_hello {
	uint32_t version;       /* US_PROTOCOL_VERSION */
	uint32_t ring_size;
	uint32_t pool_buffers;
	uint32_t buffer_size;
	uint64_t arena_size;
	uint64_t arena_iova;
	uint64_t pool_size;     /* pool_buffers * buffer_size */
	uint64_t rings_size;    /* bytes of the rings memfd */
	uint32_t device_class;  /* US_CLASS_*: what the rings memfd holds */
	uint32_t reserved;      /* 0 */
} __attribute__((packed));

/* Modules are loaded in order (dependencies first, the driver last); the
 * unused tail of `modules` is zero. Strings are NUL-terminated. */
struct us_probe {
	char pci_address[US_PCI_ADDR_MAX]; /* "0000:00:02.0" */
	uint32_t n_modules;                /* 1 .. US_MAX_MODULES */
	char modules[US_MAX_MODULES][US_PATH_MAX];
} __attribute__((packed));

/* A device's PCI ids, from its config space: what LOAD matches against the
 * modules' PCI device tables (MODULE_DEVICE_TABLE(pci, ...)). */
struct us_pci_ids {
	uint16_t vendor;
	uint16_t device;
	uint16_t subvendor;  /* subsystem vendor */
	uint16_t subdevice;  /* subsystem device */
	uint32_t class;      /* base class << 16 | subclass << 8 | prog-if */
} __attribute__((packed));

/* The modules as in us_probe; a PROBE after a successful LOAD names the same
 * ones and runs what LOAD loaded. */
struct us_load {
	uint32_t n_modules;                /* 1 .. US_MAX_MODULES */
	char modules[US_MAX_MODULES][US_PATH_MAX];
	struct us_pci_ids ids;
} __attribute__((packed));

struct us_set_mtu {
	uint32_t mtu;
} __attribute__((packed));

struct us_set_mac {
	uint8_t mac[6];
} __attribute__((packed));

#define US_RX_MODE_PROMISC  0x1u
#define US_RX_MODE_ALLMULTI 0x2u

/* Followed by n_mc addresses of 6 bytes: the message is exactly
 * header + sizeof(struct us_set_rx_mode) + 6 * n_mc bytes. */
struct us_set_rx_mode {
	uint32_t flags;
	uint16_t n_mc; /* <= US_MAX_MC */
} __attribute__((packed));

struct us_set_features {
	uint64_t features; /* NETIF_F_* bits as the kernel ABI defines them */
} __attribute__((packed));

/* ethtool -L DEV combined N: the queue pairs the driver runs, <= US_MAX_QUEUES. */
struct us_set_channels {
	uint32_t combined;
} __attribute__((packed));

enum us_ethtool_cmd {
	US_ETHTOOL_DRVINFO = 1, /* reply data: struct us_ethtool_drvinfo */
	US_ETHTOOL_LINK = 2,    /* reply data: struct us_ethtool_link */
	US_ETHTOOL_STATS = 3,   /* reply data: struct us_ethtool_stats + stats */
};

/* `first` is 0 except for US_ETHTOOL_STATS, where it is the index of the
 * first statistic wanted: a driver has more statistics than one reply holds
 * (e1000: 43), so the host asks page by page until it has `total`. */
struct us_ethtool {
	uint32_t cmd;
	uint32_t first;
} __attribute__((packed));

struct us_ethtool_drvinfo {
	char driver[US_NAME_MAX];
	char version[US_NAME_MAX];
	char fw_version[US_NAME_MAX];
	char bus_info[US_NAME_MAX];
} __attribute__((packed));

struct us_ethtool_link {
	uint32_t speed;   /* Mb/s, 0xffffffff unknown */
	uint8_t duplex;   /* 0 half, 1 full, 0xff unknown */
	uint8_t autoneg;  /* 0 off, 1 on */
	uint8_t port;     /* PORT_* of the kernel ABI */
	uint8_t link;     /* ethtool_op_get_link */
} __attribute__((packed));

/* One statistic of get_ethtool_stats, named by get_strings(ETH_SS_STATS);
 * the name is truncated to 31 bytes and NUL-terminated. */
struct us_ethtool_stat {
	char name[US_NAME_MAX];
	uint64_t value;
} __attribute__((packed));

/* Reply data of US_ETHTOOL_STATS: `total` statistics exist; this reply holds
 * stats [first, first + n), n <= US_ETHTOOL_STATS_PER_REPLY (n < the
 * maximum only on the last page; n = 0 when first >= total). */
struct us_ethtool_stats {
	uint32_t total;
	uint32_t n;
	struct us_ethtool_stat stats[];
} __attribute__((packed));

#define US_ETHTOOL_STATS_PER_REPLY \
	((US_ETHTOOL_DATA_MAX - sizeof(struct us_ethtool_stats)) / sizeof(struct us_ethtool_stat))

/* Followed by data_len bytes (<= US_REPLY_DATA_MAX): the message is exactly
 * header + sizeof(struct us_reply) + data_len bytes. */
struct us_reply {
	int32_t status;    /* 0 or a negative errno */
	uint32_t data_len;
} __attribute__((packed));

/* What fills a message: LOAD's text (ETHTOOL's data is at most US_ETHTOOL_DATA_MAX). */
#define US_REPLY_DATA_MAX (US_MSG_MAX - sizeof(struct us_msg_header) - sizeof(struct us_reply))

struct us_registered {
	uint8_t perm_addr[6];
	uint8_t dev_addr[6];
	uint32_t mtu;
	uint32_t min_mtu;
	uint32_t max_mtu;
	uint64_t features;
	uint64_t hw_features;
	uint16_t n_tx_queues;
	uint16_t n_rx_queues;
	char driver[US_NAME_MAX];  /* NUL-terminated */
	char version[US_NAME_MAX]; /* NUL-terminated */
	uint32_t offloads;         /* US_OFFLOAD_* */
} __attribute__((packed));

/* DISK's features. */
#define US_DISK_WRITE_CACHE 0x0001u /* a volatile cache: a write is durable after a flush covers it */
#define US_DISK_FUA         0x0002u /* US_BLK_FUA is honoured (else the host follows a write with a flush) */
#define US_DISK_READ_ONLY   0x0004u
#define US_DISK_ROTATIONAL  0x0008u

/*
 * A block driver registered its disk (device_add_disk), or changed its
 * capacity: the disk as applications are to see it, and who it is. The
 * identity strings are the disk's own sysfs attributes as udev reads them
 * for /dev/disk/by-id (empty where the driver has none), NUL-terminated.
 */
struct us_disk {
	uint64_t capacity;                 /* 512-byte sectors */
	uint32_t logical_block_size;       /* bytes: 512 .. 4096, a power of two */
	uint32_t physical_block_size;
	uint32_t max_sectors;              /* the most 512-byte sectors of one read or write */
	uint32_t max_discard_sectors;      /* 0: no discard */
	uint32_t max_write_zeroes_sectors; /* 0: no write-zeroes */
	uint32_t features;                 /* US_DISK_* */
	uint16_t n_queues;                 /* hardware queues: 1 .. US_MAX_QUEUES */
	uint16_t queue_depth;              /* requests per queue */
	char driver[US_NAME_MAX];          /* the module's name */
	char disk_name[US_NAME_MAX];       /* the driver's name for it: "vda", "nvme0n1" */
	char serial[US_SERIAL_MAX];        /* sysfs "serial" */
	char wwid[US_WWID_MAX];            /* sysfs "wwid" (or "eui", "nguid", "uuid"), else empty */
} __attribute__((packed));

struct us_carrier {
	uint8_t on;
} __attribute__((packed));

/* Followed by the text (<= US_TEXT_MAX bytes, no NUL needed). */
struct us_log {
	uint32_t level; /* printk level 0 (emerg) .. 7 (debug) */
} __attribute__((packed));

/* Followed by the text (<= US_TEXT_MAX bytes, no NUL needed). */
struct us_warn {
	uint32_t line;
	char file[128]; /* NUL-terminated */
} __attribute__((packed));

#endif /* UNDERSTUDY_PROTOCOL_H */
