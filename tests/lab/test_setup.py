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
