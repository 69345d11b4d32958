"""FLOPs and MACs as formulas from one trace at symbolic shapes (``profile_sweep(...,
symbolic=True)``, ``graph-budget profile --symbolic``).

The model is exported once with its swept input dimensions dynamic (``torch.export.Dim.AUTO``),
and the ordinary cost pass prices the graph on the symbolic values export recorded
(``measure_export``): every formula of the registry then returns a sympy expression, and their
sum is the figure as a polynomial in the axes. Which input dimensions follow which axis is read
from the sweep's own inputs: a dimension that changes between two points that differ in one
axis only, and equals that axis's value at both. The result is used only where it reproduces
every measured point exactly; otherwise the interpolated fit stays, with the reason. Byte
figures (traffic, peak memory) come from the partition pass, which needs concrete shapes: they
are always interpolated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.modes.fit import Fit

SYMBOLIC = ("flops", "macs")


def input_shapes(case: Any) -> list[tuple[int, ...]]:
    """The shapes of a case's input tensors, in the order a trace flattens them."""
    from pytest_graphbudget.engine.trace import Example

    return [tuple(t.shape) for t in Example(case.inputs, case.kwargs).tensors]


def dynamic_dims(
    point: Mapping[str, int], shapes: Mapping[tuple, list[tuple[int, ...]]]
) -> dict[tuple[int, int], str]:
    """(input tensor, dimension) -> the axis it follows, from the shapes at every point (keyed
    by ``tuple(point.items())``); raises ``GraphBudgetError`` saying why it cannot tell."""
    here = shapes[tuple(point.items())]
    found: dict[tuple[int, int], str] = {}
    for axis, value in point.items():
        if value < 2:
            raise GraphBudgetError(f"{axis}={value}: export fixes sizes 0 and 1, sweep from 2")
        other = next(
            (
                (dict(key), there)
                for key, there in shapes.items()
                if all((dict(key)[a] == v) == (a != axis) for a, v in point.items())
            ),
            None,
        )
        if other is None:
            raise GraphBudgetError(f"no two points differ in {axis} alone")
        moved, there = other
        for i, (a, b) in enumerate(zip(here, there, strict=True)):
            for d, (x, y) in enumerate(zip(a, b, strict=True)):
                if x != y and (x, y) != (value, moved[axis]):
                    raise GraphBudgetError(
                        f"input {i} dimension {d} changes with {axis} without being it"
                    )
                if x != y:
                    found[(i, d)] = axis
        if axis not in found.values():
            raise GraphBudgetError(f"no input dimension follows {axis}")
    return found


def derive(case: Any, dims: Mapping[tuple[int, int], str], axes: Sequence[str]) -> dict[str, Fit]:
    """FLOPs and MACs of ``case``'s model as polynomials in ``axes``, from one export with the
    ``dims`` dynamic; raises ``GraphBudgetError`` (one line) when export or pricing fails."""
    import sympy
    import torch

    from pytest_graphbudget.compat import dim_auto
    from pytest_graphbudget.compat.export import composite_decompositions
    from pytest_graphbudget.engine.hf_masks import real_input_masks
    from pytest_graphbudget.engine.measure_export import measure_exported
    from pytest_graphbudget.engine.trace import Example, trace_dynamo
    from pytest_graphbudget.errors import one_line

    auto = dim_auto()
    if auto is None:
        raise GraphBudgetError(
            f"it needs torch.export.Dim.AUTO, which torch {torch.__version__} lacks"
        )
    example = Example(case.inputs, case.kwargs)
    dynamic = [
        {d: auto for (i, d) in dims if i == index} or None for index in range(len(example.tensors))
    ]
    modes = {module: module.training for module in case.model.modules()}
    try:
        case.model.eval()
        with torch.inference_mode(False), real_input_masks(case.model, example.args, case.kwargs):
            traced = trace_dynamo(case.model, example, dynamic, composite_decompositions())
            measured = measure_exported(case.model, traced, symbolic=True)
    except Exception as exc:  # export's reasons are long: the first line says enough
        raise GraphBudgetError(f"export at symbolic shapes failed: {one_line(exc)}") from None
    finally:
        for module, training in modes.items():
            module.training = training
    if measured is None:
        raise GraphBudgetError("the exported graph lacks the values to price")
    symbols = _symbols(traced, dims)
    wanted = [sympy.Symbol(axis, positive=True, integer=True) for axis in axes]
    renamed = {symbol: wanted[list(axes).index(axis)] for symbol, axis in symbols.items()}
    totals = {
        "macs": sum(n.macs for n in measured.nodes),
        "flops": sum(n.flops for n in measured.nodes),
    }
    fits = {}
    for name, total in totals.items():
        expr = sympy.expand(sympy.sympify(_expr(total)).xreplace(renamed))
        stray = expr.free_symbols - set(wanted)
        if stray:
            raise GraphBudgetError(f"{name} depends on {', '.join(map(str, stray))}, not an axis")
        terms = sympy.Poly(expr, *wanted).terms() if wanted else []
        coefficients = {
            tuple(powers): Fraction(int(c.p), int(c.q)) for powers, c in terms if c != 0
        }
        fits[name] = Fit(name, tuple(axes), coefficients, method="symbolic")
    return fits


def _expr(value: Any) -> Any:
    """A SymInt's sympy expression; an int as it is."""
    node = getattr(value, "node", None)
    return node.expr if node is not None else value


def _symbols(traced: Any, dims: Mapping[tuple[int, int], str]) -> dict[Any, str]:
    """Export's symbol of each dynamic input dimension -> its axis; an error when export made
    one of them static (the model fixes it)."""
    placeholders = [n for n in traced.graph_module.graph.nodes if n.op == "placeholder"]
    inputs = [
        n.meta["val"]
        for n, binding in zip(placeholders, traced.placeholders, strict=True)
        if binding.kind == "input"
    ]
    found = {}
    for (i, d), axis in dims.items():
        expr = _expr(inputs[i].shape[d])
        if not getattr(expr, "is_Symbol", False):
            raise GraphBudgetError(f"export made {axis} static (input {i} dimension {d}: {expr})")
        found[expr] = axis
    return found


def checked(
    fits: dict[str, Fit],
    derived: dict[str, Fit],
    points: Sequence[Mapping[str, int]],
    profiles: Sequence[Any],
) -> dict[str, Fit]:
    """``fits`` with each derived formula in place of the interpolated one where it reproduces
    every measured point; where it does not, the interpolated one says which point it missed."""
    out = dict(fits)
    for name, formula in derived.items():
        missed = next(
            (
                (point, prof)
                for point, prof in zip(points, profiles, strict=True)
                if formula(**point) != getattr(prof, name)
            ),
            None,
        )
        if missed is None:
            formula.points = formula.held_out = len(points)
            out[name] = formula
        else:
            point, prof = missed
            shown = ",".join(f"{a}={v}" for a, v in point.items())
            note = (
                f"symbolic {formula.formula()} gives {formula(**point)} at {shown}, "
                f"measured {getattr(prof, name)}: interpolated instead"
            )
            out[name].note = note
    return out
