"""`python3 -m lab setup`: everything the lab needs, installed idempotently."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import config, initramfs
from .errors import LabError

APT_PACKAGES = [
    "qemu-system-x86", "busybox-static", "cpio", "iperf3", "kmod", "iproute2",
    "iputils-ping", "ethtool", "pciutils", "gcc", "libc6-dev", "make", "gdb",
    "patch", "xz-utils", "libzydis-dev", "libseccomp-dev", "rt-tests", "valgrind", "linux-perf", "fio",
]
PYTHON_MODULES = {"qemu.qmp": "qemu.qmp", "pytest": "pytest",
                  "pytest_timeout": "pytest-timeout", "matplotlib": "matplotlib",
                  "elftools": "pyelftools", "capstone": "capstone"}


def log(msg: str) -> None:
    print(f"[lab setup] {msg}", file=sys.stderr, flush=True)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


def _apt_missing(packages: list[str]) -> list[str]:
    missing = []
    for p in packages:
        res = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p],
                             capture_output=True, text=True)
        if "install ok installed" not in res.stdout:
            missing.append(p)
    return missing


_apt_updated = False


def _apt_update() -> None:
    global _apt_updated
    if not _apt_updated:
        log("apt-get update")
        _run(["apt-get", "update", "-q"], stdout=subprocess.DEVNULL)
        _apt_updated = True


def ensure_apt() -> None:
    missing = _apt_missing(APT_PACKAGES)
    if not missing:
        return
    if os.geteuid() != 0:
        raise LabError(f"missing Debian packages: {' '.join(missing)}",
                       hint="run `python3 -m lab setup` as root (it uses apt-get)")
    _apt_update()
    log(f"apt-get install {' '.join(missing)}")
    _run(["apt-get", "install", "-y", "-q", *missing], stdout=subprocess.DEVNULL,
         env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def ensure_python() -> None:
    missing = [pkg for mod, pkg in PYTHON_MODULES.items()
               if importlib.util.find_spec(mod.split(".")[0]) is None
               or (mod == "qemu.qmp" and importlib.util.find_spec(mod) is None)]
    if not missing:
        return
    log(f"pip install -r lab/requirements.txt (missing: {', '.join(missing)})")
    _run([sys.executable, "-m", "pip", "install", "-q", "--root-user-action=ignore",
          "-r", str(config.LAB_DIR / "requirements.txt")])


def _apt_field(package: str, field: str) -> str | None:
    res = subprocess.run(["apt-cache", "show", "--no-all-versions", package],
                         capture_output=True, text=True)
    m = re.search(rf"^{field}: (\S+)$", res.stdout, re.M)
    return m.group(1) if m else None


def available_abis(flavour: str = "amd64") -> list[str]:
    res = subprocess.run(["apt-cache", "search", "--names-only",
                          rf"^linux-image-6\.1\.0-[0-9]+-{flavour}$"],
                         capture_output=True, text=True)
    abis = re.findall(rf"linux-image-(6\.1\.0-\d+)-{flavour}", res.stdout)
    return sorted(set(abis), key=lambda a: int(a.rsplit("-", 1)[1]))


def download_package(package: str, dest: Path, version: str | None = None,
                     hint: str | None = None) -> Path:
    """Fetches one .deb by exact name (never a glob), of `version` if given
    (else the candidate), and checks its sha256."""
    spec = f"{package}={version}" if version else package
    sha = _apt_field(spec, "SHA256")
    if sha is None:
        _apt_update()
        sha = _apt_field(spec, "SHA256")
    if sha is None:
        raise LabError(f"Debian package {spec} is not in the archive",
                       hint=hint or "pick an ABI the archive serves (`python3 -m lab setup --list-abis`) "
                                    "in lab/lab.toml ([kernel] abi, [live_update])")
    dest.mkdir(parents=True, exist_ok=True)
    pattern = f"{package}_{version}_*.deb" if version else f"{package}_*.deb"
    for deb in dest.glob(pattern):
        if hashlib.sha256(deb.read_bytes()).hexdigest() == sha:
            return deb
    log(f"apt-get download {spec}")
    _run(["apt-get", "download", "-q", spec], cwd=dest,
         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    debs = sorted(dest.glob(pattern), key=lambda p: p.stat().st_mtime)
    if not debs or hashlib.sha256(debs[-1].read_bytes()).hexdigest() != sha:
        raise LabError(f"downloaded {spec} does not match the archive's sha256 {sha}")
    return debs[-1]


def ensure_kernel(kernel: config.KernelConfig) -> None:
    if kernel.vmlinuz.exists() and (kernel.modules / "modules.dep").exists():
        return
    deb = download_package(kernel.package, config.cache_dir() / "debs")
    log(f"extracting {deb.name}")
    kernel.root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=kernel.root.parent) as tmp:
        _run(["dpkg-deb", "-x", str(deb), tmp])
        _run(["depmod", "-b", tmp, kernel.release])
        if kernel.root.exists():
            shutil.rmtree(kernel.root)
        os.rename(tmp, kernel.root)
        os.mkdir(tmp)  # TemporaryDirectory wants something to remove


def ensure_driver_modules(kernel: config.KernelConfig) -> None:
    """The driver modules of a live-update ABI: config.DRIVER_TREES of its
    linux-image package, with a modules.dep of them made by depmod.

    Only those trees (about a quarter of the package's 400 MB): live update
    loads these modules, it never boots this kernel. The trees are the lab's
    drivers' and all their modules.dep chains reach (config.cached_chain).
    Extracted next to, and in the same layout as, the pinned kernel
    (config.KernelConfig.root), so the guest sees them over 9p at the same
    paths. A cache of drivers/net alone (an older lab's) is extracted again.
    """
    if all(t.is_dir() for t in kernel.driver_trees) and (kernel.modules / "modules.dep").exists():
        return
    deb = download_package(kernel.package, config.cache_dir() / "debs")
    log(f"extracting {', '.join(config.DRIVER_TREES)} of {deb.name}")
    kernel.root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=kernel.root.parent) as tmp:
        base = f"./lib/modules/{kernel.release}"
        members = [f"{base}/kernel/{t}" for t in config.DRIVER_TREES]
        members += [f"{base}/modules.{f}" for f in ("order", "builtin", "builtin.modinfo")]
        with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)],
                              stdout=subprocess.PIPE) as package:
            untar = subprocess.run(["tar", "-x", "-C", tmp, *members], stdin=package.stdout)
            package.stdout.close()
        if package.returncode or untar.returncode:
            raise LabError(f"cannot extract {', '.join(members)} from {deb}",
                           hint="delete the .deb and run `python3 -m lab setup` again")
        _run(["depmod", "-b", tmp, kernel.release])
        if kernel.root.exists():
            shutil.rmtree(kernel.root)
        os.rename(tmp, kernel.root)
        os.mkdir(tmp)  # TemporaryDirectory wants something to remove


def ensure_headers(kernels: list[config.KernelConfig]) -> None:
    """Kbuild and the headers of each ABI: a kernel half's struct layouts come from here."""
    missing = [k.headers_package for k in kernels if not (k.headers / "Module.symvers").exists()]
    if not missing:
        return
    _apt_update()
    for package in missing:
        if _apt_field(package, "Version") is None:
            raise LabError(f"Debian package {package} is not in the archive",
                           hint="pick another ABI (`python3 -m lab setup --list-abis`) in "
                                "lab/lab.toml, or list it under [live_update] modules_only")
    log(f"apt-get install {' '.join(missing)}")
    _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
         stdout=subprocess.DEVNULL, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def _installed_version(package: str) -> str | None:
    res = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    return res.stdout.strip() or None


def _modinfo(field: str, ko: Path) -> str:
    return subprocess.run(["modinfo", "-F", field, str(ko)], capture_output=True, text=True).stdout.strip()


def ensure_source(fixture: config.FixtureModule, kernel: config.KernelConfig) -> tuple[str, Path]:
    """The driver's directory of linux-source-6.1 at the version the pinned
    ABI was built from (its headers package's), extracted alone into the
    fixture's cache directory; its package and version in `source-version`.

    The package's 139 MB tarball is streamed, never written out, and the
    .deb is deleted afterwards: a fixture needs one driver's 0.5 MB of it.
    """
    version = _installed_version(kernel.headers_package)
    if version is None:
        raise LabError(f"{kernel.headers_package} is not installed",
                       hint="run `python3 -m lab setup` as root")
    package = "linux-source-" + ".".join(kernel.abi.split(".")[:2])  # linux-source-6.1
    record = f"{package} {version}\n"
    stamp = fixture.root / "source-version"
    tree = fixture.root / package
    if (tree / fixture.subdir).is_dir() and stamp.exists() and stamp.read_text() == record:
        return record.strip(), tree
    deb = download_package(package, config.cache_dir() / "debs", version,
                           hint=f"the archive no longer serves the source of {kernel.release}: "
                                f"pin a newer ABI in lab/lab.toml ([kernel] abi)")
    log(f"extracting {fixture.subdir} of {deb.name}")
    fixture.root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=fixture.root) as tmp:
        tarball = f"./usr/src/{package}.tar.xz"
        member = f"{package}/{fixture.subdir}/"
        with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as pkg, \
             subprocess.Popen(["tar", "-x", "-O", tarball], stdin=pkg.stdout, stdout=subprocess.PIPE) as outer:
            pkg.stdout.close()
            inner = subprocess.run(["tar", "-x", "-J", "-C", tmp, member], stdin=outer.stdout)
            outer.stdout.close()
        if pkg.returncode or outer.returncode or inner.returncode or not (Path(tmp) / member).is_dir():
            raise LabError(f"cannot extract {member} from {tarball} in {deb}",
                           hint="delete the .deb and run `python3 -m lab setup` again")
        if tree.exists():
            shutil.rmtree(tree)
        os.rename(Path(tmp) / package, tree)
    stamp.write_text(record)
    deb.unlink()
    return record.strip(), tree


def ensure_fixture_module(fixture: config.FixtureModule, kernel: config.KernelConfig) -> Path:
    """Builds a fixture module (config.FIXTURE_MODULES): Debian's source of
    the driver with lab/fixtures/<name>.patch, by Kbuild against the pinned
    ABI's headers, so that it keeps the module's name, ID table, vermagic
    and CRCs and differs from Debian's build only by what the patch says.
    Rebuilt when the source, the patch or the headers change (`built-from`).
    """
    source, tree = ensure_source(fixture, kernel)
    patch = fixture.patch.read_bytes()
    record = (f"source: {source}\n"
              f"patch: {fixture.patch.relative_to(config.REPO_DIR)} "
              f"(sha256 {hashlib.sha256(patch).hexdigest()})\n"
              f"headers: {kernel.headers_package} {_installed_version(kernel.headers_package)}\n")
    stamp = fixture.root / "built-from"
    if fixture.ko.exists() and stamp.exists() and stamp.read_text() == record:
        return fixture.ko
    log(f"building {fixture.ko.name} ({fixture.patch.name} on {source})")
    build = fixture.root / "build"
    if build.exists():
        shutil.rmtree(build)
    shutil.copytree(tree, build)
    # Exact or not at all (--fuzz=0): a patch that no longer fits the source
    # must fail here, not build a module that differs in some other way.
    res = subprocess.run(["patch", "-p1", "--batch", "--forward", "--fuzz=0", "--no-backup-if-mismatch",
                          "-d", str(build), "-i", str(fixture.patch)], capture_output=True, text=True)
    if res.returncode:
        raise LabError(f"{fixture.patch.relative_to(config.REPO_DIR)} does not apply to {source}:\n"
                       f"{(res.stdout + res.stderr).strip()}",
                       hint="update the patch to this source (lab/fixtures/)")
    kbuild = ["make", "-C", str(kernel.headers), f"M={build / fixture.subdir}",
              f"{fixture.config}=m", "modules"]
    res = subprocess.run(kbuild, capture_output=True, text=True)
    built = build / fixture.subdir / f"{fixture.module}.ko"
    if res.returncode or not built.exists():
        raise LabError(f"Kbuild of {fixture.name} failed:\n{(res.stdout + res.stderr).strip()[-4000:]}",
                       hint=f"is {kernel.headers_package} complete? (`python3 -m lab setup` installs it)")
    name, vermagic = _modinfo("name", built), _modinfo("vermagic", built)
    if name != fixture.module or not vermagic.startswith(f"{kernel.release} "):
        raise LabError(f"{built} is module {name!r} of {vermagic!r}, "
                       f"not {fixture.module} of {kernel.release}")
    os.replace(built, fixture.ko)
    shutil.rmtree(build)
    stamp.write_text(record)
    return fixture.ko


def setup() -> None:
    ensure_apt()
    ensure_python()
    kernel = config.kernel()
    ensure_kernel(kernel)
    updates = config.update_kernels()
    for k in [*updates, *config.modules_only_kernels()]:
        if k != kernel:
            ensure_driver_modules(k)
    ensure_headers(updates)
    for fixture in config.FIXTURE_MODULES.values():
        ensure_fixture_module(fixture, kernel)
    initramfs.build(kernel)
    log(f"ready: guest kernel {kernel.release} in {kernel.root}")
