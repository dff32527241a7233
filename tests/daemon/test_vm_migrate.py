"""The VM's live migration with understudy in the guest (docs/migration.md):
us0 on an e1000 parks when the e1000 is unplugged, QEMU migrates the guest
to a twin without it, and `understudy migrate` gives us0 the RTL8139 plugged
there; a busybox stream to the lab bridge's peer must arrive exact, with no
reset, and the MAC unchanged (lab/vm_migrate.py; the in-kernel baseline is
left to the scenario command)."""
import pytest

from lab import vm_migrate
from lab.migration import MEMORY_MIB

pytestmark = pytest.mark.lab


def test_a_guest_with_us0_on_an_e1000_migrates_to_a_host_with_an_rtl8139(no_leftover_qemu, lab_ready, runtime_built):
    rep = vm_migrate.scenario("e1000", "rtl8139", MEMORY_MIB, baseline=False)
    print(rep.figures)
    assert rep.ok, rep.notes
    f = rep.figures
    assert f["outcome"] == "moved" and f["announced"] > 0, f
    assert f["parked_ms"] is not None and f["parked_ms"] > f["migration_ms"], "us0 waited through QEMU's migration"
