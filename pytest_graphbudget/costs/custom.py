"""``register_formula``: the public way to price an op the built-in registry does not know.

    import torch
    from pytest_graphbudget import register_formula

    # torch.ops.mylib.fused_mm is defined first (torch.library.custom_op and its fake):
    # docs/metrics.md ("Adding a formula") has the whole example, which its test runs.
    @register_formula(torch.ops.mylib.fused_mm.default, role="anchor", kind="matmul")
    def fused_mm(a, b, *, out=None, **kwargs):
        # a, b, out are Shape objects (tuples of ints); other arguments come as passed.
        m, k = a
        n = b[1]
        return {"macs": m * k * n, "flops": 2 * m * k * n + m * n}

The formula is called as the built-in ones are, ``fn(*args, out=None, **kwargs)``, with every
tensor argument and the output replaced by its ``Shape``; it returns a mapping with at least
``"flops"`` and ``"macs"`` (other keys are ignored). ``flops`` is ``2 * macs`` plus every FLOP
that is not a multiply-accumulate, so ``flops < 2 * macs`` is an error. A formula that raises
is a ``FormulaError`` naming the op and the exception, never an "unsupported" op: the
registry's own formulas may decline a call they cannot read, a user's may not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_graphbudget.costs.registry import (
    ROLES,
    FormulaError,
    OpCost,
    RegistryError,
    add,
    base_name,
)


def op_key(op: Any) -> str:
    """The registry key of an ``OpOverload`` or ``OpOverloadPacket``: ``mm``, ``mylib.fused``."""
    import torch

    if isinstance(op, torch._ops.OpOverload):
        qualified = op.name()
    elif isinstance(op, torch._ops.OpOverloadPacket):
        qualified = op._qualified_op_name
    else:
        raise RegistryError(
            f"register_formula takes an op such as torch.ops.mylib.myop.default, got {op!r}"
        )
    namespace = qualified.partition("::")[0]
    name = base_name(qualified)
    return name if namespace in ("aten", "prim") else f"{namespace}.{name}"


def register_formula(
    op: Any, role: str = "anchor", *, kind: str | None = None
) -> Callable[[Callable[..., Mapping[str, int]]], Callable[..., Mapping[str, int]]]:
    """Register ``fn`` as the formula of ``op`` (all its overloads), with a fusion role.

    ``role`` is one of ``anchor``, ``pointwise``, ``reduction``, ``gather``, ``view``, ``free``
    (see ``costs.registry``); ``kind`` names the op in reports (default: its key, such as
    ``mylib.fused_mm``). An op that already has an entry raises ``RegistryError``.
    """
    key = op_key(op)
    if role not in ROLES:
        raise RegistryError(f"{key}: unknown role {role!r}; use one of {', '.join(ROLES)}")

    def wrap(fn: Callable[..., Mapping[str, int]]) -> Callable[..., Mapping[str, int]]:
        def formula(*args: Any, out: Any = None, **kwargs: Any) -> OpCost:
            try:
                result = fn(*args, out=out, **kwargs)
            except Exception as exc:  # the user's mistake: say so, never "unsupported"
                raise FormulaError(raised(key, exc)) from exc
            return to_cost(key, result)

        add(key, role, formula, kind)
        return fn

    return wrap


def raised(key: str, exc: Exception) -> str:
    """The one line that says a registered formula raised, and how formulas are called."""
    from pytest_graphbudget.errors import one_line

    return (
        f"the formula registered for {key} raised {one_line(exc, typed=True)} (it is called "
        "as fn(*args, out=..., **kwargs), each tensor given as its Shape: a tuple of ints)"
    )


def to_cost(key: str, result: Any) -> OpCost:
    """Check a custom formula's mapping and turn it into an ``OpCost``."""
    if not isinstance(result, Mapping) or not {"flops", "macs"} <= result.keys():
        raise FormulaError(
            f"{key}: a formula returns a mapping with 'flops' and 'macs', got {result!r}"
        )
    flops, macs = result["flops"], result["macs"]
    for label, value in (("flops", flops), ("macs", macs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise FormulaError(f"{key}: {label} must be a whole number >= 0, got {value!r}")
    if flops < 2 * macs:
        raise FormulaError(
            f"{key}: flops={flops} is less than 2 * macs={2 * macs}; flops counts 2 per "
            "multiply-accumulate plus every other FLOP"
        )
    return OpCost(macs=macs, other=flops - 2 * macs)
