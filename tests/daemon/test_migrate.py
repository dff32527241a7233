"""Migration (docs/migration.md): `understudy migrate us0 --to` moves us0
between an e1000 and an RTL8139 (8139cp) and back during a hash-checked
transfer on the lab bridge, its MAC and features kept; and moves the daemon
must refuse -- an absent destination, one bound to a kernel driver, one whose
driver cannot take what us0 uses (its MTU, which no standby masks), a move
during a move -- are refused with a clear message under traffic, the old
driver untouched.
"""
import json
import threading
import time

import pytest

from lab import migrate_loop, net, traffic, understudy
from lab.guest import Guest
from lab.netns import LabNetwork

pytestmark = pytest.mark.lab

BULK_BYTES = 60 * 1000 * 1000
# Paced to outlast the refusals and one move with its 5 s probation: 60 MB at 20 Mbit/s take 24 s.
RATE_MBPS = 20
# Within 8139cp's MTU range (60..4096), above pcnet32's (68..1500).
MTU = 1600


def test_us0_moves_from_e1000_to_8139cp_and_back_during_one_transfer(no_leftover_qemu, lab_ready, runtime_built):
    rep = migrate_loop.migrate_loop("e1000", "8139cp", moves=2, rate_mbps=RATE_MBPS)
    f = rep.figures
    print({k: v for k, v in f.items() if k != "per_move"})
    assert rep.ok, rep.notes
    assert [r["outcome"] for r in f["per_move"]] == ["moved", "moved"]
    for r, driver in zip(f["per_move"], ("8139cp", "e1000")):
        assert r["announced"] > 0 and r["from_device"] != r["to_device"], r
        assert (r["serving"], r["serving_driver"]) == (r["to_device"], driver), "the status shows the new device"
        # The peers' side: the destination sent us0's gratuitous ARP or NA (QEMU's capture of what it sent).
        assert r["announced_on_wire"] > 0, r
        assert all(r[k] is not None for k in ("load_ms", "stop_ms", "start_ms", "replay_ms", "downtime_ms")), r
        assert r["wire_gap_ms"] is not None, "us0's frames stopped on the wire during the move, and resumed"
    assert f["mac_unchanged"] and f["resets"] == 0 and f["hash_ok"], f
    assert [r["to_modules"][-1]["path"].rsplit("/", 1)[-1] for r in f["per_move"]] == ["8139cp.ko", "e1000.ko"]


def migrate(d: understudy.Daemon, *args: str) -> tuple[int, dict]:
    return d.cli_json("migrate", "us0", *args)


def test_moves_that_cannot_be_made_are_refused_under_traffic_and_change_nothing(no_leftover_qemu, bins):
    with LabNetwork() as network, Guest(devices=["rtl8139", "pcnet", "rtl8139"], netdev=network) as g:
        understudy.prepare(g)
        serving, pcnet, rtl = (g.pci_address(f"nic{i}") for i in range(3))
        for bdf in (serving, pcnet):
            understudy.bind_vfio(g, bdf)
        understudy.bind_kernel(g, rtl, "8139cp")
        cp = understudy.module_chain(g, "8139cp")
        d = understudy.Daemon(g, bins, None)
        try:
            d.run(serving, cp)
            d.wait_state(serving, "registered", timeout=120)
            g.run(f"ip link set us0 mtu {MTU}", check=True)
            net.bring_up_iface(g, "us0", network=network)
            before = d.wait_state(serving, "open", timeout=30, mtu=MTU)
            with traffic.Us0Transfer(g, BULK_BYTES, timeout=240, network=network, rate_mbps=RATE_MBPS) as transfer:
                traffic.wait_received(d, "us0", before["counters"]["rx_bytes"] + 2_000_000, transfer)
                code, absent = migrate(d, "--to", "0000:00:1f.7")
                assert code == 1 and "no PCI device 0000:00:1f.7" in absent["error"], absent
                code, bound = migrate(d, "--to", rtl)
                assert code == 1 and "bound to the kernel driver 8139cp" in bound["error"], bound
                code, lacking = migrate(d, "--to", pcnet, "--module", understudy.module_path(g, "pcnet32"))
                assert code == 1 and lacking["handover"]["outcome"].startswith("refused: "), lacking
                assert f"the MTU in use, {MTU}, is outside its range 68..1500" in lacking["error"], lacking
                assert "--standby" in lacking["error"], "the refusal says how to mask"
                assert lacking["handover"]["load_ms"] is not None, "pcnet32 was loaded and probed to find out"
                same = d.status_of("us0")
                assert (same["device"], same["pid"], same["state"]) == (serving, before["pid"], "open"), same
                # A move during a move: the second is refused, the first goes on.
                understudy.bind_vfio(g, rtl)
                first: dict = {}

                def move_to_rtl():
                    first["code"], first["answer"] = migrate(d, "--to", rtl, "--module", cp[-1])

                mover = threading.Thread(target=move_to_rtl)
                mover.start()
                deadline = time.monotonic() + 30
                while d.status_of("us0")["migrations"][-1]["to_device"] != rtl:
                    assert time.monotonic() < deadline, "the first move never began"
                    time.sleep(0.05)
                code, second = migrate(d, "--to", pcnet, "--module", understudy.module_path(g, "pcnet32"))
                assert code == 1 and "a move is already under way" in second["error"], second
                mover.join(120)
                assert first["code"] == 0 and first["answer"]["handover"]["outcome"] == "moved", first
                result = transfer.result(300)
            summary = result.summary()
            print("refusals", json.dumps([absent, bound, lacking, second])[:3000], "bulk", summary)
            assert summary["hash_ok"] and summary["bytes"] == BULK_BYTES and summary["resets"] == 0, summary
            after = d.status_of("us0")
            assert (after["device"], after["driver_name"], after["mtu"]) == (rtl, "8139cp", MTU), after
            assert [m["outcome"].split(":")[0] for m in after["migrations"]] == ["refused", "moved"], after["migrations"]
        finally:
            d.stop()


def test_a_new_driver_that_dies_on_probation_sends_us0_back_to_the_old_device(no_leftover_qemu, bins):
    # pcnet32 serves; 8139cp, the destination, is killed while on probation.
    with LabNetwork() as network, Guest(devices=["pcnet", "rtl8139"], netdev=network) as g:
        understudy.prepare(g)
        pcnet, rtl = g.pci_address("nic0"), g.pci_address("nic1")
        for bdf in (pcnet, rtl):
            understudy.bind_vfio(g, bdf)
        d = understudy.Daemon(g, bins, None)
        try:
            d.run(pcnet, understudy.module_chain(g, "pcnet32"))
            d.wait_state(pcnet, "registered", timeout=120)
            net.bring_up_iface(g, "us0", network=network)
            before = d.status_of("us0")
            outcome: dict = {}
            cp = understudy.module_args(understudy.module_chain(g, "8139cp"))

            def move_to_rtl():
                outcome["code"], outcome["answer"] = migrate(d, "--to", rtl, *cp)

            with traffic.Us0Transfer(g, BULK_BYTES, timeout=240, network=network, rate_mbps=RATE_MBPS) as transfer:
                traffic.wait_received(d, "us0", before["counters"]["rx_bytes"] + 2_000_000, transfer)
                mover = threading.Thread(target=move_to_rtl)
                mover.start()
                # The new driver serves on probation: kill it there.
                deadline = time.monotonic() + 60
                while (st := d.status_of("us0"))["device"] != rtl or st["state"] != "open":
                    assert time.monotonic() < deadline and mover.is_alive(), f"the move never switched: {outcome}"
                    time.sleep(0.05)
                understudy.kill_driver(g, st["pid"])
                mover.join(120)
                result = transfer.result(300)
            summary = result.summary()
            record = outcome["answer"]["handover"]
            print("rollback", record, "bulk", summary)
            assert outcome["code"] == 4 and record["outcome"].startswith("rolled back: the new driver failed"), record
            assert "killed by signal 9" in record["outcome"] and record["rolled_back_at_ms"] is not None, record
            assert record["announced"] >= 2, "announced at the new device, then back at the old one"
            assert summary["hash_ok"] and summary["bytes"] == BULK_BYTES and summary["resets"] == 0, summary
            after = d.status_of("us0")
            assert (after["device"], after["driver_name"], after["state"]) == (pcnet, "pcnet32", "open"), after
            assert [s["device"] for s in after["standby"]] == [], "the RTL8139 was no standby: it is released"
        finally:
            d.stop()
