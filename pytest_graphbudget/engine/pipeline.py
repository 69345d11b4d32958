"""One graph through the engine: traced and priced (``tiers.py``), partitioned and
assembled (``assemble.py``) into a ``Profile``. ``profile_graph`` is what a mode calls, once per
graph it profiles.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from pytest_graphbudget.engine import walk
from pytest_graphbudget.engine.placed import place_helper_lines
from pytest_graphbudget.engine.profile import Profile
from pytest_graphbudget.engine.unrecorded import unrecorded_note
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.heap import heap_frozen


def is_program(model: Any) -> bool:
    """An ``ExportedProgram``, checked without importing torch for other models."""
    return type(model).__name__ == "ExportedProgram" and hasattr(model, "graph_signature")


def profile_graph(
    model: Any,
    args: tuple,
    kwargs: dict[str, Any],
    hardware: Any,
    name: str,
    tier: str | None = None,
    execution: str = "eager",
) -> Profile:
    """``tier`` (``tiers.ASKED``) asks for a whole-graph export or Dynamo's graph breaks after
    ``fx`` instead of the taped forward; ``execution`` (``latency.EXECUTIONS``) how the model
    runs, which its estimated time prices."""
    import torch

    from pytest_graphbudget import hardware as hw
    from pytest_graphbudget.engine.trace import Example

    program = model if is_program(model) else None
    if program is not None:  # its module holds the state under the names its graph uses
        model = program.module()
    if not isinstance(model, torch.nn.Module):
        raise GraphBudgetError(f"expected a torch.nn.Module, got {type(model).__name__}")
    target = hw.get(hardware)
    example = Example(args, kwargs)
    with walk.walking(model):
        return _profile(model, program, example, args, kwargs, target, name, tier, execution)


def _profile(
    model: Any,
    program: Any,
    example: Any,
    args: tuple,
    kwargs: dict[str, Any],
    target: Any,
    name: str,
    tier: str | None,
    execution: str,
) -> Profile:
    """``profile_graph`` inside one walk of the model's modules (``walk.walking``)."""
    import torch

    from pytest_graphbudget.engine.assemble import assemble
    from pytest_graphbudget.engine.fakes import eager_linear
    from pytest_graphbudget.engine.hf_masks import real_input_masks
    from pytest_graphbudget.engine.tiers import trace_and_measure
    from pytest_graphbudget.quiet import held

    start = time.perf_counter()
    # Profiling runs the model in eval mode; the caller's model keeps the mode it had.
    modes = {module: module.training for module in walk.modules(model)}
    try:
        with held(f"tracing {name}"):
            # Tracing speaks to torch developers (export's notes on attribute assignment, FX's
            # on leaf modules, the generated code of a graph that failed); users see our
            # summary of what worked and why the rest failed, and the rest only when they ask.
            # Under the caller's inference_mode, export would keep composite ops (aten.linear)
            # whole: the graph and its subgraphs would differ from the same model's outside it.
            with (
                torch.inference_mode(False),
                _fresh_casts(),
                _values_kept(model, example),
                eager_linear(),
                real_input_masks(model, args, kwargs),
            ):
                traced, measured, failures = trace_and_measure(model, example, program, tier)
    finally:
        for module, training in modes.items():
            module.training = training
    if measured.frees is None:  # an export's: the lines of helpers that call submodules
        measured.placed = place_helper_lines(measured.nodes)
    seconds = time.perf_counter() - start
    with heap_frozen():  # partitioning makes as many objects as the cost pass
        prof = assemble(
            model, args, kwargs, name, target, traced, measured, failures, seconds, execution
        )
    prof.notes += [note] if (note := unrecorded_note(measured)) else []
    if target.compute_capability:  # a CUDA GPU's: memory as its caching allocator holds it
        from pytest_graphbudget.engine.allocator import CudaMemory, count_on_gpu

        count_on_gpu(prof, model, measured, CudaMemory.of(target.compute_capability))
    elif target.family:  # a GPU whose allocator is not CUDA's (cdna3)
        from pytest_graphbudget.engine.allocator import HOST_PEAK

        prof.notes.append(
            f"{HOST_PEAK}: {target.name} is no CUDA GPU, and its "
            "allocator's rounding and workspaces are not modelled"
        )
    return prof


@contextlib.contextmanager
def _fresh_casts() -> Iterator[None]:
    """Autocast's cast cache off for the capture: its forwards (the trace, the cost pass)
    run in one autocast context, where a cached weight cast is priced only in the first, so
    a profile under the caller's own ``torch.autocast`` would miss every weight's cast. A
    served model casts its weights again in each new context, each forward."""
    import torch

    cached = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)
    try:
        yield
    finally:
        torch.set_autocast_cache_enabled(cached)


KEEP_BYTES = 2**28
"""The most bytes of weights, buffers and inputs copied up front to be put back after a
forward that no tape watches (``kept.everything``): beyond it the copy would cost what the
profile does. The taped forward copies what it writes whatever the size."""


@contextlib.contextmanager
def _values_kept(model: Any, example: Any) -> Iterator[None]:
    """The model's weights and buffers, its inputs and the CPU's random state as they were:
    profiling runs a forward to price it, and a forward that writes its own state in place
    (an EMA buffer, a cache, a weight clamped under ``no_grad``, an input) would keep what
    that run wrote. A tensor is copied before it is first written (``kept``), and put back."""
    import torch

    from pytest_graphbudget.engine import walk
    from pytest_graphbudget.engine.kept import keeping

    tensors = [t for _, t in walk.named_tensors(model, "_parameters", unique=True)]
    tensors += [t for _, t in walk.named_tensors(model, "_buffers", unique=True)]
    tensors += list(example.tensors)
    held: list = []  # objects among the inputs (a KV cache), their attributes as they were
    tensors += _held_state((example.args, example.kwargs), held)
    # plain CPU tensors: not the meta device's, a fake's or a quantized subclass's
    real = [
        t
        for t in tensors
        if type(t) in (torch.Tensor, torch.nn.Parameter)
        and t.device.type == "cpu"
        and not t.is_inference()  # no version counter; nothing outside inference_mode writes it
    ]
    whole = sum(t.numel() * t.element_size() for t in real) <= KEEP_BYTES
    with torch.random.fork_rng(devices=[]):
        try:
            with keeping(real, whole):
                yield
        finally:
            _put_back(held)


HELD_OBJECTS = 10_000
"""The most containers and objects among the inputs whose contents are kept (``_held_state``)."""


def _held_state(value: Any, held: list, depth: int = 0) -> list:
    """The tensors inside the inputs' objects and containers, and each mutable one with a copy
    of its contents in ``held``: a KV cache (transformers' ``DynamicCache``) grows by
    rebinding its layers' tensors to longer ones, which no version counter sees, and a second
    profile of the same step would price one token more."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if depth > 8 or len(held) > HELD_OBJECTS or isinstance(value, (torch.nn.Module, type)):
        return []
    if type(value) is list or type(value) is dict:  # a subclass (ModelOutput) may refuse clear()
        held.append((value, value.copy()))
    items = value.values() if isinstance(value, dict) else value
    if not isinstance(value, (list, tuple, dict)):
        state = getattr(value, "__dict__", None)
        if not isinstance(state, dict) or callable(value):
            return []
        held.append((state, dict(state)))
        items = state.values()
    return [t for item in items for t in _held_state(item, held, depth + 1)]


def _put_back(held: list) -> None:
    """Each container and object of ``_held_state`` as it was."""
    for container, contents in held:
        if isinstance(container, list):
            container[:] = contents
        else:
            container.clear()
            container.update(contents)
