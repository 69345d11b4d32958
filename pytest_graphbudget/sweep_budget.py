"""Budget tables that sweep shapes: ``seq_len = [128, 2048]`` and/or ``batch = [1, 32]``.

Such a table becomes one table per point, named ``bert-base[seq_len=2048]``, each checked as
any table is. A limit may be one value for every point, or a table with one value per point:
``flops_max = {128 = "22G", 2048 = "400G"}`` (one swept axis: keyed by its values), or keyed by
the point's name, ``{"seq_len=128,batch=1" = "22G", ...}`` (any sweep). Every point needs a
value and every key must be a point: a missing limit would pass silently.

``growth_max = {seq_len = "quadratic"}`` adds one more table, ``bert-base[growth]``: it fits
each figure of ``shape_sweep.FITTED`` over the points and fails when one's degree in an axis
exceeds the allowed one (``fit.GROWTH``). Telling degree d from d+1 takes d+2 values of the
axis; fewer is an error, since any d+1 points fit a polynomial of degree d.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.budget_files import Broken, Table
from pytest_graphbudget.budgets import LIMITS
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.fit import GROWTH, growth_degree
from pytest_graphbudget.shape_sweep import AXES, SweepPoint, grid, points_of

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_graphbudget.check import Checker, ModelResult
    from pytest_graphbudget.profiler import Profiler

GROWTH_KEY = "growth_max"


@dataclass
class GrowthTable(Table):
    """The ``<name>[growth]`` check of a swept table: its points' tables and allowed degrees."""

    points: list[Table] = field(default_factory=list)
    axes: dict[str, list[int]] = field(default_factory=dict)
    growth: dict[str, str] = field(default_factory=dict)  # axis -> "linear", ...


def expand(entry: Table, shown: str) -> list[Broken | Table]:
    """``entry`` as it is when it sweeps nothing, else one table per point (and its growth
    table); a ``Broken`` with a one-line message for a sweep key it cannot read."""
    where = f"{shown}::{entry.name}"
    swept = [axis for axis in AXES if isinstance(entry.table.get(axis), list)]
    try:
        if not swept:
            _refuse_point_keys(entry.table, where)
            return [entry]
        return _expand(entry, where)
    except GraphBudgetError as exc:
        return [Broken(entry.name, str(exc), entry.line())]


def _refuse_point_keys(table: dict[str, Any], where: str) -> None:
    for key, value in table.items():
        if key == GROWTH_KEY or (key in LIMITS and isinstance(value, dict)):
            raise GraphBudgetError(
                f"{key} in {where}: {'growth' if key == GROWTH_KEY else 'a limit per point'} "
                "needs a sweep: seq_len = [...] or batch = [...]"
            )


def _expand(entry: Table, where: str) -> list[Broken | Table]:
    table = entry.table
    if "factory" in table:
        raise GraphBudgetError(
            f"{where}: a sweep rebuilds the model at every point, which a factory cannot; "
            "name a zoo model (model = ...) or sweep in Python with profile_sweep"
        )
    axes = grid(*(table[a] if isinstance(table.get(a), list) else None for a in AXES))
    points = points_of(axes)
    labels = [SweepPoint(point, None).label() for point in points]
    per_point = {
        key: _per_point(key, value, axes, labels, where)
        for key, value in table.items()
        if key in LIMITS and isinstance(value, dict)
    }
    tables: list[Broken | Table] = []
    for i, (point, label) in enumerate(zip(points, labels, strict=True)):
        values = {k: v for k, v in table.items() if k != GROWTH_KEY}
        values.update(point)
        values.setdefault("model", entry.name)
        values.update({key: limits[i] for key, limits in per_point.items()})
        if "name" in values:
            values["name"] = f"{values['name']}[{label}]"
        tables.append(Table(f"{entry.name}[{label}]", values, entry.defaults, entry.lines))
    if GROWTH_KEY in table:
        growth = _growth(table[GROWTH_KEY], axes, where)
        tables.append(
            GrowthTable(
                f"{entry.name}[growth]",
                {k: v for k, v in table.items() if k not in LIMITS and k != GROWTH_KEY},
                entry.defaults,
                entry.lines,
                points=[t for t in tables if isinstance(t, Table)],
                axes=axes,
                growth=growth,
            )
        )
    return tables


def _per_point(
    key: str, value: dict[str, Any], axes: dict[str, list[int]], labels: list[str], where: str
) -> list[Any]:
    """A limit's value at each point, from a table keyed by axis value or point name."""
    names = {label: label for label in labels}
    shown = ", ".join(labels)
    if len(axes) == 1:
        (axis,) = axes
        names.update({str(v): f"{axis}={v}" for v in axes[axis]})
        shown = ", ".join(str(v) for v in axes[axis])
    unknown = [k for k in value if k not in names]
    if unknown:
        raise GraphBudgetError(
            f"{key} in {where}: {unknown[0]!r} is not a point of the sweep; keys are {shown}"
        )
    by_label = {names[k]: v for k, v in value.items()}
    missing = [label for label in labels if label not in by_label]
    if missing:
        raise GraphBudgetError(
            f"{key} in {where}: no limit for {missing[0]}; give one per point ({shown})"
        )
    return [by_label[label] for label in labels]


def _growth(value: Any, axes: dict[str, list[int]], where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not value:
        raise GraphBudgetError(
            f'{GROWTH_KEY} in {where}: a table such as {{seq_len = "quadratic"}}, got {value!r}'
        )
    for axis, word in value.items():
        if axis not in axes:
            raise GraphBudgetError(
                f"{GROWTH_KEY} in {where}: {axis!r} is not swept; sweep it ({axis} = [...]) or "
                f"bound one of {', '.join(axes)}"
            )
        degree = growth_degree(word, f"{GROWTH_KEY} {axis} in {where}")
        if len(axes[axis]) < degree + 2:
            raise GraphBudgetError(
                f"{GROWTH_KEY} {axis} = {word!r} in {where}: telling {word} from faster growth "
                f"takes {degree + 2} values of {axis}, got {len(axes[axis])}"
            )
    return dict(value)


def check_growth(
    entry: GrowthTable,
    nodeid: str,
    path: Path,
    shown: str,
    checker: Checker,
    profiler: Profiler,
    hardware: str | None = None,
) -> ModelResult:
    """Profile every point (the profiler's cache shares them with the points' own checks), fit
    each figure and judge its degree in each bounded axis. Shows the last point's figures."""
    from pytest_graphbudget.check import ModelResult, budget_dict
    from pytest_graphbudget.shape_sweep import fits_of

    budget = entry.budget(f"{path.name}::{entry.name}", hardware)
    tag = budget.variant.tag  # mode/optimizer/dtype: the points' own, in the id as theirs
    result = ModelResult(
        tag(nodeid),
        tag(entry.name),
        nodeid,
        shown,
        entry.lines.get(GROWTH_KEY, entry.line()),
        budget_dict(budget),
        source="toml",
    )
    target = hardware or budget.hardware
    try:
        profiles = [
            profiler.profile_table(t.table, t.name, target, budget.variant) for t in entry.points
        ]
        fits = fits_of(entry.axes, profiles)
    except GraphBudgetError as exc:
        result.error = str(exc)
        return result
    result.profile = profiles[-1].to_dict()
    result.findings = [
        finding for axis, word in entry.growth.items() for finding in _judge(fits, axis, word)
    ]
    return result


def _judge(fits: dict[str, Any], axis: str, word: str) -> list[dict[str, Any]]:
    from pytest_graphbudget import figures

    allowed = GROWTH[word]
    found = []
    for name, fitted in fits.items():
        label = figures.get(name).label
        if not fitted.polynomial:
            message = (
                f"{label} is not a polynomial over the points, so its growth in {axis} was not "
                f"judged against {GROWTH_KEY} {axis} = {word!r}"
            )
            found.append(_finding("warn", message))
            continue
        degree = fitted.degree(axis)
        if degree > allowed:
            grows = next(w for w, d in GROWTH.items() if d == degree)
            spare = "" if fitted.held_out else "; no point to spare verified the degree"
            message = (
                f"{label} grows with {axis} to degree {degree} ({grows}: {fitted.formula()}"
                f"{spare}), faster than {GROWTH_KEY} {axis} = {word!r}"
            )
            found.append(_finding("fail", message, degree, allowed))
    return found


def _finding(severity: str, message: str, value: int | None = None, limit: int | None = None):
    return {
        "severity": severity,
        "key": GROWTH_KEY,
        "message": message,
        "value": value,
        "limit": limit,
    }
