"""Latency on a calibrated machine: every op of a fused subgraph priced by its kernel kind.

``graph-budget hardware --calibrate`` measures, per kind of kernel, the FLOP/s and bytes/s it
achieves and a fixed cost per launch (``rates.KernelRate``). Eager PyTorch, which is what a
user times, launches one kernel per op, so a subgraph's estimate is the sum over its ops: each
op its own launch, its own reads and writes, at its kind's rate. The subgraph's kind is its
anchor's. A profile without calibrated kernels keeps the plain roofline (``Hardware.time``).

Kinds: convolutions by shape class (``conv_depthwise``: one input channel per group, and
``conv_depthwise_large`` when its input outgrows a core's L2 cache, ``LARGE_BYTES``, where a
CPU's depthwise kernels run several times slower per element; ``conv_pointwise``: 1x1;
``conv_grouped``: a kernel wider than 1x1 over groups of several channels, ResNeXt's and
RegNet's, which runs slower per FLOP than a dense one, its products being narrow;
``conv_stem``: over an RGB image; ``_small_map``: 1x1 and dense ones on at most ``SMALL_MAP``
output pixels; ``conv_dense``: the rest), ``matmul`` (linear, mm, bmm), ``attention``,
``batch_norm`` (in eval: per channel, but dearer than a plain pointwise op), ``pointwise``,
``pointwise_exp`` (``EXP_KINDS``), ``resample`` (``RESAMPLE_KINDS``), ``reduction`` (norms,
softmax, sums), ``pooling``, ``copy`` (layout changes, gathers), ``select`` (``SELECT_KINDS``:
an output whose size the values decide), ``nms`` (TorchVision's: scalar, branchy IoU
comparisons), ``roi_align`` (``ROI_KINDS``: scalar bilinear samples), ``sort`` (``SORT_KINDS``:
a sort's comparisons), ``topk`` and ``topk_heap`` (a selection and a partial sort, by what
they read: ``TOPK_HEAP``), ``compare`` (``COMPARE_KINDS``: a bool an element) and ``view`` (no
data moved: only its launch). Each split came from ``benchmarks/latency_ops.py`` (every ATen op
of a forward timed beside its price); ``FALLBACK`` prices a split kind an older calibration
lacks.

A GPU profile (``hardware.FAMILIES``) prices each kernel at its efficiency kind's fractions of
the datasheet's peaks plus a launch (``efficiency_kind``, ``kernel_seconds``); a profile with
neither calibration nor family, on the plain roofline plus its own ``launch_us`` where it gives
one. ``execution`` says what a kernel is: each op (``eager``, ``group_seconds``) or each fused
group (``compiled``, ``fused_seconds``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pytest_graphbudget.rates import KERNEL_KINDS, SUMMED_KINDS

LARGE_BYTES = 2**20
"""An input above this (a server core's L2 cache) makes a depthwise convolution ``_large``."""
SMALL_MAP = 64
"""A 1x1 or dense convolution whose output has at most this many pixels a channel (8x8: the
last stage of an ImageNet network, 7x7, and squeeze-excitation's 1x1) is ``_small_map``: with
few pixels to block over, its kernel runs 1.3x to 1.5x slower per FLOP than on 14x14 and up
(``benchmarks/latency_ops.py`` on ResNet-50, RegNet, EfficientNet, GoogLeNet)."""
KINDS = KERNEL_KINDS
"""Every kind (``rates.KERNEL_KINDS``, where a profile's tables are checked against them)."""
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
}
"""A kind a profile calibrated before it existed reads its nearest older kind's rate."""
MATMUL_KINDS = {"linear", "matmul", "bmm", "lstm"}
BLOCK_KINDS = {"mha", "encoder_layer"}
"""Fused attention blocks (``nn.MultiheadAttention``'s and ``nn.TransformerEncoderLayer``'s
inference fast paths): their FLOPs are mostly the projections, which run at a product's rate,
not the scores' (ViT-B/16's blocks came out at 1.15x their time priced as ``attention``,
``benchmarks/latency_ops.py``): ``attention_block``."""
EXP_KINDS = frozenset(
    "exp exp2 expm1 log log2 log10 log1p tanh erf erfc sigmoid silu gelu softplus mish elu celu "
    "selu glu log_sigmoid_forward sin cos".split()
)
"""Pointwise ops that evaluate an exponential, logarithm or erf per element: several times
the CPU time per byte of an add or a relu (EfficientNet's SiLUs came out at 0.3x of their
time priced as plain pointwise ops, ``benchmarks/latency_ops.py``): ``pointwise_exp``."""
RESAMPLE_KINDS = frozenset(
    "upsample upsample_linear1d upsample_bicubic2d _upsample_bilinear2d_aa "
    "_upsample_bicubic2d_aa upsample_trilinear3d grid_sampler_2d grid_sampler_3d".split()
)
"""Interpolating resamples (bilinear and up; nearest copies, FLOPs 0): ``resample``, which
reads four inputs and weighs them per output element (LR-ASPP's bilinear upsampling to
520x520 came out at 0.2x of its time priced as a plain pointwise op)."""
SELECT_KINDS = frozenset({"nonzero", "argwhere", "masked_select"})
"""Ops whose output's size depends on the values, and ``index`` by a boolean mask (which runs a
``nonzero`` first): a count pass, then the copy. Each took 10 to 30 µs on a few thousand
elements where a plain copy of them took 2 to 4, so priced as ``copy`` SSDlite's 91 ``nonzero``
and 180 masked ``index`` calls came out at 0.2x to 0.4x of their time
(``benchmarks/latency_ops.py``): ``select``."""
ROI_KINDS = frozenset(
    f"torchvision.{name}" for name in ("roi_align", "ps_roi_align", "roi_pool", "ps_roi_pool")
)
"""TorchVision's RoI pooling: a scalar loop over bins and samples. Faster R-CNN's 150 RoIs
of 256 channels took 17 ms where a pointwise rate (its FLOPs at the matmul's peak) priced them
at 0.7 (``benchmarks/latency_ops.py``): ``roi_align``."""
SORT_KINDS = frozenset(
    "sort _unique2 _unique unique_dim unique_consecutive unique_dim_consecutive".split()
)
"""A sort (``argsort`` too) and the unique ops, which sort first: time by comparisons, the
registry's ``n log2 n``, about 1.5 ns each on an AMD EPYC core, where a reduction's bytes
rate and a pointwise op's priced SSDlite's at a fiftieth of their time: ``sort``."""
TOPK_HEAP = 64
"""ATen's CPU ``topk`` keeps a heap of k (``std::partial_sort``) when k is at most a
sixty-fourth of its row, ``topk_heap``, else it selects (``std::nth_element``), ``topk``: on
an AMD EPYC core 12 to 15 ns an element selecting, 2.6 to 8 keeping a heap, where a reduction's
bytes rate had priced a router's top 2 of 8 experts at a thirtieth of its time. Either is
priced by what it reads (``kernel_bytes``); ``kthvalue`` and ``median``, which select too, as
``topk``."""
COMPARE_KINDS = frozenset(
    "eq ne lt le gt ge isnan isinf isfinite isposinf isneginf where masked_fill".split()
)
"""Comparisons, which write a bool an element, and ``where`` and ``masked_fill``, which choose
each element by a mask: ATen's CPU kernels take 1 to 2 ns an element over a structured mask,
where an ``add`` takes 0.3, so as ``pointwise`` SSDlite's ``eq`` over its labels and Swin's
and T5's attention masks priced at a fifth of their time (``benchmarks/latency_ops.py``):
``compare``, at a FLOP rate (the registry's one an element, whatever the dtype)."""
STEM_CHANNELS = 4
"""A dense convolution over at most this many input channels (an image's RGB) is
``conv_stem``: its products are too short to fill a vector unit (MobileNet's, EfficientNet's
and RegNet's 3x3 stems came out at 0.55x of their time priced as ``conv_dense``)."""
CATEGORY_KINDS = {"elementwise": "pointwise", "movement": "copy", "view": "view"}


def kernel_kind(
    node: Any,
    param_shapes: Mapping[str, tuple[int, ...]],
    sizes: Mapping[str, int] = {},
    channels: Mapping[str, int] = {},
    masks: Collection[str] = frozenset(),
) -> str:
    """The calibrated kind that prices ``node`` (a ``NodeCost``), from its op kind, category
    and, for a convolution, its weight's shape ``(out, in / groups, *kernel)``, its input's
    bytes (in ``sizes``, by producer) and channels (in ``channels``: dim 1 of its output); for
    an ``index``, whether it reads a boolean mask (``masks``: the names of boolean tensors)."""
    if node.kind == "conv":
        # its weight, or under autocast the cast of it it reads (``weight_casts``)
        found = [param_shapes[w] for w in (*node.weights, *node.inputs) if w in param_shapes]
        weight = max(found, key=len, default=())
        if len(weight) >= 3:
            per_group, window = _per_group(weight, node.shapes), weight[2:]
            if per_group == 1 and any(k > 1 for k in window):
                largest = max((sizes.get(p, 0) for p in node.inputs), default=0)
                return "conv_depthwise_large" if largest > LARGE_BYTES else "conv_depthwise"
            small = bool(node.shapes) and _pixels(node.shapes[0]) <= SMALL_MAP
            if all(k == 1 for k in window):
                return "conv_pointwise_small_map" if small else "conv_pointwise"
            given = channels.get(node.inputs[0], per_group) if node.inputs else per_group
            if given > per_group:
                return "conv_grouped"
            if per_group <= STEM_CHANNELS:
                return "conv_stem"
            return "conv_dense_small_map" if small else "conv_dense"
        return "conv_dense"
    if node.kind.startswith("conv"):  # conv_backward, ...
        return "conv_dense"
    if node.kind in MATMUL_KINDS:
        return "matmul"
    if node.kind == "fft":  # log2 N passes over the signal, no product: not a matmul's rate
        return "reduction"
    if node.kind == "attention":
        return "attention"
    if node.kind in BLOCK_KINDS:
        return "attention_block"
    if node.kind == "bn":
        return "batch_norm"
    if node.kind == "torchvision.nms":
        return "nms"
    if node.kind in ROI_KINDS:
        return "roi_align"
    if node.kind in SORT_KINDS:
        return "sort"
    if node.kind == "topk":
        return _topk_kind(node, sizes)
    if node.kind in ("kthvalue", "median", "nanmedian"):  # a selection, as topk's: 16-21 ns
        return "topk"  # an element on one EPYC, as topk's 13-16
    if node.kind in SELECT_KINDS or (node.kind == "index" and masks.intersection(node.inputs)):
        return "select"
    if node.kind in COMPARE_KINDS:
        return "compare"
    if "pool" in node.kind:
        return "pooling"
    if node.kind in RESAMPLE_KINDS and node.flops > 0:
        return "resample"
    if node.kind in EXP_KINDS:
        return "pointwise_exp"
    if node.category in ("anchor", "reduction"):
        return "matmul" if node.category == "anchor" else "reduction"
    return CATEGORY_KINDS.get(node.category, "pointwise")


def _topk_kind(node: Any, sizes: Mapping[str, int]) -> str:
    """``topk_heap`` when its input holds at least ``TOPK_HEAP`` times the values it keeps
    (k a row: its first output), else ``topk``. The input's own bytes (its views' forms),
    not the lines a strided one touches (``sizes``)."""
    import torch

    kept = 1
    for size in node.shapes[0] if node.shapes else ():
        kept *= size
    itemsize = getattr(torch, node.dtype, torch.float32).itemsize
    extents = (getattr(node, "read_extents", None) or {}).values()
    read = sum(_form_bytes(form) for extent in extents for form in extent.forms)
    if not read:  # no forms (symbolic sizes): what ``sizes`` says it reads
        read = sizes.get(node.inputs[0], 0) if node.inputs else 0
    return "topk_heap" if read >= TOPK_HEAP * kept * itemsize else "topk"


def _form_bytes(form: tuple) -> int:
    """The bytes of the elements a view of ``form`` (``extents.form``) holds."""
    total = 1
    for count, _ in form[1]:
        total *= count
    return total


def _per_group(weight: tuple[int, ...], shapes: list[tuple[int, ...]]) -> int:
    """A convolution's input channels per group: its weight's dim 1, ``(out, in / groups,
    *kernel)``, but a transposed one's weight is ``(in, out / groups, *kernel)``: told apart by
    its batched output, whose channels are not the weight's dim 0 (``ConvTranspose2d(256, 1,
    4)`` had read as depthwise)."""
    out = shapes[0] if shapes else ()
    if len(out) == len(weight) and out[1] != weight[0] and out[1] % weight[1] == 0:
        return weight[0] // (out[1] // weight[1])
    return weight[1]


def _pixels(shape: tuple[int, ...]) -> int:
    """Pixels a channel of an ``(N, C, *spatial)`` output; the whole of a shorter one."""
    pixels = 1
    for size in shape[2:] if len(shape) > 2 else shape:
        pixels *= size
    return pixels


def node_bytes(node: Any, sizes: Mapping[str, int]) -> int:
    """What one eager launch moves: its inputs (their sizes in ``sizes``), weights, output."""
    read = sum(sizes.get(producer, 0) for producer in dict.fromkeys(node.inputs))
    return read + sum(node.weights.values()) + sum(node.views.values())


def kernel_bytes(kind: str, node: Any, sizes: Mapping[str, int]) -> int:
    """The bytes a launch of ``kind`` is priced by: none for a view; what a top-k reads, whose
    time goes with the elements it compares (priced with its k values and indices a row too,
    a router's top 2 of 8 read 1.4x its time where a detector's 300 of 3,234 read 0.9x); for
    the rest ``node_bytes``."""
    if kind == "view":
        return 0
    if kind in ("topk", "topk_heap"):
        return sum(sizes.get(producer, 0) for producer in dict.fromkeys(node.inputs))
    return node_bytes(node, sizes)


def tensor_sizes(measured: Any) -> dict[str, int]:
    """Bytes of every node's output and every graph input, by name: what a kernel reading
    it moves. A broadcast view (an expanded weight, stride 0) moves at most the bytes of its
    storage it covers: ``F.linear`` over a non-contiguous input is a ``bmm`` over the weight
    expanded along the batch, which reads the weight from cache, not once per batch row."""
    sizes = {name: sum(storages.values()) for name, storages in measured.inputs.items()}
    sizes.update({n.name: _read_bytes(n) for n in measured.nodes})
    return sizes


def _read_bytes(node: Any) -> int:
    extents = getattr(node, "view_extents", None) or {}
    total = 0
    for key, size in node.views.items():
        extent = extents.get(key)  # no storage size (symbolic): the view's own bytes
        if extent is None or not extent.nbytes:
            total += size
            continue
        lines = sum(_line_bytes(form) for form in extent.forms)
        total += min(max(min(size, extent.bytes), lines), extent.nbytes)
    return total


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
    """Dim 1 of every node's (first) output by name: a convolution's input channels."""
    return {n.name: n.shapes[0][1] for n in measured.nodes if n.shapes and len(n.shapes[0]) > 1}


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
    kind: str, flops: float, moved: float, target: Any, dtype: str, compiled: bool = False
) -> float:
    """One kernel of ``kind`` on ``target``: at its calibrated rate (a calibration), at its
    family's efficiencies and launch cost (a GPU profile; a ``compiled`` model's fused kernel
    at the family's compiled fractions), else its launch (``launch_us``; none on ``generic``
    and a profile of peaks and bandwidth alone) plus the plain roofline. A view launches no
    kernel on a GPU and costs nothing on the roofline."""
    rate = target.kernel(kind, dtype) or target.kernel(FALLBACK.get(kind, kind), dtype)
    if rate is not None:
        return rate.time(flops, moved, summed=kind in SUMMED_KINDS)
    if kind == "view":
        return 0.0
    peak = tensor_core_dtype(kind, dtype)
    if target.efficiency:
        return target.kind_time(efficiency_kind(kind, flops), flops, moved, peak, compiled)
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
    """A subgraph's eager estimate: the sum of its ops' launches, each its own kernel."""
    total = 0.0
    for node in members:
        kind = kernel_kind(node, param_shapes, sizes, channels, masks)
        total += kernel_seconds(kind, node.flops, kernel_bytes(kind, node, sizes), target, dtype)
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
    a group of views alone."""
    kinds = [kernel_kind(m, param_shapes, sizes, channels, masks) for m in group.members]
    if all(kind == "view" for kind in kinds):
        return 0.0
    anchor = kernel_kind(group.anchor, param_shapes, sizes, channels, masks)
    flops = sum(m.flops for m in group.members)
    return kernel_seconds(
        "pointwise" if anchor == "view" else anchor, flops, traffic, target, dtype, compiled=True
    )


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
