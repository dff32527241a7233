# SPDX-License-Identifier: GPL-2.0
"""Writing a fault's patches into a running module, in either world.

understudy: the module lives in a driver process, placed by our loader.  The
process describes every module it loaded to debuggers through gdb's JIT
interface (runtime/driver/debugger.c): __jit_debug_descriptor, a symbol of
the (non-PIE) executable, heads a list of in-memory copies of the .ko files
whose section headers carry the addresses the sections were loaded at.  This
module reads that list through /proc/PID/mem and writes the patch there too
(root: the kernel's FOLL_FORCE lets /proc/PID/mem write the read-only text).
Nothing in the driver process had to change for it.  Runs inside the guest:
`python3 -m lab.swifi inject-process ...`.

in-kernel: the section addresses are /sys/module/NAME/sections/*, and
swifi-poke.ko (lab/swifi/poke/, which build_poke builds) writes the bytes
(a module text page is written through a writable alias).  Driven from the host through the guest agent.

In both worlds the bytes in memory must be the patch's old bytes, or nothing
is written.
"""
from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import time
from pathlib import Path

from ..errors import LabError
from .faults import Fault, Patch

JIT_DESCRIPTOR = "__jit_debug_descriptor"
POKE_MODULE = "swifi_poke"
# The in-kernel injector's source, its Kbuild and its Makefile, where it is also built.
POKE_DIR = Path(__file__).resolve().parent / "poke"
SHF_ALLOC = 0x2


class InjectionRefused(LabError):
    """The running module's bytes are not what the patch expects (nothing was written)."""


# -- understudy: a driver process -------------------------------------------------

def _symbol_address(executable: str, name: str) -> int:
    from elftools.elf.elffile import ELFFile
    with open(executable, "rb") as f:
        elf = ELFFile(f)
        if elf["e_type"] != "ET_EXEC":
            raise LabError(f"{executable} is position-independent; its JIT descriptor "
                           "address would need the load base")
        symtab = elf.get_section_by_name(".symtab")
        syms = symtab.get_symbol_by_name(name) if symtab else None
        if not syms:
            raise LabError(f"{executable} has no symbol {name}",
                           hint="is this understudy-driver (runtime/driver/debugger.c)?")
        return syms[0]["st_value"]


class ProcessMemory:
    """Another process's memory through /proc/PID/mem (root)."""

    def __init__(self, pid: int):
        self.pid = pid
        try:
            self.fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
        except FileNotFoundError:
            raise LabError(f"no process {pid}") from None
        except PermissionError:
            raise LabError(f"cannot open /proc/{pid}/mem", hint="run as root") from None

    def read(self, addr: int, size: int) -> bytes:
        data = os.pread(self.fd, size, addr)
        if len(data) != size:
            raise LabError(f"process {self.pid}: short read at {addr:#x}")
        return data

    def write(self, addr: int, data: bytes) -> None:
        if os.pwrite(self.fd, data, addr) != len(data):
            raise LabError(f"process {self.pid}: short write at {addr:#x}")

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> "ProcessMemory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")


def _registered_module(mem: ProcessMemory, symfile: int, size: int) -> tuple[str | None, dict[str, int]]:
    """The module name and loaded section addresses of one in-memory .ko copy.
    Only its headers, section names and .modinfo are read (the copies carry
    debug information: megabytes nobody needs here)."""
    (ident, _t, _m, _v, _entry, _phoff, shoff, _flags, _ehsize, _phentsize, _phnum,
     shentsize, shnum, shstrndx) = ELF_HEADER.unpack(mem.read(symfile, ELF_HEADER.size))
    if ident[:4] != b"\x7fELF" or shentsize != SECTION_HEADER.size or shstrndx >= shnum \
            or shoff + shnum * shentsize > size:
        raise LabError(f"process {mem.pid}: a JIT entry at {symfile:#x} is not a sane ELF file")
    table = mem.read(symfile + shoff, shnum * shentsize)
    headers = [SECTION_HEADER.unpack_from(table, i * shentsize) for i in range(shnum)]
    names_hdr = headers[shstrndx]
    if names_hdr[4] + names_hdr[5] > size:
        raise LabError(f"process {mem.pid}: a JIT entry's section names lie outside it")
    names = mem.read(symfile + names_hdr[4], names_hdr[5])

    def name_of(h) -> str:
        return names[h[0]:names.index(b"\0", h[0])].decode(errors="replace")

    module, addresses = None, {}
    for h in headers:
        name, flags, addr, offset, sh_size = name_of(h), h[2], h[3], h[4], h[5]
        if name == ".modinfo" and offset + sh_size <= size:
            m = re.search(rb"(?:^|\0)name=([^\0]+)", mem.read(symfile + offset, sh_size))
            module = m.group(1).decode() if m else None
        if flags & SHF_ALLOC and addr:
            addresses[name] = addr
    return module, addresses


def process_sections(pid: int, module: str) -> dict[str, int]:
    """Where the driver process `pid` loaded each allocated section of `module`."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except FileNotFoundError:
        raise LabError(f"no process {pid}") from None
    descriptor = _symbol_address(exe, JIT_DESCRIPTOR)
    with ProcessMemory(pid) as mem:
        _version, _action, _relevant, entry = struct.unpack("<IIQQ", mem.read(descriptor, 24))
        for _ in range(256):   # a list the process wrote: bounded, not trusted to end
            if not entry:
                break
            nxt, _prev, symfile, size = struct.unpack("<QQQQ", mem.read(entry, 32))
            if not 0 < size < 1 << 30:
                raise LabError(f"process {pid}: implausible JIT entry of {size} bytes")
            name, addresses = _registered_module(mem, symfile, size)
            if name == module:
                return addresses
            entry = nxt
    raise LabError(f"process {pid} has not registered a module named {module}",
                   hint="is it an understudy-driver that has loaded the module?")


def _check_and_write(read, write, where: list[tuple[int, Patch]]) -> None:
    for addr, p in where:
        current = read(addr, len(p.old))
        if current != p.old:
            raise InjectionRefused(
                f"{p.function}+{p.function_offset:#x} ({p.section}+{p.offset:#x} at {addr:#x}) "
                f"holds {current.hex()}, not {p.old.hex()}: nothing written")
    for addr, p in where:
        write(addr, p.new)


def _stop_all_threads(pid: int, timeout: float = 2.0) -> None:
    """SIGSTOP, and wait until every thread has stopped (at an instruction boundary)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except FileNotFoundError:
                continue
            states.append(stat.rsplit(")", 1)[1].split()[0])
        if all(s in "tT" for s in states):
            return
        time.sleep(0.0005)


def _wait_for_trigger(path: str, timeout: float) -> None:
    """Makes a FIFO at `path`, prints "ready", and waits for data in it."""
    import select
    if os.path.lexists(path):
        os.unlink(path)
    os.mkfifo(path)
    # Opened read-write, the FIFO has a writer of its own: poll() then waits
    # for data, not for the first writer to come and go.
    fd = os.open(path, os.O_RDWR)
    try:
        print(json.dumps({"ready": True}), flush=True)
        poll = select.poll()
        poll.register(fd, select.POLLIN)
        if not poll.poll(int(timeout * 1000)):
            raise LabError(f"nothing was written into {path} within {timeout} s")
    finally:
        os.close(fd)
        os.unlink(path)


def inject_process(pid: int, fault: Fault, revert: bool = False, trigger: str | None = None,
                   trigger_timeout: float = 300) -> dict:
    """Writes the fault (or, with revert, its undo) into driver process `pid`;
    returns the addresses and when the bytes were written (CLOCK_MONOTONIC ns,
    and the wall clock in s).

    With `trigger`, everything is prepared first (addresses found, old bytes
    checked), a FIFO is made at that path, "ready" is printed, and the write
    waits for a line written into the FIFO: the caller chooses the moment
    without paying for Python's start-up then. The wait is a blocking poll,
    not a loop: a busy guest CPU would starve the driver, and its heartbeat
    would report hangs that are not there.
    The process is stopped (SIGSTOP) for the write, so no thread executes a
    half-written instruction."""
    sections = process_sections(pid, fault.module)
    patches = [p.reverted() if revert else p for p in fault.patches]
    missing = [p.section for p in patches if p.section not in sections]
    if missing:
        raise LabError(f"process {pid}: {fault.module} has no loaded section {missing[0]}")
    where = [(sections[p.section] + p.offset, p) for p in patches]
    with ProcessMemory(pid) as mem:
        if trigger:
            _check_and_write(mem.read, lambda addr, data: None, where)
            _wait_for_trigger(trigger, trigger_timeout)
        try:
            _stop_all_threads(pid)
        except (ProcessLookupError, FileNotFoundError):
            raise LabError(f"no process {pid}") from None
        try:
            _check_and_write(mem.read, mem.write, where)
            written_ns, written_at = time.monotonic_ns(), time.time()
        except OSError:
            raise LabError(f"no process {pid}") from None
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    return {"pid": pid, "addresses": [hex(a) for a, _ in where], "written_ns": written_ns,
            "written_at": written_at}


def wait_exit(pid: int, timeout: float) -> int | None:
    """CLOCK_MONOTONIC ns when process `pid` (not our child) is gone, or None."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return time.monotonic_ns()
    try:
        import select
        poll = select.poll()
        poll.register(fd, select.POLLIN)
        if poll.poll(int(timeout * 1000)):
            return time.monotonic_ns()
        return None
    finally:
        os.close(fd)


# -- in-kernel: the guest's own module ---------------------------------------------

def kernel_sections(guest, module: str, names: set[str]) -> dict[str, int]:
    """The guest kernel's addresses of a loaded module's sections (root)."""
    out = {}
    for name in names:
        try:
            raw = guest.read_file(f"/sys/module/{module}/sections/{name}")
        except FileNotFoundError:
            raise LabError(f"the guest kernel has no section {name} of {module} "
                           "(is the module loaded?)") from None
        out[name] = int(raw.decode().strip(), 16)
    return out


def build_poke() -> Path:
    """Builds swifi-poke.ko against the pinned kernel's headers (make skips it if
    it is up to date); its path, which the guest sees too (its root is the host's)."""
    res = subprocess.run(["make", "-s", "-C", str(POKE_DIR)], capture_output=True, text=True)
    if res.returncode:
        raise LabError(f"make -C {POKE_DIR} failed:\n{res.stdout}{res.stderr}",
                       hint="python3 -m lab setup installs the kernel headers")
    return POKE_DIR / "swifi-poke.ko"


def inject_kernel(guest, fault: Fault, poke_ko: Path | str, revert: bool = False,
                  timeout: float = 30) -> dict:
    """Writes the fault (or its undo) into the guest kernel's copy of the module.
    Each patch is one insmod of swifi-poke.ko (which checks the old bytes)."""
    patches = [p.reverted() if revert else p for p in fault.patches]
    sections = kernel_sections(guest, fault.module, {p.section for p in patches})
    addresses = []
    for p in patches:
        addr = sections[p.section] + p.offset
        # One guest command per patch: the guest may stop answering right after
        # it. The unload runs in the background: a CPU the fault keeps spinning
        # holds up the RCU grace period it waits for, for ever. So the next
        # patch first waits for the previous unload to finish.
        script = (f"rmmod {POKE_MODULE} 2>/dev/null; "
                  f"while [ -e /sys/module/{POKE_MODULE} ]; do sleep 0.05; done; "
                  f"insmod {poke_ko} addr={addr:#x} old={p.old.hex()} new={p.new.hex()} || "
                  f"{{ dmesg | grep 'swifi:' | tail -1 >&2; exit 1; }}; "
                  f"rmmod {POKE_MODULE} </dev/null >/dev/null 2>&1 &")
        res = guest.run(script, timeout=timeout)
        if res.returncode != 0:
            if "not written" in res.err:
                raise InjectionRefused(f"{p.function}+{p.function_offset:#x}: {res.err.strip()}")
            raise LabError(f"insmod swifi-poke failed: {res.err.strip()}")
        addresses.append(hex(addr))
    return {"addresses": addresses}
