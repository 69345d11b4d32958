"""Where an eager kernel does what the cost pass's fake or meta kernel does not.

The cost pass runs each op's fake (or meta) kernel and prices what it returns; a few eager
kernels allocate or refuse differently, and the figures must be the eager ones: the dtype
checks meta kernels skip (``check_dtypes``), and ``max_pool1d``, which makes indices on fakes
and none on the CPU (``eager_cpu_max_pool1d``), in the FX cost pass and on the tape alike.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx, nn

from pytest_graphbudget.engine.nodes import NodeCost, _nbytes

ONE_DTYPE = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "convolution"})
"""Ops whose CPU and CUDA kernels refuse tensors of two dtypes, and whose meta kernels do not
check: a float32 Linear fed int64 or float64 inputs raises when run, and priced on meta or
fake tensors it would give figures of a model that cannot run."""


def check_dtypes(func: Any, args: tuple) -> None:
    """Raise, as the model's kernel would, when an op of ``ONE_DTYPE`` mixes dtypes."""
    name = func.__name__.partition(".")[0]
    if name not in ONE_DTYPE or func._overloadname != "default":
        return
    dtypes = [a.dtype for a in args if isinstance(a, torch.Tensor)]
    if len(set(dtypes)) > 1:
        shown = " and ".join(str(d).removeprefix("torch.") for d in dict.fromkeys(dtypes))
        raise RuntimeError(f"{name} got tensors of two dtypes ({shown}), which its kernel refuses")


def eager_cpu_max_pool1d(node: NodeCost, indices: dict[Any, int], x: torch.Tensor) -> None:
    """ATen's ``max_pool1d`` makes indices only for autograd, off the CPU, or on a tensor
    subclass (``max_pool1d_with_indices``, whose indices die with the call): on fake tensors,
    or under a dispatch mode, it always does. Eager on a CPU tensor that needs no gradient it
    runs ``max_pool1d_impl``: the output and, for a strided ``x``, a contiguous copy held
    while it runs. ``indices`` (storage -> bytes) leave ``node.writes`` for ``cuda_workspace``,
    which the CUDA allocator's replay holds while the node runs (``allocator.cuda_peak``)."""
    if x.device.type not in ("cpu", "meta") or (x.requires_grad and torch.is_grad_enabled()):
        return
    for key, size in indices.items():
        node.writes.pop(key, None)
        node.cuda_workspace += size
    if not x.is_contiguous():
        node.workspace = max(node.workspace, _nbytes(x))


def is_max_pool1d(n: fx.Node, gm: fx.GraphModule) -> bool:
    """Whether an FX node is ``F.max_pool1d`` or ``torch.max_pool1d``, or an ``nn.MaxPool1d``
    (whose indices, when it returns them, are its output, not made and let go)."""
    if n.op == "call_module":
        return isinstance(gm.get_submodule(n.target), nn.MaxPool1d)
    return n.op == "call_function" and getattr(n.target, "__name__", "") == "max_pool1d"


def in_max_pool1d(frame: Any) -> bool:
    """Whether the Python code that called a taped op is ``F.max_pool1d``'s (past torch's
    wrappers: Dynamo's ``disable`` around a mode that keeps it)."""
    while frame is not None and frame.f_code.co_filename.endswith(_WRAPPERS):
        frame = frame.f_back
    code = frame.f_code if frame is not None else None
    return code is not None and code.co_name == "_max_pool1d" and "functional" in code.co_filename


_WRAPPERS = ("eval_frame.py", "_python_dispatch.py")
