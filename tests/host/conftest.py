"""Builds what the host tests need: the Rust workspace and the hostile test stand-in."""
import subprocess
from pathlib import Path

import pytest

from lab import config

HOST_DIR = config.REPO_DIR / "host"
TARGET = HOST_DIR / "target" / "debug"
STAND_IN = HOST_DIR / "target" / "test-stand-ins" / "hostile-driver"


@pytest.fixture(scope="session")
def host_binaries() -> dict[str, Path]:
    subprocess.run(["cargo", "build", "--locked", "--quiet", "--manifest-path", str(HOST_DIR / "Cargo.toml")], check=True)
    STAND_IN.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread", "-I", str(config.REPO_DIR / "include"),
                    "-o", str(STAND_IN),
                    str(Path(__file__).with_name("hostile_driver.c"))], check=True)
    return {"understudyd": TARGET / "understudyd", "understudy": TARGET / "understudy",
            "hostile_driver": STAND_IN}
