"""Plain-text tables for the CLI's own output."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

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
        "ms",
        "status",
        "bound",
    ]
    return format_table(headers, rows)
