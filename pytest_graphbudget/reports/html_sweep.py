"""The HTML report of a shape sweep: how each figure grows with the swept axis.

It reads the sweep's plot-ready JSON (``{"axes", "points", "fit"}``, the value of the
``"sweep"`` key that ``graph-budget profile NAME --seq-len 128,256,512 --format json`` writes):
one log-log chart per fitted figure, the measured points joined by a line (one line per value
of the second axis of a grid), the fitted formula under it, and the points as a table. The page
is ``html.page`` with one ``Section``, so it is as self-contained as the other reports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pytest_graphbudget.gate import figures
from pytest_graphbudget.reports.html_page import Section, page

W, H = 470, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 44
LINE_COLORS = ("#d9822b", "#3b78b5", "#2e7d32", "#8e44ad", "#c62828", "#555555")


def _series(sweep: Mapping[str, Any], key: str) -> dict[str, list[tuple[int, float]]]:
    """(x, value) per line: x is the first axis; a grid's second axis names the lines."""
    axes = list(sweep["axes"])
    x_axis, line_axis = axes[0], (axes[1] if len(axes) > 1 else None)
    lines: dict[str, list[tuple[int, float]]] = {}
    for point in sweep["points"]:
        name = f"{line_axis}={point[line_axis]}" if line_axis else key
        lines.setdefault(name, []).append((point[x_axis], point["totals"][key]))
    return {name: sorted(values) for name, values in lines.items()}


def growth_svg(sweep: Mapping[str, Any], key: str) -> str:
    """One figure against the first swept axis, both on log scales."""
    x_axis = next(iter(sweep["axes"]))
    fig = figures.get(key)
    lines = _series(sweep, key)
    xs = sorted({x for values in lines.values() for x, _ in values})
    ys = [y for values in lines.values() for _, y in values if y > 0] or [1.0]
    x_lo, x_hi = math.log(xs[0]), math.log(xs[-1])
    x_pad = (x_hi - x_lo) * 0.06 or 1.0
    y_lo, y_hi = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    y_hi = max(y_hi, y_lo + 1)

    def px(x: float) -> float:
        share = (math.log(x) - x_lo + x_pad) / (x_hi - x_lo + 2 * x_pad)
        return LEFT + share * (W - LEFT - RIGHT)

    def py(y: float) -> float:
        share = (math.log10(max(y, 10.0**y_lo)) - y_lo) / (y_hi - y_lo)
        return H - BOTTOM - share * (H - TOP - BOTTOM)

    parts = [
        f'<svg class="growth" data-figure="{key}" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="{escape(fig.label)} against {x_axis}">'
    ]
    for x in xs:
        parts.append(
            f'<line class="grid" x1="{px(x):.1f}" y1="{TOP}" x2="{px(x):.1f}" y2="{H - BOTTOM}"/>'
            f'<text class="tick" x="{px(x):.1f}" y="{H - BOTTOM + 16}">{x}</text>'
        )
    for e in range(y_lo, y_hi + 1):
        y = py(10.0**e)
        parts.append(
            f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}"/>'
            f'<text class="tick y" x="{LEFT - 6}" y="{y + 4:.1f}">{fig.format(10.0**e)}</text>'
        )
    parts.append(f'<text class="axis" x="{(LEFT + W - RIGHT) / 2:.0f}" y="{H - 8}">{x_axis}</text>')
    for i, (color, (name, values)) in enumerate(zip(LINE_COLORS * 8, lines.items(), strict=False)):
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in values)
        parts.append(f'<polyline class="series" points="{path}" style="stroke:{color}"/>')
        if len(lines) > 1:  # a grid: which line is which
            parts.append(
                f'<text class="series-name" x="{LEFT + 8}" y="{TOP + 14 + 14 * i}" '
                f'style="fill:{color}">{escape(name)}</text>'
            )
        for x, y in values:
            tip = f"{x_axis}={x}{'' if name == key else ', ' + name}: {fig.format(y)} {fig.label}"
            parts.append(
                f'<circle class="point" data-point="{x}" cx="{px(x):.1f}" cy="{py(y):.1f}" '
                f'r="4" fill="{color}"><title>{escape(tip)}</title></circle>'
            )
    parts.append("</svg>")
    return "\n".join(parts)


def _formula(sweep: Mapping[str, Any], key: str) -> str:
    fitted = sweep.get("fit", {}).get("figures", {}).get(key)
    if not fitted:
        return "not fitted"
    if not fitted.get("polynomial"):
        return fitted.get("reason", "no polynomial fits the points")
    from pytest_graphbudget.modes.fit import check_text

    variables = sweep["fit"].get("variables", {})
    names = ", ".join(f"{s} = {a}" for s, a in variables.items())
    held, unverified = fitted.get("held_out", 0), fitted.get("unverified", [])
    return f"{fitted['formula']} ({names}; {check_text(held, unverified, [*variables.values()])})"


def sweep_section(
    sweep: Mapping[str, Any],
    keys: Sequence[str],
    anchor: str = "sweep",
    title: str = "How cost grows",
) -> Section:
    """The growth curves of ``keys`` (the fitted figures), their formulas, and the points."""
    charts = "".join(
        f'<figure class="growth-box"><figcaption>{escape(figures.get(k).label)}</figcaption>'
        f'{growth_svg(sweep, k)}<p class="formula"><code>{escape(_formula(sweep, k))}</code>'
        "</p></figure>"
        for k in keys
    )
    axes = list(sweep["axes"])
    head = "".join(f'<th class="num">{escape(a)}</th>' for a in axes) + "".join(
        f'<th class="num">{escape(figures.get(k).heading)}</th>' for k in keys
    )
    rows = "".join(
        "<tr>"
        + "".join(f'<td class="num">{p[a]}</td>' for a in axes)
        + "".join(f'<td class="num">{figures.get(k).format(p["totals"][k])}</td>' for k in keys)
        + "</tr>"
        for p in sweep["points"]
    )
    over = " x ".join(f"{a} {', '.join(map(str, v))}" for a, v in sweep["axes"].items())
    body = (
        f'<p>Profiled at {escape(over)}.</p><div class="growth-charts">{charts}</div>'
        f'<table class="points"><tr>{head}</tr>{rows}</table>'
    )
    return Section(anchor, title, body)


def sweep_page(model: str, sweep: Mapping[str, Any]) -> str:
    """The page of ``graph-budget profile MODEL --seq-len ... --html FILE``."""
    keys = [k for k in sweep.get("fit", {}).get("figures", {}) if k in figures.BY_KEY]
    keys = keys or [k for k in ("flops", "peak_memory_bytes") if k in sweep["points"][0]["totals"]]
    return page(f"{model}: graph-budget sweep", [], [sweep_section(sweep, keys)])


POINT = re.compile(r"(?P<name>.+)\[(?P<point>(?:seq_len|batch)=\d+(?:,(?:seq_len|batch)=\d+)?)\]")
"""A swept budget table's point, as ``sweep_budget`` names it: ``bert[seq_len=128,batch=8]``."""


def run_sweeps(results: Sequence[Any]) -> list[Section]:
    """The growth curves of every swept budget table of a run, from its points' results
    (``name[seq_len=128]``, ...), each figure fitted as ``profile --seq-len`` fits it."""
    from pytest_graphbudget.errors import GraphBudgetError
    from pytest_graphbudget.modes.fit import fit
    from pytest_graphbudget.modes.sweep import FITTED, fit_symbol

    swept: dict[str, list[tuple[dict[str, int], dict[str, Any]]]] = {}
    for result in results:
        match = POINT.fullmatch(result.label)
        if match and result.profile:
            values = {k: int(v) for k, v in (a.split("=") for a in match["point"].split(","))}
            swept.setdefault(match["name"], []).append((values, result.profile["totals"]))
    sections = []
    for i, (name, found) in enumerate(swept.items()):
        axes = {a: sorted({v[a] for v, _ in found}) for a in found[0][0]}
        if len(found) < 2 or any(set(v) != set(axes) for v, _ in found):
            continue
        found.sort(key=lambda point: [point[0][a] for a in axes])
        points = [{**values, "totals": totals} for values, totals in found]
        try:
            fitted = {
                key: fit(key, list(axes), [v for v, _ in found], [int(t[key]) for _, t in found])
                for key in FITTED
            }
        except GraphBudgetError:  # the same point twice: curves without formulas
            fitted = {}
        variables = {fit_symbol(axis): axis for axis in axes}
        sweep = {
            "axes": axes,
            "points": points,
            "fit": {"variables": variables, "figures": {k: f.to_dict() for k, f in fitted.items()}},
        }
        sections.append(sweep_section(sweep, FITTED, f"sweep-{i}", f"How cost grows: {name}"))
    return sections
