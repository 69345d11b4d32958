"""The cost registry: one formula per ATen op, keyed by the op's name.

Formulas are pure functions of shapes, in the style of ``torch/utils/flop_counter.py``: the
interpreter (``measure.py``) replaces every tensor argument by its shape (a tuple of ints)
before calling them, so no formula ever touches a tensor. A formula returns an ``OpCost``:
``macs`` for the multiply-accumulates of contraction ops, ``other`` for every other FLOP.
The per-op costs are documented in ``docs/metrics.md``; keep the two in step.

Importing the modules below fills the registry.
"""

from __future__ import annotations

from pytest_graphbudget.costs import (  # noqa: F401
    attention,
    contraction,
    detection,
    elementwise,
    movement,
    reduction,
)
from pytest_graphbudget.costs.registry import (
    FORMULAS,
    ZERO_COST,
    OpCost,
    Shape,
    base_name,
    price,
    register,
)

__all__ = ["Shape", "FORMULAS", "ZERO_COST", "OpCost", "base_name", "price", "register"]
