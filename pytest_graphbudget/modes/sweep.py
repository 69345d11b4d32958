"""Shape sweeps: one profile per sequence length and/or batch, and the exact formula of each
figure over them (``fit.py``), as ``profile_sweep`` returns and ``graph-budget profile NAME
--seq-len 128,256,512`` prints.

A zoo name is rebuilt at every point (``zoo.resolve(name, seq_len=..., batch=...)``). Any other
model takes ``inputs``, a callable given the swept axes as keywords (``inputs(seq_len=128)``,
or ``inputs(seq_len=128, batch=8)`` for a grid) that returns what ``profile_model`` takes as
inputs (a tensor, a tuple of them), or a dict of keyword inputs.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError, closest
from pytest_graphbudget.modes.fit import SYMBOLS, Fit, fit
from pytest_graphbudget.modes.symbolic import input_shapes

AXES = ("seq_len", "batch")
FITTED = ("flops", "macs", "peak_memory_bytes", "traffic_bytes")
"""The figures a sweep fits: work, memory at the peak, and bytes moved."""
METHOD = "interpolated"
PROFILE_OPTIONS = ("mode", "loss", "optimizer", "dtype")
"""Keywords of ``profile_sweep`` that go to every point's ``Request``, not to the zoo."""
ZOO_OPTIONS = ("input_shape", "meta", "trust_pickle")
"""The zoo's options a sweep of a name passes to every point (``zoo.resolve``)."""
KEYWORDS = (*AXES, "inputs", "hardware", "name", "symbolic", *PROFILE_OPTIONS, *ZOO_OPTIONS)
"""``profile_sweep``'s keywords: a misspelt one is named with the one meant."""


@dataclass
class SweepPoint:
    values: dict[str, int]  # axis -> its value at this point
    profile: Any  # profile.Profile

    def label(self) -> str:
        """``seq_len=128`` or ``seq_len=128,batch=8``: how a result row names the point."""
        return ",".join(f"{axis}={value}" for axis, value in self.values.items())

    def to_dict(self) -> dict[str, Any]:
        return {**self.values, "totals": self.profile.to_dict()["totals"]}


@dataclass
class Sweep:
    """The profiles of one model over a grid of shapes, and each figure's fitted formula."""

    model: str
    axes: dict[str, list[int]]
    points: list[SweepPoint]
    fits: dict[str, Fit] = field(default_factory=dict)

    @property
    def method(self) -> str:
        """``symbolic`` when a figure's formula came from one trace at symbolic shapes (each
        figure says its own), else ``interpolated``."""
        symbolic = any(f.method == "symbolic" for f in self.fits.values())
        return "symbolic" if symbolic else METHOD

    def __repr__(self) -> str:
        """One line: what every point profiled, the axes and the FLOPs' formula (the
        dataclass's own held every point's whole profile)."""
        first = self.points[0].profile if self.points else None
        where = f" on {first.hardware.name}, {first.mode} {first.dtype}" if first else ""
        over = " x ".join(f"{axis}={values}" for axis, values in self.axes.items())
        flops = f"; {self.fits['flops'].formula()}" if "flops" in self.fits else ""
        return f"<Sweep {self.model!r}{where}: {over}, {len(self.points)} points{flops}>"

    def _repr_html_(self) -> str:
        """Jupyter's rich display, from ``reports`` through the package root, as
        ``Profile._repr_html_``'s (the modes may not import ``reports``)."""
        import sys

        return sys.modules["pytest_graphbudget"]._sweep_html(self)

    def to_dict(self) -> dict[str, Any]:
        """Plot-ready JSON: ``{"sweep": {"mode", "dtype", "axes", "points", "fit"}}``."""
        first = self.points[0].profile if self.points else None
        return {
            "sweep": {
                # What every point profiled: --mode/--dtype change every figure of the points.
                "mode": getattr(first, "mode", "eval"),
                "dtype": getattr(first, "dtype", None),
                "axes": {axis: list(values) for axis, values in self.axes.items()},
                "points": [point.to_dict() for point in self.points],
                "fit": {
                    "method": self.method,
                    "variables": {fit_symbol(axis): axis for axis in self.axes},
                    "figures": {name: f.to_dict() for name, f in self.fits.items()},
                },
            }
        }


def fit_symbol(axis: str) -> str:
    """How a formula writes the axis: ``s`` for seq_len, ``b`` for batch."""
    return SYMBOLS.get(axis, axis)


def axis_values(axis: str, values: Any) -> list[int] | None:
    """A swept axis as a list of distinct positive integers (None: not swept)."""
    if values is None:
        return None
    if isinstance(values, int) and not isinstance(values, bool):
        values = [values]
    if isinstance(values, Sequence) and not isinstance(values, (str, bytes)):
        values = list(values)  # a range or a tuple reads as the list it holds
    if (
        not isinstance(values, list)
        or not values
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)
    ):
        raise GraphBudgetError(
            f"{axis}: a list of positive integers such as [128, 256, 512], got {values!r}"
        )
    if len(set(values)) != len(values):
        raise GraphBudgetError(f"{axis}: each value once, got {list(values)!r}")
    return list(values)


def grid(seq_len: Any = None, batch: Any = None) -> dict[str, list[int]]:
    """The swept axes, checked: at least one of ``seq_len`` and ``batch``."""
    axes = {
        axis: checked
        for axis, values in zip(AXES, (seq_len, batch), strict=True)
        if (checked := axis_values(axis, values)) is not None
    }
    if not axes:
        raise GraphBudgetError("a sweep needs seq_len=[...] or batch=[...] (or both)")
    return axes


def fitted_grid(seq_len: Any = None, batch: Any = None) -> dict[str, list[int]]:
    """``grid``, one axis of two values at least: a formula fitted through one point is a
    constant (``batch=4`` had given ``flops = 99456``, as if batch cost nothing). An axis of
    one value beside a swept one holds it (``seq_len=[16, 32], batch=4``: the batch's)."""
    axes = grid(seq_len, batch)
    if axes and all(len(values) < 2 for values in axes.values()):
        axis, values = next(iter(axes.items()))
        raise GraphBudgetError(
            f"{axis}: a sweep needs at least two values to fit, got {values!r}; "
            "profile one point with profile_model"
        )
    return axes


def refuse_unknown(options: Mapping[str, Any]) -> None:
    """A misspelt keyword (``hardwre=``, ``seqlen=``) is named with the one meant: it had been
    called an option of zoo names, or the sweep had said it needed ``seq_len=[...]``."""
    for key in options:
        if key not in KEYWORDS:
            raise GraphBudgetError(f"unknown keyword {key!r}{closest(key, KEYWORDS)}")


def points_of(axes: Mapping[str, Sequence[int]]) -> list[dict[str, int]]:
    """Every point of the grid, the first axis slowest."""
    names = list(axes)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes.values())]


def fits_of(axes: Mapping[str, Sequence[int]], profiles: Sequence[Any]) -> dict[str, Fit]:
    """Each figure of ``FITTED`` fitted over the points (profiles in ``points_of`` order).

    Two points that profiled the same inputs mean the model ignores an axis (an image model
    given ``seq_len``): an error, not a constant "fit" that a growth budget would pass."""
    points = points_of(axes)
    seen: dict[str, str] = {}
    for point, prof in zip(points, profiles, strict=True):
        inputs = ", ".join(f"{i.name} {'x'.join(map(str, i.shape))}" for i in prof.inputs)
        label = SweepPoint(point, None).label()
        if inputs in seen:
            raise GraphBudgetError(
                f"{prof.model}: {seen[inputs]} and {label} profile the same inputs ({inputs}); "
                f"sweep an axis the model takes"
            )
        seen[inputs] = label
    return {
        name: fit(name, list(axes), points, [int(getattr(p, name)) for p in profiles])
        for name in FITTED
    }


def profile_sweep(
    model_or_name: Any,
    seq_len: Sequence[int] | None = None,
    batch: Sequence[int] | None = None,
    *,
    inputs: Callable[..., Any] | None = None,
    hardware: Any = "generic",
    name: str | None = None,
    symbolic: bool = False,
    **zoo_options: Any,
) -> Sweep:
    """Profile ``model_or_name`` at every point of ``seq_len`` x ``batch`` and fit each figure.

    ``model_or_name``: a zoo name (rebuilt per point, ``zoo_options`` such as ``meta`` apply),
    or an ``nn.Module`` with ``inputs``, called with the swept axes as keywords at each point.
    ``symbolic``: also derive FLOPs and MACs from one export at symbolic shapes (``symbolic.py``).
    ``mode``, ``loss``, ``optimizer`` and ``dtype`` apply to every point, as ``profile_model``'s.
    """
    from pytest_graphbudget.modes import dispatch

    refuse_unknown(zoo_options)
    axes = fitted_grid(seq_len, batch)
    how = {key: zoo_options.pop(key) for key in PROFILE_OPTIONS if key in zoo_options}
    build = _builder(model_or_name, axes, inputs, zoo_options)
    label = name or (model_or_name if isinstance(model_or_name, str) else None)
    label = label or type(model_or_name).__name__
    # One request for every point, checked before the first is built; each point its case.
    every = dispatch.request(model_or_name, hardware=hardware, **how)
    swept, shapes = [], {}
    for point in points_of(axes):
        case = build(point)
        shapes[tuple(point.items())] = input_shapes(case) if symbolic else []
        shown = SweepPoint(point, None).label()
        prof = dispatch.profile(replace(every, model=case, name=f"{label}[{shown}]"))
        swept.append(SweepPoint(point, prof))
    fits = fits_of(axes, [p.profile for p in swept])
    if symbolic:
        fits = with_symbolic(fits, case, shapes, swept, how)
    return Sweep(label, axes, swept, fits)


def with_symbolic(
    fits: dict[str, Fit],
    case: Any,
    shapes: dict[tuple, list],
    points: Sequence[SweepPoint],
    how: Mapping[str, Any] = {},
) -> dict[str, Fit]:
    """The fits, with FLOPs and MACs derived from one export of ``case`` (the last point's) at
    symbolic shapes where that reproduces every point; else each says why not (``note``).
    The export is of the forward as the model is: a sweep of another variant (``how``: its
    ``dtype``, ``mode``) keeps its measured fits (an int8 sweep had printed float32's formula
    as its symbolic one)."""
    from pytest_graphbudget.modes import symbolic

    other = {k: v for k, v in how.items() if k in ("mode", "optimizer", "dtype", "parallel")}
    if other:
        said = ", ".join(f"{k}={v}" for k, v in other.items())
        for name in symbolic.SYMBOLIC:
            fits[
                name
            ].note = f"symbolic derivation not used: it exports the model's own forward, not {said}"
        return fits
    try:
        dims = symbolic.dynamic_dims(points[-1].values, shapes)
        derived = symbolic.derive(case, dims, list(points[-1].values))
    except GraphBudgetError as exc:
        for name in symbolic.SYMBOLIC:
            fits[name].note = f"symbolic derivation not used: {exc}"
        return fits
    values = [p.values for p in points]
    return symbolic.checked(fits, derived, values, [p.profile for p in points])


def _builder(
    model: Any, axes: Mapping[str, Any], inputs: Any, zoo_options: dict[str, Any]
) -> Callable[[dict[str, int]], Any]:
    """How the ``ModelCase`` of one point is made."""
    from pytest_graphbudget.case import ModelCase

    if isinstance(model, str):
        if inputs is not None:
            raise GraphBudgetError("inputs= is for modules; a zoo name builds its own inputs")
        from pytest_graphbudget import zoo

        taken = [key for key in axes if key in zoo_options]
        if taken:
            raise GraphBudgetError(f"{', '.join(taken)} given twice: as a sweep and as an option")
        if zoo_options.get("input_shape") is not None:  # a point it disagrees with: before any
            from pytest_graphbudget.zoo.base import LoadOptions

            for point in points_of(axes):
                LoadOptions(input_shape=zoo_options["input_shape"], **point)
        return lambda point: zoo.resolve(model, **zoo_options, **point)
    if zoo_options:
        unknown = ", ".join(sorted(zoo_options))
        raise GraphBudgetError(f"options {unknown} only apply to zoo model names")
    if isinstance(model, ModelCase):
        model = model.model
    if not callable(inputs):
        raise GraphBudgetError(
            f"sweeping a module needs inputs=, a callable given the swept axes as keywords: "
            f"inputs=lambda {', '.join(axes)}: ..."
        )
    try:
        inspect.signature(inputs).bind(**dict.fromkeys(axes, 1))
    except (TypeError, ValueError):
        raise GraphBudgetError(
            f"inputs= must accept the swept axes as keywords ({', '.join(axes)}): "
            f"inputs=lambda {', '.join(axes)}: ..."
        ) from None

    def build(point: dict[str, int]) -> ModelCase:
        made = inputs(**point)
        if isinstance(made, Mapping):
            return ModelCase(model, (), dict(made))
        return ModelCase(model, made)

    return build
