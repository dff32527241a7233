"""`python3 -m lab coverage`: which of Debian's ethernet modules the runtime provides every import for."""
import json
import subprocess
import sys

from lab import config

# The lab's drivers, which run behind understudyd: each loads, its chain complete.
RUNNING = ["intel/e1000/e1000", "intel/e1000e/e1000e", "amd/pcnet32", "realtek/8139cp", "intel/e100", "dec/tulip/tulip"]


def test_coverage_counts_the_modules_whose_chain_has_every_import(runtime_built, debian_modules):
    res = subprocess.run([sys.executable, "-m", "lab", "coverage", "--json"], cwd=config.REPO_DIR,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    modules = report["per_module"]
    on_disk = list((debian_modules / "kernel/drivers/net/ethernet").rglob("*.ko"))
    assert report["modules"] == len(modules) == len(on_disk) > 100
    assert report["load"] == sum(m["loads"] for m in modules.values())
    assert sum(c["modules"] for c in report["by_vendor"].values()) == report["modules"]
    for name in RUNNING:
        assert modules[name]["loads"] and modules[name]["missing"] == [], (name, modules[name])
    # igb lacks imports in its own file and in i2c-algo-bit, a dependency: both are named.
    igb = modules["intel/igb/igb"]
    assert not igb["loads"] and igb["chain"][-1] == "igb.ko"
    assert "__hw_addr_sync_dev" in igb["missing_by_module"]["igb"]
    assert igb["missing_by_module"]["i2c_algo_bit"], igb["missing_by_module"]
    # The roadmap: the imports most modules lack, most first.
    counts = [m["modules"] for m in report["most_missing"]]
    assert counts == sorted(counts, reverse=True) and counts[0] > 10
    assert report["commit"] and "[coverage]" in res.stderr
