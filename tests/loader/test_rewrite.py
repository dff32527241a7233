"""The rewriting pass for checked modules (docs/checking.md, "The rewritten
module"), through ko-load --checked: every Debian network module is rewritten,
and what cannot be is refused with the offsets concerned. That the rewritten
code runs exactly as the original is shown by running it: the runtime's
self-tests and the lab's NICs under the checker (tests/runtime/test_check.py)."""
from concurrent.futures import ThreadPoolExecutor

from .conftest import BUILD, run_ko_load, run_ko_load_json
from .test_loader import dummy_args


def test_every_network_module_is_rewritten_for_checking(abi, built):
    paths = sorted((abi.modules / "kernel" / "drivers" / "net").rglob("*.ko"))
    assert len(paths) >= 400, f"only {len(paths)} modules under drivers/net"

    def load(path):
        res, report = run_ko_load_json(*dummy_args(abi), "--checked", path)
        if res.returncode:
            return f"{path.name}: {res.stderr.strip()}"
        (m,) = report["modules"]
        text = sum(s["size"] for s in m["sections"] if s["flags"] & 1)
        if text > 4096 and m["check_sites"] == 0:
            return f"{path.name}: {text} bytes of code and not one probe"
        return None

    with ThreadPoolExecutor(max_workers=2) as pool:
        problems = [p for p in pool.map(load, paths) if p]
    assert not problems, "\n".join(problems)


def test_a_rewritten_module_keeps_its_tables_and_gains_probes(abi, built):
    """e1000 rewritten: the same relocations applied (plus one per probe), the
    same special-section entries, and a probe per memory access and per stack frame event."""
    e1000 = next((abi.modules / "kernel").rglob("e1000.ko"))
    _, plain = run_ko_load_json(*dummy_args(abi), e1000)
    res, checked = run_ko_load_json(*dummy_args(abi), "--checked", e1000)
    assert res.returncode == 0, res.stderr
    (p,), (c,) = plain["modules"], checked["modules"]
    assert p["check_sites"] == 0 and c["check_sites"] > 3000
    probes = c["check_sites"]
    extra = sum(c["relocations"].values()) - sum(p["relocations"].values())
    assert probes <= extra <= 2 * probes    # a call each, a lea's rip-relative operand some
    for table in ("mcount_loc", "retpoline_sites", "return_sites", "jump_table", "bug_table",
                  "static_call_sites", "params"):
        assert c["special"][table] == p["special"][table], table
    assert c["exports"] == p["exports"]


def test_code_that_cannot_be_rewritten_is_refused_with_its_offsets(built):
    fixture = BUILD / "fixtures" / "unmovable.ko"
    assert run_ko_load("--resolve-all-dummy", fixture).returncode == 0
    res = run_ko_load("--resolve-all-dummy", "--checked", fixture)
    assert res.returncode == 1
    assert "cannot rewrite .text for checking" in res.stderr, res.stderr
    assert "bytes that do not decode at 0x6" in res.stderr, res.stderr


def test_stack_probes_whose_bytes_every_path_wrote_are_pruned(built):
    """tests/loader/fixtures/stackslots.S: of seven candidate probes (a frame, four
    accesses through %rsp, a reload and a rewrite of a slot written on every path,
    a return), the two that could tell the checker nothing are left out."""
    res, report = run_ko_load_json("--resolve-all-dummy", "--checked", BUILD / "fixtures" / "stackslots.ko")
    assert res.returncode == 0, res.stderr
    (m,) = report["modules"]
    assert m["check_sites"] == 5
