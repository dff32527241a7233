"""What the daemon's end-to-end tests share: understudyd and the CLI built for
a module's guests, and the hostile test stand-in for a driver process."""
import subprocess
from pathlib import Path

import pytest

from lab import config, understudy
from lab.understudy import HOST_DIR, TARGET

STAND_IN = HOST_DIR / "target" / "test-stand-ins" / "hostile-driver"


@pytest.fixture(scope="module")
def bins(lab_ready, runtime_built):
    """The daemon, the CLI and the driver process, as lab/understudy.py runs them."""
    return understudy.build()


@pytest.fixture(scope="session")
def host_binaries() -> dict[str, Path]:
    """The daemon and the CLI, with hostile_driver.c as the driver process."""
    subprocess.run(["cargo", "build", "--locked", "--quiet", "--manifest-path", str(HOST_DIR / "Cargo.toml")], check=True)
    STAND_IN.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread", "-I", str(config.REPO_DIR / "include"),
                    "-o", str(STAND_IN),
                    str(Path(__file__).with_name("hostile_driver.c"))], check=True)
    return {"understudyd": TARGET / "understudyd", "understudy": TARGET / "understudy",
            "hostile_driver": STAND_IN}
