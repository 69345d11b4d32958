"""``graph-budget history FILE --html OUT``: every figure of each model over commits.

One chart per model: each figure a series, as a percentage of its first recorded value (so
that FLOPs and bytes share an axis), one point per history line (a run at a commit). A point
where the figure moved past the tolerance is drawn larger and listed under the chart with
the layer that moved it, or with the torch/pytest-graphbudget version that moved with it.
The page is ``html_page.page`` with one ``Section`` per model: self-contained, no network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pytest_graphbudget.gate import figures
from pytest_graphbudget.reports.history import Move, by_model, moves
from pytest_graphbudget.reports.html_page import Section, page
from pytest_graphbudget.reports.html_sweep import LINE_COLORS

W, H = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 150, 16, 44


def short(commit: str | None) -> str:
    return commit[:7] if commit else "no commit"


def chart(model: str, lines: Sequence[Mapping[str, Any]], moved: Sequence[Move]) -> str:
    """The model's figures over its lines, as percentages of their first measured values; a
    line whose model could not be checked is a cross on the axis, with its error."""
    first = next((line["figures"] for line in lines if line["figures"]), {})
    keys = [k for k in first if k in figures.BY_KEY]
    share = {
        k: [
            100.0 * line["figures"][k] / (first[k] or 1) if k in line["figures"] else None
            for line in lines
        ]
        for k in keys
    }
    ys = [y for values in share.values() for y in values if y is not None] or [100.0]
    lo, hi = min(min(ys), 100.0) - 5, max(max(ys), 100.0) + 5
    marked = {(m.index, m.figure) for m in moved}

    def px(i: int) -> float:
        return LEFT + (i + 0.5) / len(lines) * (W - LEFT - RIGHT)

    def py(y: float) -> float:
        return H - BOTTOM - (y - lo) / (hi - lo) * (H - TOP - BOTTOM)

    parts = [
        f'<svg class="history" data-model="{escape(model)}" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="{escape(model)}: figures over commits">'
    ]
    for i, line in enumerate(lines):
        parts.append(
            f'<text class="tick" x="{px(i):.1f}" y="{H - BOTTOM + 16}">'
            f"{escape(short(line.get('commit')))}</text>"
        )
        if "error" in line:
            tip = f"{short(line.get('commit'))}: could not be checked: {line['error']}"
            parts.append(
                f'<text class="error" x="{px(i):.1f}" y="{H - BOTTOM - 4}">\u2715'
                f"<title>{escape(tip)}</title></text>"
            )
    for y in sorted({round(lo), 100, round(hi)}):
        parts.append(
            f'<line class="grid" x1="{LEFT}" y1="{py(y):.1f}" x2="{W - RIGHT}" y2="{py(y):.1f}"/>'
            f'<text class="tick y" x="{LEFT - 6}" y="{py(y) + 4:.1f}">{y}%</text>'
        )
    for n, (key, color) in enumerate(zip(keys, LINE_COLORS * 4, strict=False)):
        fig = figures.get(key)
        path = " ".join(
            f"{px(i):.1f},{py(y):.1f}" for i, y in enumerate(share[key]) if y is not None
        )
        parts.append(f'<polyline class="series" points="{path}" style="stroke:{color}"/>')
        parts.append(
            f'<text class="series-name" x="{W - RIGHT + 8}" y="{TOP + 14 + 14 * n}" '
            f'style="fill:{color}">{escape(fig.label)}</text>'
        )
        for i, (line, y) in enumerate(zip(lines, share[key], strict=True)):
            if y is None:
                continue
            big = (i, key) in marked
            value = fig.format(line["figures"].get(key, 0))
            tip = f"{short(line.get('commit'))}: {value} {fig.label}"
            parts.append(
                f'<circle class="point{" moved" * big}" data-figure="{key}" data-commit='
                f'"{escape(line.get("commit") or "")}" cx="{px(i):.1f}" cy="{py(y):.1f}" '
                f'r="{6 if big else 3}" fill="{color}"><title>{escape(tip)}</title></circle>'
            )
    parts.append("</svg>")
    return "\n".join(parts)


def move_text(move: Move) -> str:
    """``1a2b3c4: FLOPs 8.19 K -> 16.4 K (+100.0%), layer fc``."""
    fig = figures.get(move.figure)
    change = f"{(move.new / move.old - 1) * 100:+.1f}%" if move.old else "from 0"
    text = f"{short(move.commit)}: {fig.label} {fig.format(move.old)} -> {fig.format(move.new)}"
    text += f" ({change})"
    if move.counter:
        text += f"; {move.counter}"
    if move.layer:
        text += f"; moved most: {move.layer}"
    return text


def section(
    index: int, model: str, lines: Sequence[Mapping[str, Any]], moved: list[Move]
) -> Section:
    items = "".join(f"<li>{escape(move_text(m))}</li>" for m in moved)
    items += "".join(
        f"<li>{escape(short(line.get('commit')))}: could not be checked: "
        f"{escape(line['error'])}</li>"
        for line in lines
        if "error" in line
    )
    listed = (
        f'<ul class="moves">{items}</ul>' if items else "<p>No figure moved past the tolerance.</p>"
    )
    return Section(
        f"history-{index}",
        model,
        f'<figure class="growth-box">{chart(model, lines, moved)}</figure>{listed}',
    )


def history_page(records: list[dict[str, Any]], tolerance: float | None = None) -> str:
    """The page of a history file's lines (``history.read``)."""
    moved = moves(records, tolerance)
    sections = [
        section(i, model, lines, [m for m in moved if m.model == model])
        for i, (model, lines) in enumerate(by_model(records).items())
    ]
    return page("graph-budget history", [], sections)
