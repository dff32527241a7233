"""Live migration between two QEMU processes while a TCP stream runs through the guest's NIC
(lab/migration.py has the procedure).  Each test leaves no QEMU and no namespace behind."""
import socket
import struct
import time

import pytest

from lab import agent, migration
from lab.devices import lookup
from lab.errors import LabError
from lab.guest import Guest
from lab.netns import LabNetwork, namespace_exists

pytestmark = pytest.mark.lab


def assert_stream_survived(run: migration.MigrationRun) -> None:
    assert run.migration["status"] == "completed", run.migration
    assert run.sender_status == 0, "the guest's nc failed: the connection broke"
    assert run.peer["resets"] == 0 and run.peer["error"] is None, run.peer
    assert run.peer["sha256"] == run.sent_sha256, "the peer received other bytes than were sent"
    assert run.bytes_after_switchover >= migration.TRAFFIC_PROOF_BYTES, \
        "the stream did not go on after the switch-over"
    assert not namespace_exists(run.network), f"namespace {run.network} outlived the run"


@pytest.mark.timeout(300)
def test_tcp_stream_survives_live_migration_to_another_qemu(lab_ready, no_leftover_qemu):
    run = migration.run()
    assert_stream_survived(run)
    assert run.dest_nic == run.source_nic
    # QEMU stops the guest for well under a second here; 5 s would mean TCP
    # lost packets and backed off, i.e. the destination's port was not found.
    assert run.peer["max_stall_ms"] < 5000, run.summary()


@pytest.mark.timeout(300)
def test_nic_model_changes_across_live_migration(lab_ready, no_leftover_qemu):
    e1000, rtl8139 = lookup("e1000"), lookup("rtl8139")
    run = migration.run(swap_to=rtl8139.name)
    assert_stream_survived(run)
    assert (run.source_nic.driver, run.source_nic.vendor_device) == (e1000.driver,
                                                                     e1000.vendor_device)
    assert (run.dest_nic.driver, run.dest_nic.vendor_device) == (rtl8139.driver,
                                                                 rtl8139.vendor_device)
    assert run.dest_nic.mac != run.source_nic.mac
    # From the gratuitous ARP, or from the new NIC's first ARP request for the
    # peer; a peer still sending to the old MAC would stall for tens of seconds.
    assert f"lladdr {run.dest_nic.mac}" in run.peer_neighbour, "the peer kept the old MAC"
    # Unplug, migration, probe and address take about a second, TCP's
    # retransmission back-off adds up to as much again.
    assert run.peer["max_stall_ms"] < 15000, run.summary()


@pytest.mark.timeout(300)
def test_a_failed_migration_leaves_the_guest_running_on_the_source(lab_ready, no_leftover_qemu):
    with LabNetwork() as network, \
            Guest(devices=["e1000"], memory_mib=migration.MEMORY_MIB, netdev=network) as source:
        source.run("modprobe e1000", check=True)
        migration.bring_up(source, "nic0")
        source.detach_host_root()
        twin = source.incoming_twin()
        twin.memory_mib = migration.MEMORY_MIB // 2     # not the same machine: refused
        with twin:
            with pytest.raises(LabError, match="migration failed"):
                source.migrate_to(twin)
        assert source.run("ping -c 1 -W 5 10.203.0.1").returncode == 0
    assert not namespace_exists(network.name)


def test_agent_connection_follows_the_guest_to_the_destination_socket(tmp_path):
    """A frame cut in two by the switch-over is reassembled, in order, from both QEMUs."""
    def listener(name):
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(str(tmp_path / name))
        srv.listen()
        return srv

    def frame(kind, ident, payload):
        return agent.HEADER.pack(agent.MAGIC, kind, 0, ident, len(payload)) + payload

    source, dest = listener("source.sock"), listener("dest.sock")
    deadline = time.monotonic() + 10
    client = agent.AgentClient(str(tmp_path / "source.sock"))
    client.connect(deadline)
    to_source, _ = source.accept()
    proc = client.spawn(["true"], {}, "/")
    client.follow(str(tmp_path / "dest.sock"), deadline)
    to_dest, _ = dest.accept()
    output = frame(agent.OUT, proc.id, b"written across the switch-over")
    # The destination's part is there first; it must still be read second.
    to_dest.sendall(output[20:] + frame(agent.EXIT, proc.id, struct.pack("<i", 0)))
    to_source.sendall(output[:20])
    to_source.close()
    client.await_follow(deadline)
    res = proc.wait(5)
    assert (res.returncode, res.stdout) == (0, b"written across the switch-over")
    client.close()
    for s in (to_dest, source, dest):
        s.close()
