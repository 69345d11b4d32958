"""The registry itself: ``register`` decorates formulas, ``price`` looks them up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from typing import Any


class Shape(tuple):
    """A tensor argument as formulas see it: its shape, a tuple of ints."""


@dataclass(frozen=True)
class OpCost:
    """The work of one op: multiply-accumulates of contractions and every other FLOP."""

    macs: int = 0
    other: int = 0

    @property
    def flops(self) -> int:
        return 2 * self.macs + self.other

    def __add__(self, rhs: OpCost) -> OpCost:
        return OpCost(self.macs + rhs.macs, self.other + rhs.other)


Formula = Callable[..., OpCost]

FORMULAS: dict[str, Formula] = {}
"""Op name (``"convolution"``, ``"addmm"``) -> formula(*args, out=..., **kwargs)."""

ZERO_COST: set[str] = set()
"""Ops that move or describe data but compute nothing; they are costed at zero FLOPs."""


def register(*names: str) -> Callable[[Formula], Formula]:
    """Register ``formula`` for every op in ``names`` (in-place and out variants included)."""

    def wrap(formula: Formula) -> Formula:
        for name in names:
            FORMULAS[name] = formula
        return formula

    return wrap


def base_name(qualified: str) -> str:
    """``aten::relu_`` / ``aten.relu_.default`` -> ``relu``: in-place variants share a formula."""
    parts = qualified.replace("::", ".").split(".")
    name = parts[1] if len(parts) > 1 else parts[0]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


def price(name: str, args: tuple, kwargs: dict[str, Any], out: Any) -> OpCost | None:
    """The cost of one call, or ``None`` when no formula knows the op."""
    if name in ZERO_COST:
        return OpCost()
    formula = FORMULAS.get(name)
    if formula is None:
        return None
    return formula(*args, out=out, **kwargs)


def numel(shape: Any) -> int:
    """Elements of a shape; 0 for anything that is not a shape (None, scalars)."""
    return prod(shape) if isinstance(shape, Shape) else 0


def out_numel(out: Any) -> int:
    """Elements of an op's (first) output."""
    if isinstance(out, (list, tuple)) and not isinstance(out, Shape):
        return numel(out[0]) if out else 0
    return numel(out)
