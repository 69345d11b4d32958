"""Which calibrated kind of kernel prices an op: ``kernel_kind``, from the op, its category and
the shapes of what it reads (``engine.latency`` prices each kind at its rate).

Kinds: convolutions by shape class (``conv_depthwise``: one input channel per group, and
``conv_depthwise_large`` when its input outgrows a core's L2 cache, ``LARGE_BYTES``, where a
CPU's depthwise kernels run several times slower per element; ``conv_pointwise``: 1x1;
``conv_grouped``: a kernel wider than 1x1 over groups of several channels, ResNeXt's and
RegNet's, which runs slower per FLOP than a dense one, its products being narrow;
``conv_stem``: over an RGB image; ``_small_map``: 1x1 and dense ones on at most ``SMALL_MAP``
output pixels; ``conv_dense``: the rest), ``matmul`` (linear, mm, bmm), ``attention``,
``batch_norm`` (in eval: per channel, but dearer than a plain pointwise op), ``pointwise``,
``pointwise_exp`` (``EXP_KINDS``), ``resample`` (``RESAMPLE_KINDS``), ``reduction`` (norms,
softmax, sums), ``pooling``, ``copy`` (layout changes, row gathers, ``WRITES_IN_PLACE``),
``index`` (``x[idx]`` and ``x[idx] = v`` by integer tensors: an offset an index value,
``engine.lookups``), ``select`` (``SELECT_KINDS``: an output whose size the values decide),
``nms`` (TorchVision's: scalar, branchy IoU comparisons), ``roi_align`` (``ROI_KINDS``:
scalar bilinear samples), ``sort`` (``SORT_KINDS``: a sort's comparisons), ``topk`` and
``topk_heap`` (a selection and a partial sort, by what they read: ``TOPK_HEAP``), ``compare``
(``COMPARE_KINDS``: a bool an element) and ``view`` (no data moved: only its launch). Each
split came from ``benchmarks/latency_ops.py`` (every ATen op of a forward timed beside its
price).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pytest_graphbudget.rates import KERNEL_KINDS

LARGE_BYTES = 2**20
"""An input above this (a server core's L2 cache) makes a depthwise convolution ``_large``."""
SMALL_MAP = 64
"""A 1x1 or dense convolution whose output has at most this many pixels a channel (8x8: the
last stage of an ImageNet network, 7x7, and squeeze-excitation's 1x1) is ``_small_map``: with
few pixels to block over, its kernel runs 1.3x to 1.5x slower per FLOP than on 14x14 and up
(``benchmarks/latency_ops.py`` on ResNet-50, RegNet, EfficientNet, GoogLeNet)."""
KINDS = KERNEL_KINDS
"""Every kind (``rates.KERNEL_KINDS``, where a profile's tables are checked against them)."""
MATMUL_KINDS = {"linear", "matmul", "bmm", "lstm"}
BLOCK_KINDS = {"mha", "encoder_layer"}
"""Fused attention blocks (``nn.MultiheadAttention``'s and ``nn.TransformerEncoderLayer``'s
inference fast paths): their FLOPs are mostly the projections, which run at a product's rate,
not the scores' (ViT-B/16's blocks came out at 1.15x their time priced as ``attention``,
``benchmarks/latency_ops.py``): ``attention_block``."""
EXP_KINDS = frozenset(
    "exp exp2 expm1 log log2 log10 log1p tanh erf erfc sigmoid silu gelu softplus mish elu celu "
    "selu glu log_sigmoid_forward sin cos logit logaddexp logaddexp2 sinc polar lgamma digamma "
    "polygamma mvlgamma i0 special_entr special_xlog1py special_erfcx special_log_ndtr "
    "special_ndtri special_i0e special_i1 special_i1e".split()
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
"""Ops whose output's size depends on the values, and ``index`` and ``index_put`` by a boolean
mask (which run a ``nonzero`` first): a count pass, then the copy. Each took 10 to 30 µs on a
few thousand elements where a plain copy of them took 2 to 4, so priced as ``copy`` SSDlite's
91 ``nonzero`` and 180 masked ``index`` calls came out at 0.2x to 0.4x of their time
(``benchmarks/latency_ops.py``): ``select``."""
ROI_KINDS = frozenset(
    f"torchvision.{name}"
    for op in ("roi_align", "ps_roi_align", "roi_pool", "ps_roi_pool")
    for name in (op, f"_{op}_backward")
)
"""TorchVision's RoI pooling: a scalar loop over bins and samples. Faster R-CNN's 150 RoIs
of 256 channels took 17 ms where a pointwise rate (its FLOPs at the matmul's peak) priced them
at 0.7 (``benchmarks/latency_ops.py``): ``roi_align``. Their backwards loop alike, adding
into the input's gradient."""
SORT_KINDS = frozenset(
    "sort _unique2 _unique unique_dim unique_consecutive unique_dim_consecutive mode".split()
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
ALLOCATIONS = frozenset(
    "empty empty_like empty_strided empty_permuted new_empty new_empty_strided".split()
)
"""Ops that allocate and write nothing: no kernel on a GPU, a view's cost on a CPU. A BatchNorm
in eval on the tape (``_batch_norm_impl_index``'s empty reserve) had launched a kernel of its
own, 10 us on every GPU profile: resnet18 on ``rtx4090`` read 24% slower taped than traced."""
FILLS = frozenset(
    "zero fill uniform normal bernoulli random exponential geometric cauchy log_normal".split()
)
"""In-place writes that read nothing: ``engine.latency`` prices them by the bytes they write."""
WRITES_IN_PLACE = FILLS | frozenset(
    "copy index_fill index_copy index_put _unsafe_index_put masked_scatter scatter put".split()
)
"""Ops of the registry's ``view`` role that write: into a storage they did not make, they
leave their node a ``view`` (no new storage), yet they move its bytes. ``y.copy_(x)``,
``zero_`` and an ``index_put_`` by a mask the kinds do not see price as ``copy`` (by integer
indices as ``index``, by a boolean mask as ``select``), where they had cost only a launch:
Faster R-CNN's RoI features put back in place, 0.7 ms each on an AMD EPYC, had priced at
5 µs."""


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
    an ``index`` or ``index_put``, whether it reads a boolean mask (``masks``: the names of
    boolean tensors) or integer indices (``NodeCost.lookups``)."""
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
    if node.lookups:  # by integer tensors (``engine.lookups``), whatever the dtype indexed
        return "index"
    masked = node.kind in ("index", "index_put") and masks.intersection(node.inputs)
    if node.kind in SELECT_KINDS or masked:  # a nonzero first, then the copy
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
    if node.category == "view" and node.kind in WRITES_IN_PLACE:
        return "copy"
    if node.kind in ALLOCATIONS:
        return "view"
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
