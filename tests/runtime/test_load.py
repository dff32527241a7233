"""LOAD (docs/protocol.md, "LOAD") and the kernel half per ABI (runtime/README.md,
"One kernel half per ABI"), against the real understudy-driver and Debian's modules
of several ABIs. No VM: LOAD touches no device, so the device and arena fds here are
ones the driver could not use.

Messages are built with struct from include/understudy/protocol.h's layouts (the
host's crate checks its own against the header in host/protocol/tests/layout.rs).
"""
import errno
import os
import socket
import struct
import subprocess

import pytest

from lab import config

from .conftest import BUILD, DRIVER, KERNEL_HALF

MSG_LOAD, MSG_REPLY = 12, 64
MAX_MODULES, PATH_MAX, MSG_MAX = 8, 256, 4096
REPLY_DATA_MAX = MSG_MAX - 8 - 8
E1000_IDS = (0x8086, 0x100E, 0x1AF4, 0x1100, 0x020000)   # QEMU's e1000
RTL8139_IDS = (0x10EC, 0x8139, 0x1AF4, 0x1100, 0x020000)


def load_message(modules, ids, seq=1) -> bytes:
    paths = b"".join(str(m).encode().ljust(PATH_MAX, b"\0") for m in modules)
    body = (struct.pack("<I", len(modules)) + paths.ljust(MAX_MODULES * PATH_MAX, b"\0")
            + struct.pack("<HHHHI", *ids))
    return struct.pack("<HHI", MSG_LOAD, 0, seq) + body


class Driver:
    """understudy-driver under a control socket, with fds it must not need for LOAD."""

    def __init__(self, *extra):
        self.host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        null = os.open("/dev/null", os.O_RDONLY)
        empty = os.memfd_create("no-arena")          # 0 bytes: mapping it would fail
        fds = {"control": child.fileno(), "device": null, "arena": empty, "rings": empty,
               "kick": null, "notify": null}
        argv = [str(DRIVER), *extra]
        for name, fd in fds.items():
            argv += [f"--{name}-fd", str(fd)]
        self.proc = subprocess.Popen(argv, pass_fds=set(fds.values()), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        child.close()
        os.close(null)
        os.close(empty)
        self.host.settimeout(60)

    def load(self, modules, ids, seq=1) -> tuple[int, str]:
        self.host.send(load_message(modules, ids, seq))
        msg = self.host.recv(MSG_MAX + 1)
        type_, flags, got_seq, status, data_len = struct.unpack_from("<HHIiI", msg)
        assert (type_, flags, got_seq) == (MSG_REPLY, 0, seq)
        assert len(msg) == 16 + data_len <= MSG_MAX
        return status, msg[16:].decode()

    def end(self) -> subprocess.CompletedProcess:
        self.host.close()
        out, err = self.proc.communicate(timeout=60)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)


@pytest.fixture
def driver(runtime_built):
    started = []

    def start(*extra):
        started.append(Driver(*extra))
        return started[-1]
    yield start
    for d in started:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


def e1000(abi: str):
    return config.cached_module(abi, "e1000")


def half(abi: str) -> str:
    return str(BUILD / "abi" / abi / "understudy-kernel.ko")


@pytest.mark.parametrize("abi", [config.kernel().abi, "6.1.0-47", "6.1.0-50", "6.1.0-56"])
def test_a_module_loads_on_its_own_abis_half(driver, abi):
    d = driver()
    status, text = d.load([e1000(abi)], E1000_IDS)
    assert status == 0, text
    assert text == f"abi={abi}-amd64 half={half(abi)}"
    # A second LOAD is a violation; nothing ran: no boot, no init, no probe.
    d.host.send(load_message([e1000(abi)], E1000_IDS, seq=2))
    assert d.host.recv(MSG_MAX) == b""
    res = d.end()
    assert res.returncode == 2 and "protocol violation: LOAD twice" in res.stderr
    assert "INIT" not in res.stdout and "PROBE" not in res.stdout
    assert f"LOADED modules=2 abi={abi}-amd64" in res.stdout


def test_a_device_no_modules_table_matches_is_refused(driver):
    d = driver()
    status, text = d.load([e1000(config.kernel().abi)], RTL8139_IDS)
    assert status == -errno.ENODEV
    assert text.startswith("device 10ec:8139 (subsystem 1af4:1100, class 020000) matches no "
                           "module's PCI table (e1000: "), text
    entries = int(text.split("(e1000: ")[1].split()[0])
    assert entries == 37   # e1000_pci_tbl of 6.1, QEMU's 8086:100e among them


def test_8139cp_with_its_dependency_matches_an_rtl8139(driver):
    abi = config.kernel().abi
    status, text = driver().load([config.cached_module(abi, "mii"),
                                  config.cached_module(abi, "8139cp")], RTL8139_IDS)
    assert status == 0, text


@pytest.mark.parametrize("name, content, reason", [
    ("truncated.ko", lambda ko: ko[:len(ko) // 2], "extends beyond the end of the file"),
    ("true.ko", lambda ko: open("/bin/true", "rb").read(), "no vermagic= (not a kernel module?)"),
])
def test_a_broken_or_foreign_file_is_refused_with_the_reason(driver, tmp_path, name, content,
                                                              reason):
    path = tmp_path / name
    path.write_bytes(content(e1000(config.kernel().abi).read_bytes()))
    status, text = driver().load([path], E1000_IDS)
    assert status == -errno.ENOEXEC
    assert reason in text and str(path) in text, text


def test_a_missing_file_is_enoent(driver, tmp_path):
    status, text = driver().load([tmp_path / "gone.ko"], E1000_IDS)
    assert status == -errno.ENOENT
    assert text == f"{tmp_path / 'gone.ko'}: No such file or directory\n"


def test_a_module_forced_onto_another_abis_half_is_refused_with_every_crc_mismatch(driver):
    """6.1.0-50's e1000 on the pinned (6.1.0-55) half: struct device and net_device differ."""
    d = driver("--runtime", str(KERNEL_HALF))
    status, text = d.load([e1000("6.1.0-50")], E1000_IDS)
    assert status == -errno.ENOEXEC
    lines = text.splitlines()
    assert lines[0].startswith(f"tried {config.kernel().release}: ") and "CRC mismatches" in lines[0]
    assert any(line.startswith("crc-mismatch: alloc_etherdev_mqs (module expects CRC 0x")
               for line in lines), lines
    mismatches = [line for line in lines if line.startswith("crc-mismatch: ")]
    stated = int(lines[0].split(": ")[-2].split()[0])
    left_out = int(lines[-1].split()[0][1:]) if lines[-1].endswith("left out)") else 0
    assert len(mismatches) + left_out == stated > 50
    assert len(text.encode()) <= REPLY_DATA_MAX


def test_a_headerless_abis_module_runs_on_a_half_whose_crcs_all_match(driver):
    """Debian ships no headers for 6.1.0-51; its e1000's CRCs are 6.1.0-50's."""
    status, text = driver().load([e1000("6.1.0-51")], E1000_IDS)
    assert status == 0, text
    assert text == f"abi=6.1.0-50-amd64 half={half('6.1.0-50')} module_abi=6.1.0-51-amd64"


def test_a_headerless_abis_module_no_half_matches_is_refused_with_each_halfs_reasons(driver):
    """6.1.0-48's e1000 matches no half's CRCs: each half tried, nearest first, says why."""
    status, text = driver().load([e1000("6.1.0-48")], E1000_IDS)
    assert status == -errno.ENOEXEC
    lines = text.splitlines()
    assert lines[0].startswith("ABI 6.1.0-48-amd64 has no kernel half in ")
    tried = [line.split(":")[0] for line in lines if line.startswith("tried ")]
    halves = sorted(p.name for p in (BUILD / "abi").iterdir())
    by_distance = sorted(halves, key=lambda a: (abs(int(a.rsplit("-", 1)[1]) - 48), a))
    assert tried == [f"tried {a}-amd64" for a in by_distance]
    assert all("CRC mismatches" in line for line in lines if line.startswith("tried "))
    assert f"on {by_distance[0]}-amd64:" in lines
    assert lines[-1].endswith("more lines left out)")     # 86 mismatches per half do not fit
    assert len(text.encode()) <= REPLY_DATA_MAX


def test_stand_alone_picks_the_half_by_vermagic(runtime_built):
    res = subprocess.run([str(DRIVER), "--module", str(e1000("6.1.0-50"))],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"LOADED modules=2 abi=6.1.0-50-amd64 half={half('6.1.0-50')}" in res.stdout
    assert "INIT module=e1000 result=0" in res.stdout


def test_the_e1000_nocsum_fixture_loads_like_debians_e1000_of_the_pinned_abi(driver, runtime_built):
    """The fixture of tests/daemon/test_update_incompatible.py (lab/fixtures/e1000-nocsum.patch,
    built by `python3 -m lab setup`) passes LOAD's checks as Debian's build does: it is
    refused later, by the compatibility check, not here."""
    abi = config.kernel().abi
    nocsum = config.fixture_module("e1000-nocsum")
    status, text = driver().load([nocsum], E1000_IDS)
    assert status == 0, text
    assert text == f"abi={abi}-amd64 half={half(abi)}"
    res = subprocess.run([str(DRIVER), "--module", str(nocsum)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "INIT module=e1000 result=0" in res.stdout
