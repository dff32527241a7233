"""What the driver process's tests share: its executable, its kernel half and its
event lines (the fixtures that build them, runtime_built and debian_modules, are
tests/conftest.py's: the daemon's tests need them too)."""
from pathlib import Path

from lab import understudy
from tests.conftest import BUILD, REPO

DRIVER = BUILD / "understudy-driver"
KERNEL_HALF = BUILD / "understudy-kernel.ko"
LAUNCH = Path(__file__).with_name("launch.py")

__all__ = ["BUILD", "DRIVER", "KERNEL_HALF", "LAUNCH", "REPO", "driver_argv", "events", "launch",
           "stand_alone"]


def launch(g, device: str, argv: list[str], *, options: tuple[str, ...] = (), timeout: int = 180):
    """understudy-driver's `argv` in the guest on its PCI device `device` (nic0,
    disk0), through launch.py (which binds the device to vfio-pci and gives it
    back); the output is printed for the test's log."""
    res = g.run(["python3", str(LAUNCH), *options, g.pci_address(device), *argv],
                cwd=str(REPO), timeout=timeout)
    print(res.out)
    print(res.err)
    return res


def driver_argv(g, module: str) -> list[str]:
    """understudy-driver with `module` and its chain from the guest's modules.dep."""
    return [str(DRIVER), "--runtime", str(KERNEL_HALF),
            *understudy.module_args(understudy.module_chain(g, module))]


def stand_alone(g, device: str, module: str, *actions: str, timeout: int = 180):
    """driver_argv(module) on `device`, doing `actions` (--open, --blk-read, ...) without a host."""
    return launch(g, device, [*driver_argv(g, module), *actions], timeout=timeout)


def events(stdout: str, kind: str) -> list[dict[str, str]]:
    """The driver's event lines of one kind ("REGISTERED name=eth0 ...") as dicts."""
    found = []
    for line in stdout.splitlines():
        words = line.split()
        if words and words[0] == kind:
            found.append(dict(w.split("=", 1) for w in words[1:] if "=" in w))
    return found
