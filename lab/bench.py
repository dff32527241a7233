"""Benchmarks in the lab.  Each prints its figures as a table, or as JSON with --json.

bench baseline --driver D: the in-kernel driver's figures, the yardstick every
understudy figure is divided by.  Medians over several runs, because these
machines are noisy.

bench net --driver D: the same NIC, in one guest, alternately driven by the
in-kernel driver and by understudy (the same module file in a driver process
behind understudyd's TAP us0); medians and understudy ÷ in-kernel ratios.
understudy's driver runs on its own vCPU and polls while the traffic is sparse
(`understudy run --cpu --poll-us`); its pings are measured again without polling.
With --no-iommu the guest has no IOMMU and understudy drives the NIC through
uio_pci_generic (docs/design.md §4); the same benchmark in a guest with the
IOMMU follows, so that its ratios stand beside VFIO's. With --queues N a
virtio-net NIC has N queue pairs (understudy run --queues N; the in-kernel
driver takes them as it probes), and with --parallel P iperf3 runs P
connections: the report then counts each queue's packets in both worlds.

bench rt --driver D: real-time latency (cyclictest) beside the same two, idle and
under traffic (lab/bench_rt.py).

bench blk --driver virtio_blk: fio on one disk, the in-kernel driver's and
understudy's behind /dev/nbdN (lab/bench_blk.py).
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
import time
from pathlib import Path

from . import config, net, provenance, understudy
from .devices import lookup_nic
from .errors import LabError
from .guest import Guest
from .netns import LabNetwork

BASELINE_DRIVERS = ["e1000", "pcnet32", "8139cp", "e100"]


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def measure_traffic(guest: Guest, seconds: int, network: LabNetwork | None = None, parallel: int = 1) -> dict:
    """Throughput both ways (iperf3, `parallel` connections), guest CPU per byte moved,
    and 100 pings, through whatever interface carries the guest's traffic to its
    peer (slirp's, or `network`'s)."""
    busy0 = net.cpu_busy_seconds(guest)
    t0 = time.monotonic()
    try:
        sent = net.iperf3_run(guest, reverse=False, seconds=seconds, network=network, parallel=parallel)
        rx = net.iperf3(guest, reverse=True, seconds=seconds, network=network, parallel=parallel)
    except TimeoutError as e:
        raise LabError(f"{e}: the transfer stalled, the NIC stopped moving frames; run the series "
                       "again. A stall that comes back is worth a report, unless the NIC is e100's "
                       "i82559er, whose QEMU model stalls now and then, in-kernel too "
                       "(docs/performance.md §9)") from None
    tx = sent.pop("mbps")
    elapsed = time.monotonic() - t0
    busy = net.cpu_busy_seconds(guest) - busy0
    moved_bytes = (tx + rx) * 1e6 / 8 * seconds
    return {"tx_mbps": tx, "rx_mbps": rx, **{f"tx_{k}": v for k, v in sent.items()},
            **measure_pings(guest, network),
            "cpu_ns_per_byte": busy * 1e9 / moved_bytes if moved_bytes else None,
            "cpu_utilisation": busy / elapsed / guest.cpus}


def measure_pings(guest: Guest, network: LabNetwork | None = None) -> dict:
    """100 pings 20 ms apart: the round trip's median and p99, the loss, and the
    guest's CPU utilisation meanwhile (what a polling driver spends on them)."""
    busy0, t0 = net.cpu_busy_seconds(guest), time.monotonic()
    p = net.ping(guest, count=100, interval=0.02, network=network)
    busy = net.cpu_busy_seconds(guest) - busy0
    return {"rtt_ms_median": p["rtt_ms_median"], "rtt_ms_p99": p["rtt_ms_p99"], "ping_loss_pct": p["loss_pct"],
            "ping_cpu_utilisation": busy / (time.monotonic() - t0) / guest.cpus}


def measure_kernel_run(guest: Guest, driver: str, dev_id: str, seconds: int) -> dict:
    """One run of every baseline figure against the in-kernel driver."""
    figures = measure_traffic(guest, seconds)
    reload = net.guest_workload(guest, ["reload", "--driver", driver,
                                        "--pci", guest.pci_address(dev_id)])
    if reload.get("error"):
        raise LabError(f"reload of {driver} failed: {reload['error']}")
    return {**figures, "reload_downtime_ms": reload["downtime_ms"],
            "reload_probe_ms": reload["probe_ms"], "reload_link_ms": reload["link_ms"]}


def medians(runs: list[dict]) -> dict:
    keys = [k for k in runs[0] if all(isinstance(r.get(k), (int, float)) for r in runs)]
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in keys}


def run_ratios(top: list[dict], bottom: list[dict], key: str, bottom_key: str | None = None) -> list[float]:
    """Run i's `key` in `top` ÷ run i's `bottom_key` (by default `key`) in `bottom`, for
    alternating runs: pairing keeps a ratio meaningful when the machine's speed
    drifts during a benchmark."""
    bkey = bottom_key or key
    return [t[key] / b[bkey] for t, b in zip(top, bottom)
            if isinstance(t.get(key), (int, float)) and isinstance(b.get(bkey), (int, float)) and b[bkey]]


def spread(ratios: list[float]) -> dict | None:
    """min, median and max of per-run ratios: a figure read with its noise."""
    if not ratios:
        return None
    return {"min": round(min(ratios), 3), "median": round(statistics.median(ratios), 3),
            "max": round(max(ratios), 3)}


def baseline(driver: str, runs: int, seconds: int) -> dict:
    dev = lookup_nic(driver)
    log(f"booting a guest with {dev.name} (in-kernel {dev.driver})")
    results = []
    with Guest(devices=[dev.name]) as guest:
        net.load_kernel_drivers(guest)
        for i in range(runs):
            log(f"{dev.driver}: run {i + 1}/{runs} (iperf3 {seconds} s each way, 100 pings, reload)")
            results.append(measure_kernel_run(guest, dev.driver, "nic0", seconds))
    return {"driver": dev.driver, "device": dev.name, **lab_identity(),
            "runs": runs, **medians(results), "per_run": results}


def lab_identity() -> dict:
    """What a figure was measured on: the guest kernel and the CPU TCG emulates."""
    return {"abi": config.kernel().release, "guest_cpu": config.guest_defaults().cpu_model}


def table(rows: list[dict], keys: list[str]) -> str:
    head = ["figure", *(r["driver"] for r in rows)]
    lines = [head] + [[k, *(_fmt(r.get(k)) for r in rows)] for k in keys]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines)


def _range(s: dict | None) -> str:
    """A spread as ' [min–max]', or nothing."""
    return f" [{_fmt(s['min'])}–{_fmt(s['max'])}]" if s else ""


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return str(v)


BASELINE_KEYS = ["tx_mbps", "rx_mbps", "rtt_ms_median", "rtt_ms_p99", "ping_loss_pct",
                 "cpu_ns_per_byte", "reload_downtime_ms", "reload_probe_ms", "reload_link_ms"]


def cmd_baseline(args) -> int:
    drivers = BASELINE_DRIVERS if args.driver == "all" else args.driver.split(",")
    reports = [baseline(d, args.runs, args.seconds) for d in drivers]
    command = "python3 -m lab " + shlex.join(sys.argv[1:])
    if args.json:
        out = reports[0] if len(reports) == 1 else {"drivers": reports}
        print(json.dumps({**out, **provenance.record()}, indent=2))
    else:
        print(table(reports, BASELINE_KEYS))
        print(f"(medians of {args.runs} runs; {command})")
    return 0


NET_KEYS = ["tx_mbps", "rx_mbps", "rtt_ms_median", "rtt_ms_p99", "ping_loss_pct", "ping_cpu_utilisation",
            "rtt_ms_median_sleeping", "ping_cpu_utilisation_sleeping",
            "cpu_ns_per_byte", "cpu_utilisation", "tx_rtt_ms_mean", "tx_cwnd_kib_max",
            "tx_peer_window_kib_max"]
# understudy ÷ in-kernel, of the medians: what running the driver in a process costs,
# each as (understudy's figure, the in-kernel driver's).
# rtt_ratio is the idle round trip (ping) with the driver's TX thread polling
# (--poll-us), rtt_ratio_sleeping without; tcp_rtt_ratio the sending TCP's own
# round trip under load (iperf3's mean), which a deep queue before the NIC inflates.
NET_RATIOS = {"tx_ratio": ("tx_mbps", "tx_mbps"), "rx_ratio": ("rx_mbps", "rx_mbps"),
              "rtt_ratio": ("rtt_ms_median", "rtt_ms_median"),
              "rtt_ratio_sleeping": ("rtt_ms_median_sleeping", "rtt_ms_median"),
              "tcp_rtt_ratio": ("tx_rtt_ms_mean", "tx_rtt_ms_mean"),
              "cpu_per_byte_ratio": ("cpu_ns_per_byte", "cpu_ns_per_byte")}

# understudy's driver polls (`understudy run --poll-us`) this long after its last
# work while the traffic is sparse: longer than the 20 ms between the benchmark's
# pings, so that each finds its TX thread running (docs/performance.md §8).
DEFAULT_POLL_US = 30_000


# What the NIC is plugged into. slirp's TCP offers a fixed 64 KiB window (no window
# scaling), so through it throughput is that window ÷ the round trip, whichever
# driver runs; a TAP on a host bridge has the host's own TCP at the far end.
NETWORKS = {"tap": "a TAP on a bridge in a network namespace, the peer the host's TCP (lab/netns.py)",
            "slirp": "QEMU's user-mode network, the peer the host's loopback behind slirp's TCP"}


def driver_cpu(guest: Guest) -> int:
    """The vCPU a benchmark runs understudy's driver process on (`understudy run
    --cpu`): the guest's last; the daemon's thread for the device gets the others.
    Left to the scheduler, the two share a vCPU for much of a transfer while the
    other idles (docs/performance.md §5)."""
    return guest.cpus - 1


# Each world of each run also moves this much each way by a hash-checked transfer:
# iperf3 counts bytes, it does not check them.
HASHED_BYTES = 16 << 20


def hashed_transfers(guest: Guest, network: LabNetwork) -> dict:
    """Whether a hash-checked transfer each way arrived whole (lab/net.py `bulk`)."""
    return {way: net.bulk(guest, way, HASHED_BYTES, network=network).hash_ok for way in ("tx", "rx")}


QUEUE_PACKETS = re.compile(r"^(tx|rx)_queue_\d+_packets$")


def queue_packets(stats: dict[str, int]) -> dict[str, int]:
    """A driver's per-queue packet counters (virtio_net's tx_queue_N_packets, ...)."""
    return {name: value for name, value in stats.items() if QUEUE_PACKETS.match(name)}


def kernel_queue_packets(guest: Guest, dev_id: str) -> dict[str, int] | None:
    """The in-kernel driver's per-queue counters (`ethtool -S`); None for a
    driver that keeps no statistics (pcnet32)."""
    res = guest.run(["ethtool", "-S", net.iface_of(guest, dev_id)])
    if res.returncode and "no stats available" in res.out + res.err:
        return None
    if res.returncode:
        raise LabError(f"ethtool -S {dev_id} failed: {res.err.strip()}")
    out = res.out
    pairs = (line.strip().split(": ", 1) for line in out.splitlines() if ": " in line)
    return queue_packets({name: int(value) for name, value in pairs if value.strip().isdigit()})


def understudy_queue_packets(daemon: understudy.Daemon, bdf: str) -> dict[str, int]:
    """The driver process's per-queue counters (`understudy ethtool --stats --json`)."""
    status, report = daemon.cli_json("ethtool", "--stats", bdf)
    if status:
        raise LabError(f"understudy ethtool --stats {bdf} failed: {report}")
    return queue_packets({s["name"]: s["value"] for s in report["ethtool"]["stats"]})


def bench_net(driver: str, runs: int, seconds: int, network_kind: str = "tap", iommu: bool = True,
              queues: int = 1, parallel: int = 1, cpu: int | None = None, poll_us: int = DEFAULT_POLL_US) -> dict:
    """Alternating runs of the in-kernel driver and understudy on the same device
    (without `iommu`: in a guest without one, understudy over uio_pci_generic;
    with `queues`, a NIC of that many queue pairs; `parallel` iperf3 connections;
    the driver process on vCPU `cpu`, by default driver_cpu's, its TX thread
    polling for up to `poll_us` (0: never). A polling driver's round trip is
    also measured without polling, by a driver started again without it."""
    dev = lookup_nic(driver)
    cpus = config.guest_defaults().cpus     # every lab guest's (nic_lab boots with the defaults)
    if cpu is not None and not 0 <= cpu < cpus:
        raise LabError(f"--driver-cpu {cpu}: the guest has vCPUs 0 to {cpus - 1}")
    if not 0 <= poll_us <= 1_000_000:
        raise LabError(f"--poll-us {poll_us}: 0 (never) to 1000000 µs")
    bins = understudy.build(release=True)
    kernel_runs, understudy_runs = [], []
    hashes = {"kernel": [], "understudy": []}
    log(f"booting a guest {'with' if iommu else 'WITHOUT'} an IOMMU, {dev.name}"
        f"{f' ({queues} queue pairs)' if queues > 1 else ''} on {NETWORKS[network_kind]}")
    with understudy.nic_lab(dev.name, network=network_kind == "tap", iommu=iommu, queues=queues) as lab:
        guest, network, bdf, modules = lab.guest, lab.network, lab.bdf, lab.modules
        cpu = driver_cpu(guest) if cpu is None else cpu
        daemon = understudy.Daemon(guest, bins)
        try:
            for i in range(runs):
                log(f"run {i + 1}/{runs}: in-kernel {dev.driver}")
                understudy.bind_kernel(guest, bdf, dev.driver)
                net.bring_up(guest, "nic0", network=network)
                traffic = measure_traffic(guest, seconds, network, parallel)
                kernel_queues = kernel_queue_packets(guest, "nic0")
                kernel_runs.append({**traffic, "queue_packets": kernel_queues or {}})
                hashes["kernel"].append(hashed_transfers(guest, network))
                log(f"run {i + 1}/{runs}: understudy ({dev.driver} in a driver process)")
                understudy.understudy_up(guest, daemon, bdf, modules, network, cpu, poll_us=poll_us or None)
                # A driver without statistics (kernel_queues None) keeps none in a driver process either.
                understudy_runs.append({**measure_traffic(guest, seconds, network, parallel),
                                        "queue_packets": {} if kernel_queues is None
                                        else understudy_queue_packets(daemon, bdf)})
                hashes["understudy"].append(hashed_transfers(guest, network))
                understudy.understudy_down(guest, daemon, bdf)
                if poll_us:
                    log(f"run {i + 1}/{runs}: understudy's pings without polling")
                    understudy.understudy_up(guest, daemon, bdf, modules, network, cpu)
                    understudy_runs[-1].update({f"{k}_sleeping": v for k, v in measure_pings(guest, network).items()
                                                if k in ("rtt_ms_median", "ping_cpu_utilisation")})
                    understudy.understudy_down(guest, daemon, bdf)
        finally:
            daemon.stop()
    kernel, under = medians(kernel_runs), medians(understudy_runs)
    ratios = {name: round(under[uk] / kernel[kk], 3) if kernel.get(kk) and uk in under else None
              for name, (uk, kk) in NET_RATIOS.items()}
    spreads = {name: spread(run_ratios(understudy_runs, kernel_runs, uk, kk)) for name, (uk, kk) in NET_RATIOS.items()}
    return {"driver": dev.driver, "device": dev.name, **lab_identity(),
            "dma": "iommu (vfio-pci)" if iommu else "unconfined (uio_pci_generic)",
            "network": network_kind, "runs": runs, "seconds": seconds, "driver_cpu": cpu, "poll_us": poll_us,
            "queues": queues, "parallel": parallel, **ratios,
            # each ratio's per-run spread (run i understudy ÷ run i in-kernel)
            "spread": spreads,
            "ping_loss_pct": under.get("ping_loss_pct"), "kernel": kernel, "understudy": under,
            # every run's hash-checked transfers, each way, arrived whole
            "hash_ok": {world: all(ok for run in checked for ok in run.values()) for world, checked in hashes.items()},
            "hashed_mib_per_way_and_run": HASHED_BYTES >> 20,
            "per_run": {"kernel": kernel_runs, "understudy": understudy_runs}}


def cmd_net(args) -> int:
    report = bench_net(args.driver, args.runs, args.seconds, args.network, iommu=not args.no_iommu,
                       queues=args.queues, parallel=args.parallel, cpu=args.driver_cpu, poll_us=args.poll_us)
    if args.no_iommu:
        vfio = bench_net(args.driver, args.runs, args.seconds, args.network, queues=args.queues,
                         parallel=args.parallel, cpu=args.driver_cpu, poll_us=args.poll_us)
        report["vfio"] = {k: vfio[k] for k in [*NET_RATIOS, "spread", "kernel", "understudy", "per_run", "hash_ok"]}
    command = "python3 -m lab " + shlex.join(sys.argv[1:])
    report = {**report, **provenance.record()}
    if args.plot:
        from .bench_plot import write_plot
        write_plot([report], Path(args.plot))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        rows = [{"driver": f"in-kernel {report['driver']}", **report["kernel"]},
                {"driver": "understudy" + (" (no IOMMU)" if args.no_iommu else ""), **report["understudy"]}]
        if args.no_iommu:
            rows.append({"driver": "understudy (VFIO)", **report["vfio"]["understudy"]})
        print(table(rows, NET_KEYS))
        print("  ".join(f"{k} {_fmt(report[k])}{_range(report['spread'][k])}" for k in NET_RATIOS))
        if args.no_iommu:
            print("VFIO: " + "  ".join(f"{k} {_fmt(report['vfio'][k])}{_range(report['vfio']['spread'][k])}"
                                       for k in NET_RATIOS))
        if args.queues > 1:
            for world in ("kernel", "understudy"):
                counts = report["per_run"][world][-1]["queue_packets"]
                print(f"{world}, last run, packets per queue: "
                      + ", ".join(f"{name.removesuffix('_packets')} {n}" for name, n in sorted(counts.items())))
        print(f"hash-checked transfers ({HASHED_BYTES >> 20} MiB each way per run and world) whole: "
              + ", ".join(f"{world} {'yes' if ok else 'NO'}" for world, ok in all_hashes(report).items()))
        print(f"(understudy's driver on vCPU {report['driver_cpu']}, "
              + (f"polling {report['poll_us']} µs (--poll-us; *_sleeping: without); " if report["poll_us"]
                 else "not polling; ")
              + f"medians of {args.runs} alternating runs on {NETWORKS[args.network]}, "
              f"host {provenance.machine()['cpu_model']}; {command})")
    if not all(all_hashes(report).values()):
        log("a hash-checked transfer arrived changed or short: see hash_ok in the report")
        return 1
    return 0


def all_hashes(report: dict) -> dict:
    """Each world's hash verdict, the VFIO guest's too after --no-iommu."""
    return {**report["hash_ok"], **{f"{w} (VFIO)": ok for w, ok in report.get("vfio", {}).get("hash_ok", {}).items()}}


def add_parser(sub):
    """`lab bench` and its baseline and net benchmarks; returns the group others add theirs to."""
    b = sub.add_parser("bench", help="benchmarks (table, or JSON with --json)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bsub = b.add_subparsers(dest="bench", required=True)
    base = bsub.add_parser("baseline", help="the in-kernel driver's figures in the lab",
                           description="TCP throughput both ways (iperf3), ping RTT median and "
                           "p99, guest CPU per byte, and the reload downtime (rmmod + modprobe + "
                           "address + link → first answered ping), medians over --runs.")
    base.add_argument("--driver", default="e1000",
                      help=f"one of {', '.join(BASELINE_DRIVERS)}, a comma list, or 'all'")
    base.add_argument("--runs", type=int, default=3)
    base.add_argument("--seconds", type=int, default=5, help="iperf3 duration per direction")
    base.add_argument("--json", action="store_true", help="print one JSON object")
    base.set_defaults(func=cmd_baseline)
    netp = bsub.add_parser("net", help="understudy against the in-kernel driver, same guest and NIC",
                           description="Alternating runs on one device, rebound between the "
                           "in-kernel driver and vfio-pci + understudyd: iperf3 both ways, 100 "
                           "pings, guest CPU per byte (daemon and driver process included), and a "
                           "hash-checked transfer each way (exit 1 if one arrives changed). "
                           "Medians, and understudy ÷ in-kernel ratios.")
    netp.add_argument("--driver", default="e1000",
                      help=f"a lab NIC's in-kernel driver: {', '.join(BASELINE_DRIVERS)} "
                      "(8139cp drives QEMU's rtl8139, an 8139C+ that 8139too refuses)")
    netp.add_argument("--runs", type=int, default=3)
    netp.add_argument("--seconds", type=int, default=5, help="iperf3 duration per direction")
    netp.add_argument("--network", choices=sorted(NETWORKS), default="tap",
                      help="the guest's peer: " + "; ".join(f"{k}: {v}" for k, v in NETWORKS.items())
                      + " (default: tap)")
    netp.add_argument("--no-iommu", action="store_true",
                      help="understudy through uio_pci_generic in a guest without an IOMMU, its DMA "
                      "unconfined (docs/design.md §4); then the same in a guest with one, for VFIO's ratios")
    netp.add_argument("--queues", type=int, default=1, metavar="N",
                      help="queue pairs of the NIC (virtio_net on a TAP only): QEMU's mq=on, "
                      "`understudy run --queues N`; per-queue packet counts join the report")
    netp.add_argument("--parallel", type=int, default=1, metavar="P",
                      help="iperf3 connections each way (-P), to spread flows over the queues")
    netp.add_argument("--driver-cpu", type=int, metavar="CPU",
                      help="the vCPU of understudy's driver process and its interrupts "
                      "(`understudy run --cpu`; default: the guest's last)")
    netp.add_argument("--poll-us", type=int, default=DEFAULT_POLL_US, metavar="N",
                      help="understudy's TX thread polls for up to N µs after its last work while "
                      f"the traffic is sparse (`understudy run --poll-us`; default {DEFAULT_POLL_US}; "
                      "0: it never polls). A polling driver's pings are measured again without it "
                      "(rtt_ratio_sleeping), and every world's CPU while pinging is reported")
    netp.add_argument("--plot", metavar="FILE", help="draw mean and maximum throughput into this PNG "
                      "(`bench plot-net` draws saved reports)")
    netp.add_argument("--json", action="store_true", help="print one JSON object")
    netp.set_defaults(func=cmd_net)
    return bsub
