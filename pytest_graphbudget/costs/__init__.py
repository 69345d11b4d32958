"""The cost registry: one entry per op (formula, fusion role, kind label), keyed by its name.

Formulas are pure functions of shapes, in the style of ``torch/utils/flop_counter.py``: the
interpreter (``engine/measure.py``) replaces every tensor argument by its shape (a tuple of ints)
before calling them, so no formula ever touches a tensor. A formula returns an ``OpCost``:
``macs`` for the multiply-accumulates of contraction ops, ``other`` for every other FLOP.
Roles and keys are described in ``registry.py``; ``registry.register_formula`` adds an op from
outside. The per-op costs are documented in ``docs/metrics.md``; keep the two in step.

Importing the modules below fills the registry.
"""

from __future__ import annotations

import torch  # noqa: F401  (the formulas' modules import it anyway; check_torch reads it)

from pytest_graphbudget.compat import check_torch

check_torch()  # one line for a torch below the floor, before any formula meets its ops

from pytest_graphbudget.costs import (  # noqa: E402, F401
    attention,
    backward,
    contraction,
    detection,
    elementwise,
    linalg,
    loss,
    movement,
    quantized,
    reduction,
    resizes,
    rnn_workspace,
    scratch,
    selections,
    spectral,
    workspace,
)
from pytest_graphbudget.costs.registry import (  # noqa: E402
    REGISTRY,
    ROLES,
    Entry,
    FormulaError,
    OpCost,
    RegistryError,
    Shape,
    base_name,
    kind_of,
    lookup,
    price,
    register,
    register_formula,
)

__all__ = [
    "REGISTRY",
    "ROLES",
    "Entry",
    "FormulaError",
    "OpCost",
    "RegistryError",
    "Shape",
    "base_name",
    "kind_of",
    "lookup",
    "price",
    "register",
    "register_formula",
]
