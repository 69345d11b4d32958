"""Latency on a calibrated machine: every op of a fused subgraph priced by its kernel kind.

``graph-budget hardware --calibrate`` measures, per kind of kernel, the FLOP/s and bytes/s it
achieves and a fixed cost per launch (``rates.KernelRate``). Eager PyTorch, which is what a
user times, launches one kernel per op, so a subgraph's estimate is the sum over its ops: each
op its own launch, its own reads and writes, at its kind's rate. The subgraph's kind is its
anchor's. A profile without calibrated kernels keeps the plain roofline (``Hardware.time``).
An op's kind is ``engine.kinds.kernel_kind``'s; ``FALLBACK`` prices a kind an older
calibration lacks.

A GPU profile (``hardware.FAMILIES``) prices each kernel at its efficiency kind's fractions of
the datasheet's peaks plus a launch (``efficiency_kind``, ``kernel_seconds``); a profile with
neither calibration nor family, on the plain roofline plus its own ``launch_us`` where it gives
one. ``execution`` says what a kernel is: each op (``eager``, ``group_seconds``) or each fused
group (``compiled``, ``fused_seconds``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pytest_graphbudget.engine.kinds import FILLS, WRITES_IN_PLACE, kernel_kind
from pytest_graphbudget.rates import SUMMED_KINDS

FALLBACK = {
    "conv_grouped": "conv_dense",
    "conv_dense_small_map": "conv_dense",
    "conv_pointwise_small_map": "conv_pointwise",
    "conv_stem": "conv_dense",
    "pointwise_exp": "pointwise",
    "resample": "pointwise",
    "attention_block": "attention",
    "select": "copy",
    "nms": "pointwise",
    "roi_align": "pointwise",
    "sort": "reduction",
    "topk": "reduction",
    "topk_heap": "reduction",
    "compare": "pointwise",
    "index": "copy",
}
"""A kind a profile calibrated before it existed reads its nearest older kind's rate."""


def node_bytes(node: Any, sizes: Mapping[str, int]) -> int:
    """What one eager launch moves: its inputs (their sizes in ``sizes``), weights, output,
    and what its op wrote that the node did not return: an FX node of ``nn.MaxPool2d`` returns
    the values, and its ``max_pool2d_with_indices`` writes the indices too, as on the tape."""
    written = sum(node.views.values())
    written += sum(size for key, size in node.writes.items() if key not in node.views)
    return reads(node, node.inputs, sizes) + sum(node.weights.values()) + written


def reads(node: Any, producers: Collection[str], sizes: Mapping[str, int]) -> int:
    """The bytes ``node`` reads of what ``producers`` made: each one's size in ``sizes``, but
    of a producer of several tensors (``Sizes.parts``) only those it reads (the conv after a
    max pool reads its values, not the indices the pool keeps for its backward)."""
    parts = getattr(sizes, "parts", {})
    total = 0
    for producer in dict.fromkeys(producers):
        if producer in parts:
            total += sum(size for key, size in parts[producer].items() if key in node.reads)
        else:
            total += sizes.get(producer, 0)
    return total


def kernel_flops(kind: str, node: Any) -> int:
    """The FLOPs a launch of ``kind`` is priced by: an ``index``'s offsets (``NodeCost.lookups``:
    its time goes with them, as a sort's with its comparisons), else the node's FLOPs."""
    return node.lookups if kind == "index" else node.flops


def kernel_bytes(kind: str, node: Any, sizes: Mapping[str, int]) -> int:
    """The bytes a launch of ``kind`` is priced by: none for a view; what a top-k reads, whose
    time goes with the elements it compares (priced with its k values and indices a row too,
    a router's top 2 of 8 read 1.4x its time where a detector's 300 of 3,234 read 0.9x); the
    elements an ``index`` copies, read and written (not the whole tensor it indexes: a top
    450 of 27,000 labels reads 450 of them), and the copy of the tensor it writes into when
    it writes a new one (``torch.index_put``: a clone, then the writes); what a write in place
    writes (not the tensor it writes into: ``y[:, -1:].copy_(x)``), and reads unless it fills;
    ``scatter_``'s and ``put_``'s elements written (``NodeCost.lookup_bytes``), index and
    values; ``x[mask] = v``'s mask and values (the elements it writes, the mask decides); for
    the rest ``node_bytes``."""
    if kind == "view":
        return 0
    if kind == "index":
        cloned = node.kind in WRITES_IN_PLACE and node.category != "view"
        return 2 * node.lookup_bytes + (2 * sum(node.views.values()) if cloned else 0)
    if kind == "copy" and node.category == "view" and node.lookup_bytes:  # scatter_, put_
        return node.lookup_bytes + _reads_besides_destination(node, sizes)
    if kind == "copy" and node.category == "view":  # a write in place (``WRITES_IN_PLACE``)
        written = sum(node.views.values())  # read from its source and written, or a fill's
        return written if node.kind in FILLS else 2 * written
    if kind == "select" and node.category == "view":
        return _reads_besides_destination(node, sizes)
    if kind in ("topk", "topk_heap"):
        return reads(node, node.inputs, sizes)
    return node_bytes(node, sizes)


def _reads_besides_destination(node: Any, sizes: Mapping[str, int]) -> int:
    """What a write in place reads: its inputs but its destination, the first of them unless
    it is a buffer (a weight, not an input)."""
    return reads(node, node.inputs[1:] if not node.weights else node.inputs, sizes)


class Sizes(dict):
    """``tensor_sizes``: bytes by producer's name, with ``parts``: each storage's bytes of a
    producer of several (a max pool's values and indices), which ``reads`` picks from."""

    parts: dict[str, dict[Any, int]]


def tensor_sizes(measured: Any) -> Sizes:
    """Bytes of every node's output and every graph input, by name: what a kernel reading
    it moves. A broadcast view (an expanded weight, stride 0) moves at most the bytes of its
    storage it covers: ``F.linear`` over a non-contiguous input is a ``bmm`` over the weight
    expanded along the batch, which reads the weight from cache, not once per batch row."""
    sizes = Sizes((name, sum(storages.values())) for name, storages in measured.inputs.items())
    sizes.parts = {}
    for node in measured.nodes:
        each = _read_bytes(node)
        sizes[node.name] = sum(each.values())
        if len(each) > 1:
            sizes.parts[node.name] = each
    return sizes


def _read_bytes(node: Any) -> dict[Any, int]:
    """What a kernel reading each storage of ``node``'s output moves, by storage."""
    extents = getattr(node, "view_extents", None) or {}
    found = {}
    for key, size in node.views.items():
        extent = extents.get(key)  # no storage size (symbolic): the view's own bytes
        if extent is None or not extent.nbytes:
            found[key] = size
            continue
        lines = sum(_line_bytes(form) for form in extent.forms)
        found[key] = min(max(min(size, extent.bytes), lines), extent.nbytes)
    return found


LINE = 64
"""A cache line. A kernel reads whole lines, so a view whose neighbouring elements lie a line
or more apart moves a line for each: SSDlite's ``scores[:, label]``, one class's column of 91,
took 35 µs in each ``gt`` over its 3,234 elements on an AMD EPYC, priced at 5 by their 13 KB
(``benchmarks/latency_ops.py``)."""


def _line_bytes(form: tuple) -> int:
    """The bytes of whole lines a view of ``form`` (``extents.form``: in bytes, outermost dim
    first, its innermost a run of bytes) touches: each run of less than ``LINE`` bytes moves a
    line, or the gap to the next run where runs share lines; 0 for a single run."""
    _, dims = form
    run, _ = dims[-1]
    if len(dims) == 1 or run >= LINE:
        return 0
    runs = 1
    for count, _ in dims[:-1]:
        runs *= count
    return runs * min(LINE, min(stride for _, stride in dims[:-1]))


def tensor_masks(measured: Any) -> frozenset[str]:
    """The names of the nodes whose output is boolean, and of the boolean inputs: an
    ``index`` reading one selects."""
    made = {n.name for n in measured.nodes if n.dtype == "bool"}
    return frozenset(made | measured.input_masks)


def tensor_channels(measured: Any) -> dict[str, int]:
    """Dim 1 of every node's (first) output and of every input by name: a convolution's input
    channels (a grouped convolution reading the model's input is no dense one)."""
    made = {n.name: n.shapes[0][1] for n in measured.nodes if n.shapes and len(n.shapes[0]) > 1}
    return {**measured.input_channels, **made}


EXECUTIONS = ("eager", "compiled")
"""How the model runs: ``eager`` launches one kernel per op (what PyTorch does without
``torch.compile``), ``compiled`` one per fused group (what a compiler such as Inductor does)."""
EFFICIENCY_OF = {
    "conv_depthwise": "depthwise",
    "conv_depthwise_large": "depthwise",
    "conv_grouped": "conv_grouped",
    "attention": "attention",
    "batch_norm": "norm",
    "reduction": "norm",
    "sort": "norm",  # a GPU's radix sort streams its keys: a reduction's share, as before
    "topk": "norm",  # and its radix select too
    "topk_heap": "norm",
    "pooling": "pool",
}
"""The GPU efficiency kind (``hardware.EFFICIENCY_KINDS``) of a kernel kind; the other
convolutions are ``conv``, products ``matmul`` (or ``matmul_small``), the rest ``elementwise``."""
SMALL_MATMUL = 2**30
"""A product of fewer FLOPs than this (a gigaFLOP) is ``matmul_small``: too few tiles to fill
a GPU's multiprocessors."""


def efficiency_kind(kind: str, flops: float) -> str:
    """The GPU efficiency kind that prices a kernel of ``kind`` doing ``flops``."""
    if kind in EFFICIENCY_OF:
        return EFFICIENCY_OF[kind]
    if kind.startswith("conv"):
        return "conv"
    if kind in ("matmul", "attention_block"):  # a fused block's FLOPs are its projections'
        return "matmul_small" if flops < SMALL_MATMUL else "matmul"
    return "elementwise"


def kernel_seconds(
    kind: str,
    flops: float,
    moved: float,
    target: Any,
    dtype: str,
    compiled: bool = False,
    channels_last: bool = False,
) -> float:
    """One kernel of ``kind`` on ``target``: at its calibrated rate (a calibration), at its
    family's efficiencies and launch cost (a GPU profile; a ``compiled`` model's fused kernel
    at the family's compiled fractions), else its launch (``launch_us``; none on ``generic``
    and a profile of peaks and bandwidth alone) plus the plain roofline. A view launches no
    kernel on a GPU and costs nothing on the roofline. An eager convolution on a
    ``channels_last`` input takes its family's factor (``Hardware.kind_time``)."""
    rate = target.kernel(kind, dtype) or target.kernel(FALLBACK.get(kind, kind), dtype)
    if rate is not None:
        return rate.time(flops, moved, summed=kind in SUMMED_KINDS)
    if kind == "view":
        return 0.0
    peak = tensor_core_dtype(kind, dtype)
    if target.efficiency:
        kernel = efficiency_kind(kind, flops)
        return target.kind_time(kernel, flops, moved, peak, compiled, channels_last)
    return target.launch_s + target.time(flops, moved, peak)


def tensor_core_dtype(kind: str, dtype: str) -> str:
    """The peak a float32 kernel runs at: ``tf32`` for a convolution while cuDNN may use
    TF32 (``torch.backends.cudnn.allow_tf32``, PyTorch's default) and for a product while
    cuBLAS may (``torch.backends.cuda.matmul.allow_tf32``: off by default, on after
    ``torch.set_float32_matmul_precision("high")``); a profile without a ``tf32`` peak
    prices it at float32's. Depthwise convolutions run off the tensor cores."""
    if dtype != "float32":
        return dtype
    import torch

    if kind.startswith("conv") and "depthwise" not in kind:
        return "tf32" if torch.backends.cudnn.allow_tf32 else dtype
    if kind == "matmul":
        return "tf32" if torch.backends.cuda.matmul.allow_tf32 else dtype
    return dtype


def group_seconds(
    members: list,
    target: Any,
    dtype: str,
    sizes: Mapping[str, int],
    param_shapes: Mapping,
    channels: Mapping[str, int] = {},
    masks: Collection[str] = frozenset(),
) -> float:
    """A subgraph's eager estimate: the sum of its ops' launches, each its own kernel (a roll
    over k dims runs k, one a dim: ``extra_kernels``)."""
    total = 0.0
    for node in members:
        kind = kernel_kind(node, param_shapes, sizes, channels, masks)
        flops, moved = kernel_flops(kind, node), kernel_bytes(kind, node, sizes)
        seconds = kernel_seconds(kind, flops, moved, target, dtype, False, node.channels_last)
        total += (1 + node.extra_kernels) * seconds
    return total


def fused_seconds(
    group: Any,
    traffic: float,
    target: Any,
    dtype: str,
    sizes: Mapping[str, int],
    param_shapes: Mapping,
    channels: Mapping[str, int] = {},
    masks: Collection[str] = frozenset(),
) -> float:
    """A subgraph's compiled estimate: one kernel of its anchor's kind over the group's
    FLOPs and its traffic (inputs from outside, weights, outputs used outside); nothing for
    a group of views alone. A compiler's gather is a load at computed offsets in the kernel
    it generates, not ATen's ``index``: a group it anchors is a copy."""
    kinds = [kernel_kind(m, param_shapes, sizes, channels, masks) for m in group.members]
    if all(kind == "view" for kind in kinds):
        return 0.0
    anchor = kernel_kind(group.anchor, param_shapes, sizes, channels, masks)
    flops = sum(m.flops for m in group.members)
    anchor = {"view": "pointwise", "index": "copy"}.get(anchor, anchor)
    return kernel_seconds(anchor, flops, traffic, target, dtype, compiled=True)


def weight_casts(shapes: Mapping[str, tuple[int, ...]], measured: Any) -> dict:
    """``shapes`` (every parameter's, by name) with the shape of each node that casts one
    parameter, by the node's name: under autocast a convolution reads its weight through such
    a cast, and its kind (depthwise, grouped, 1x1) is read off the weight's shape."""
    found = dict(shapes)
    for n in measured.nodes:
        if n.kind == "copy" and not n.inputs and len(n.weights) == 1:
            (fqn,) = n.weights
            if fqn in shapes:
                found[n.name] = shapes[fqn]
    return found


def param_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    """Every parameter's and buffer's shape by qualified name (empty for a non-module)."""
    named = getattr(model, "named_parameters", None)
    if named is None:
        return {}
    shapes = {name: tuple(p.shape) for name, p in named()}
    shapes.update({name: tuple(b.shape) for name, b in model.named_buffers()})
    return shapes
