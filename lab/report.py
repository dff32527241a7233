# SPDX-License-Identifier: GPL-2.0
"""What a lab scenario says: its progress on stderr, then its figures and checks
as a table or one JSON object, and its verdict as the exit status (1 if a check
failed; lab/__main__.py lists the others).

The crash scenarios (lab/scenario.py) and the update scenario
(lab/update_loop.py) report alike, so both report through this module.
"""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field
from typing import Callable

from . import provenance

EXIT_FAILED = 1


def log(msg: str) -> None:
    print(f"[scenario] {msg}", file=sys.stderr, flush=True)


@dataclass
class Report:
    """A scenario's figures and checks; failed checks make the exit status 1."""
    figures: dict
    checks: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def check(self, name: str, ok: bool, why: str = "") -> None:
        self.checks[name] = bool(ok)
        if not ok:
            self.notes.append(f"{name} failed{': ' + why if why else ''}")

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    def as_json(self) -> dict:
        return {**self.figures, "ok": self.ok, "checks": self.checks, "failures": self.notes}


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def cell(v) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def columns(records: list[dict], cols: list[str]) -> list[str]:
    """One right-aligned line per record (a header line first) of the given fields."""
    rows = [cols] + [[cell(r.get(c)) for c in cols] for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    return ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]


def verdict_lines(rep: Report) -> list[str]:
    """A scenario table's last lines: each check, and why a failed one failed."""
    return ["checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in rep.checks.items()),
            *[f"  {n}" for n in rep.notes]]


def emit(rep: Report, as_json: bool, table: Callable[[Report], str]) -> int:
    """Prints the report (JSON with the run's provenance, or `table`'s text); the exit status."""
    print(json.dumps({**rep.as_json(), **provenance.record()}, indent=2) if as_json else table(rep))
    return 0 if rep.ok else EXIT_FAILED
