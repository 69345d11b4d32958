"""``graph-budget profile NAME --seq-len 128,256,512`` (or ``--batch 1,8,32``, or both as a
grid): one row per point and the fitted formula of each figure, as a text table, markdown, CSV
(the points) or JSON (``Sweep.to_dict()``, plot-ready). A single value is no sweep: ``swept``
puts it back as the plain option and ``profile`` prints its usual single profile.
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

from pytest_graphbudget.cli import loading
from pytest_graphbudget.cli.console import EXIT_OK, Console, check_writable, format_of
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate import figures
from pytest_graphbudget.modes.sweep import (
    AXES,
    FITTED,
    Sweep,
    SweepPoint,
    fit_symbol,
    fits_of,
    points_of,
    with_symbolic,
)
from pytest_graphbudget.modes.symbolic import input_shapes
from pytest_graphbudget.reports.tables import csv_text, json_text, markdown_table, text_table

COLUMNS = (*FITTED, "est_latency_s")
"""The figures of each point's row: those fitted, and the roofline's time estimate."""


def swept(args: argparse.Namespace) -> dict[str, list[int]]:
    """The axes given more than one value; an axis given one value becomes a plain option."""
    axes = {}
    for axis in AXES:
        values = getattr(args, axis, None)
        if isinstance(values, list) and len(values) > 1:
            axes[axis] = values
        elif isinstance(values, list):
            setattr(args, axis, values[0])
    return axes


def run(args: argparse.Namespace, console: Console, axes: dict[str, list[int]]) -> int:
    """Profile the model at every point, fit, and print the sweep."""
    fmt = format_of(args)
    check_writable(args.output)
    check_writable(getattr(args, "html", None), "--html")
    if args.visualize:
        raise GraphBudgetError("--visualize draws one profile; give one --seq-len/--batch value")
    if getattr(args, "decode", False):
        swept = " and ".join("--" + axis.replace("_", "-") for axis in axes)  # the flags given
        raise GraphBudgetError(
            f"--decode profiles one point: give {swept} one value, or sweep without --decode"
        )
    hardware = loading.hardware(args)
    how = loading.variant(args)  # --mode, --optimizer, --dtype: every point alike
    if getattr(args, "input_shape", None):  # a point it contradicts: refused before any runs
        from pytest_graphbudget.zoo.base import LoadOptions

        for values in points_of(axes):
            LoadOptions(input_shape=tuple(args.input_shape), **values)
    points, shapes = [], {}
    for values in points_of(axes):
        at = copy.copy(args)
        for axis, value in values.items():
            setattr(at, axis, value)
        case = loading.load_case(args.model, at, console)
        case.name = f"{case.name}[{SweepPoint(values, None).label()}]"
        shapes[tuple(values.items())] = input_shapes(case) if args.symbolic else []
        points.append(SweepPoint(values, loading.profile_case(case, hardware, console, how)))
    fits = fits_of(axes, [p.profile for p in points])
    if args.symbolic:
        console.progress(f"exporting {case.name} at symbolic shapes ...")
        fits = with_symbolic(fits, case, shapes, points, how)
    sweep = Sweep(args.model, axes, points, fits)
    if getattr(args, "html", None):  # the growth curves (reports/html_sweep.py)
        from pytest_graphbudget.reports.html_sweep import sweep_page

        title = f"{sweep.model} ({variant_text(sweep)})"
        console.emit(sweep_page(title, sweep.to_dict()["sweep"]), args.html)
    console.emit(render(sweep, fmt), args.output)
    return EXIT_OK


def render(sweep: Sweep, fmt: str) -> str:
    if fmt == "json":
        return json_text(sweep.to_dict())
    headers = [*sweep.axes, *(figures.get(key).heading for key in COLUMNS)]
    if fmt == "csv":
        return csv_text([*sweep.axes, *COLUMNS], _rows(sweep, str))
    rows = _rows(sweep, None)
    align = "r" * len(headers)
    if fmt == "markdown":
        lines = [f"## {sweep.model}: sweep ({variant_text(sweep)})", ""]
        lines += markdown_table(headers, rows, align)
        lines += ["", f"### {_fit_heading(sweep)}", ""]
        lines += [
            f"- `{formula}` ({note})" if formula else f"  - {note}"
            for formula, note in fit_lines(sweep)
        ]
        return "\n".join(lines) + "\n"
    lines = [f"{sweep.model}: sweep over {_over(sweep)}, {_trace(sweep)}", ""]
    lines += ["  " + line for line in text_table(headers, rows, align)]
    lines += ["", _fit_heading(sweep), ""]
    lines += [
        f"  {formula}  ({note})" if formula else f"    {note}" for formula, note in fit_lines(sweep)
    ]
    return "\n".join(lines) + "\n"


def _rows(sweep: Sweep, plain: Any) -> list[list[str]]:
    """One row per point; ``plain`` (``str``) gives plain numbers, else readable units."""
    rows = []
    for point in sweep.points:
        cells = [str(v) for v in point.values.values()]
        for key in COLUMNS:
            value = getattr(point.profile, key)
            cells.append(plain(value) if plain else figures.format_value(key, value))
        rows.append(cells)
    return rows


def _over(sweep: Sweep) -> str:
    return " x ".join(f"{axis} {', '.join(map(str, v))}" for axis, v in sweep.axes.items())


def _trace(sweep: Sweep) -> str:
    methods = sorted({p.profile.trace.method for p in sweep.points})
    hardware = sweep.points[0].profile.hardware.name
    return f"{'/'.join(methods)} trace, {variant_text(sweep)}, hardware {hardware}"


def variant_text(sweep: Sweep) -> str:
    """``eval, float32`` or ``train step, bfloat16``: what every point profiled, so that a
    sweep run with --mode or --dtype says it was (the points' figures alone do not)."""
    first = sweep.points[0].profile
    mode = "train step" if getattr(first, "mode", "eval") == "train" else "eval"
    return f"{mode}, {first.dtype}"


def _fit_heading(sweep: Sweep) -> str:
    symbols = ", ".join(f"{fit_symbol(axis)} = {axis}" for axis in sweep.axes)
    return f"Fitted formulas (exact, {sweep.method} over {len(sweep.points)} points; {symbols})"


def fit_lines(sweep: Sweep) -> list[tuple[str, str]]:
    """Each figure's formula, and whether a point beyond those it needed verified it."""
    lines = []
    for fitted in sweep.fits.values():
        if not fitted.polynomial:
            lines.append((fitted.formula(), str(fitted.to_dict()["reason"])))
        elif fitted.method == "symbolic":
            lines.append((fitted.formula(), f"symbolic, reproduces all {fitted.points} points"))
        else:  # which points beyond those it needed checked it, axis by axis
            lines.append((fitted.formula(), fitted.check()))
        if fitted.note:
            lines.append(("", fitted.note))
    return lines
