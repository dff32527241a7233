# SPDX-License-Identifier: GPL-2.0
"""A campaign's results: outcome counts per fault type for both worlds, the
headline figure, and a plot.

Headline: of the trials whose fault crashed or hung the guest with the
in-kernel driver, the share in which understudy kept the application
unaffected -- it recovered transparently, or the fault had no visible effect
on it at all.  Trials whose fault could not be injected in one of the worlds
(its bytes differed in memory) and trials the lab itself failed are counted
apart, never in the headline.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ..errors import LabError
from .campaign import KERNEL_OUTCOMES, NOT_INJECTED, RESULTS, SEVERE, UNDERSTUDY_OUTCOMES, lab_failed, read_results
from .faults import FAULT_TYPES

UNAFFECTED = {"recovered transparently", "no effect"}
OTHER = [NOT_INJECTED, "lab error"]


def load(directory: Path) -> dict:
    path = directory / RESULTS
    if not path.exists():
        raise LabError(f"no {RESULTS} in {directory}", hint="the --out directory of a campaign")
    latest, replaced = read_results(path)
    meta_path = directory / "campaign.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    return {"meta": meta, "trials": list(latest.values()),
            "lab_errors_rerun": sum(map(lab_failed, replaced)),
            "chosen_rerun": len({r["trial"] for r in replaced if not lab_failed(r)})}


def _table(trials: list[dict], world: str, outcomes: list[str]) -> dict:
    types = [t for t in FAULT_TYPES if any(tr["type"] == t for tr in trials)]
    table = {t: Counter() for t in types}
    for tr in trials:
        table[tr["type"]][tr.get(world, {}).get("outcome", "lab error")] += 1
    columns = outcomes + [o for o in OTHER if any(c[o] for c in table.values())]
    return {"columns": columns,
            "rows": {t: {o: table[t][o] for o in columns} for t in types},
            "total": {o: sum(table[t][o] for t in types) for o in columns}}


def summarize(data: dict) -> dict:
    trials = data["trials"]
    severe = [tr for tr in trials if tr.get("kernel", {}).get("outcome") in SEVERE
              and tr.get("understudy", {}).get("outcome") not in OTHER]
    survived = [tr for tr in severe if tr["understudy"]["outcome"] in UNAFFECTED]
    latencies = [r.get("first_packet_ms") for tr in trials
                 for r in tr.get("understudy", {}).get("recoveries", []) if r.get("first_packet_ms")]
    return {
        "meta": data["meta"],
        "trials": len(trials),
        "kernel": _table(trials, "kernel", KERNEL_OUTCOMES),
        "understudy": _table(trials, "understudy", UNDERSTUDY_OUTCOMES),
        "kernel_crash_or_hang": len(severe),
        "understudy_unaffected_of_those": len(survived),
        "survival_pct": round(100 * len(survived) / len(severe), 1) if severe else None,
        "not_survived": [{"trial": tr["trial"], "understudy": tr["understudy"]["outcome"],
                          "fault": tr["fault"]["description"]}
                         for tr in severe if tr not in survived],
        "recovery_first_packet_ms": sorted(latencies),
        "commits": dict(Counter(tr.get("commit", "unrecorded") for tr in trials)),
        "lab_errors_rerun": data.get("lab_errors_rerun", 0),
        "chosen_rerun": data.get("chosen_rerun", 0),
    }


def _text_table(title: str, table: dict) -> str:
    cols = table["columns"]
    head = ["type", *cols]
    rows = [[t, *(str(r[c]) for c in cols)] for t, r in table["rows"].items()]
    rows.append(["total", *(str(table["total"][c]) for c in cols)])
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([title, fmt(head), *map(fmt, rows)])


def markdown_table(table: dict) -> str:
    cols = table["columns"]
    lines = ["| type | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for t, r in table["rows"].items():
        lines.append(f"| {t} | " + " | ".join(str(r[c]) for c in cols) + " |")
    lines.append("| **total** | " + " | ".join(f"**{table['total'][c]}**" for c in cols) + " |")
    return "\n".join(lines)


def headline(summary: dict) -> str:
    n, k = summary["kernel_crash_or_hang"], summary["understudy_unaffected_of_those"]
    if not n:
        return "no trial crashed or hung the guest with the in-kernel driver"
    return (f"of the {n} trials that crash or hang the guest in-kernel, understudy survived "
            f"with the application unaffected in {k} ({summary['survival_pct']}%)")


def provenance(summary: dict) -> str:
    runs = ", ".join(f"{c[:12]} ({n} trial{'' if n == 1 else 's'})" for c, n in summary["commits"].items())
    text = f"run at {runs}"
    if summary["lab_errors_rerun"]:
        text += f"; {summary['lab_errors_rerun']} trial(s) the lab failed were run again"
    if summary["chosen_rerun"]:
        text += (f"; {summary['chosen_rerun']} finished trial(s) were run again with --rerun "
                 "(their last record counts)")
    return text


def text_report(summary: dict) -> str:
    parts = [_text_table("in-kernel driver:", summary["kernel"]), "",
             _text_table("understudy:", summary["understudy"]), "",
             f"{summary['trials']} trials; " + headline(summary), provenance(summary)]
    for miss in summary["not_survived"]:
        parts.append(f"  not survived: {miss['trial']} ({miss['understudy']}): {miss['fault']}")
    return "\n".join(parts)


def markdown_report(summary: dict) -> str:
    parts = ["In-kernel driver:", "", markdown_table(summary["kernel"]), "",
             "understudy, the same faults:", "", markdown_table(summary["understudy"]), "",
             f"{summary['trials']} trials; **{headline(summary)}**.", "", provenance(summary) + "."]
    for miss in summary["not_survived"]:
        parts.append(f"- not survived: `{miss['trial']}` ({miss['understudy']}): {miss['fault']}")
    return "\n".join(parts)


def write_plot(summary: dict, path: Path) -> None:
    """Two panels of stacked bars: outcomes per fault type, in-kernel and understudy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"guest crash": "#b2182b", "guest hang": "#ef8a62", "driver failure": "#fddbc7",
               "no effect": "#d9d9d9", "recovered transparently": "#1a9850",
               "recovered, app-visible error": "#a6d96a", "not recovered": "#fdae61",
               "daemon failure": "#7b3294", NOT_INJECTED: "#ffffff", "lab error": "#636363"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, world, title in ((axes[0], "kernel", "in-kernel driver"),
                             (axes[1], "understudy", "understudy (same faults)")):
        table = summary[world]
        types = list(table["rows"])
        bottom = [0] * len(types)
        for outcome in table["columns"]:
            values = [table["rows"][t][outcome] for t in types]
            if not any(values):
                continue
            ax.bar(types, values, bottom=bottom, label=outcome, color=colours.get(outcome, "#999999"),
                   edgecolor="#444444", linewidth=0.5)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=45)
        ax.legend(fontsize=7, loc="upper right")
    axes[0].set_ylabel("trials")
    meta = summary.get("meta", {})
    fig.suptitle(f"fault injection, {meta.get('driver', '?')} ({summary['trials']} trials): "
                 + headline(summary), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
