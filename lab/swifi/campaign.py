# SPDX-License-Identifier: GPL-2.0
"""The fault-injection campaign: each trial (fault type, seed) runs the same
fault in both worlds and classifies what happened.

in-kernel: a guest with the NIC bound to its kernel driver runs the trial's
workload (guestload.py: two hash-checked TCP transfers and pings); once bytes
flow, the fault's patches are written into the guest kernel's copy of the
module (swifi-poke.ko).  Outcome: guest crash (QEMU exited, or panic / oops
on the console), guest hang (the agent stops answering, or a lockup or RCU
stall is reported), driver failure (the workload failed, the guest is fine),
no effect.

understudy: a guest with the NIC behind understudyd (restarts allowed) runs
the same workload through us0 and the same patches are written into the
running driver process (/proc/PID/mem).  Outcome: recovered transparently
(the daemon restarted the driver, both transfers intact, no reset), recovered
with an app-visible error, not recovered (the restart failed, or the fault
broke the driver without the daemon noticing and the workload failed),
daemon failure (understudyd died), no effect; guest crash / hang as above
should never happen here and are reported if they do.

Clean state: a guest is rebooted after any trial that left it crashed, hung
or suspicious (an oops, a lockup, an in-kernel fault that had any effect);
after a trial without effect the in-kernel patch is reverted and the module
reloaded, and the understudy driver restarted from its file
(`understudy recover`), so no fault outlives its trial.

Results are appended to DIR/trials.jsonl as each trial ends; --resume skips
trials already there.
"""
from __future__ import annotations

import json
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import config, net, understudy
from ..agent import AgentGone
from ..devices import NIC, lookup
from ..errors import LabError
from ..guest import SLIRP_GATEWAY, Guest
from .faults import FAULT_TYPES, Fault, generator_for
from .inject import InjectionRefused, build_poke, inject_kernel

FAULT_FILE, TRIGGER = "/tmp/swifi-fault.json", "/tmp/swifi-go"
RESULTS = "trials.jsonl"
NOT_INJECTED = "not injected"
KERNEL_OUTCOMES = ["guest crash", "guest hang", "driver failure", "no effect"]
# The in-kernel outcomes the headline is about: the fault took the machine down.
SEVERE = {"guest crash", "guest hang"}
UNDERSTUDY_OUTCOMES = ["recovered transparently", "recovered, app-visible error", "not recovered",
                       "daemon failure", "no effect", "guest crash", "guest hang"]
# Soft lockups are reported after 2 x watchdog_thresh s, RCU stalls after the
# stall timeout: both well inside a trial's transfer inactivity limit, so a
# hung CPU is on the console by the time the workload gives up.
KERNEL_APPEND = "watchdog_thresh=5 rcupdate.rcu_cpu_stall_timeout=10"
# A transfer's inactivity limit: above a restart's downtime plus TCP's
# retransmission back-off on this loaded machine (stalls of 10-18 s seen).
TRANSFER_TIMEOUT_S = 30
WORKLOAD_DEADLINE_S = TRANSFER_TIMEOUT_S + 40
INJECT_WAIT_S = 60           # for the first eighth of the bytes before injecting
RESPONSIVE_S = 15            # an agent that does not run `true` within this: hung
CRASH = re.compile(r"Kernel panic|BUG: |Oops|general protection fault|invalid opcode:|"
                   r"kernel BUG at|unable to handle|stack-protector|double fault")
HANG = re.compile(r"soft lockup|hard LOCKUP|rcu.{0,40}stall|blocked for more than")


def log(msg: str) -> None:
    print(f"[swifi] {msg}", file=sys.stderr, flush=True)


@dataclass
class Settings:
    driver: str = "e1000"
    types: list[str] = field(default_factory=lambda: list(FAULT_TYPES))
    trials_per_type: int = 50
    faults_per_trial: int = 1
    jobs: int = 1
    out: Path = Path("swifi-results")
    resume: bool = False
    # With resume: trials to run again although done, or "severe" for all whose
    # in-kernel world crashed or hung the guest (after a change to understudy).
    rerun: list[str] = field(default_factory=list)
    megabytes: int = 24
    ping_interval_ms: int = 100
    ping_timeout_ms: int = 1000


class ArmedInjection:
    """`inject-process --trigger` started in the guest for one driver process
    and ready (addresses found, old bytes checked): fire() writes the fault
    within milliseconds, at the moment the caller chooses rather than after
    Python's start-up in the guest. Raises LabError if it cannot get ready."""

    def __init__(self, guest: Guest, pid: int, fault_file: str, trigger: str,
                 watch_exit_s: float | None = None, timeout: float = 60):
        self.guest, self.pid, self.trigger = guest, pid, trigger
        seen = bytearray()
        ready = threading.Event()

        def sink(kind: str, chunk: bytes) -> None:
            if kind == "out":
                seen.extend(chunk)
                if b'"ready"' in seen:
                    ready.set()

        watch = ["--watch-exit", str(watch_exit_s)] if watch_exit_s else []
        self.proc = guest.spawn(["python3", "-m", "lab.swifi", "inject-process", "--pid", str(pid),
                                 "--fault", fault_file, "--trigger", trigger, *watch],
                                cwd=str(config.REPO_DIR), sink=sink)
        deadline = time.monotonic() + timeout
        while not ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise LabError(f"the injector for driver process {pid} did not get ready")

    def fire(self, timeout: float = 60):
        """Writes the fault; the injector's CommandResult (its last line is JSON)."""
        # `timeout`: a writer of a FIFO whose reader is gone would wait for ever.
        self.guest.run(["timeout", "10", "sh", "-c", f"echo go > {shlex.quote(self.trigger)}"])
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except LabError:
                pass


def host_module(driver: str) -> Path:
    """The pinned kernel's module file on the host: the very file the guest loads."""
    found = sorted(config.kernel().modules.rglob(f"{driver}.ko"))
    if not found:
        raise LabError(f"no {driver}.ko in {config.kernel().modules}", hint="python3 -m lab setup")
    return found[0]


def trial_plan(s: Settings) -> list[tuple[str, int]]:
    return [(t, seed) for seed in range(s.trials_per_type) for t in s.types]


def read_results(path: Path) -> tuple[dict[str, dict], list[dict]]:
    """The last record of each trial in a results file, in file order, and the
    earlier records of the same trials they replace (a resumed campaign runs a
    trial the lab failed again, and --rerun runs chosen ones again). A last
    line cut short by a killed run is left out, so its trial runs again; any
    other line that is not a record is an error."""
    lines = path.read_text().splitlines()
    latest: dict[str, dict] = {}
    replaced: list[dict] = []
    for n, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            name = record["trial"]
        except (json.JSONDecodeError, KeyError, TypeError):
            if n == len(lines):
                break
            raise LabError(f"{path}:{n} is not a trial record") from None
        if name in latest:
            replaced.append(latest.pop(name))
        latest[name] = record
    return latest, replaced


def drop_cut_line(path: Path) -> None:
    """Cuts off a last line a killed run left without its newline, so that the
    records a resumed run appends start on a line of their own."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def lab_failed(record: dict) -> bool:
    """The lab, not the fault, ended one of the trial's worlds: it says nothing."""
    return any(record.get(world, {}).get("outcome") == "lab error" for world in ("kernel", "understudy"))


def done_trials(path: Path, rerun: Sequence[str] = ()) -> set[str]:
    """Trials --resume skips: those with a record the lab did not fail, but
    for the trials named in `rerun` ("severe": every trial whose in-kernel
    world crashed or hung the guest)."""
    if not path.exists():
        return set()
    latest = read_results(path)[0]
    unknown = [name for name in rerun if name != "severe" and name not in latest]
    if unknown:
        raise LabError(f"no trial {', '.join(unknown)} in {path} to run again",
                       hint='trial names are TYPE-SEED, as in the report; or "severe"')
    again = set(rerun)
    if "severe" in again:
        again |= {name for name, record in latest.items()
                  if record.get("kernel", {}).get("outcome") in SEVERE}
    return {name for name, record in latest.items() if not lab_failed(record) and name not in again}


# -- the workload and what the guest looks like afterwards ------------------------

def _rx_bytes(guest: Guest, iface: str) -> int:
    return int(guest.read_file(f"/sys/class/net/{iface}/statistics/rx_bytes").decode())


def _bulk_verdict(direction: str, host: net.HostBulk, guest_side: dict | None) -> dict:
    try:
        host_side = host.result(timeout=5 if guest_side is None else 30)
    except Exception:  # noqa: BLE001 - a host side that never got its peer
        host_side = None
    finally:
        if host.proc.poll() is None:
            host.proc.kill()
            host.proc.wait()
    if not host_side or not guest_side or "sha256" not in guest_side:
        why = (guest_side or {}).get("error") or "no report"
        return {"direction": direction, "hash_ok": False, "resets": 0, "errors": [why]}
    return net.BulkResult(direction, host_side, guest_side).summary()


class GuestDown(Exception):
    """The guest's console reported a crash or a lockup while the workload ran."""


def _wait_while_guest_lives(proc, guest: Guest, console_mark: int):
    """The workload's result; gives up early once the console shows the guest
    crashed or locked up. Such a guest keeps its verdict whatever the workload
    does next, and waiting out a hung guest's workload deadline was most of the
    campaign's time."""
    deadline = time.monotonic() + WORKLOAD_DEADLINE_S
    while True:
        try:
            return proc.wait(1)
        except TimeoutError:
            pass
        console = guest.console_text()[console_mark:]
        if CRASH.search(console) or HANG.search(console):
            raise GuestDown("the guest's console reported a crash or lockup")
        if time.monotonic() > deadline:
            raise TimeoutError(f"still running after {WORKLOAD_DEADLINE_S} s")


def exercise(guest: Guest, iface: str, nbytes: int, inject) -> dict:
    """Runs the workload, calls inject() once bytes flow, and reports both."""
    tx = net.HostBulk("tx", nbytes, timeout=TRANSFER_TIMEOUT_S + 30)
    rx = net.HostBulk("rx", nbytes, timeout=TRANSFER_TIMEOUT_S + 30)
    args = ["python3", "-m", "lab.swifi.guestload", "--host", SLIRP_GATEWAY,
            "--tx-port", str(tx.port), "--rx-port", str(rx.port), "--bytes", str(nbytes),
            "--timeout", str(TRANSFER_TIMEOUT_S)]
    report: dict = {}
    guest_side: dict | None = None
    t0 = time.monotonic()
    console_mark = len(guest.console_text())
    try:
        before = _rx_bytes(guest, iface)
        proc = guest.spawn(args, cwd=str(config.REPO_DIR))
        deadline = time.monotonic() + INJECT_WAIT_S
        while _rx_bytes(guest, iface) < before + nbytes // 8 and proc.poll() is None:
            if time.monotonic() > deadline:
                raise LabError("the workload did not start moving bytes")
            time.sleep(0.05)
        report["inject_at_s"] = round(time.monotonic() - t0, 2)
        try:
            report["injection"] = inject()
            # A fault written after the workload ended tells nothing about it.
            report["late"] = proc.poll() is not None
        except InjectionRefused as e:
            proc.kill()
            report["refused"] = str(e)
            return report
        except (TimeoutError, LabError) as e:
            report["injection_error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        try:
            res = _wait_while_guest_lives(proc, guest, console_mark)
            guest_side = json.loads(res.out.strip().splitlines()[-1])
        except (TimeoutError, GuestDown) as e:
            report["workload_error"] = str(e)
            try:
                proc.kill()
            except LabError:
                pass
        except (LabError, IndexError, json.JSONDecodeError) as e:
            report["workload_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        report["tx"] = _bulk_verdict("tx", tx, (guest_side or {}).get("tx"))
        report["rx"] = _bulk_verdict("rx", rx, (guest_side or {}).get("rx"))
    report["ping"] = {k: (guest_side or {}).get(k, {}).get("received") for k in ("ping", "ping_after")}
    report["workload_ok"] = (all(report[d]["hash_ok"] and not report[d]["resets"] and not report[d]["errors"]
                                 for d in ("tx", "rx"))
                             and bool(report["ping"]["ping_after"]))
    report["seconds"] = round(time.monotonic() - t0, 1)
    return report


def guest_health(guest: Guest, console_mark: int) -> dict:
    """Is the guest still up and answering, and what did its console say since the mark?"""
    alive = guest.alive()
    responsive = False
    if alive:
        try:
            responsive = guest.run("true", timeout=RESPONSIVE_S).returncode == 0
        except (TimeoutError, LabError):
            responsive = False
    console = guest.console_text()[console_mark:]
    hang = [line for line in console.splitlines() if HANG.search(line)]
    # "BUG: soft lockup" is a hang, not a crash.
    crash = [line for line in console.splitlines() if CRASH.search(line) and line not in hang]
    return {"qemu_alive": alive, "responsive": responsive, "crash_lines": crash[:5],
            "hang_lines": hang[:5], "alive": guest.alive()}


def _guest_outcome(health: dict) -> str | None:
    if not health["alive"] or health["crash_lines"]:
        return "guest crash"
    if not health["responsive"] or health["hang_lines"]:
        return "guest hang"
    return None


# -- the two worlds ----------------------------------------------------------------

class KernelWorld:
    """A guest whose NIC is driven by the in-kernel driver."""

    def __init__(self, driver: str, poke_ko: Path):
        self.dev = lookup(driver)
        self.poke_ko = poke_ko       # build_poke()'s
        self.guest: Guest | None = None
        self.iface = ""

    def _boot(self) -> None:
        self.close()
        self.guest = Guest(devices=[self.dev.name], extra_append=KERNEL_APPEND).start()
        net.load_kernel_drivers(self.guest)
        self.iface = net.iface_of(self.guest, "nic0")

    def ready(self) -> Guest:
        if self.guest is None or not self.guest.alive():
            self._boot()
        return self.guest

    def trial(self, fault: Fault, nbytes: int) -> dict:
        g = self.ready()
        mark = len(g.console_text())
        report = exercise(g, self.iface, nbytes, lambda: inject_kernel(g, fault, self.poke_ko))
        if "refused" in report:
            self._reset(fault, reverted=True)
            return {"outcome": NOT_INJECTED, **report}
        if report.get("injection_error", "").startswith("LabError") or report.get("late"):
            # insmod itself failed (not a guest taken down by the fault), or
            # the fault came after the workload: the trial says nothing.
            self.close()
            return {"outcome": "lab error", **report}
        health = guest_health(g, mark)
        outcome = _guest_outcome(health) or ("no effect" if report["workload_ok"] else "driver failure")
        if outcome == "no effect":
            self._reset(fault)
        else:
            self.close()   # anything could be corrupted: the next trial boots afresh
        return {"outcome": outcome, **report, "guest": health}

    def _reset(self, fault: Fault, reverted: bool = False) -> None:
        """Takes the fault out: undo the patch, reload the module from its file."""
        g = self.guest
        try:
            if not reverted:
                inject_kernel(g, fault, self.poke_ko, revert=True)
            g.run(["rmmod", self.dev.driver], check=True, timeout=60)
            g.run(["modprobe", self.dev.driver], check=True, timeout=60)
            net.bring_up(g, "nic0")
            self.iface = net.iface_of(g, "nic0")
        except (TimeoutError, LabError) as e:
            log(f"in-kernel guest not reusable ({str(e).splitlines()[0]}): rebooting")
            self.close()

    def close(self) -> None:
        if self.guest is not None:
            self.guest.stop()
            self.guest = None


class UnderstudyWorld:
    """A guest whose NIC is driven by the same module in an understudy driver process."""

    def __init__(self, driver: str, bins: dict, settings: Settings):
        self.dev = lookup(driver)
        self.bins, self.s = bins, settings
        self.guest: Guest | None = None
        self.daemon: understudy.Daemon | None = None
        self.bdf = ""

    def _boot(self) -> None:
        self.close()
        g = self.guest = Guest(devices=[self.dev.name]).start()
        self.bdf = g.pci_address("nic0")
        understudy.prepare(g)
        modules = understudy.module_chain(g, self.dev.driver)
        self.daemon = understudy.Daemon(
            g, self.bins, None, "--max-restarts", "1000000", "--restart-window-s", "1",
            "--ping-interval-ms", str(self.s.ping_interval_ms),
            "--ping-timeout-ms", str(self.s.ping_timeout_ms))
        understudy.understudy_up(g, self.daemon, self.bdf, modules)

    def ready(self) -> Guest:
        if self.guest is None or not self.guest.alive() or not self.daemon.alive():
            self._boot()
        return self.guest

    def trial(self, fault: Fault, nbytes: int) -> dict:
        g = self.ready()
        n_before = len(self.daemon.status()[self.bdf]["recoveries"])
        mark = len(g.console_text())
        g.write_file(FAULT_FILE, json.dumps(fault.to_json()).encode())
        at_injection: dict = {}

        injector = self._start_injector(at_injection)

        def inject() -> dict:
            if injector is not None:
                try:
                    res = injector.fire()
                    if res.returncode == 0:
                        return json.loads(res.out.strip().splitlines()[-1])
                    if "nothing written" in res.err:
                        raise InjectionRefused(res.err.strip().splitlines()[-1])
                except TimeoutError:
                    injector.kill()
            # Without a prepared injector (the driver restarted meanwhile under
            # load, without any fault): the slow way, into the driver as it is now.
            for attempt in range(3):
                st = self.daemon.status()[self.bdf]
                pid = st["pid"]
                at_injection["recoveries"] = len(st["recoveries"])
                if st["state"] != "open" or pid is None:
                    time.sleep(1)
                    continue
                res = g.run(["python3", "-m", "lab.swifi", "inject-process", "--pid", str(pid),
                             "--fault", FAULT_FILE], cwd=str(config.REPO_DIR), timeout=60)
                if res.returncode == 0:
                    return json.loads(res.out)
                if "nothing written" in res.err:
                    raise InjectionRefused(res.err.strip().splitlines()[-1])
                lines = res.err.strip().splitlines() or ["(no message)"]
                if f"no process {pid}" not in lines[-1]:
                    raise LabError(f"inject-process failed: {lines[-1]}")
            raise LabError(f"no driver process to inject into (state {st['state']})")

        report = exercise(g, "us0", nbytes, inject)
        if "refused" in report:
            self._reset(restart_driver=False)
            return {"outcome": NOT_INJECTED, **report}
        if "injection" not in report:
            # Writing to a process does not take the guest down: the lab failed.
            self.close()
            return {"outcome": "lab error", **report}
        if report.get("late"):
            self._reset(restart_driver=True)
            return {"outcome": "lab error", **report}
        health = guest_health(g, mark)
        daemon_alive = self.daemon.alive()
        recoveries: list[dict] = []
        status = {}
        if daemon_alive and health["responsive"]:
            status = self._settled_status()
            recoveries = status.get("recoveries", [])[at_injection.get("recoveries", n_before):]
        outcome = _guest_outcome(health)
        if outcome is None:
            if not daemon_alive:
                outcome = "daemon failure"
            elif recoveries and all(r["outcome"] == "recovered" for r in recoveries) \
                    and status.get("state") != "dead":
                outcome = "recovered transparently" if report["workload_ok"] else "recovered, app-visible error"
            elif recoveries or status.get("state") == "dead" or not report["workload_ok"]:
                outcome = "not recovered"
            else:
                outcome = "no effect"
        result = {"outcome": outcome, **report, "guest": health, "daemon_alive": daemon_alive,
                  "spurious_recoveries": at_injection.get("recoveries", n_before) - n_before,
                  "recoveries": recoveries, "state_after": status.get("state"),
                  "undetected": not recoveries and not report["workload_ok"]}
        if outcome in ("guest crash", "guest hang", "daemon failure"):
            self.close()
        else:
            self._reset(restart_driver=not recoveries or outcome == "not recovered")
        return result

    def _start_injector(self, at_injection: dict) -> ArmedInjection | None:
        """inject-process, prepared and waiting for its trigger (None if it could not get ready)."""
        st = self.daemon.status()[self.bdf]
        at_injection["recoveries"] = len(st["recoveries"])
        try:
            return ArmedInjection(self.guest, st["pid"], FAULT_FILE, TRIGGER)
        except LabError:
            return None

    def _settled_status(self, timeout: float = 30) -> dict:
        """The device's status once no restart is under way any more."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.daemon.status().get(self.bdf, {})
            recs = st.get("recoveries") or []
            if st.get("state") != "recovering" and not (recs and recs[-1]["outcome"] == "under way"):
                return st
            if time.monotonic() > deadline:
                return st
            time.sleep(0.3)

    def _reset(self, restart_driver: bool) -> None:
        """A driver that may still hold the fault is replaced by a fresh one from its file."""
        g, d = self.guest, self.daemon
        try:
            if restart_driver:
                st = d.status()[self.bdf]
                if st["state"] == "dead":
                    understudy_down(g, d, self.bdf)
                    understudy.understudy_up(g, d, self.bdf, understudy.module_chain(g, self.dev.driver))
                else:
                    res = d.cli("recover", self.bdf)
                    if res.returncode and "already under way" not in res.err:
                        raise LabError(f"understudy recover: {res.err.strip()}")
            d.wait_state(self.bdf, "open", timeout=60, carrier=True)
            net.bring_up_iface(g, "us0")
            self._settled_status()
        except (TimeoutError, LabError) as e:
            log(f"understudy guest not reusable ({str(e).splitlines()[0]}): rebooting")
            self.close()

    def close(self) -> None:
        if self.guest is not None:
            try:
                if self.daemon is not None and self.daemon.alive():
                    self.daemon.stop()
            except (TimeoutError, LabError):
                pass
            self.guest.stop()
            self.guest, self.daemon = None, None


def understudy_down(g: Guest, d: understudy.Daemon, bdf: str) -> None:
    res = d.cli("stop", bdf)
    if res.returncode:
        raise LabError(f"understudy stop {bdf} failed: {res.err.strip()}")


# -- running a campaign --------------------------------------------------------------

def _command_line() -> str:
    args = sys.argv[1:]
    prog = "python3 -m lab" if args[:1] == ["swifi"] else "python3 -m lab.swifi"
    return f"{prog} {shlex.join(args)}"


def _source_commit() -> str:
    """The commit the lab and understudy were built from ("+dirty" with local
    changes): a campaign resumed in a later session says which trials ran what."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(config.REPO_DIR), *args], capture_output=True, text=True)
    head = git("rev-parse", "HEAD")
    if head.returncode:
        return "unknown"
    dirty = git("diff", "--quiet", "HEAD", "--", ".", ":!docs").returncode != 0
    return head.stdout.strip() + ("+dirty" if dirty else "")


def run_campaign(s: Settings) -> Path:
    dev = lookup(s.driver)
    if dev.kind != NIC:
        raise LabError(f"{s.driver} is not a network device")
    unknown = [t for t in s.types if t not in FAULT_TYPES]
    if unknown:
        raise LabError(f"unknown fault type(s) {', '.join(unknown)}", hint=f"one of {', '.join(FAULT_TYPES)}")
    s.out.mkdir(parents=True, exist_ok=True)
    results = s.out / RESULTS
    if results.exists() and not s.resume:
        raise LabError(f"{results} exists", hint="--resume continues it, or choose another --out")
    gen = generator_for(host_module(dev.driver))
    bins = understudy.build()
    poke_ko = build_poke()
    if s.resume:
        drop_cut_line(results)
    done = done_trials(results, s.rerun) if s.resume else set()
    whole = trial_plan(s)
    plan = [(t, seed) for t, seed in whole if f"{t}-{seed}" not in done]
    commit = _source_commit()
    meta = {"driver": dev.driver, "device": dev.name, "module_sha256": gen.m.sha256,
            "abi": config.kernel().release, "faults_per_trial": s.faults_per_trial,
            "megabytes": s.megabytes, "ping_interval_ms": s.ping_interval_ms,
            "ping_timeout_ms": s.ping_timeout_ms, "types": s.types,
            "trials_per_type": s.trials_per_type, "command": _command_line(), "commit": commit}
    (s.out / "campaign.json").write_text(json.dumps(meta, indent=2) + "\n")
    log(f"{len(plan)} trial(s) to run ({len(whole) - len(plan)} already done), {s.jobs} job(s); "
        f"{dev.driver} sha256 {gen.m.sha256[:16]}…; results in {results}")
    todo: queue.Queue = queue.Queue()
    for item in plan:
        todo.put(item)
    lock = threading.Lock()
    counter = {"n": 0}
    t_start = time.monotonic()

    def worker(k: int) -> None:
        kernel_world = KernelWorld(dev.driver, poke_ko)
        us_world = UnderstudyWorld(dev.driver, bins, s)
        try:
            while True:
                try:
                    fault_type, seed = todo.get_nowait()
                except queue.Empty:
                    return
                record = {**run_trial(gen, fault_type, seed, s, kernel_world, us_world), "commit": commit}
                with lock:
                    with open(results, "a") as f:
                        f.write(json.dumps(record) + "\n")
                    counter["n"] += 1
                    elapsed = time.monotonic() - t_start
                    left = (len(plan) - counter["n"]) * elapsed / counter["n"]
                    log(f"{counter['n']}/{len(plan)} {record['trial']} [job {k}]: in-kernel "
                        f"{record['kernel']['outcome']}; understudy {record['understudy']['outcome']} "
                        f"({record['seconds']:.0f} s; about {left / 60:.0f} min left)")
        finally:
            kernel_world.close()
            us_world.close()

    threads = [threading.Thread(target=worker, args=(k,), name=f"swifi-{k}") for k in range(s.jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def run_trial(gen, fault_type: str, seed: int, s: Settings, kernel_world: KernelWorld,
              us_world: UnderstudyWorld) -> dict:
    t0 = time.monotonic()
    fault = gen.generate(fault_type, seed, s.faults_per_trial)
    nbytes = s.megabytes << 20
    record = {"trial": f"{fault_type}-{seed}", "type": fault_type, "seed": seed,
              "fault": fault.to_json(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for name, world in (("kernel", kernel_world), ("understudy", us_world)):
        t_world = time.monotonic()
        try:
            record[name] = world.trial(fault, nbytes)
        except (TimeoutError, LabError, AgentGone, OSError) as e:
            # The lab itself failed (a guest that would not boot, a setup step):
            # not an outcome of the fault. The world starts afresh.
            record[name] = {"outcome": "lab error", "error": f"{type(e).__name__}: {e}"[:2000]}
            world.close()
        # All of the world's part, boot and clean-up included ("seconds" is the workload's).
        record[name]["world_seconds"] = round(time.monotonic() - t_world, 1)
    record["seconds"] = round(time.monotonic() - t0, 1)
    return record
