"""Latency on a calibrated machine: every op of a fused subgraph priced by its kernel kind.

``graph-budget hardware --calibrate`` measures, per kind of kernel, the FLOP/s and bytes/s it
achieves and a fixed cost per launch (``hardware.KernelRate``). Eager PyTorch, which is what a
user times, launches one kernel per op, so a subgraph's estimate is the sum over its ops: each
op its own launch, its own reads and writes, at its kind's rate. The subgraph's kind is its
anchor's. A profile without calibrated kernels keeps the plain roofline (``Hardware.time``).

Kinds: convolutions by shape class (``conv_depthwise``: one input channel per group, and
``conv_depthwise_large`` when its input outgrows a core's L2 cache, ``LARGE_BYTES``, where a
CPU's depthwise kernels run several times slower per element; ``conv_pointwise``: 1x1;
``conv_dense``: the rest), ``matmul`` (linear, mm, bmm),
``attention``, ``batch_norm`` (in eval: per channel, but dearer than a plain pointwise op),
``pointwise``, ``reduction`` (norms, softmax, sums), ``pooling``, ``copy``
(layout changes, gathers) and ``view`` (no data moved: only its launch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LARGE_BYTES = 2**20
"""An input above this (a server core's L2 cache) makes a depthwise convolution ``_large``."""
COMPUTE_KINDS = (
    "conv_depthwise",
    "conv_depthwise_large",
    "conv_pointwise",
    "conv_dense",
    "matmul",
    "attention",
)
"""The kinds whose rate is FLOPs per second; the others' is bytes per second."""
KINDS = (
    *COMPUTE_KINDS,
    "batch_norm",
    "pointwise",
    "reduction",
    "pooling",
    "copy",
    "view",
)
MATMUL_KINDS = {"linear", "matmul", "bmm", "lstm"}
ATTENTION_KINDS = {"attention", "mha", "encoder_layer"}
CATEGORY_KINDS = {"elementwise": "pointwise", "movement": "copy", "view": "view"}


def kernel_kind(
    node: Any, param_shapes: Mapping[str, tuple[int, ...]], sizes: Mapping[str, int] = {}
) -> str:
    """The calibrated kind that prices ``node`` (a ``NodeCost``), from its op kind, category
    and, for a convolution, its weight's shape ``(out, in / groups, *kernel)`` and its input's
    bytes (in ``sizes``, by producer)."""
    if node.kind == "conv":
        weight = next((param_shapes[w] for w in node.weights if w in param_shapes), ())
        if len(weight) >= 3:
            per_group, window = weight[1], weight[2:]
            if per_group == 1 and any(k > 1 for k in window):
                largest = max((sizes.get(p, 0) for p in node.inputs), default=0)
                return "conv_depthwise_large" if largest > LARGE_BYTES else "conv_depthwise"
            if all(k == 1 for k in window):
                return "conv_pointwise"
        return "conv_dense"
    if node.kind.startswith("conv"):  # conv_backward, ...
        return "conv_dense"
    if node.kind in MATMUL_KINDS:
        return "matmul"
    if node.kind in ATTENTION_KINDS:
        return "attention"
    if node.kind == "bn":
        return "batch_norm"
    if "pool" in node.kind:
        return "pooling"
    if node.category in ("anchor", "reduction"):
        return "matmul" if node.category == "anchor" else "reduction"
    return CATEGORY_KINDS.get(node.category, "pointwise")


def node_bytes(node: Any, sizes: Mapping[str, int]) -> int:
    """What one eager launch moves: its inputs (their sizes in ``sizes``), weights, output."""
    read = sum(sizes.get(producer, 0) for producer in dict.fromkeys(node.inputs))
    return read + sum(node.weights.values()) + sum(node.views.values())


def tensor_sizes(measured: Any) -> dict[str, int]:
    """Bytes of every node's output and every graph input, by name."""
    sizes = {name: sum(storages.values()) for name, storages in measured.inputs.items()}
    sizes.update({n.name: sum(n.views.values()) for n in measured.nodes})
    return sizes


def group_seconds(
    members: list, target: Any, dtype: str, sizes: Mapping[str, int], param_shapes: Mapping
) -> float:
    """A subgraph's estimate on calibrated ``target``: the sum of its ops' launches."""
    total = 0.0
    for node in members:
        kind = kernel_kind(node, param_shapes, sizes)
        rate = target.kernel(kind, dtype)
        moved = 0 if kind == "view" else node_bytes(node, sizes)
        if rate is None:  # a kind the calibration left out: the plain roofline
            total += target.time(node.flops, moved, dtype)
        else:
            total += rate.time(node.flops, moved)
    return total


def param_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    """Every parameter's and buffer's shape by qualified name (empty for a non-module)."""
    named = getattr(model, "named_parameters", None)
    if named is None:
        return {}
    shapes = {name: tuple(p.shape) for name, p in named()}
    shapes.update({name: tuple(b.shape) for name, b in model.named_buffers()})
    return shapes
