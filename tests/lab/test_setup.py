"""`python3 -m lab setup` refuses a kernel ABI the archive does not serve, and says what to do."""
import os
import subprocess
import sys

from lab import config


def test_a_pinned_abi_that_is_gone_is_a_clear_error(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "UNDERSTUDY_ABI": "6.1.0-999", "UNDERSTUDY_CACHE": str(cache)}
    res = subprocess.run([sys.executable, "-m", "lab", "setup"], cwd=config.REPO_DIR, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 3
    assert "linux-image-6.1.0-999-amd64 is not in the archive" in res.stderr
    assert "--list-abis" in res.stderr and "lab/lab.toml" in res.stderr
    assert not cache.exists(), "a refused setup leaves nothing behind"


def test_list_abis_includes_the_pinned_one():
    res = subprocess.run([sys.executable, "-m", "lab", "setup", "--list-abis"],
                         cwd=config.REPO_DIR, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0
    assert config.kernel().abi in res.stdout.split()


def test_the_e1000_nocsum_fixture_is_debians_e1000_rebuilt_with_only_its_patch():
    """What `lab setup` builds from Debian's source (lab/fixtures/e1000-nocsum.patch)
    must load wherever Debian's e1000 of the pinned ABI does: the same module
    name and PCI ID table, vermagic and symbol CRCs, and a probe without the
    checksum offloads."""
    fixture = config.FIXTURE_MODULES["e1000-nocsum"]
    ko = config.fixture_module("e1000-nocsum")
    debian = config.cached_module(config.kernel().abi, "e1000")

    def modinfo(field, path):
        return subprocess.run(["modinfo", "-F", field, str(path)], capture_output=True,
                              text=True, check=True).stdout.split("\n")

    for field in ("name", "alias", "vermagic", "depends"):
        assert modinfo(field, ko) == modinfo(field, debian), field
    assert modinfo("name", ko)[0] == "e1000"

    def crcs(path):
        return subprocess.run(["/sbin/modprobe", "--dump-modversions", str(path)], capture_output=True,
                              text=True, check=True).stdout.splitlines()

    assert crcs(ko) and sorted(crcs(ko)) == sorted(crcs(debian))
    assert ko.read_bytes() != debian.read_bytes()
    built_from = (fixture.root / "built-from").read_text()
    assert f"{config.kernel().headers_package} " in built_from
    assert (fixture.root / "source-version").read_text().startswith("linux-source-6.1 ")
    # The cached source stays Debian's, unpatched (each build patches a copy),
    # and the committed patch still fits it exactly.
    tree = fixture.root / "linux-source-6.1"
    assert "NETIF_F_HW_CSUM |" in (tree / fixture.subdir / "e1000_main.c").read_text()
    res = subprocess.run(["patch", "-p1", "--dry-run", "--fuzz=0", "-d", str(tree), "-i", str(fixture.patch)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
