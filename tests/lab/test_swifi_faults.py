# SPDX-License-Identifier: GPL-2.0
"""The fault generator (lab/swifi/faults.py) on Debian's e1000.ko, without a VM:
each type changes exactly the instruction it means to, never a byte a
relocation or a load-time patch site covers, and the same (module, type,
seed) always gives the same patch."""
import pytest
from capstone import x86

from lab.errors import LabError
from lab.swifi import faults
from lab.swifi.campaign import host_module
from lab.swifi.faults import FAULT_TYPES, Generator, Module, disassemble

SEEDS = range(12)


@pytest.fixture(scope="module")
def gen(lab_ready):
    return Generator(Module(host_module("e1000")))


def one(code: bytes, at: int):
    insns = list(faults._disassembler().disasm(code, at))
    assert len(insns) == 1 and insns[0].size == len(code), (code.hex(), insns)
    return insns[0]


def insn_at(gen, patch):
    found = [i for i in gen.m.instructions if i.section == patch.section and i.offset == patch.offset]
    assert found, f"{patch} does not start at an instruction"
    return found[0]


def is_nops(code: bytes) -> bool:
    return all(part.startswith("nop") for part in disassemble(code).split("; "))


@pytest.mark.parametrize("fault_type", FAULT_TYPES)
def test_patches_match_the_file_and_never_touch_relocated_or_load_patched_bytes(gen, fault_type):
    data = {name: gen.m.section_data(name) for name in gen.m.text_sections.values()}
    for seed in SEEDS:
        for p in gen.generate(fault_type, seed).patches:
            assert p.section in (".text", ".text.unlikely"), p
            assert data[p.section][p.offset:p.offset + len(p.old)] == p.old
            assert len(p.new) == len(p.old) and p.new != p.old
            covered = set(range(p.offset, p.offset + len(p.new)))
            assert not covered & gen.m.relocated[p.section], p
            touched = [i for i in gen.m.instructions if i.section == p.section
                       and i.offset < p.offset + len(p.new) and i.offset + len(i.raw) > p.offset]
            assert touched and not any((i.section, i.offset) in gen.m.site_instructions for i in touched), p


def test_the_same_inputs_give_the_same_fault_and_seeds_differ(gen, lab_ready):
    fresh = Generator(Module(host_module("e1000")))
    for t in FAULT_TYPES:
        assert gen.generate(t, 7) == fresh.generate(t, 7)
    offsets = {gen.generate("text", s).patches[0].offset for s in SEEDS}
    assert len(offsets) > len(SEEDS) // 2
    assert gen.generate("nop", 3, count=5).patches[:1] != gen.generate("nop", 4, count=5).patches[:1]
    assert len({p.offset for p in gen.generate("nop", 3, count=5).patches}) == 5


def test_the_fentry_call_sites_are_known_and_avoided(gen):
    # Every function starts with `call __fentry__`, whose rel32 is relocated and
    # which the kernel turns into a NOP at load: a listed site.
    xmit = next(f for f in gen.m.functions if f[1] == "e1000_xmit_frame")
    assert set(range(xmit[2] + 1, xmit[2] + 5)) <= gen.m.relocated[".text"]
    assert (".text", xmit[2]) in gen.m.site_instructions
    hang = gen.generate("hang", 0).patches[0]
    assert hang.function_offset == 5, hang


@pytest.mark.parametrize("fault_type,operand", [("source", 1), ("destination", 0)])
def test_register_faults_change_one_register_operand(gen, fault_type, operand):
    for seed in SEEDS:
        p = gen.generate(fault_type, seed).patches[0]
        old, new = one(p.old, p.offset), one(p.new, p.offset)
        assert old.mnemonic == new.mnemonic and insn_at(gen, p).raw == p.old
        assert new.operands[operand].type == x86.X86_OP_REG
        assert new.operands[operand].reg != old.operands[operand].reg
        other = 1 - operand
        assert faults._operand_key(new.operands[other]) == faults._operand_key(old.operands[other])


def test_pointer_faults_change_only_the_address_calculation(gen):
    for seed in SEEDS:
        p = gen.generate("pointer", seed).patches[0]
        old, new = one(p.old, p.offset), one(p.new, p.offset)
        assert old.mnemonic == new.mnemonic
        pairs = list(zip(old.operands, new.operands))
        changed = [(a, b) for a, b in pairs if faults._operand_key(a) != faults._operand_key(b)]
        assert len(changed) == 1 and changed[0][0].type == x86.X86_OP_MEM, p
        a, b = changed[0][0].mem, changed[0][1].mem
        assert (a.disp != b.disp) != (a.base != b.base) and a.index == b.index, p


def test_interface_faults_drop_an_argument_setup_before_a_call(gen):
    for seed in SEEDS:
        p = gen.generate("interface", seed).patches[0]
        insn = insn_at(gen, p)
        assert insn.raw == p.old and is_nops(p.new)
        _, written = insn.cs.regs_access()
        assert {insn.cs.reg_name(r) for r in written} & faults.ARG_REGS, insn.text
        k = gen.m.instructions.index(insn)
        assert any(i.cs.mnemonic == "call" for i in gen.m.instructions[k + 1:k + 9]), insn.text


def test_branch_loop_text_and_nop_faults(gen):
    for seed in SEEDS:
        b = gen.generate("branch", seed).patches[0]
        assert insn_at(gen, b).raw == b.old and insn_at(gen, b).cs.mnemonic.startswith("j")
        assert is_nops(b.new)

        lp = gen.generate("loop", seed).patches[0]
        old, new = one(lp.old, lp.offset), one(lp.new, lp.offset)
        assert old.operands[0].imm == new.operands[0].imm < lp.offset, "a backward branch, same target"
        assert old.mnemonic != new.mnemonic and old.mnemonic.startswith("j")

        t = gen.generate("text", seed).patches[0]
        assert insn_at(gen, t).raw == t.old
        assert sum(bin(a ^ b).count("1") for a, b in zip(t.old, t.new)) == 1

        n = gen.generate("nop", seed).patches[0]
        assert insn_at(gen, n).raw == n.old and is_nops(n.new)


def test_run_time_faults_hit_the_hot_path(gen):
    hot = {"e1000_xmit_frame", "e1000_intr", "e1000_clean"}
    for seed in SEEDS:
        h = gen.generate("hang", seed).patches[0]
        assert h.new == faults.HANG and h.function in hot and disassemble(h.new, h.offset) == f"jmp {h.offset:#x}"
        n = gen.generate("null", seed).patches[0]
        assert n.new == faults.NULL_LOAD and n.function in hot
        a = gen.generate("alloc", seed).patches[0]
        assert a.old == faults.TEST_RAX and a.new == faults.ZERO_RAX
        assert "rx" in a.function, a


def test_bad_input_is_refused_clearly(gen, tmp_path):
    with pytest.raises(LabError, match="unknown fault type"):
        gen.generate("double-free", 0)
    junk = tmp_path / "junk.ko"
    junk.write_bytes(b"not an ELF file")
    with pytest.raises(LabError, match="not a kernel module"):
        Module(junk)
    with pytest.raises(LabError, match="site"):
        gen.generate("hang", 0, count=10)
