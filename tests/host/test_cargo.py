"""The host crates' own unit tests (ring validation against a hostile producer,
control-message parsing, include/understudy/protocol.h ↔ Rust layout, VFIO
sysfs checks), run as part of the repository's test suite."""
import subprocess

from lab.understudy import HOST_DIR


def test_cargo_test_passes():
    res = subprocess.run(["cargo", "test", "--locked", "--quiet", "--manifest-path", str(HOST_DIR / "Cargo.toml")],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
