"""bench plot-net: `bench net` result files drawn as the DDE paper's Fig. 7 --
mean and maximum throughput of each way, user-level beside in-kernel.

A report of `bench net --no-iommu` carries two guests' runs: the one without an
IOMMU (in-kernel, then understudy over uio_pci_generic) and the one with it
(in-kernel, then understudy over VFIO).  Each pair is drawn beside its own
in-kernel runs, since the ratio that matters is within one guest.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

WAYS = {"tx_mbps": "guest sends", "rx_mbps": "guest receives"}
COLOURS = {"in-kernel": "#4d4d4d", "understudy": "#b2182b",
           "in-kernel, guest without IOMMU": "#4d4d4d", "understudy over UIO": "#b2182b",
           "in-kernel, guest with IOMMU": "#999999", "understudy over VFIO": "#ef8a62"}


def series(report: dict) -> dict[str, list[dict]]:
    """Each case's per-run figures, named as the plot labels them."""
    if "vfio" not in report:
        return {"in-kernel": report["per_run"]["kernel"], "understudy": report["per_run"]["understudy"]}
    return {"in-kernel, guest without IOMMU": report["per_run"]["kernel"],
            "understudy over UIO": report["per_run"]["understudy"],
            "in-kernel, guest with IOMMU": report["vfio"]["per_run"]["kernel"],
            "understudy over VFIO": report["vfio"]["per_run"]["understudy"]}


def write_plot(reports: list[dict], path: Path) -> None:
    """Bars of the mean over runs, a tick at the maximum (as Fig. 7), and each
    case's median guest CPU utilisation under its bar's label."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [(r, way) for r in reports for way in WAYS]
    fig, ax = plt.subplots(figsize=(max(6, 2.6 * len(groups)), 4.5))
    width = 0.2
    labelled = set()
    for g, (report, way) in enumerate(groups):
        cases = series(report)
        for i, (name, runs) in enumerate(cases.items()):
            values = [run[way] for run in runs if isinstance(run.get(way), (int, float))]
            if not values:
                continue
            x = g + (i - (len(cases) - 1) / 2) * width
            ax.bar(x, statistics.mean(values), width, color=COLOURS[name],
                   label=None if name in labelled else name)
            labelled.add(name)
            ax.plot([x - width / 3, x + width / 3], [max(values)] * 2, color="black", linewidth=1.5)
            busy = statistics.median(run["cpu_utilisation"] for run in runs)
            ax.text(x, 0, f"{busy:.0%}", ha="center", va="bottom", fontsize=7, color="white")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{r['driver']}: {WAYS[way]}" for r, way in groups], fontsize=9)
    ax.set_ylabel("TCP throughput (Mbit/s): bar mean, tick max")
    runs = sorted({r["runs"] for r in reports})
    cpu = reports[0].get("machine", {}).get("cpu_model", "?")
    ax.set_title(f"iperf3 through each driver, {'/'.join(map(str, runs))} runs x {reports[0]['seconds']} s "
                 f"per way; white: guest CPU busy over both ways (QEMU TCG guest, host {cpu})", fontsize=8)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cmd_plot_net(args) -> int:
    reports = [json.loads(Path(f).read_text()) for f in args.results]
    write_plot(reports, Path(args.out))
    print(args.out)
    return 0


def add_parser(bsub) -> None:
    p = bsub.add_parser("plot-net", help="draw `bench net` result files as mean/max throughput bars",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="JSON files `bench net --json` printed")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.set_defaults(func=cmd_plot_net)
