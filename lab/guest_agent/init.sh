#!/bin/busybox sh
# PID 1 of every lab guest: mount the host's root read-only over 9p, give it
# writable scratch space and the guest kernel's modules, then hand over to the
# agent, which runs the host's commands inside that root.  Variables LAB_* come
# from the kernel command line (see lab/guest.py).
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /host /tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

fail() {
	echo "lab-init: $*" >/dev/console
	echo "lab-init: giving up" >/dev/console
	poweroff -f
}

for m in $(cat /modules/order); do
	insmod "/modules/$m.ko" || fail "insmod $m failed"
done

# The host root is the read-only lower layer of an overlay whose upper layer is
# guest memory: everything looks writable, nothing reaches the host.
mkdir -p /lower /rw
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose \
	hostroot /lower || fail "cannot mount the host root over 9p"
mount -t tmpfs -o mode=0755 rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work hostroot /host ||
	fail "cannot mount the overlay root"
# /tmp stays the host's (through the overlay): the repository may be cloned
# there.  /run holds the host's live sockets and pid files, which mean nothing
# in the guest, so it starts empty.
mount -t tmpfs -o mode=0755 run /host/run
# The guest kernel's modules, extracted by `lab setup`, at the usual place.
mkdir -p "/host/lib/modules/$LAB_KREL"
mount --bind "/host$LAB_KMODULES" "/host/lib/modules/$LAB_KREL" ||
	fail "guest modules not found at $LAB_KMODULES"
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs shm /host/dev/shm
if [ -n "$LAB_SHARE" ]; then
	# A writable host directory for this boot (results, logs), read-write.
	mkdir -p /host/run/lab
	mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 \
		labshare /host/run/lab || fail "cannot mount the lab share"
fi
hostname lab
ip link set lo up
echo "lab-init: ready ($(cut -d' ' -f1 /proc/uptime)s)" >/dev/console
exec /bin/labagent /dev/ttyS1
