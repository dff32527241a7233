# SPDX-License-Identifier: GPL-2.0
"""The fault generator: Nooks' (Rio's) single-instruction faults, computed from a .ko file.

A fault is a list of patches, each (section, offset within it, old bytes, new
bytes), chosen deterministically from (module sha256, fault type, seed).  The
same patch is later written into the *running* module, in the guest's kernel
or in understudy's driver process (inject.py), so the fault is gone when the
driver is reloaded from disk: as in Nooks, recovery reloads a clean binary.

Never patched: bytes a relocation covers (the loader or the kernel writes
them after we read the file), and instructions the kernel or our loader
rewrites at load time (call sites of __fentry__, return thunks, retpolines,
static calls, jump labels, lock prefixes, BUG/WARN sites): the sections that
list those sites are read through their relocations.  Injection re-checks
the old bytes in memory anyway, so a site the list misses is refused, never
half-patched.  Only .text-like sections that run after load are used
(.init.text ran before any injection, .exit.text runs at unload).

Nooks' Table II types: source, destination, pointer, interface, branch,
loop, text, nop.  Run-time types: hang (`jmp .` early in a hot-path
function), null (a load through a zeroed register at the start of one), and
alloc (an allocator's result replaced by NULL right where the driver tests
it).  A double free is not offered: it needs a second call with the same
pointer, which no single in-place instruction change can make honestly.
"""
from __future__ import annotations

import hashlib
import io
import random
import re
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from ..errors import LabError

NOOKS_TYPES = ["source", "destination", "pointer", "interface", "branch", "loop", "text", "nop"]
RUNTIME_TYPES = ["hang", "null", "alloc"]
FAULT_TYPES = NOOKS_TYPES + RUNTIME_TYPES

# Executable sections that never run while a driver is up, or only at unload.
SKIP_TEXT = {".init.text", ".exit.text"}
# Sections listing code sites the kernel (and understudy's loader) rewrite at load.
SITE_SECTIONS = {"__mcount_loc", ".smp_locks", ".retpoline_sites", ".return_sites",
                 "__jump_table", ".static_call_sites", "__bug_table", ".altinstructions",
                 ".parainstructions", "__ex_table", ".ibt_endbr_seal", ".call_sites"}
# Bytes each x86-64 relocation type writes (R_X86_64_*).
RELOC_SIZE = {1: 8, 2: 4, 4: 4, 9: 4, 10: 4, 11: 4, 12: 2, 13: 2, 14: 1, 15: 1, 24: 8,
              41: 4, 42: 4}
# Single-instruction NOPs by length (Intel's recommended forms).
NOPS = {1: "90", 2: "6690", 3: "0f1f00", 4: "0f1f4000", 5: "0f1f440000", 6: "660f1f440000",
        7: "0f1f8000000000", 8: "0f1f840000000000", 9: "660f1f840000000000"}
# x86-64 SysV argument registers, every width.
ARG_REGS = {"rdi", "edi", "di", "dil", "rsi", "esi", "si", "sil", "rdx", "edx", "dx", "dl",
            "rcx", "ecx", "cx", "cl", "r8", "r8d", "r8w", "r8b", "r9", "r9d", "r9w", "r9b"}
# Kernel allocators whose NULL result a driver must handle.
ALLOCATORS = {"__netdev_alloc_skb", "__napi_alloc_skb", "netdev_alloc_frag", "napi_alloc_frag",
              "__netdev_alloc_frag_align", "__napi_alloc_frag_align", "__alloc_skb",
              "__kmalloc", "kmalloc_trace", "kmem_cache_alloc", "kmem_cache_alloc_trace",
              "dma_alloc_attrs", "vzalloc", "vmalloc", "__alloc_pages", "alloc_pages",
              "page_frag_alloc_align", "build_skb", "napi_build_skb", "__kmalloc_node",
              "alloc_etherdev_mqs", "kmemdup"}
# Hot-path functions for run-time faults: transmit, interrupt, NAPI poll.
HOT_PATTERNS = [r"xmit", r"intr$|_interrupt$|_isr$", r"_clean$|_poll$"]
# Allocation failures are injected where the data path allocates (RX refill, receive).
DATA_PATH = r"rx_irq|alloc_rx|refill|_rx$|_tx$|xmit|_poll$|_clean$|_intr$"
NOT_DATA_PATH = r"probe|setup|test|eeprom|ringparam|set_"
HANG = bytes.fromhex("ebfe")                 # jmp .
NULL_LOAD = bytes.fromhex("31c08b00")        # xor %eax,%eax; mov (%rax),%eax
TEST_RAX = bytes.fromhex("4885c0")           # test %rax,%rax
ZERO_RAX = bytes.fromhex("31c090")           # xor %eax,%eax; nop: rax = 0, same flags as the test
DISP_DELTAS = [8, 16, 24, 32, 64, 128, -8, -16, -32, -64]


@dataclass(frozen=True)
class Patch:
    section: str
    offset: int          # within the section
    old: bytes
    new: bytes
    function: str
    function_offset: int
    before: str          # disassembly of the old bytes
    after: str           # disassembly of the new bytes

    def to_json(self) -> dict:
        d = asdict(self)
        d["old"], d["new"] = self.old.hex(), self.new.hex()
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Patch":
        return cls(**{**d, "old": bytes.fromhex(d["old"]), "new": bytes.fromhex(d["new"])})

    def reverted(self) -> "Patch":
        return Patch(self.section, self.offset, self.new, self.old, self.function,
                     self.function_offset, self.after, self.before)


@dataclass(frozen=True)
class Fault:
    module: str          # the module's name (modinfo name=)
    module_sha256: str
    type: str
    seed: int
    patches: list[Patch] = field(default_factory=list)

    @property
    def description(self) -> str:
        return "; ".join(f"{p.function}+{p.function_offset:#x}: {p.before} -> {p.after}"
                         for p in self.patches)

    def to_json(self) -> dict:
        return {"module": self.module, "module_sha256": self.module_sha256, "type": self.type,
                "seed": self.seed, "patches": [p.to_json() for p in self.patches],
                "description": self.description}

    @classmethod
    def from_json(cls, d: dict) -> "Fault":
        return cls(d["module"], d["module_sha256"], d["type"], d["seed"],
                   [Patch.from_json(p) for p in d["patches"]])


@dataclass(frozen=True)
class Insn:
    section: str
    offset: int
    raw: bytes
    text: str
    function: str
    function_start: int
    cs: object = field(compare=False, repr=False)   # the capstone instruction


def _disassembler(detail: bool = True):
    import capstone
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = detail
    return md


def disassemble(code: bytes, address: int = 0) -> str:
    """`mnemonic operands; ...` of a byte string at a section offset ("(invalid)"
    where it does not decode)."""
    md = _disassembler(detail=False)
    out, pos = [], 0
    while pos < len(code):
        insn = next(md.disasm(code[pos:], address + pos, 1), None)
        if insn is None:
            out.append(f"(invalid {code[pos:].hex()})")
            break
        out.append(f"{insn.mnemonic} {insn.op_str}".strip())
        pos += insn.size
    return "; ".join(out)


def nop_bytes(n: int) -> bytes:
    """n bytes of NOP: one instruction up to 9 bytes, then several."""
    out = b""
    while n > 0:
        k = min(n, 9)
        out += bytes.fromhex(NOPS[k])
        n -= k
    return out


class Module:
    """A .ko's executable code as the fault generator sees it."""

    def __init__(self, path: str | Path, data: bytes | None = None):
        self.path = Path(path)
        self.data = data if data is not None else self.path.read_bytes()
        self.sha256 = hashlib.sha256(self.data).hexdigest()
        try:
            from elftools.elf.elffile import ELFFile
            from elftools.common.exceptions import ELFError
        except ImportError:
            raise LabError("pyelftools is not installed", hint="python3 -m lab setup") from None
        try:
            self.elf = ELFFile(io.BytesIO(self.data))
            if self.elf["e_type"] != "ET_REL" or self.elf["e_machine"] != "EM_X86_64":
                raise LabError(f"{self.path}: not an x86-64 kernel module (ELF relocatable)")
            self.sections = list(self.elf.iter_sections())
            self.symtab = self.elf.get_section_by_name(".symtab")
        except ELFError as e:
            raise LabError(f"{self.path}: not a kernel module: {e}") from None
        if self.symtab is None:
            raise LabError(f"{self.path}: has no symbol table")

    @cached_property
    def name(self) -> str:
        modinfo = self.elf.get_section_by_name(".modinfo")
        m = re.search(rb"(?:^|\0)name=([^\0]+)", modinfo.data() if modinfo else b"")
        return m.group(1).decode() if m else self.path.name.removesuffix(".ko")

    @cached_property
    def text_sections(self) -> dict[int, str]:
        """Index -> name of the executable sections faults may go into."""
        return {i: s.name for i, s in enumerate(self.sections)
                if s["sh_flags"] & 0x4 and s["sh_flags"] & 0x2 and s["sh_type"] == "SHT_PROGBITS"
                and s.name not in SKIP_TEXT and s["sh_size"] > 0}

    def _relocations(self, target_name: str):
        rela = self.elf.get_section_by_name(".rela" + target_name)
        return rela.iter_relocations() if rela is not None else []

    @cached_property
    def relocated(self) -> dict[str, set[int]]:
        """Per text section, every byte offset a relocation writes."""
        out: dict[str, set[int]] = {}
        for name in self.text_sections.values():
            covered = out.setdefault(name, set())
            for r in self._relocations(name):
                size = RELOC_SIZE.get(r["r_info_type"], 8)
                covered.update(range(r["r_offset"], r["r_offset"] + size))
        return out

    @cached_property
    def sites(self) -> dict[str, set[int]]:
        """Per text section, offsets that the load-time patching tables point at."""
        out: dict[str, set[int]] = {name: set() for name in self.text_sections.values()}
        for site_section in SITE_SECTIONS:
            for r in self._relocations(site_section):
                sym = self.symtab.get_symbol(r["r_info_sym"])
                shndx = sym["st_shndx"]
                if isinstance(shndx, int) and shndx in self.text_sections:
                    out[self.text_sections[shndx]].add(sym["st_value"] + r["r_addend"])
        return out

    @cached_property
    def functions(self) -> list[tuple[str, str, int, int]]:
        """(section, name, start, size) of every sized function in the text sections."""
        funcs = set()
        for sym in self.symtab.iter_symbols():
            shndx = sym["st_shndx"]
            if sym["st_info"]["type"] == "STT_FUNC" and sym["st_size"] > 0 \
                    and isinstance(shndx, int) and shndx in self.text_sections:
                funcs.add((self.text_sections[shndx], sym.name, sym["st_value"], sym["st_size"]))
        return sorted(funcs, key=lambda f: (f[0], f[2], f[1]))

    def section_data(self, name: str) -> bytes:
        return self.elf.get_section_by_name(name).data()

    @cached_property
    def instructions(self) -> list[Insn]:
        """Every instruction of every function, in order."""
        md = _disassembler()
        out: list[Insn] = []
        for section, fname, start, size in self.functions:
            code = self.section_data(section)[start:start + size]
            for cs in md.disasm(code, start):
                out.append(Insn(section, cs.address, bytes(cs.bytes),
                                f"{cs.mnemonic} {cs.op_str}".strip(), fname, start, cs))
        return out

    def untouchable(self, section: str, offset: int, size: int) -> bool:
        """Whether any of the bytes is relocated."""
        covered = self.relocated.get(section, set())
        return any(o in covered for o in range(offset, offset + size))

    @cached_property
    def site_instructions(self) -> set[tuple[str, int]]:
        """(section, offset) of each instruction that contains a load-time patch site."""
        out = set()
        for insn in self.instructions:
            sites = self.sites.get(insn.section, ())
            if any(o in sites for o in range(insn.offset, insn.offset + len(insn.raw))):
                out.add((insn.section, insn.offset))
        return out

    def eligible(self, insn: Insn) -> bool:
        return not self.untouchable(insn.section, insn.offset, len(insn.raw)) \
            and (insn.section, insn.offset) not in self.site_instructions

    @cached_property
    def eligible_instructions(self) -> list[Insn]:
        return [i for i in self.instructions if self.eligible(i)]

    def patch(self, insn: Insn, new: bytes, at: int | None = None) -> Patch:
        """A patch of `new` over the instruction (or at a given section offset)."""
        offset = insn.offset if at is None else at
        old = self.section_data(insn.section)[offset:offset + len(new)]
        assert len(old) == len(new) and old != new
        assert not self.untouchable(insn.section, offset, len(new)), "patch covers a relocation"
        # A run-time fault may overwrite the start of several instructions:
        # `before` names all of them.
        covered = [i.text for i in self.instructions if i.section == insn.section
                   and i.offset < offset + len(new) and i.offset + len(i.raw) > offset]
        return Patch(insn.section, offset, old, new, insn.function, offset - insn.function_start,
                     "; ".join(covered) or disassemble(old, offset), disassemble(new, offset))


# -- candidate sites per fault type ------------------------------------------------

def _decode_one(code: bytes):
    return next(_disassembler().disasm(code, 0), None)


def _operand_key(op) -> tuple:
    """What identifies an operand, for 'only this operand changed' checks."""
    from capstone import x86
    if op.type == x86.X86_OP_REG:
        return ("reg", op.reg, op.size)
    if op.type == x86.X86_OP_IMM:
        return ("imm", op.imm, op.size)
    if op.type == x86.X86_OP_MEM:
        m = op.mem
        return ("mem", m.segment, m.base, m.index, m.scale, m.disp, op.size)
    return ("other", op.type)


def _register_variants(insn: Insn, operand: int) -> list[bytes]:
    """Encodings of the instruction with one ModRM register field changed such
    that only operand `operand` (0 destination, 1 source) names another register."""
    from capstone import x86
    cs = insn.cs
    ops = list(cs.operands)
    if cs.modrm_offset == 0 or len(ops) != 2 or ops[operand].type != x86.X86_OP_REG:
        return []
    raw, pos = bytearray(insn.raw), cs.modrm_offset
    modrm = raw[pos]
    fields = [(3, 0x38)] + ([(0, 0x07)] if modrm >> 6 == 3 else [])
    out = []
    for shift, mask in fields:
        for value in range(8):
            new_modrm = (modrm & ~mask) | (value << shift)
            if new_modrm == modrm:
                continue
            variant = bytes(raw[:pos]) + bytes([new_modrm]) + bytes(raw[pos + 1:])
            d = _decode_one(variant)
            if d is None or d.size != len(raw) or d.mnemonic != cs.mnemonic:
                continue
            new_ops = list(d.operands)
            if len(new_ops) != 2 or new_ops[operand].type != x86.X86_OP_REG:
                continue
            other = 1 - operand
            if _operand_key(new_ops[other]) == _operand_key(ops[other]) \
                    and new_ops[operand].reg != ops[operand].reg \
                    and new_ops[operand].size == ops[operand].size:
                out.append(variant)
    return out


def _may_have_register_variant(insn: Insn, operand: int) -> bool:
    from capstone import x86
    ops = insn.cs.operands
    return insn.cs.modrm_offset > 0 and len(ops) == 2 and ops[operand].type == x86.X86_OP_REG


def _may_have_pointer_variant(insn: Insn) -> bool:
    from capstone import x86
    mems = [op for op in insn.cs.operands if op.type == x86.X86_OP_MEM]
    return insn.cs.modrm_offset > 0 and len(mems) == 1 \
        and mems[0].mem.base not in (0, x86.X86_REG_RIP)


def _pointer_variants(insn: Insn) -> list[bytes]:
    """The memory operand's address calculation changed: another displacement,
    or (no displacement) another base register."""
    from capstone import x86
    cs = insn.cs
    mems = [op for op in cs.operands if op.type == x86.X86_OP_MEM]
    if len(mems) != 1 or cs.modrm_offset == 0 or mems[0].mem.base in (0, x86.X86_REG_RIP):
        return []
    raw = bytearray(insn.raw)
    out = []
    if cs.disp_size in (1, 4):
        lo, hi = (-128, 127) if cs.disp_size == 1 else (-(1 << 31), (1 << 31) - 1)
        for delta in DISP_DELTAS:
            disp = cs.disp + delta
            if lo <= disp <= hi:
                v = bytearray(raw)
                v[cs.disp_offset:cs.disp_offset + cs.disp_size] = disp.to_bytes(
                    cs.disp_size, "little", signed=True)
                out.append(bytes(v))
    elif cs.disp_size == 0 and raw[cs.modrm_offset] >> 6 == 0 and raw[cs.modrm_offset] & 7 not in (4, 5):
        modrm = raw[cs.modrm_offset]
        for base in range(8):
            if base in (4, 5) or base == modrm & 7:
                continue
            v = bytearray(raw)
            v[cs.modrm_offset] = (modrm & ~7) | base
            out.append(bytes(v))
    good = []
    for v in out:
        d = _decode_one(v)
        if d is not None and d.size == len(raw) and d.mnemonic == cs.mnemonic:
            good.append(v)
    return good


def _is_relative_branch(cs) -> bool:
    from capstone import x86
    return (cs.group(x86.X86_GRP_JUMP) and len(cs.operands) == 1
            and cs.operands[0].type == x86.X86_OP_IMM)


def _invert_condition(raw: bytes) -> bytes | None:
    b = bytearray(raw)
    if 0x70 <= b[0] <= 0x7F:
        b[0] ^= 1
    elif len(b) >= 2 and b[0] == 0x0F and 0x80 <= b[1] <= 0x8F:
        b[1] ^= 1
    else:
        return None
    return bytes(b)


def _writes_argument(cs) -> bool:
    try:
        _, written = cs.regs_access()
    except Exception:  # noqa: BLE001 - capstone cannot tell for a few instructions
        return False
    return any(cs.reg_name(r) in ARG_REGS for r in written)


class Generator:
    """Chooses fault sites in one module; the same inputs always give the same fault."""

    def __init__(self, module: Module):
        self.m = module

    def _rng(self, fault_type: str, seed: int, n: int) -> random.Random:
        return random.Random(f"{self.m.sha256}:{fault_type}:{seed}:{n}")

    def candidates(self, fault_type: str) -> list:
        """What the type may pick from: instructions (or (instruction, variants) pairs)."""
        eligible = self.m.eligible_instructions
        # Variants are computed for the chosen instruction only (decoding
        # every alternative of every instruction takes seconds); one that
        # has none is passed over (generate draws again).
        if fault_type in ("source", "destination"):
            operand = 1 if fault_type == "source" else 0
            return [i for i in eligible if _may_have_register_variant(i, operand)]
        if fault_type == "pointer":
            return [i for i in eligible if _may_have_pointer_variant(i)]
        if fault_type == "interface":
            return self._interface_sites()
        if fault_type == "branch":
            return [i for i in eligible if _is_relative_branch(i.cs)]
        if fault_type == "loop":
            return [i for i in eligible if _is_relative_branch(i.cs)
                    and i.cs.operands[0].imm < i.offset
                    and i.cs.operands[0].imm >= i.function_start
                    and _invert_condition(i.raw) is not None]
        if fault_type in ("text", "nop"):
            return [i for i in eligible if i.cs.mnemonic not in ("nop", "int3")]
        if fault_type in ("hang", "null"):
            return self._hot_entries(len(HANG if fault_type == "hang" else NULL_LOAD))
        if fault_type == "alloc":
            return self._alloc_tests()
        raise LabError(f"unknown fault type {fault_type!r}", hint=f"one of {', '.join(FAULT_TYPES)}")

    def _interface_sites(self) -> list[Insn]:
        """The instruction setting up an argument register for a call, found by
        walking back from the call within its straight-line code."""
        insns, eligible = self.m.instructions, set(id(i) for i in self.m.eligible_instructions)
        out = []
        for k, insn in enumerate(insns):
            if insn.cs.mnemonic != "call":
                continue
            for back in range(k - 1, max(k - 8, -1), -1):
                prev = insns[back]
                if prev.function != insn.function or prev.cs.mnemonic in ("call", "ret", "jmp") \
                        or prev.cs.mnemonic.startswith("j"):
                    break
                if _writes_argument(prev.cs) and prev.cs.mnemonic not in ("push", "pop"):
                    if id(prev) in eligible:
                        out.append(prev)
        return sorted(set(out), key=lambda i: (i.section, i.offset))

    def _hot_functions(self) -> list[str]:
        names = [f[1] for f in self.m.functions]
        hot = []
        for pattern in HOT_PATTERNS:
            hot += [n for n in names if re.search(pattern, n) and n not in hot
                    and "." not in n and "test" not in n]
        return hot

    def _hot_entries(self, size: int) -> list[tuple[Insn, int]]:
        """The first instruction boundary of each hot function from which `size`
        bytes are free of relocations and patch sites."""
        hot = set(self._hot_functions())
        out, seen = [], set()
        insns = self.m.instructions
        for k, insn in enumerate(insns):
            if insn.function not in hot or insn.function in seen:
                continue
            span, j = 0, k
            while span < size and j < len(insns) and insns[j].function == insn.function \
                    and self.m.eligible(insns[j]):
                span += len(insns[j].raw)
                j += 1
            if span >= size:
                out.append((insn, insn.offset))
                seen.add(insn.function)
        return out

    def _alloc_tests(self) -> list[Insn]:
        """The data path's `test %rax,%rax` of an allocator's result: at most three
        instructions after the call, none of them a branch or writing rax.
        (A copy of rax made before the test keeps the real pointer, but the
        driver takes its allocation-failure path, and the object leaks.)"""
        calls = set()
        for name in self.m.text_sections.values():
            for r in self.m._relocations(name):
                sym = self.m.symtab.get_symbol(r["r_info_sym"])
                if sym.name in ALLOCATORS:
                    calls.add((name, r["r_offset"] + 4))   # end of the call's rel32
        insns, eligible, out = self.m.instructions, self.m.eligible_instructions, []
        eligible_ids = set(id(i) for i in eligible)
        for k, insn in enumerate(insns):
            if (insn.section, insn.offset) not in calls or not re.search(DATA_PATH, insn.function) \
                    or re.search(NOT_DATA_PATH, insn.function):
                continue
            for nxt in insns[k:k + 3]:
                if nxt.raw == TEST_RAX:
                    if id(nxt) in eligible_ids:
                        out.append(nxt)
                    break
                _, written = nxt.cs.regs_access()
                if nxt.cs.mnemonic.startswith("j") or any(
                        nxt.cs.reg_name(r) in ("rax", "eax") for r in written):
                    break
        return out

    def generate(self, fault_type: str, seed: int, count: int = 1) -> Fault:
        """`count` patches of one type (distinct instructions), for (module, type, seed)."""
        if fault_type not in FAULT_TYPES:
            raise LabError(f"unknown fault type {fault_type!r}", hint=f"one of {', '.join(FAULT_TYPES)}")
        pool = self.candidates(fault_type)
        if len(pool) < count:
            raise LabError(f"{self.m.name}: {len(pool)} site(s) for a {fault_type} fault, "
                           f"{count} wanted")
        patches: list[Patch] = []
        used: set[tuple[str, int]] = set()
        for n in range(count):
            rng = self._rng(fault_type, seed, n)
            for _ in range(10 * len(pool)):
                choice = pool[rng.randrange(len(pool))]
                patch = self._make(fault_type, choice, rng)
                if patch is not None and not any(
                        (patch.section, o) in used
                        for o in range(patch.offset, patch.offset + len(patch.new))):
                    break
            else:
                raise LabError(f"{self.m.name}: no site found for {fault_type} fault {n + 1}")
            used.update((patch.section, o) for o in range(patch.offset, patch.offset + len(patch.new)))
            patches.append(patch)
        return Fault(self.m.name, self.m.sha256, fault_type, seed, patches)

    def _make(self, fault_type: str, choice, rng: random.Random) -> Patch | None:
        m = self.m
        if fault_type in ("source", "destination", "pointer"):
            variants = (_pointer_variants(choice) if fault_type == "pointer" else
                        _register_variants(choice, 1 if fault_type == "source" else 0))
            if not variants:
                return None
            return m.patch(choice, variants[rng.randrange(len(variants))])
        if fault_type in ("interface", "branch", "nop"):
            return m.patch(choice, nop_bytes(len(choice.raw)))
        if fault_type == "loop":
            return m.patch(choice, _invert_condition(choice.raw))
        if fault_type == "text":
            bit = rng.randrange(len(choice.raw) * 8)
            flipped = bytearray(choice.raw)
            flipped[bit // 8] ^= 1 << (bit % 8)
            return m.patch(choice, bytes(flipped))
        if fault_type in ("hang", "null"):
            insn, at = choice
            return m.patch(insn, HANG if fault_type == "hang" else NULL_LOAD, at=at)
        if fault_type == "alloc":
            return m.patch(choice, ZERO_RAX)
        raise AssertionError(fault_type)


_GENERATORS: dict[str, Generator] = {}


def generator_for(path: str | Path) -> Generator:
    """A cached generator per module file (disassembly takes a second or two)."""
    key = str(Path(path).resolve())
    if key not in _GENERATORS:
        _GENERATORS[key] = Generator(Module(path))
    return _GENERATORS[key]
