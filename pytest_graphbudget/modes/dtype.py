"""``dtype=``: the model and its floating inputs in another floating dtype, as a copy.

Casting works like ``model.to(dtype)`` (not autocast, which ``amp_float16`` and
``amp_bfloat16`` ask for: ``amp.py``): every floating parameter, buffer and
input becomes ``dtype``, so weights, activations and traffic are counted in its bytes and the
roofline takes the hardware's peak for it. The caller's model is never touched: a copy is cast,
and each floating tensor is cast straight into the copy (no second full-precision copy).
"""

from __future__ import annotations

from typing import Any

from pytest_graphbudget.errors import GraphBudgetError, one_line
from pytest_graphbudget.modes.amp import AMP as AUTOCAST
from pytest_graphbudget.modes.quantize import QUANTIZED, quantized_copy


def cast(model: Any, args: tuple, kwargs: dict[str, Any], dtype: str | None) -> tuple:
    """``(model, args, kwargs)`` in ``dtype``: the same objects when nothing needs casting,
    else a cast copy of the model and cast floating inputs (integer ones, token ids, stay);
    for ``int8`` and ``float8_e4m3fn`` a quantized copy (``quantize.py``), inputs as given."""
    import torch
    from torch.utils import _pytree as pytree

    from pytest_graphbudget.engine.quantized import packed

    if dtype is None or dtype in AUTOCAST:  # autocast decides per op (``amp.py``)
        return model, args, kwargs
    if dtype in QUANTIZED:
        return quantized_copy(model, dtype), args, kwargs
    target = getattr(torch, dtype)

    def needs(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != target

    program = hasattr(model, "graph_signature")  # an ExportedProgram
    if program:
        state = list(model.state_dict.values())
    elif isinstance(model, torch.nn.Module):
        state = [*model.parameters(), *model.buffers()]
    else:  # not a model: profile_model says so
        return model, args, kwargs
    inputs = pytree.tree_leaves((args, kwargs))
    if not any(map(needs, state + inputs)):
        return model, args, kwargs
    if program:
        raise GraphBudgetError(
            f"dtype={dtype!r} cannot recast an exported program (its graph fixed its dtypes "
            "when it was exported): export the model in that dtype and leave dtype unset"
        )
    if next(packed(model), None) is not None:  # its forward refused the cast inputs
        raise GraphBudgetError(
            f"dtype={dtype!r} casts the floating inputs too, and {type(model).__name__} is "
            "already quantized (torch.ao's packed weights take float32 inputs): leave dtype unset"
        )
    args, kwargs = pytree.tree_map(lambda t: t.to(target) if needs(t) else t, (args, kwargs))
    return _cast_copy(model, target, state, needs), args, kwargs


def _cast_copy(model: Any, target: Any, state: list, needs: Any) -> Any:
    """A deep copy of ``model`` whose floating state is ``target``; tied weights stay tied."""
    import copy

    import torch
    from torch.nn.parameter import is_lazy

    memo: dict[int, Any] = {}
    for tensor in state:
        if id(tensor) in memo or not needs(tensor) or is_lazy(tensor):
            continue
        cast = tensor.detach().to(target)
        if isinstance(tensor, torch.nn.Parameter):
            cast = torch.nn.Parameter(cast, requires_grad=tensor.requires_grad)
        memo[id(tensor)] = cast
    try:
        copied = copy.deepcopy(model, memo)
    except Exception as exc:
        name = str(target).removeprefix("torch.")
        raise GraphBudgetError(
            f"dtype={name!r}: cannot copy {type(model).__name__} to cast it "
            f"({one_line(exc, typed=True)}); cast it yourself (model.to({target})) and leave "
            "dtype unset"
        ) from None
    return copied.to(target)  # lazy parameters, not yet materialised, take the dtype too
