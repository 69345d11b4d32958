"""``profile_model``: the request checked, a zoo name or a ``ModelCase`` resolved, then
handed to exactly one mode: the decode step (``decode.py``), the training step (``train.py``)
or one forward (``engine.pipeline``), cast (``dtype.py``) and timed (``runtime.py``) as asked.
No mode calls back here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_graphbudget.case import ModelCase
from pytest_graphbudget.engine.pipeline import is_program, profile_graph
from pytest_graphbudget.engine.profile import Profile
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.modes import runtime


def profile_model(
    model: Any,
    inputs: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    hardware: Any = "generic",
    name: str | None = None,
    mode: str = "eval",
    loss: Callable | None = None,
    optimizer: str | None = None,
    dtype: str | None = None,
    measure: bool | int = False,
    tier: str | None = None,
    **zoo_options: Any,
) -> Profile:
    """Profile one forward pass of ``model`` at ``inputs`` (and keyword ``kwargs``).

    ``model`` is an ``nn.Module``, a ``ModelCase``, or a zoo name such as ``"resnet50"`` (then
    ``seq_len``, ``batch``, ``input_shape`` and the other zoo options may be given).
    ``mode="train"`` profiles one training step instead: forward, ``loss`` (a callable of the
    outputs; default their sum), backward and, when ``optimizer`` ("adam" or "sgd") is named,
    its update (``train.py``).
    ``dtype`` ("float32", "bfloat16", "float16"; None: the model's own) profiles a cast copy
    of the model and of its floating inputs (``dtype.py``): bytes and peak are that dtype's.
    ``decode=True, context=N`` profiles one generated token of a causal LM instead
    (``decode.step_profile``; ``profile_decode`` gives the prefill beside it).
    ``measure`` (True: 20 runs, or a number of runs) also times it here (``runtime.py``).
    A model ``fx`` cannot trace is priced from one taped forward; ``tier="dynamo"`` asks for
    a whole graph from ``torch.export`` instead, ``tier="dynamo-breaks"`` for Dynamo's graph
    breaks (where and why the forward breaks).
    """
    from pytest_graphbudget.modes.dtype import cast
    from pytest_graphbudget.modes.request import check_dtype, check_mode

    check_mode(mode, loss, optimizer)
    check_dtype(dtype)
    runs = runtime.runs_asked(measure, mode, zoo_options, isinstance(model, str))
    if zoo_options.get("decode") or "context" in zoo_options:
        from pytest_graphbudget.modes.decode import step_profile

        if mode != "eval" or dtype is not None:
            raise GraphBudgetError(
                "decode profiles one generated token in eval mode, in the "
                "model's own dtype: drop mode/dtype"
            )
        return step_profile(model, hardware, name, zoo_options)
    zoo_options.pop("decode", None)
    if isinstance(model, str):
        from pytest_graphbudget import zoo

        model = zoo.resolve(model, **zoo_options)
    elif zoo_options:
        unknown = ", ".join(sorted(zoo_options))
        raise GraphBudgetError(f"options {unknown} only apply to zoo model names")
    load = runtime.loaded(model) if runs else None
    if isinstance(model, ModelCase):
        name = name or model.name
        inputs = model.inputs if inputs is None else inputs
        kwargs = model.kwargs if kwargs is None else kwargs
        model = model.model
    if is_program(model):
        inputs, kwargs = _saved_inputs(model, inputs, kwargs)
    name = name or type(model).__name__
    model, args, kwargs = cast(model, _as_tuple(inputs), dict(kwargs or {}), dtype)
    if mode == "train":
        from pytest_graphbudget.modes.train import profile_step

        return profile_step(model, args, kwargs, hardware, name, loss, optimizer)
    prof = profile_graph(model, args, kwargs, hardware, name, tier)
    return runtime.attach(prof, model, args, kwargs, runs, load) if runs else prof


def _saved_inputs(program: Any, inputs: Any, kwargs: Any) -> tuple[Any, Any]:
    """The example inputs an exported program was saved with, when none are given."""
    if kwargs or (inputs is not None and not (isinstance(inputs, (tuple, list)) and not inputs)):
        return inputs, kwargs
    example = getattr(program, "example_inputs", None)
    return example if example is not None else (inputs, kwargs)


def _as_tuple(inputs: Any) -> tuple:
    if inputs is None:
        return ()
    if isinstance(inputs, tuple):
        return inputs
    if isinstance(inputs, list):
        return tuple(inputs)
    return (inputs,)
