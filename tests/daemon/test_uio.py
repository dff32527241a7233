"""Debian's e1000.ko and pcnet32.ko through the UIO back-end, on a machine
without an IOMMU (docs/design.md §4, "Without an IOMMU").

One lab guest without the emulated IOMMU, with hugepages reserved at boot,
serves every test here, in order: the refusals first -- VFIO without an
IOMMU, and with --no-iommu a device another driver holds, no free hugepages,
no uio_pci_generic -- each leaving the device as it was; then the real
uio_pci_generic carries a ping and hash-checked transfers both ways through
us0; then the driver process is killed in the middle of a transfer and the
transfer completes through its successor. First, pcnet32 -- port I/O,
32-bit DMA -- passes traffic in a guest of its own (before the shared
guest boots: one lab guest at a time).
"""
import pytest

from lab import net, traffic, understudy
from lab.guest import Guest

pytestmark = pytest.mark.lab

BULK_BYTES = 20 * 1000 * 1000
CRASH_BYTES = 40 * 1000 * 1000
UIO = "uio_pci_generic"


@pytest.fixture(scope="module")
def lab(bins):
    """The guest without an IOMMU, its e1000's address and module, and understudyd."""
    with Guest(devices=["e1000"], iommu=False) as g:
        understudy.prepare(g)
        bdf = g.pci_address("nic0")
        ko = understudy.module_path(g, "e1000")
        d = understudy.Daemon(g, bins, None, "--max-restarts", "3", "--restart-window-s", "300")
        yield g, bdf, ko, d
        print(d.stop()[-4000:])


def refused(d: understudy.Daemon, bdf: str, ko: str, *flags: str) -> str:
    res = d.cli("run", "--device", bdf, "--module", ko, *flags)
    assert res.returncode != 0, res.out
    assert d.status() == {}, "a refused run leaves nothing running"
    return res.err


def override(g: Guest, bdf: str) -> str:
    """The device's driver_override, "" when none (sysfs shows "(null)")."""
    text = g.read_file(f"/sys/bus/pci/devices/{bdf}/driver_override").decode().strip()
    return "" if text == "(null)" else text


def test_pcnet32_over_uio_passes_traffic(no_leftover_qemu, bins):
    with Guest(devices=["pcnet"], iommu=False) as g:
        understudy.prepare(g)
        bdf = g.pci_address("nic0")
        d = understudy.Daemon(g, bins)
        try:
            understudy.understudy_up(g, d, bdf, understudy.module_chain(g, "pcnet32"))
            assert d.status()[bdf]["dma_unconfined"]
            assert net.ping(g, count=20, interval=0.05)["loss_pct"] == 0
            for direction in ("tx", "rx"):
                summary = net.bulk(g, direction, BULK_BYTES // 2).summary()
                print("bulk", summary)
                assert summary["hash_ok"] and summary["resets"] == 0, summary
        finally:
            print(d.stop()[-3000:])


def test_without_the_flag_a_machine_without_an_iommu_is_refused(lab):
    g, bdf, ko, d = lab
    before = understudy.bound_driver(g, bdf)
    err = refused(d, bdf, ko)
    assert "has no IOMMU group" in err, err
    assert understudy.bound_driver(g, bdf) == before
    understudy.unbind(g, bdf)


def test_no_uio_pci_generic_is_a_clear_error(lab):
    g, bdf, ko, d = lab
    # A kernel without the module: its file hidden (in this guest's mount namespace only).
    path = g.run(f"modinfo -n {UIO}", check=True).out.strip()
    g.run(f"rmmod {UIO} 2>/dev/null; mount --bind /dev/null {path}", check=True)
    try:
        err = refused(d, bdf, ko, "--no-iommu")
    finally:
        g.run(f"umount {path}", check=True)
    assert "no uio_pci_generic driver" in err, err
    assert understudy.bound_driver(g, bdf) is None and override(g, bdf) == ""


def test_a_device_another_driver_holds_is_refused_and_left_there(lab):
    g, bdf, ko, d = lab
    understudy.bind_kernel(g, bdf, "e1000")
    err = refused(d, bdf, ko, "--no-iommu")
    assert "is bound to the kernel driver e1000" in err, err
    assert understudy.bound_driver(g, bdf) == "e1000" and override(g, bdf) == ""
    understudy.unbind(g, bdf)


def test_too_few_hugepages_are_refused_before_the_device_is_bound(lab):
    g, bdf, ko, d = lab
    pages = "/proc/sys/vm/nr_hugepages"
    reserved = g.run(f"cat {pages}", check=True).out.strip()
    g.run(f"echo 0 > {pages}", check=True)
    try:
        err = refused(d, bdf, ko, "--no-iommu")
    finally:
        g.run(f"echo {reserved} > {pages}", check=True)
    assert "needs 32 free 2 MiB hugepages and 0 are free" in err, err
    assert understudy.bound_driver(g, bdf) is None and override(g, bdf) == ""


def test_e1000_over_uio_passes_traffic_and_says_its_dma_is_unconfined(lab):
    g, bdf, ko, d = lab
    understudy.understudy_up(g, d, bdf, [ko])
    assert understudy.bound_driver(g, bdf) == UIO
    st = d.status()[bdf]
    assert st["dma_unconfined"] and st["mac"] == "52:54:00:12:34:56", st
    shown = d.cli("status").out
    assert "DMA UNCONFINED" in shown, shown

    p = net.ping(g, count=20, interval=0.05)
    print("ping", p)
    assert p["loss_pct"] == 0, p
    for direction in ("tx", "rx"):
        result = net.bulk(g, direction, BULK_BYTES)
        summary = result.summary()
        print("bulk", summary)
        assert summary["hash_ok"] and summary["bytes"] == BULK_BYTES and summary["resets"] == 0, summary


def test_a_killed_driver_over_uio_is_restarted_and_the_transfer_survives(lab):
    g, bdf, ko, d = lab
    opened = d.wait_state(bdf, "open", timeout=30, carrier=True)
    crash = traffic.crash_mid_transfer(g, d, bdf, CRASH_BYTES, kill_after=5_000_000)
    summary = crash.transfer.summary()
    print("recovery", crash.recovery, "bulk", summary)
    assert crash.killed_pid == opened["pid"]
    assert summary["hash_ok"] and summary["bytes"] == CRASH_BYTES and summary["resets"] == 0, summary
    assert crash.carrier_drops == 0
    r = crash.recovery
    assert "killed by signal 9" in r["cause"] and r["outcome"] == "recovered", r
    after = d.wait_state(bdf, "open", timeout=30, carrier=True)
    assert after["device_stop"]["bus_master_off"], after
    assert understudy.bus_master_on(g, bdf), "the fresh driver enabled bus mastering again"
    assert net.ping(g, count=10, interval=0.05)["loss_pct"] == 0

