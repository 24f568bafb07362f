"""Plain-text tables for the CLI's own output."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from scheduler.policies import Plan


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned, text left-aligned."""
    cells = [[_text(value) for value in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(row) for row in cells]
    return "\n".join(out)


_NUMERIC_TEXT = re.compile(r"[-+]?[\d,]*\.?\d+%?")


def _is_number(value: object) -> bool:
    """Numbers, and numbers already formatted as text (``"31.3%"``, ``"1,692"``), align right."""
    if isinstance(value, str):
        return bool(_NUMERIC_TEXT.fullmatch(value))
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 2 else f"{value:,.1f}"
    return str(value)


def comparison_table(plans: Sequence[Plan]) -> str:
    """Several policies' plans of one scenario, one row each."""
    rows = [
        [
            p.policy,
            p.metrics.utilization,
            p.metrics.value,
            p.metrics.penalty,
            p.metrics.objective,
            p.metrics.rt_coverage,
            p.metrics.completed,
            p.metrics.unscheduled,
            p.metrics.rt_moves,
            p.solve_ms,
            p.status,
            "-" if p.bound is None else p.bound,
        ]
        for p in plans
    ]
    headers = [
        "policy",
        "util",
        "value",
        "penalty",
        "objective",
        "rt_cov",
        "done",
        "unsched",
        "rt_moves",
        "ms",
        "status",
        "bound",
    ]
    return format_table(headers, rows)


# -- rows that are frozen dataclasses: their fields are the columns -------------------------


def row_columns(row_type: type, rows: Sequence[Any]) -> list[str]:
    """The columns of dataclass rows: their fields, less a ``when_set`` field (metadata) that
    no row sets (a report's ``pool`` on a cluster of one pool)."""
    return [
        f.name
        for f in fields(row_type)
        if not f.metadata.get("when_set") or any(getattr(row, f.name) is not None for row in rows)
    ]


def rows_table(row_type: type, rows: Sequence[Any]) -> str:
    """An aligned table of dataclass rows (times as ``YYYY-MM-DD HH:MM``, GPU lists as ranges,
    a ``*_share`` column in percent, a missing value as ``-``)."""
    columns = row_columns(row_type, rows)
    return format_table(columns, [[_column_text(c, getattr(row, c)) for c in columns] for row in rows])


def _column_text(column: str, value: object) -> object:
    if column.endswith("_share") and isinstance(value, float):
        return f"{value:.1%}"  # a share reads as the footers write it: 58.3%, 100.0%
    return cell_text(value)


def row_records(row_type: type, rows: Sequence[Any]) -> list[dict[str, object]]:
    """Dataclass rows as JSON objects: times in ISO 8601, enums by value, tuples as lists."""
    columns = row_columns(row_type, rows)
    return [{c: _json_value(getattr(row, c)) for c in columns} for row in rows]


def write_rows_csv(row_type: type, rows: Sequence[Any], out: TextIO) -> None:
    """Dataclass rows as CSV with a header (GPU lists space-separated)."""
    columns = row_columns(row_type, rows)
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([_csv_value(getattr(row, c)) for c in columns] for row in rows)


def _json_value(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def _csv_value(value: object) -> object:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value)
    return _json_value(value)


def cell_text(value: object) -> object:
    """How a value reads in the aligned table."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return gpu_ranges(value)
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    return value


def gpu_ranges(gpus: Sequence[int]) -> str:
    """``(0, 1, 2, 3, 6)`` -> ``0-3,6``."""
    runs: list[list[int]] = []
    for gpu in gpus:
        if runs and gpu == runs[-1][1] + 1:
            runs[-1][1] = gpu
        else:
            runs.append([gpu, gpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def count_of(count: int, noun: str) -> str:
    """``1 short hour``, ``2 short hours``: a count with its noun in the right number."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"
