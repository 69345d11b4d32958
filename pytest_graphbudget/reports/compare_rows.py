"""The totals of ``graph-budget compare``, written once for every view of it (text, markdown,
HTML): each figure's label, A, B and the change B - A.

A figure's change is in its own unit and, from a nonzero A, relative too (``+149M`` from 0,
``+4.1M (+2.3%)`` otherwise); a bottleneck share's is in percentage points: 40% -> 38% is ``-2.0
points``, where a relative ``-5.0%`` would read as the share's own change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_graphbudget.gate import figures
from pytest_graphbudget.gate.figures import Figure
from pytest_graphbudget.units import format_ratio

SHARES = ("compute_bound", "memory_bound")
"""The bottleneck mix ``compare`` adds to the totals, as ``<label>_share``."""


def delta(a: float, b: float, figure: Figure) -> str:
    """``=``, ``+149M`` (from 0) or ``-4.1M (-2.3%)``: B - A in the figure's unit."""
    diff = b - a
    if not diff:
        return "="
    sign = "+" if diff > 0 else "-"
    text = sign + figure.format(abs(diff))
    if a:
        text += f" ({diff / a:+.1%})"
    return text


def _share_delta(a: float, b: float) -> str:
    """``=`` (under 0.05 points) or ``-0.7 points``: a share's change in percentage points."""
    diff = b - a
    return "=" if abs(diff) < 5e-4 else f"{diff * 100:+.1f} points"


def total_rows(result: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """``(key, [label, A, B, change])`` for each total of ``compare``'s result, in its order:
    the figures ``figures.TABLE`` names and writes, then the bottleneck shares."""
    rows = []
    for key, t in result["totals"].items():
        figure = figures.BY_KEY.get(key)
        if figure is not None:
            shown = [figure.format(t["a"]), figure.format(t["b"]), delta(t["a"], t["b"], figure)]
            rows.append((key, [figure.label, *shown]))
    for label in SHARES:
        t = result["totals"][f"{label}_share"]
        shown = [format_ratio(t["a"]), format_ratio(t["b"]), _share_delta(t["a"], t["b"])]
        rows.append((f"{label}_share", [f"{label} share", *shown]))
    return rows
