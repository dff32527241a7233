"""Live update with Debian's own driver builds: `understudy update` hands us0 to
another ABI's e1000.ko during a hash-checked TCP transfer (the new module loads
and is checked while the old driver serves); an update the loader or the
device's ID refuses changes nothing; and a new driver that refuses the device
at probe (8139too on QEMU's C+ RTL8139, which it leaves to 8139cp) is rolled
back to the old one, with the settings in force and the transfer intact.
"""
import json

import pytest

from lab import config, net, traffic, understudy
from lab.guest import SLIRP_GATEWAY, Guest

pytestmark = pytest.mark.lab

BULK_BYTES = 40 * 1000 * 1000
# Paced, so that the update (its 5 s probation included) is over mid-transfer: 40 MB at 20 Mbit/s take 16 s.
RATE_MBPS = 20
MAC = "52:54:00:12:34:99"


def up(g: Guest, bins: dict, bdf: str, modules: list[str]) -> understudy.Daemon:
    d = understudy.Daemon(g, bins, None, "--max-restarts", "3")
    d.run(bdf, modules)
    d.wait_state(bdf, "registered", timeout=120)
    g.run(f"ip link set us0 mtu 1400 address {MAC} && ip link set us0 up && "
          f"ip addr add {net.GUEST_ADDRESS} dev us0 && ip route replace default via {SLIRP_GATEWAY} dev us0",
          check=True)
    d.wait_state(bdf, "open", timeout=60, carrier=True, mtu=1400)
    return d


def update(d: understudy.Daemon, device: str, *args: str) -> tuple[int, dict]:
    """`understudy update DEVICE ARGS --json`; `--abi` finds the lab's cache through UNDERSTUDY_CACHE."""
    res = d.g.run([str(d.bins["understudy"]), "--socket", d.socket, "update", device, *args, "--json"],
                  timeout=300, env={"UNDERSTUDY_CACHE": str(config.cache_dir())})
    return res.returncode, json.loads(res.out)


def during_transfer(g: Guest, d: understudy.Daemon, bdf: str, act) -> tuple[object, net.BulkResult, int]:
    """Runs `act()` once 2 MB of a paced transfer have passed us0; returns what
    it returned, the transfer's result and the carrier drops meanwhile."""
    before = d.status()[bdf]
    drops = understudy.carrier_drops(g)
    with traffic.Us0Transfer(g, BULK_BYTES, timeout=180, rate_mbps=RATE_MBPS) as transfer:
        traffic.wait_received(d, bdf, before["counters"]["rx_bytes"] + 2_000_000, transfer)
        outcome = act()
        assert transfer.running(), "the update was over before the transfer: pace it slower"
        result = transfer.result(300)
    return outcome, result, understudy.carrier_drops(g) - drops


def test_e1000_is_updated_to_another_abis_build_under_traffic_and_refused_updates_change_nothing(no_leftover_qemu, bins):
    new = str(config.cached_module("6.1.0-53", "e1000"))
    with Guest(devices=["e1000"]) as g:
        bdf, ko = understudy.hand_over(g, "nic0", "e1000")
        d = up(g, bins, bdf, [ko])
        try:
            before = d.status()[bdf]
            (code, answer), result, drops = during_transfer(g, d, bdf, lambda: update(d, "us0", "--abi", "6.1.0-53"))
            summary = result.summary()
            print("update", answer.get("handover"), "bulk", summary)
            assert code == 0, answer
            record = answer["handover"]
            assert record["outcome"] == "updated", record
            assert "6.1.0-53" in record["kernel_half"], record
            assert [m["path"] for m in record["from_modules"]] == [ko]
            assert all(record[k] is not None for k in ("load_ms", "start_ms", "replay_ms", "serving_ms")), record
            assert summary["hash_ok"] and summary["bytes"] == BULK_BYTES and summary["resets"] == 0, summary
            assert drops == 0, "us0 kept its carrier through the update"
            after = d.wait_state(bdf, "open", timeout=30, carrier=True, mtu=1400, mac=MAC)
            assert after["pid"] != before["pid"] and after["recovery_count"] == 0, after
            assert [m["path"] for m in after["modules"]] == [new], after
            assert after["updates"][-1]["first_packet_ms"] is not None, after["updates"]

            # Refused before anything stops, under traffic: a module for another
            # device, and a build of an ABI no kernel half matches (Debian ships
            # no headers for 6.1.0-48, and its CRCs match no other half).
            pid = after["pid"]
            rtl = [understudy.module_path(g, "mii"), understudy.module_path(g, "8139cp")]
            refusals, result, drops = during_transfer(g, d, bdf, lambda: [
                update(d, "us0", "--module", rtl[0], "--module", rtl[1]),
                update(d, "us0", "--abi", "6.1.0-48")])
            (code, answer), (code_48, answer_48) = refusals
            assert code == 1 and "matches no module's PCI table" in answer["error"], answer
            assert code_48 == 1 and "6.1.0-48-amd64 has no kernel half" in answer_48["error"], answer_48
            assert "on 6.1.0-47-amd64" in answer_48["error"], "each half tried is named"
            assert answer_48["handover"]["outcome"].startswith("refused"), answer_48
            summary = result.summary()
            assert summary["hash_ok"] and summary["resets"] == 0 and drops == 0, summary
            st = d.status()[bdf]
            assert st["pid"] == pid and st["state"] == "open" and st["recovery_count"] == 0, st
            assert [u["outcome"].split(":")[0] for u in st["updates"]] == ["updated", "refused", "refused"], st["updates"]
            g.run(f"ping -c 3 -W 5 {SLIRP_GATEWAY}", check=True)
            assert d.alive()
        finally:
            print(d.stop()[-5000:])


def test_a_new_driver_that_refuses_the_device_is_rolled_back_to_the_old_one(no_leftover_qemu, bins):
    with Guest(devices=["rtl8139"]) as g:
        bdf, _ = understudy.hand_over(g, "nic0", "8139cp")
        old = understudy.module_chain(g, "8139cp")
        d = up(g, bins, bdf, old)
        try:
            before = d.status()[bdf]
            new = understudy.module_chain(g, "8139too")
            (code, answer), result, drops = during_transfer(
                g, d, bdf, lambda: update(d, "us0", *[a for m in new for a in ("--module", m)]))
            summary = result.summary()
            print("update", answer, "bulk", summary)
            assert code == 4, answer
            record = answer["handover"]
            assert record["outcome"].startswith("rolled back: the new driver failed"), record
            assert record["rolled_back_at_ms"] is not None and record["start"] == "template", record
            assert summary["hash_ok"] and summary["bytes"] == BULK_BYTES and summary["resets"] == 0, summary
            assert drops == 0
            after = d.wait_state(bdf, "open", timeout=30, carrier=True, mtu=1400, mac=MAC)
            assert [m["path"] for m in after["modules"]] == old and after["pid"] != before["pid"], after
            assert after["template_pid"] == before["template_pid"], "the old version's template served the rollback"
        finally:
            print(d.stop()[-5000:])
