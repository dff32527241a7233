"""runtime/loader against Debian's own modules, against broken copies of them, and
against hand-written fixtures (the C unit test)."""
import random
import re
import struct
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import BUILD, TIMEOUT_S, run_ko_load, run_ko_load_json

ETHERNET = "drivers/net/ethernet"

# Ethernet modules the loader refuses, with the reason it must give. Empty:
# all 112 of 6.1.0-55-amd64 load. A refusal not listed here fails the test.
EXPECTED_REFUSALS: dict[str, str] = {}

# What readelf finds across all 4023 modules of 6.1.0-55-amd64.
RELOCATION_TYPES = {"R_X86_64_64", "R_X86_64_PC32", "R_X86_64_PLT32",
                    "R_X86_64_32S", "R_X86_64_PC64", "R_X86_64_NONE"}

TWO_GIB = 1 << 31


def dummy_args(abi):
    return ["--resolve-all-dummy", "--percpu", ",".join(abi.percpu_names()),
            "--symvers", abi.symvers, "--vermagic", abi.vermagic]


def readelf_relocation_counts(path) -> Counter:
    out = subprocess.run(["readelf", "-rW", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return Counter(m.group(1) for m in re.finditer(r"^\s*[0-9a-f]{16}\s+[0-9a-f]{16}\s+(R_X86_64_\w+)",
                                                   out, re.MULTILINE))


def undefined_symbols(path) -> set[str]:
    out = subprocess.run(["nm", "-u", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()[0] == "U"}


def defined_symbols(path) -> set[str]:
    out = subprocess.run(["nm", "--defined-only", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines()}


def inside(addr, region):
    start, size = region
    return start <= addr < start + size


def check_loaded_module(m, path, percpu_names, percpu_size) -> list[str]:
    """Everything that must hold for a module loaded with dummy resolution."""
    problems = []
    image, text = m["image"], m["text"]
    if not (0 < image[0] and image[0] + image[1] <= TWO_GIB):
        problems.append(f"image {image} not below 2 GiB")
    for region in ("text", "rodata", "data"):
        start, size = m[region]
        if not (image[0] <= start and start + size <= image[0] + image[1]):
            problems.append(f"{region} {m[region]} outside image {image}")
    unresolved = [i["name"] for i in m["imports"] if not i["resolved"]]
    if unresolved:
        problems.append(f"unresolved imports {unresolved}")
    crcs = Counter(i["crc"] for i in m["imports"])
    if set(crcs) != {"match"}:
        problems.append(f"CRCs against Module.symvers: {dict(crcs)}")
    for i in m["imports"]:
        if i["name"] in percpu_names and not (i["percpu"] and i["value"] < percpu_size):
            problems.append(f"per-cpu import {i['name']} is not a per-cpu offset")
    expected = readelf_relocation_counts(path)
    if Counter(m["relocations"]) != expected:
        problems.append(f"relocations {m['relocations']} != readelf {dict(expected)}")
    if "init_module" in defined_symbols(path) and not inside(m["init"], text):
        problems.append(f"init {m['init']:#x} not in text")
    return problems


def test_every_ethernet_module_loads_and_relocates_with_crcs_matching(abi, built):
    paths = sorted((abi.modules / "kernel" / ETHERNET).rglob("*.ko"))
    assert len(paths) >= 100, f"only {len(paths)} modules under {ETHERNET}"
    percpu_names = set(abi.percpu_names())

    def load(path):
        res, report = run_ko_load_json(*dummy_args(abi), path)
        name = path.name
        if name in EXPECTED_REFUSALS:
            assert res.returncode == 1 and EXPECTED_REFUSALS[name] in report["error"]["message"], \
                f"{name}: expected refusal '{EXPECTED_REFUSALS[name]}', got {res.stderr}"
            return []
        if res.returncode != 0:
            return [f"{name}: refused: {res.stderr.strip()}"]
        assert report["test_mode_dummy_resolution"] is True
        (m,) = report["modules"]
        return [f"{name}: {p}" for p in
                check_loaded_module(m, path, percpu_names, report["percpu_layout"]["size"])]

    with ThreadPoolExecutor(max_workers=2) as pool:
        problems = [p for found in pool.map(load, paths) for p in found]
    assert not problems, "\n".join(problems)


def test_all_debian_modules_link_in_dependency_order(abi, built):
    """All 4023 modules in one process, in modules.dep order: every import another
    module exports must link to that module, with the CRC of its __kcrctab."""
    deps = {}
    for line in (abi.modules / "modules.dep").read_text().splitlines():
        module, rest = line.split(":", 1)
        deps[module] = rest.split()
    order, seen = [], set()

    def visit(module):
        if module not in seen:
            seen.add(module)
            for dep in deps[module]:
                visit(dep)
            order.append(module)

    for module in sorted(deps):
        visit(module)
    owner = {}
    for line in abi.symvers.read_text().splitlines():
        _, symbol, module, *_ = line.split("\t")
        owner[symbol] = module.rsplit("/", 1)[-1].replace("-", "_")

    res, report = run_ko_load_json(*dummy_args(abi), *(abi.modules / m for m in order),
                                   timeout=300)
    assert res.returncode == 0, res.stderr
    assert len(report["modules"]) == len(order) == len(deps)
    types, mislinked, from_modules = set(), [], 0
    for m in report["modules"]:
        types.update(m["relocations"])
        for i in m["imports"]:
            expected = owner.get(i["name"], "vmlinux")
            provider = i["provider"] or "vmlinux"
            if provider != expected or i["crc"] != "match":
                mislinked.append(f"{m['name']}: {i['name']} from {provider} "
                                 f"(Module.symvers: {expected}), CRC {i['crc']}")
            from_modules += bool(i["provider"])
    assert not mislinked, "\n".join(mislinked[:50])
    assert from_modules > 10000
    assert types == RELOCATION_TYPES


def test_mii_exports_serve_8139too(abi, built):
    mii, r8139 = abi.module("drivers/net/mii.ko"), abi.module(f"{ETHERNET}/realtek/8139too.ko")
    res, report = run_ko_load_json(*dummy_args(abi), mii, r8139)
    assert res.returncode == 0, res.stderr
    mii_m, r8139_m = report["modules"]
    exports = {e["name"]: e for e in mii_m["exports"]}
    assert len(exports) == 10 and "generic_mii_ioctl" in exports
    from_mii = {i["name"]: i for i in r8139_m["imports"] if i["provider"] == "mii"}
    wanted = {i["name"] for i in r8139_m["imports"]} & set(exports)
    assert wanted and set(from_mii) == wanted
    for name, imp in from_mii.items():
        assert imp["value"] == exports[name]["value"] and inside(imp["value"], mii_m["text"]), name
        assert not imp["dummy"] and imp["crc"] == "match", name


def test_missing_imports_list_is_complete(abi, built):
    e1000 = abi.module(f"{ETHERNET}/intel/e1000/e1000.ko")
    res, report = run_ko_load_json("--symvers", abi.symvers, "--vermagic", abi.vermagic, e1000)
    assert res.returncode == 1
    assert report["error"]["status"] == "unresolved"
    missing = [p["symbol"] for p in report["error"]["problems"] if p["kind"] == "missing"]
    assert len(missing) == len(set(missing))
    assert set(missing) == undefined_symbols(e1000)
    assert f"{len(missing)} unresolved imports" in res.stderr
    for name in missing:
        assert f"missing {name}:" in res.stderr


def test_dummy_resolution_announces_test_mode(abi, built):
    res = run_ko_load(*dummy_args(abi), abi.module(f"{ETHERNET}/intel/e1000/e1000.ko"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("TEST MODE (--resolve-all-dummy)")
    assert "TEST MODE: " in res.stdout and "DUMMY (test mode)" in res.stdout


# ---------------------------------------------------------------------------
# Broken inputs: each must be refused with its precise reason, never crash.

def elf_sections(data: bytes) -> dict[str, tuple[int, int]]:
    """name -> (file offset, size) of every section of an ELF64 file."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shnum, shstrndx = struct.unpack_from("<HH", data, 0x3c)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * i) for i in range(shnum)]
    names_off = headers[shstrndx][4]

    def name(h):
        start = names_off + h[0]
        return data[start:data.index(b"\0", start)].decode()

    return {name(h): (h[4], h[5]) for h in headers}


@pytest.fixture
def e1000_copy(abi, tmp_path):
    def make(mutate, name="e1000.ko"):
        data = bytearray((abi.module(f"{ETHERNET}/intel/e1000/e1000.ko")).read_bytes())
        data = mutate(data) or data
        path = tmp_path / name
        path.write_bytes(bytes(data))
        return path
    return make


def refused(abi, path, *extra):
    res = run_ko_load(*dummy_args(abi), *extra, path)
    assert res.returncode == 1, f"expected a refusal, got {res.returncode}: {res.stdout[-500:]}"
    return res.stderr


def test_truncated_module(abi, built, e1000_copy):
    half = e1000_copy(lambda d: d[:len(d) // 2])
    assert re.search(r"section header table \(offset 0x4f908, 55 entries\) extends beyond "
                     r"the end of the file \(\d+ bytes\): truncated\?", refused(abi, half))
    stub = e1000_copy(lambda d: d[:40], "stub.ko")
    assert "file is 40 bytes, too short for an ELF header (64 bytes)" in refused(abi, stub)


def test_not_an_elf_file(abi, built, tmp_path):
    path = tmp_path / "readme.ko"
    path.write_text("this is not a kernel module\n" * 10)
    assert f"{path}: not an ELF file (bad magic)" in refused(abi, path)


def test_elf_for_another_machine(abi, built, e1000_copy):
    def aarch64(d):
        d[0x12:0x14] = struct.pack("<H", 183)
    assert "ELF machine is 183 (AArch64), not x86_64 (62)" in refused(abi, e1000_copy(aarch64))


def test_relocation_with_out_of_range_symbol(abi, built, e1000_copy):
    def corrupt(d):
        offset, _ = elf_sections(d)[".rela.text"]
        r_info, = struct.unpack_from("<Q", d, offset + 8)
        struct.pack_into("<Q", d, offset + 8, (0xffffff << 32) | (r_info & 0xffffffff))
    message = refused(abi, e1000_copy(corrupt))
    assert re.search(r"section \.rela\.text entry 0: symbol index 16777215 out of range "
                     r"\(symbol table has \d+ entries\)", message)


def test_vermagic_follows_linux(abi, built, e1000_copy):
    """As in Linux (same_magic), a module with CRCs may carry another release:
    its CRCs decide. What follows the release must match."""
    other = abi.release.replace("-55-", "-99-")
    assert other != abi.release
    renamed = e1000_copy(lambda d: d.replace(f"vermagic={abi.release}".encode(),
                                             f"vermagic={other}".encode()))
    res = run_ko_load(*dummy_args(abi), renamed)
    assert res.returncode == 0, res.stderr
    flags = f"{other} SMP preempt mod_unload modversions "
    edited = e1000_copy(lambda d: d.replace(f"vermagic={abi.release} SMP preempt".encode(),
                                            f"vermagic={other} SMP preemp_".encode()), "flags.ko")
    message = refused(abi, edited)
    assert (f"vermagic mismatch: module has '{flags.replace('preempt', 'preemp_')}', "
            f"expected '{abi.vermagic}'") in message
    original = abi.module(f"{ETHERNET}/intel/e1000/e1000.ko")
    assert "vermagic mismatch" in refused(abi, original, "--vermagic", "6.1.0-0-amd64 SMP")


def test_crc_mismatch(abi, built, e1000_copy):
    edited = {}

    def corrupt(d):
        offset, _ = elf_sections(d)["__versions"]
        for index in (0, 5):     # two entries: both must be reported
            entry = offset + 64 * index
            crc, = struct.unpack_from("<Q", d, entry)
            name = bytes(d[entry + 8:d.index(b"\0", entry + 8)]).decode()
            struct.pack_into("<Q", d, entry, crc ^ 0xffffffff)
            edited[name] = crc
    message = refused(abi, e1000_copy(corrupt))
    assert "2 CRC mismatches and 0 unresolved imports" in message
    for name, crc in edited.items():
        assert (f"crc mismatch {name}: module expects CRC 0x{crc ^ 0xffffffff:08x}, "
                f"vmlinux has 0x{crc:08x}") in message


def test_random_corruption_never_crashes(abi, built, e1000_copy):
    """Bytes flipped in the headers, symbols and relocations: a refusal or a load,
    never a crash or a hang."""
    pristine = abi.module(f"{ETHERNET}/intel/e1000/e1000.ko").read_bytes()
    sections = elf_sections(pristine)
    shoff, = struct.unpack_from("<Q", pristine, 0x28)
    targets = [(0, 64), (shoff, 55 * 64), sections[".symtab"], sections[".rela.text"],
               sections["__versions"], sections[".modinfo"], sections["__bug_table"]]
    rng = random.Random(20240601)
    outcomes = Counter()
    for attempt in range(150):
        def mutate(d):
            for _ in range(rng.randint(1, 8)):
                start, size = rng.choice(targets)
                d[start + rng.randrange(size)] = rng.randrange(256)
        path = e1000_copy(mutate, f"fuzz{attempt}.ko")
        res = run_ko_load(*dummy_args(abi), path)
        assert res.returncode in (0, 1), f"attempt {attempt}: exit {res.returncode}: {res.stderr}"
        if res.returncode == 1:
            assert res.stderr.startswith(f"ko-load: {path}: "), res.stderr
        outcomes[res.returncode] += 1
        path.unlink()
    assert outcomes[1] > 50, outcomes


# ---------------------------------------------------------------------------

def test_c_unit_test(built):
    """Per-cpu offsets, __ex_table/__bug_table lookups from real signal handlers,
    entry points, params, CRCs, on hand-written fixture modules."""
    res = subprocess.run([str(BUILD / "test-loader"), str(BUILD / "fixtures")],
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert res.returncode == 0 and res.stdout.endswith("0 failed\n"), res.stdout + res.stderr
    assert res.stdout.count("ok: ") >= 25
