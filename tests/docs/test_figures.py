"""A doc's figures are its result files' (docs/results/README.md): every table
named in TABLES is found in its doc by its header, each of its rows is read
from the result file TABLES gives for it, and each checked column's numbers
must be that file's values, rounded as printed. So a figure typed by hand, a
result file replaced under a table, a row added without its file or a row
that lost its file fails here, without a lab.

The convention, for a table that cites a result file:
- the table is found by its first header cell and the header cells it checks;
- a row is named by the longest name its first `key_cells` cells start with
  (a driver, or a driver and a gate); every row of the table must be named,
  and every name must name exactly one row;
- a column's cell holds the numbers of its JSON paths in order (dotted keys
  under the row's root, a list index as a number, `*100` or `/1000` to scale),
  with anything else between them ("**1.06** [0.86 – 1.18]"); a path whose
  value is null is printed as no number ("–");
- the doc cites each row's file (a backquoted name, `{a,b}` and `*` expanded).
"""
import fnmatch
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results"

# A number as the docs print it: 1.06, 2086, 60 033 (thousands spaced), 216k;
# not the digits of a name (e1000).
NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?: \d{3})+|\d+)(?:\.\d+)?(?!\d|\.\d)")


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    first_header: str
    columns: dict[str, tuple[str, ...]]
    rows: dict[str, tuple[str, str]]    # row name -> (result file, root path)
    key_cells: int = 1


def bench_net_rows(names: dict[str, str], series: str) -> dict[str, tuple[str, str]]:
    """`bench net` rows, one file per driver: row name -> driver."""
    return {row: (f"bench-net-{driver}-{series}.json", "") for row, driver in names.items()}


INTX_295809D = {"e1000 (e1000)": "e1000", "pcnet32 (pcnet)": "pcnet32",
                "8139cp (rtl8139)": "8139cp", "e100 (i82559er)": "e100"}
MSIX_D9785FE = {"virtio_net (virtio-net-pci)": "virtio_net", "e1000e (e1000e)": "e1000e"}

RATIO = ("{0}", "spread.{0}.min", "spread.{0}.max")


def ratio(key: str) -> tuple[str, ...]:
    """A median ratio and its per-run range: "**1.06** [0.86 – 1.18]"."""
    return tuple(p.format(key) for p in RATIO)


THROUGHPUT = {
    "in-kernel tx / rx (Mbit/s)": ("kernel.tx_mbps", "kernel.rx_mbps"),
    "understudy tx / rx (Mbit/s)": ("understudy.tx_mbps", "understudy.rx_mbps"),
    "tx ratio": ratio("tx_ratio"),
    "rx ratio": ratio("rx_ratio"),
}

BENCH_NET_POLLING = {
    **THROUGHPUT,
    "ping median in-kernel / understudy polling / not polling (ms)":
        ("kernel.rtt_ms_median", "understudy.rtt_ms_median", "understudy.rtt_ms_median_sleeping"),
    "RTT ratio polling": ratio("rtt_ratio"),
    "RTT ratio not polling": ratio("rtt_ratio_sleeping"),
    "guest CPU while pinging, in-kernel / polling / not polling":
        ("kernel.ping_cpu_utilisation*100", "understudy.ping_cpu_utilisation*100",
         "understudy.ping_cpu_utilisation_sleeping*100"),
    "CPU per byte in-kernel / understudy (ns)": ("kernel.cpu_ns_per_byte", "understudy.cpu_ns_per_byte"),
    "CPU per byte ratio": ratio("cpu_per_byte_ratio"),
    "pings lost": ("ping_loss_pct",),
}

PHASES_AND_GAPS = {
    "stop": ("phase_ms_median.stop_ms",),
    "fork + resume": ("phase_ms_median.start_ms",),
    "replay": ("phase_ms_median.replay_ms",),
    "link": ("phase_ms_median.link_ms",),
    "daemon": ("downtime_ms_median", "downtime_ms_max"),
    "wire": ("wire_gap_ms_median", "wire_gap_ms_max"),
    "ping": ("probe_gap_ms_median", "probe_gap_ms_max"),
    "TCP application": ("app_gap_ms_median", "app_gap_ms_max"),
    "transfer": ("bytes/1048576",),
}

CHECK_COST = {
    "send ratio": ("tx_ratio", "tx_ratio_spread.0", "tx_ratio_spread.1"),
    "receive ratio": ("rx_ratio", "rx_ratio_spread.0", "rx_ratio_spread.1"),
    "unchecked send / receive (Mbit/s)": ("unchecked.tx_mbps", "unchecked.rx_mbps"),
    "checked": ("checked.tx_mbps", "checked.rx_mbps"),
    "events checked per second": ("events_per_s/1000",),
}

TABLES = [
    Table("README: what it costs", "README.md", "driver (QEMU model)", {
        "TCP send / receive, understudy ÷ in-kernel": ("tx_ratio", "rx_ratio"),
        "ping median, in-kernel / understudy polling / not polling (ms)":
            BENCH_NET_POLLING["ping median in-kernel / understudy polling / not polling (ms)"],
        "guest CPU while pinging, in-kernel / polling / not polling":
            BENCH_NET_POLLING["guest CPU while pinging, in-kernel / polling / not polling"],
        "guest CPU per byte, understudy ÷ in-kernel": ("cpu_per_byte_ratio",),
    }, bench_net_rows(INTX_295809D, "2026-11-28-poll-295809d")),
    Table("performance §2: throughput, round trip, CPU per byte", "docs/performance.md",
          "driver (QEMU model)", BENCH_NET_POLLING,
          {**bench_net_rows(INTX_295809D, "2026-11-28-poll-295809d"),
           **bench_net_rows(MSIX_D9785FE, "2026-11-28-poll-d9785fe")}),
    Table("performance §2: several queues", "docs/performance.md", "queue pairs", {
        **THROUGHPUT,
        "RTT ratio": ratio("rtt_ratio"),
        "CPU per byte ratio": ratio("cpu_per_byte_ratio"),
        "pings lost": ("ping_loss_pct",),
    }, {"2": ("bench-net-virtio_net-2-queues-2026-11-28.json", ""),
        "1": ("bench-net-virtio_net-1-queue-2026-11-28.json", "")}),
    Table("performance §3: recovery downtime", "docs/performance.md", "driver (QEMU device)", PHASES_AND_GAPS, {
        "e1000 (e1000)": ("crash-loop-e1000-2026-11-26.json", ""),
        "e1000 (`autonegotiation=off`)": ("crash-loop-e1000-autoneg-off-2026-11-26.json", ""),
        "pcnet32 (pcnet)": ("crash-loop-pcnet32-2026-11-26.json", ""),
        "8139cp (rtl8139)": ("crash-loop-8139cp-2026-11-26.json", ""),
        "e1000 without an IOMMU": ("crash-loop-e1000-no-iommu-2026-11-27.json", ""),
        "virtio_net (virtio-net-pci": ("crash-loop-virtio_net-2026-11-27.json", ""),
        "e1000e (e1000e": ("crash-loop-e1000e-2026-11-27.json", ""),
    }),
    Table("performance §6: the lab's CPU model", "docs/performance.md", "`guest_cpu`", {
        "in-kernel tx / rx": ("kernel.tx_mbps", "kernel.rx_mbps"),
        "understudy tx / rx": ("understudy.tx_mbps", "understudy.rx_mbps"),
        "ratios tx / rx": ("tx_ratio", "rx_ratio"),
    }, {"`max` (ERMS)": ("bench-net-e1000-tap-2026-11-26-erms.json", ""),
        "`max,-erms`": ("bench-net-e1000-tap-2026-11-26-no-erms.json", "")}),
    Table("performance §13: real-time latency", "docs/performance.md", "case", {
        "min (µs)": ("min_us",), "mean (µs)": ("avg_us",), "p99 (µs)": ("p99_us",),
        "max (µs)": ("max_us",), "wake-ups": ("samples",),
    }, {f"{world}, {case}": ("rt-e1000-2026-11-27.json", f"{key}_{case}")
        for world, key in (("in-kernel", "kernel"), ("understudy", "understudy"))
        for case in ("idle", "load")}),
    Table("performance §14: without an IOMMU", "docs/performance.md", "driver, guest", {
        **THROUGHPUT,
        "ping in-kernel / understudy (ms)": ("kernel.rtt_ms_median", "understudy.rtt_ms_median"),
        "CPU per byte ratio": ratio("cpu_per_byte_ratio"),
    }, {f"{driver}, {guest}": (f"bench-net-{driver}-no-iommu-2026-11-27.json", root)
        for driver in ("e1000", "pcnet32")
        for guest, root in (("no IOMMU (UIO)", ""), ("IOMMU (VFIO)", "vfio"))}),
    Table("migration: the paper's Table 1", "docs/migration.md", "driver", {
        "in-kernel tx / rx (Mbit/s)": THROUGHPUT["in-kernel tx / rx (Mbit/s)"],
        "understudy tx / rx (Mbit/s)": THROUGHPUT["understudy tx / rx (Mbit/s)"],
        "ratio tx / rx": ("tx_ratio", "rx_ratio"),
        "guest CPU per byte ratio": ("cpu_per_byte_ratio",),
    }, bench_net_rows({d: d for d in INTX_295809D.values()}, "2026-11-28-poll-295809d")),
    Table("guardrail: what checking costs", "docs/guardrail.md", "driver", CHECK_COST, {
        f"{row_driver} | {gate}": (f"check-{driver}-{gate}-2026-11-27.json", "")
        for row_driver, driver, gate in (
            ("e1000", "e1000", "triage"), ("e1000", "e1000", "permissive"),
            ("e1000", "e1000", "stringent"), ("pcnet32", "pcnet32", "permissive"),
            ("8139cp", "8139cp", "permissive"), ("e100 ¹", "e100", "triage"),
            ("e100 ¹", "e100", "permissive"), ("tulip", "tulip", "triage"))
    }, key_cells=2),
    Table("guardrail: per checker", "docs/guardrail.md", "checkers", {
        column: CHECK_COST[column] for column in ("send ratio", "receive ratio", "events checked per second")
    }, {"memory, race, dma": ("check-e1000-stringent-all-2026-11-27.json", ""),
        **{c: (f"check-e1000-stringent-{c}-2026-11-27.json", "") for c in ("memory", "race", "dma")}}),
]


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables_of(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table in `text`: its header cells and its rows' cells."""
    found, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            found.append((cells(lines[i]), [cells(line) for line in lines[i + 2:j]]))
            i = j
        else:
            i += 1
    return found


def expand_braces(pattern: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    return [e for alt in m.group(1).split(",")
            for e in expand_braces(pattern[:m.start()] + alt + pattern[m.end():])]


def cited_files(text: str) -> list[str]:
    """The result files a doc names in backquotes, as file-name patterns."""
    return [p.rsplit("/", 1)[-1] for span in re.findall(r"`([^`\s]*\.json)`", text) for p in expand_braces(span)]


def value(data, path: str):
    scale = 1.0
    if "*" in path:
        path, factor = path.split("*")
        scale = float(factor)
    elif "/" in path:
        path, divisor = path.split("/")
        scale = 1 / float(divisor)
    for key in path.split("."):
        data = data[int(key)] if isinstance(data, list) else data[key]
    return None if data is None else data * scale


def printed_as(printed: str, actual: float) -> bool:
    """Whether `actual` rounds to `printed` at the precision printed."""
    decimals = len(printed.partition(".")[2])
    return abs(float(printed.replace(" ", "")) - actual) <= 0.5 * 10 ** -decimals + 1e-9


def mismatches(table: Table) -> list[str]:
    text = (REPO / table.doc).read_text()
    matching = [(header, rows) for header, rows in tables_of(text)
                if header[0] == table.first_header and set(table.columns) <= set(header)]
    if not matching:
        return [f"{table.doc}: no table with header {table.first_header!r} and columns {sorted(table.columns)}"]
    problems = []
    cited = cited_files(text)
    named = {name: [] for name in table.rows}
    for header, rows in matching:
        for row in rows:
            key = " | ".join(row[:table.key_cells])
            names = [name for name in table.rows if key.startswith(name)]
            if not names:
                problems.append(f"row {key!r} is named by no row of the table spec")
                continue
            named[max(names, key=len)].append((header, row))
    for name, found in named.items():
        if len(found) != 1:
            problems.append(f"row {name!r}: {len(found)} rows in {table.doc}")
            continue
        (header, row), (file, root) = found[0], table.rows[name]
        if not any(fnmatch.fnmatchcase(file, c) for c in cited):
            problems.append(f"row {name!r}: {table.doc} does not cite {file}")
        data = json.loads((RESULTS / file).read_text())
        for column, paths in table.columns.items():
            cell = row[header.index(column)]
            expected = [v for v in (value(data, f"{root}.{p}" if root else p) for p in paths) if v is not None]
            printed = NUMBER.findall(cell.replace("**", ""))
            if len(printed) != len(expected) or not all(itertools.starmap(printed_as, zip(printed, expected))):
                problems.append(f"row {name!r}, {column!r}: printed {cell!r}, {file} has "
                                f"{[round(v, 3) for v in expected]} ({', '.join(paths)})")
    return problems


@pytest.mark.parametrize("table", TABLES, ids=[t.name for t in TABLES])
def test_a_tables_figures_are_its_result_files(table):
    problems = mismatches(table)
    assert not problems, f"{table.doc}, {table.name}:\n" + "\n".join(problems)
