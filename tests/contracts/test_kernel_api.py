"""The kernel half's upward API, runtime/kernel/kernel_api.h, against what each
built kernel half exports. The compiler checks every listed signature against
its definition and its callers; it does not check that a listed function is
exported -- understudy-driver finds that out only when it binds the list by
name, and dies -- nor that an export meant for the driver is on the list."""
import json
import re
import subprocess

from ..conftest import BUILD, RUNTIME

HEADER = RUNTIME / "kernel" / "kernel_api.h"
KO_LOAD = BUILD / "ko-load"

# The kernel half's us_* exports that the driver executable does not bind:
# the self-test module imports us_mem_in_use (tests/runtime/selftest/selftest.h).
IMPORTED_BY_MODULES = {"us_mem_in_use"}


def listed_symbols() -> list[str]:
    """The exports the list names, expanded by the preprocessor as modules.c expands them."""
    source = (f'#include "{HEADER}"\n'
              "#define SYMBOL(name, type, parameters) US_KERNEL_API_SYMBOL_NAME(name)\n"
              "US_KERNEL_API(SYMBOL)\n")
    out = subprocess.run(["cc", "-E", "-P", "-x", "c", "-"], input=source,
                         capture_output=True, text=True, check=True).stdout
    symbols = re.findall(r'"(\w+)"', out)
    assert symbols, f"no entry found in {HEADER}:\n{out}"
    return symbols


def exports_of_each_half(build) -> dict[str, dict[str, bool]]:
    """Each built half's exports as the driver's loader finds them: name -> per-cpu."""
    halves = sorted((build / "abi").glob("*/understudy-kernel.ko"))
    assert halves, f"no kernel half under {build / 'abi'}"
    found = {}
    for half in halves:
        # The half's ddekit_* imports are the executable's: dummies suffice to read its exports.
        res = subprocess.run([str(KO_LOAD), "--resolve-all-dummy", "--json", str(half)],
                             capture_output=True, text=True, timeout=60)
        report = json.loads(res.stdout)
        assert report["ok"], f"ko-load could not load {half}:\n{res.stderr}"
        found[half.parent.name] = {e["name"]: e["percpu"] for e in report["modules"][0]["exports"]}
    return found


def test_every_listed_function_is_exported(runtime_built):
    listed = listed_symbols()
    for abi, exports in exports_of_each_half(runtime_built).items():
        # What kernel_export() in runtime/driver/modules.c dies of.
        unbindable = [s for s in listed if s not in exports or exports[s]]
        assert not unbindable, f"the {abi} half does not export {unbindable}"


def test_every_us_export_is_listed(runtime_built):
    listed = set(listed_symbols())
    for abi, exports in exports_of_each_half(runtime_built).items():
        unlisted = sorted(s for s in exports
                          if s.startswith("us_") and s not in listed | IMPORTED_BY_MODULES)
        assert not unlisted, (f"the {abi} half exports {unlisted}, which are neither in "
                              f"US_KERNEL_API ({HEADER.name}) nor imported by a module")
