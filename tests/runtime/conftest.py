"""What the driver process's tests share: its executable, its kernel half and its
event lines (the fixtures that build them, runtime_built and debian_modules, are
tests/conftest.py's: the daemon's tests need them too)."""
from tests.conftest import BUILD, REPO

DRIVER = BUILD / "understudy-driver"
KERNEL_HALF = BUILD / "understudy-kernel.ko"

__all__ = ["BUILD", "DRIVER", "KERNEL_HALF", "REPO", "events"]


def events(stdout: str, kind: str) -> list[dict[str, str]]:
    """The driver's event lines of one kind ("REGISTERED name=eth0 ...") as dicts."""
    found = []
    for line in stdout.splitlines():
        words = line.split()
        if words and words[0] == kind:
            found.append(dict(w.split("=", 1) for w in words[1:] if "=" in w))
    return found
