"""Where ``measure`` runs a model: ``device="cpu"``, ``"cuda"`` or ``"cuda:N"``.

The static profile never needs a device; only the timed runs do. A model asked to run on
another device than its own is timed as a COPY moved there, with copies of its inputs: the
user's module keeps its device, its weights and its mode.

On a CUDA device each run is timed by a pair of ``torch.cuda.Event(enable_timing=True)``
recorded on the current stream around the forward (the GPU's own clock, not the host's, so
the launch queue is not mistaken for work), and the measured peak is
``torch.cuda.max_memory_allocated()`` over the timed runs, after ``reset_peak_memory_stats()``,
minus ``memory_allocated()`` before them: what the forwards allocated through PyTorch's caching
allocator on top of the weights, the inputs and whatever was live already (cuBLAS's workspace,
allocated in the warm-up). The allocator's reserved but unused blocks are not counted, nor is
memory outside the allocator (the CUDA context, cuDNN's handle).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError, one_line

KINDS = ("cpu", "cuda")
"""The device types ``measure`` runs on."""


NAME = re.compile(r"cpu|cuda(:[0-9]+)?")
"""A device ``measure_device`` may name in a budget, checked where it is written; whether the
machine has it is checked when the model is timed (a CI runner without a GPU fails that test)."""


def check_name(value: Any, where: str) -> str:
    """A budget's ``measure_device``: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``, or a one-line error."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise GraphBudgetError(f"measure_device in {where}: cpu, cuda or cuda:N, got {value!r}")
    return value


def check_device(device: Any, label: str | None = None) -> Any:
    """``device`` as a ``torch.device`` (``"cuda"`` with its index filled in), or a one-line
    error starting with ``label`` (default ``device='cuda'``; the CLI says ``--device cuda``)."""
    import torch

    label = label or f"device={device!r}"
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        target = None
    if target is None or target.type not in KINDS:
        raise GraphBudgetError(f"{label}: not a device to measure on; give cpu, cuda or cuda:N")
    if target.type == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise GraphBudgetError(f"{label}: torch.cuda.is_available() is False on this machine")
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if target.index is None else target.index
    if index >= count:
        raise GraphBudgetError(
            f"{label}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
        )
    return torch.device("cuda", index)


def on_device(model: Any, args: tuple, kwargs: dict[str, Any], target: Any) -> tuple:
    """``(model, args, kwargs)`` on ``target``: themselves when every tensor is there already,
    else a deep copy of the model and copies of the input tensors moved there (``.to`` would
    move the caller's module in place)."""
    import torch
    from torch.utils._pytree import tree_map

    tensors = [*model.parameters(), *model.buffers()]
    tensors += [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]
    if all(t.device == target for t in tensors):
        return model, args, kwargs

    def move(value: Any) -> Any:
        return value.to(target) if isinstance(value, torch.Tensor) else value

    try:
        return copy.deepcopy(model).to(target), tree_map(move, args), tree_map(move, kwargs)
    except (RuntimeError, TypeError) as exc:  # out of memory, a model deepcopy cannot copy
        raise GraphBudgetError(
            f"cannot copy the model to {target}: {one_line(exc, 200, typed=True)}"
        ) from exc


def cuda_runs(
    call: Callable[[], Any], runs: int, warmup: int, device: Any
) -> tuple[list[float], int]:
    """``warmup`` untimed calls, then the seconds of each of ``runs`` calls timed by CUDA
    events, and the bytes the timed calls allocated at their peak (see the module's note)."""
    import torch

    with torch.cuda.device(device):
        for _ in range(warmup):
            call()
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        seconds = []
        for _ in range(runs):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3)  # elapsed_time is in milliseconds
        peak = torch.cuda.max_memory_allocated(device) - before
    return seconds, peak


def cuda_memory(target: Any) -> Any:
    """The workspaces of the GPU ``target`` (``engine.allocator.CudaMemory``): its compute
    capability and the cuBLAS workspace settings of this process's environment."""
    import os

    import torch

    from pytest_graphbudget.engine.allocator import CudaMemory

    capability = tuple(torch.cuda.get_device_capability(target))
    env = os.environ
    return CudaMemory.of(
        capability, env.get("CUBLAS_WORKSPACE_CONFIG"), env.get("CUBLASLT_WORKSPACE_SIZE")
    )


def allocator_peak(model: Any, args: tuple, kwargs: dict[str, Any], memory: Any) -> Any:
    """The forward's peak as the CUDA caching allocator counts it (``engine.allocator``),
    from the model's graph traced again on the host: its weights and buffers allocated one by
    one, as ``.to("cuda")`` moves them, then the inputs and the forward."""
    import torch

    from pytest_graphbudget.engine.allocator import cuda_peak, weight_bytes
    from pytest_graphbudget.engine.tiers import trace_and_measure
    from pytest_graphbudget.engine.trace import Example
    from pytest_graphbudget.quiet import held

    weights = weight_bytes(model)
    modes = {module: module.training for module in model.modules()}
    try:
        with held("tracing for the CUDA allocator"), torch.inference_mode(False):
            _, measured, _ = trace_and_measure(model, Example(args, kwargs), None, None)
    finally:
        for module, training in modes.items():
            module.training = training
    return cuda_peak(weights, measured, memory)
