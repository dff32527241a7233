"""An incompatible live update, as in the live-update paper: e1000 built
without checksum offload (lab/fixtures/e1000-nocsum.patch on Debian's own
source, built by `python3 -m lab setup`) offers less than the e1000 serving
us0. `understudy update` must detect that when the new driver registers,
roll back to the old modules during a hash-checked transfer without the
transfer noticing, and go through only when told `--allow-feature-loss`;
the runtime then completes checksums (and, TSO gone with them, segmentation)
in software.
"""
import pytest

from lab import config, net, understudy
from lab.guest import Guest

from .test_update import BULK_BYTES, MAC, during_transfer, up, update

pytestmark = pytest.mark.lab

# netdev_features_t bits (include/linux/netdev_features.h of 6.1; the names
# are ethtool's, as class/net/shadow.rs `feature_names` gives them).
HW_CSUM = 1 << 3     # tx-checksum-ip-generic
TSO = 1 << 16        # tx-tcp-segmentation
RXCSUM = 1 << 40     # rx-checksum
TX_BULK_BYTES = 8 * 1000 * 1000


def tx_offloads(g: Guest) -> dict[str, str]:
    """What the guest's stack leaves to us0 (`ethtool -k us0`): the TAP's offloads."""
    out = g.run("ethtool -k us0", check=True).out
    wanted = ("tx-checksumming", "scatter-gather", "tcp-segmentation-offload")
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.splitlines() if ":" in line)
            if k.strip() in wanted}


def guest_sends(g: Guest) -> dict:
    """An unpaced hash-checked guest → host transfer through us0: the direction
    whose checksums and segmentation the driver's features decide."""
    summary = net.bulk(g, "tx", TX_BULK_BYTES, timeout=300).summary()
    assert summary["hash_ok"] and summary["bytes"] == TX_BULK_BYTES and summary["resets"] == 0, summary
    return summary


def test_an_e1000_without_checksum_offload_is_rolled_back_unless_feature_loss_is_allowed(no_leftover_qemu, bins):
    nocsum = str(config.fixture_module("e1000-nocsum"))
    with Guest(devices=["e1000"]) as g:
        bdf, ko = understudy.hand_over(g, "nic0", "e1000")
        d = up(g, bins, bdf, [ko])
        try:
            before = d.status()[bdf]
            # Otherwise there would be nothing to lose: Debian's e1000 offers both on QEMU's 82540EM.
            assert before["features"] & HW_CSUM and before["features"] & TSO, before
            offloads = tx_offloads(g)
            tx_before = guest_sends(g)

            # Refused: the successor registers without what its predecessor offered
            # (class/net/shadow.rs `PassiveLog::incompatibility`), and the old modules serve again.
            (code, answer), result, drops = during_transfer(g, d, bdf, lambda: update(d, "us0", "--module", nocsum))
            refused = result.summary()
            print("refused update", answer.get("handover"), "bulk", refused)
            assert code == 4, answer
            record = answer["handover"]
            assert record["outcome"].startswith("rolled back: "), record
            assert "lacks features that were in use" in record["outcome"], record
            # Exactly what the patch took away from what was in use; what it kept is not named.
            assert "tx-checksum-ip-generic" in record["outcome"] and "tx-tcp-segmentation" in record["outcome"], record
            assert "scatter-gather" not in record["outcome"], record
            assert record["rolled_back_at_ms"] is not None, record
            assert [m["path"] for m in record["from_modules"]] == [ko], record
            assert [m["path"] for m in record["to_modules"]] == [nocsum], record
            assert refused["hash_ok"] and refused["bytes"] == BULK_BYTES and refused["resets"] == 0, refused
            assert drops == 0, "us0 kept its carrier through the rollback"
            st = d.wait_state(bdf, "open", timeout=30, carrier=True, mtu=1400, mac=MAC)
            assert [m["path"] for m in st["modules"]] == [ko], st
            assert st["features"] == before["features"] and st["recovery_count"] == 0, st
            assert st["updates"][-1]["outcome"].startswith("rolled back"), st["updates"]

            # Allowed: the same module goes in and serves with fewer features.
            (code, answer), result, drops = during_transfer(
                g, d, bdf, lambda: update(d, "us0", "--module", nocsum, "--allow-feature-loss"))
            allowed = result.summary()
            print("update with --allow-feature-loss", answer.get("handover"), "bulk", allowed)
            assert code == 0, answer
            record = answer["handover"]
            assert record["outcome"] == "updated" and config.kernel().abi in record["kernel_half"], record
            assert [m["path"] for m in record["to_modules"]] == [nocsum], record
            assert allowed["hash_ok"] and allowed["bytes"] == BULK_BYTES and allowed["resets"] == 0, allowed
            assert drops == 0, "us0 kept its carrier through the update"
            after = d.wait_state(bdf, "open", timeout=30, carrier=True, mtu=1400, mac=MAC)
            assert [m["path"] for m in after["modules"]] == [nocsum], after
            assert after["features"] == before["features"] & ~(HW_CSUM | TSO), (hex(before["features"]), hex(after["features"]))
            assert after["hw_features"] == before["hw_features"] & ~(HW_CSUM | TSO | RXCSUM), \
                (hex(before["hw_features"]), hex(after["hw_features"]))
            # The stack's side does not change: the runtime takes every tx offload
            # from every driver and completes in software what its features do not
            # cover (docs/protocol.md, "Control messages", **Offloads**).
            assert tx_offloads(g) == offloads, offloads
            tx_after = guest_sends(g)
            print(f"throughput (Mbit/s): paced host → guest transfer during the refused update "
                  f"{refused['mbps']:.1f}, during the allowed one {allowed['mbps']:.1f}; unpaced guest → host "
                  f"with Debian's e1000 {tx_before['mbps']:.1f}, with e1000-nocsum {tx_after['mbps']:.1f}")
            assert d.alive()
        finally:
            print(d.stop()[-5000:])
