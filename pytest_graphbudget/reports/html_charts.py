"""The HTML report's charts, drawn as inline SVG from a profile's JSON: the roofline and the
module icicle. No charting library and no network: the file opens from disk or a CI artifact.

Each roofline point is an SVG element with ``data-subgraph="<id>"`` (a stable hook for tests and
scripts); the icicle's cells carry ``data-path`` and a ``<title>`` that the page's script turns
into a tooltip.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape
from typing import Any

from pytest_graphbudget.gate import figures
from pytest_graphbudget.units import format_bytes, format_count, format_seconds

COLORS = {"compute_bound": "#d9822b", "memory_bound": "#3b78b5"}
"""Fill of each bottleneck, the borders of ``visualize.COLORS``."""
ICICLE_FIGURES = ("flops", "params", "peak_memory_bytes")
"""What the icicle can size modules by (a switch on the page): FLOPs, params, peak memory."""

WIDTH, HEIGHT = 640, 380
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 46


@dataclass(frozen=True)
class Roof:
    """The hardware's roof: peak FLOP/s and memory bandwidth (bytes/s); ridge = peak / bw."""

    peak: float
    bandwidth: float

    @property
    def ridge(self) -> float:
        return self.peak / self.bandwidth


def roof_of(profile: Mapping[str, Any]) -> Roof | None:
    """The roof the profile was priced on: its hardware's peak and bandwidth. A profile saved
    without them is read back from its subgraphs' roofline times (a compute-bound subgraph
    took ``flops / peak``, a memory-bound one ``traffic / bandwidth``: true of fused groups
    priced as compiled); None when no subgraph took any time."""
    hardware = profile["hardware"]
    if hardware.get("peak_flops_per_s") and hardware.get("bandwidth_bytes_per_s"):
        return Roof(hardware["peak_flops_per_s"], hardware["bandwidth_bytes_per_s"])
    ridge = hardware["ridge_point"]
    for sub in profile["subgraphs"]:
        time = sub.get("est_latency_s") or 0.0
        if time <= 0 or ridge <= 0:
            continue
        if sub["bottleneck"] == "compute_bound" and sub["flops"]:
            peak = sub["flops"] / time
            return Roof(peak, peak / ridge)
        traffic = sub["bytes_in"] + sub["bytes_out"] + sub["bytes_weights"]
        if sub["bottleneck"] == "memory_bound" and traffic:
            bandwidth = traffic / time
            return Roof(bandwidth * ridge, bandwidth)
    return None


def _decades(low: float, high: float) -> tuple[int, int]:
    return math.floor(math.log10(low)), math.ceil(math.log10(high))


@dataclass
class _Axes:
    """A log-log plot area: decades ``x`` and ``y`` (exponents) map onto the SVG box."""

    x: tuple[int, int]
    y: tuple[int, int]

    def px(self, value: float) -> float:
        lo, hi = self.x
        share = (math.log10(max(value, 10.0**lo)) - lo) / max(hi - lo, 1)
        return LEFT + share * (WIDTH - LEFT - RIGHT)

    def py(self, value: float) -> float:
        lo, hi = self.y
        share = (math.log10(max(value, 10.0**lo)) - lo) / max(hi - lo, 1)
        return HEIGHT - BOTTOM - share * (HEIGHT - TOP - BOTTOM)


def achieved(sub: Mapping[str, Any]) -> float:
    """A subgraph's FLOP/s at its roofline time (0 without FLOPs or time)."""
    time = sub.get("est_latency_s") or 0.0
    return sub["flops"] / time if time > 0 else 0.0


def flop_rate(value: float) -> str:
    """``44.4 GFLOP/s``: the count's number, a space, its prefix and the unit."""
    number, prefix = re.fullmatch(r"([-\d.e+]+)(\D*)", format_count(value)).groups()
    return f"{number} {prefix}FLOP/s"


def subgraph_tip(sub: Mapping[str, Any]) -> str:
    traffic = sub["bytes_in"] + sub["bytes_out"] + sub["bytes_weights"]
    return (
        f"#{sub['id']} {sub['kind']} - {sub['module'] or '(model)'}\n"
        f"FLOPs {format_count(sub['flops'])}, bytes {format_bytes(traffic)}, "
        f"time {format_seconds(sub.get('est_latency_s') or 0.0)}\n"
        f"intensity {sub['arithmetic_intensity']:.3g} FLOPs/B, "
        f"{flop_rate(achieved(sub))}, {sub['bottleneck'].replace('_', '-')}"
    )


def roofline_svg(profile: Mapping[str, Any]) -> str:
    """The log-log roofline: one point per fused subgraph at (intensity, achieved FLOP/s),
    coloured by bottleneck, the roof and its ridge. A subgraph without FLOPs (a copy) sits on
    the axes' floor, drawn hollow, so that every subgraph has its point."""
    subs = profile["subgraphs"]
    roof = roof_of(profile)
    ridge = profile["hardware"]["ridge_point"] or 1.0
    xs = [s["arithmetic_intensity"] for s in subs if s["arithmetic_intensity"] > 0] + [ridge]
    ys = [achieved(s) for s in subs if achieved(s) > 0]
    if roof is not None:
        ys += [roof.peak, roof.bandwidth * min(xs)]
    ys = ys or [1.0]
    axes = _Axes(_decades(min(xs) / 2, max(xs) * 2), _decades(min(ys) / 2, max(ys) * 2))
    parts = [
        f'<svg class="roofline" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="roofline of {escape(str(profile["model"]))}">',
        *_grid(axes),
    ]
    if roof is not None:
        parts += _roof(axes, roof)
    for sub in subs:
        x, y = axes.px(sub["arithmetic_intensity"]), axes.py(achieved(sub))
        floor = " floor" if not sub["flops"] else ""
        parts.append(
            f'<circle class="point {sub["bottleneck"]}{floor}" data-subgraph="{sub["id"]}" '
            f'data-bottleneck="{sub["bottleneck"]}" cx="{x:.1f}" cy="{y:.1f}" r="4.5" '
            f'fill="{COLORS.get(sub["bottleneck"], "#888")}">'
            f"<title>{escape(subgraph_tip(sub))}</title></circle>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _grid(axes: _Axes) -> list[str]:
    """Decade grid lines, their labels and the axis titles."""
    parts = []
    bottom, right = HEIGHT - BOTTOM, WIDTH - RIGHT
    for e in range(axes.x[0], axes.x[1] + 1):
        x = axes.px(10.0**e)
        parts.append(f'<line class="grid" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{bottom}"/>')
        parts.append(f'<text class="tick" x="{x:.1f}" y="{bottom + 16}">{_tick(e)}</text>')
    for e in range(axes.y[0], axes.y[1] + 1):
        y = axes.py(10.0**e)
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}"/>')
        parts.append(f'<text class="tick y" x="{LEFT - 6}" y="{y + 4:.1f}">{_tick(e)}</text>')
    parts.append(
        f'<text class="axis" x="{(LEFT + right) / 2:.0f}" y="{HEIGHT - 8}">'
        "arithmetic intensity (FLOPs/byte)</text>"
    )
    parts.append(
        f'<text class="axis" transform="translate(16 {(TOP + bottom) / 2:.0f}) rotate(-90)">'
        "achieved FLOP/s</text>"
    )
    return parts


def _tick(exponent: int) -> str:
    return format_count(10.0**exponent) if exponent >= 0 else f"1e{exponent}"


def _roof(axes: _Axes, roof: Roof) -> list[str]:
    """The memory slope up to the ridge, the flat compute roof after it, the ridge marked."""
    x0, x1 = 10.0 ** axes.x[0], 10.0 ** axes.x[1]
    start = max(x0, 10.0 ** axes.y[0] / roof.bandwidth)
    points = [(start, roof.bandwidth * start), (roof.ridge, roof.peak), (x1, roof.peak)]
    path = " ".join(f"{axes.px(x):.1f},{axes.py(y):.1f}" for x, y in points)
    rx = axes.px(roof.ridge)
    end = ' text-anchor="end" dx="-8"' if rx > (LEFT + WIDTH) / 2 else ""
    return [
        f'<polyline class="roof" points="{path}"/>',
        f'<line class="ridge" x1="{rx:.1f}" y1="{TOP}" x2="{rx:.1f}" y2="{HEIGHT - BOTTOM}"/>',
        f'<text class="ridge-label" x="{rx + 4:.1f}" y="{TOP + 12}"{end}>ridge '
        f"{roof.ridge:.3g} FLOPs/B, peak {flop_rate(roof.peak)}, "
        f"{format_bytes(roof.bandwidth)}/s</text>",
    ]


# ---------------------------------------------------------------------------------------------
# The module icicle

ICICLE_WIDTH, ROW = 1200, 24
MIN_CELL = 1.0  # px: narrower cells are left out (their share still counts in their parent)
MAX_DEPTH = 10


@dataclass
class _Node:
    path: str
    own: float = 0.0
    children: dict[str, _Node] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return self.own + sum(c.total for c in self.children.values())


def tree(own: Mapping[str, float]) -> _Node:
    """Modules' own values (``baseline.Entry.layers``) as a tree; ``<root>`` is the model's."""
    root = _Node("")
    for path, value in own.items():
        node = root
        if path and not path.startswith("<"):
            parts = path.split(".")
            for depth in range(1, len(parts) + 1):
                key = ".".join(parts[:depth])
                node = node.children.setdefault(key, _Node(key))
        node.own += value
    return root


def icicle_svg(own: Mapping[str, float], figure: str, hidden: bool = False) -> str:
    """An icicle of the modules sized by ``figure``: the model on top, each level below split
    among its children by their share (largest first)."""
    root = tree(own)
    total = root.total
    fig = figures.get(figure)
    cells: list[str] = []
    depth_seen = [0]

    def place(node: _Node, x: float, width: float, depth: int) -> None:
        if width < MIN_CELL or depth > MAX_DEPTH:
            return
        depth_seen[0] = max(depth_seen[0], depth)
        name = node.path.rsplit(".", 1)[-1] if node.path else "model"
        share = node.total / total if total else 0.0
        tip = f"{node.path or 'model'}: {fig.format(node.total)} {fig.label} ({share:.1%})"
        label = next(
            (text for text in (f"{name} {fig.format(node.total)}", name) if fits(text, width)), ""
        )
        text = f'<text x="{x + 4:.1f}" y="{depth * ROW + 16}">{escape(label)}</text>'
        cells.append(
            f'<g class="cell" data-path="{escape(node.path)}"><title>{escape(tip)}</title>'
            f'<rect x="{x:.1f}" y="{depth * ROW}" width="{max(width - 1, 0.5):.1f}" '
            f'height="{ROW - 1}" style="fill:{_shade(depth, share)}"/>'
            + (text if label else "")
            + "</g>"
        )
        offset = x
        for child in sorted(node.children.values(), key=lambda c: (-c.total, c.path)):
            part = width * child.total / node.total if node.total else 0.0
            place(child, offset, part, depth + 1)
            offset += part

    place(root, 0.0, float(ICICLE_WIDTH), 0)
    height = (depth_seen[0] + 1) * ROW
    style = ' style="display:none"' if hidden else ""
    return (
        f'<svg class="icicle" data-figure="{figure}" viewBox="0 0 {ICICLE_WIDTH} {height}" '
        f'role="img" aria-label="modules by {escape(fig.label)}"{style}>\n'
        + "\n".join(cells)
        + "\n</svg>"
    )


def fits(text: str, width: float) -> bool:
    """Whether a cell's label fits in it (about 7 units a character at the icicle's size)."""
    return len(text) * 7 + 8 <= width


def _shade(depth: int, share: float) -> str:
    """Warmer for a bigger share, lighter deeper down."""
    hue = 210 - 180 * min(share * 2, 1.0)
    return f"hsl({hue:.0f}, 65%, {min(55 + depth * 4, 85)}%)"


# ---------------------------------------------------------------------------------------------
# The charts as the page's figures


def roofline_figure(profile: Mapping[str, Any]) -> str:
    legend = (
        '<p class="legend"><span class="dot compute_bound"></span>compute-bound '
        '<span class="dot memory_bound"></span>memory-bound; hollow: no FLOPs</p>'
    )
    return (
        '<figure class="roofline-box"><figcaption>Roofline: one point per fused subgraph'
        f"</figcaption>{roofline_svg(profile)}{legend}</figure>"
    )


def icicle_figure(profile: Mapping[str, Any], anchor: str) -> str:
    """The module icicle by FLOPs, and by params and peak memory behind a switch."""
    from pytest_graphbudget.gate.baseline import entry_from

    entry = entry_from(profile)
    switch = "".join(
        f'<label><input type="radio" name="{anchor}-icicle" value="{key}"'
        f"{' checked' * (i == 0)}> {escape(figures.get(key).label)}</label>"
        for i, key in enumerate(ICICLE_FIGURES)
    )
    icicles = "\n".join(
        icicle_svg(entry.layers(key), key, hidden=i > 0) for i, key in enumerate(ICICLE_FIGURES)
    )
    return (
        '<figure class="icicle-box"><figcaption>Modules by <span class="switch">'
        f"{switch}</span></figcaption>{icicles}</figure>"
    )
