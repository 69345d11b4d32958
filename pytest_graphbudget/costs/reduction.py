"""Softmax, normalisation, reductions, pooling and resampling."""

from __future__ import annotations

from math import ceil, prod

from pytest_graphbudget.costs.registry import OpCost, Shape, numel, out_numel, register, workspace

SOFTMAX = 5  # max, subtract, exp, sum, divide
NORM_STATS = 5  # mean (sum), subtract, square, variance (sum), scale by 1/std
NORM_EVAL = 2  # subtract the running mean, scale by the running 1/std


@register("_softmax", "softmax", "_safe_softmax", role="reduction", kind="softmax")
@register("_log_softmax", "log_softmax", role="reduction", kind="log_softmax")
def softmax(x: Shape, *_, out, **__) -> OpCost:
    return OpCost(other=SOFTMAX * numel(x))


@register("_masked_softmax", role="reduction", kind="softmax")
def masked_softmax(x: Shape, mask=None, *_, out, **__) -> OpCost:
    return OpCost(other=(SOFTMAX + int(mask is not None)) * numel(x))


def _affine(weight, bias) -> int:
    return int(weight is not None) + int(bias is not None)


@register("native_layer_norm", role="reduction", kind="layer_norm")
def layer_norm(x: Shape, normalized_shape, weight=None, bias=None, *_, out, **__) -> OpCost:
    return OpCost(other=(NORM_STATS + _affine(weight, bias)) * numel(x))


@register("native_group_norm", role="reduction", kind="group_norm")
def group_norm(x: Shape, weight=None, bias=None, *_, out, **__) -> OpCost:
    return OpCost(other=(NORM_STATS + _affine(weight, bias)) * numel(x))


@register("_fused_rms_norm", role="reduction", kind="rms_norm")
def rms_norm(x: Shape, normalized_shape, weight=None, *_, out, **__) -> OpCost:
    return OpCost(other=(3 + int(weight is not None)) * numel(x))  # square, mean, scale (+ weight)


@register("_weight_norm_interface", role="reduction", kind="weight_norm")
def weight_norm(v: Shape, g: Shape, *_, out, **__) -> OpCost:
    # w = g * v / ||v||, the norm over every dim of v but one: a square and an add per
    # element of v, a square root and a divide per norm (one per element of g), then a
    # multiply per element of v (the weight_norm parametrization's one kernel).
    return OpCost(other=3 * numel(v) + 2 * numel(g))


@register("_weight_norm_interface_backward", role="reduction", kind="weight_norm_backward")
def weight_norm_backward(grad_w: Shape, v: Shape, g: Shape, norms: Shape, *_, out, **__) -> OpCost:
    # Per norm, a = sum(grad_w * v): a multiply and an add per element of v. grad_g = a / norm
    # (a divide per norm); grad_v = (g / norm) * (grad_w - v * a / norm^2): per norm g / norm,
    # norm^2 and a / norm^2 (three), per element of v a multiply, a subtract and a multiply.
    return OpCost(other=5 * numel(v) + 4 * numel(g))


# Batch norm with running statistics fuses as a pointwise op; updating them is a reduction.
@register("native_batch_norm", "_native_batch_norm_legit", kind="bn")
def batch_norm(
    x: Shape, weight, bias, running_mean, running_var, training: bool, *_, out, **__
) -> OpCost:
    stats = NORM_STATS if training or running_mean is None else NORM_EVAL
    return OpCost(other=(stats + _affine(weight, bias)) * numel(x))


@register("_native_batch_norm_legit_no_training", "_batch_norm_no_update", kind="bn")
def batch_norm_eval(x: Shape, weight, bias, *_, out, **__) -> OpCost:
    return OpCost(other=(NORM_EVAL + _affine(weight, bias)) * numel(x))


@register(
    "_batch_norm_with_update", "_native_batch_norm_legit_functional", role="reduction", kind="bn"
)
def batch_norm_train(x: Shape, weight, bias, *_, out, **__) -> OpCost:
    return OpCost(other=(NORM_STATS + _affine(weight, bias)) * numel(x))


def _per_input(cost: int):
    def formula(x: Shape, *args, out, **__) -> OpCost:
        # A binary overload (max(a, b)) is pointwise: count its output instead.
        if args and isinstance(args[0], Shape):
            return OpCost(other=out_numel(out))
        return OpCost(other=cost * numel(x))

    return formula


for _name in (
    "sum mean nansum nanmean amax amin max min aminmax argmax argmin prod any all "
    "count_nonzero logsumexp"
).split():
    register(_name, role="reduction")(_per_input(1))
# each element to its bin (MoE routing); bincount's weights are added in, not counted
register("histc", "histogram", "bincount", role="reduction")(_per_input(1))
register("equal", role="reduction")(_per_input(1))  # all(a == b): istft checks its window
# a bool tensor's all() or any() as a check (LLaVA's image tokens against its features)
register("_is_all_true", "_is_any_true", role="reduction")(_per_input(1))
for _name in "var std var_mean std_mean".split():
    register(_name, role="reduction")(_per_input(3))  # subtract the mean, square, sum
for _name in "norm linalg_vector_norm".split():
    register(_name, role="reduction")(_per_input(2))  # square, sum


@register("dist", role="reduction")
def dist(a: Shape, b: Shape, *_, out, **__) -> OpCost:
    # norm(a - b) over their broadcast: a subtract, a square (a power), an add per element.
    rank = max(len(a), len(b))
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in (a, b)]
    return OpCost(other=3 * prod(map(max, *padded)))


@register("trace", role="reduction")
def trace(x: Shape, *_, out, **__) -> OpCost:
    # The diagonal summed, as ATen's loop adds each of its min(rows, cols) elements into 0:
    # 1 per element summed, as sum.
    return OpCost(other=min(x[-2:]))


@register("cumsum", "cumprod", "cummax", "cummin", role="reduction")
def scan(*_, out, **__) -> OpCost:
    # One add (or multiply, or compare) per output element, along the scanned dimension; a
    # cummax's indices are the same scan's.
    return OpCost(other=out_numel(out))


LOG_ADD_EXP = 6
"""ATen's ``_log_add_exp_helper`` per element of ``logcumsumexp``, the running total and the
next element: ``max + log1p(exp(min - max))``: min, max, subtract, exp, log1p, add."""


@register("logcumsumexp", role="reduction")
def logcumsumexp(*_, out, **__) -> OpCost:
    return OpCost(other=LOG_ADD_EXP * out_numel(out))


def _window(kernel_size, dims: int) -> int:
    kernel = list(kernel_size) if isinstance(kernel_size, (list, tuple)) else [kernel_size]
    return prod(kernel * dims if len(kernel) == 1 else kernel)


@register(
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_pool1d_with_indices",
    "max_pool2d_with_indices",
    "max_pool3d_with_indices",
    "fractional_max_pool2d",  # windows at pseudo-random offsets, each kernel_size wide
    "fractional_max_pool3d",
    "mkldnn_max_pool2d",
    "quantized_max_pool2d",
    role="reduction",
    kind="max_pool",
)
def max_pool(x: Shape, kernel_size, *_, out, **__) -> OpCost:
    # One comparison per window element.
    return OpCost(other=_window(kernel_size, len(x) - 2) * out_numel(out))


@register("avg_pool1d", "avg_pool2d", "avg_pool3d", role="reduction", kind="avg_pool")
def avg_pool(x: Shape, kernel_size, *_, out, **__) -> OpCost:
    # Sum the window, then divide.
    return OpCost(other=(_window(kernel_size, len(x) - 2) + 1) * out_numel(out))


@register(
    "_adaptive_avg_pool2d",
    "_adaptive_avg_pool3d",
    "adaptive_avg_pool1d",
    role="reduction",
    kind="avg_pool",
)
def adaptive_avg_pool(x: Shape, *_, out, **__) -> OpCost:
    return OpCost(other=numel(x) + out_numel(out))


@register(
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    role="reduction",
    kind="max_pool",
)
def adaptive_max_pool(x: Shape, *_, out, **__) -> OpCost:
    return OpCost(other=numel(x))


LERP = 3  # sub, mul, add


def _resample(cost: int):
    def formula(*_, out, **__) -> OpCost:
        return OpCost(other=cost * out_numel(out))

    return formula


for _names, _cost in (
    (
        "upsample_nearest1d upsample_nearest2d upsample_nearest3d _upsample_nearest_exact1d "
        "_upsample_nearest_exact2d _upsample_nearest_exact3d",
        0,
    ),
    ("upsample_linear1d", LERP),
    ("upsample_bilinear2d grid_sampler_2d", 3 * LERP),
    ("upsample_trilinear3d grid_sampler_3d", 7 * LERP),
    ("upsample_bicubic2d", 35),
):
    for _name in _names.split():
        _kind = "upsample" if _name in ("upsample_nearest2d", "upsample_bilinear2d") else None
        register(_name, kind=_kind)(_resample(_cost))


def _antialiased(taps: int):
    """``interpolate(..., antialias=True)``: one pass per resized dimension, the width first
    (into an ``H_in x W_out`` buffer), then the height, each output element a weighted sum (a
    multiply and an add a tap) over ``taps`` inputs, times the downscale factor when it
    shrinks (the filter widens to average what it skips): 2 taps for bilinear, 4 for bicubic."""

    def formula(x: Shape, *_, out, **__) -> OpCost:
        (h_in, w_in), (h_out, w_out) = x[-2:], out[-2:]
        planes = numel(x) // max(h_in * w_in, 1)
        width = 2 * ceil(taps * max(w_in / w_out, 1)) * h_in * w_out if w_in != w_out else 0
        height = 2 * ceil(taps * max(h_in / h_out, 1)) * h_out * w_out if h_in != h_out else 0
        return OpCost(other=planes * (width + height))

    return formula


register("_upsample_bilinear2d_aa")(_antialiased(2))
register("_upsample_bicubic2d_aa")(_antialiased(4))


@register("sort", role="reduction")
def sort(x: Shape, dim: int = -1, *_, out, **__) -> OpCost:
    # n log2 n comparisons along the sorted dimension.
    n = x[dim] if x else 1
    return OpCost(other=numel(x) * max(1, (n - 1).bit_length()))


@register("topk", role="reduction")
def topk(x: Shape, k: int, *_, out, **__) -> OpCost:
    # One pass over the input, with a heap of k: log2 k comparisons per element.
    return OpCost(other=numel(x) * max(1, (k - 1).bit_length()))


@register("mode", role="reduction")
def mode(x: Shape, dim: int = -1, *_, out, **__) -> OpCost:
    # ATen sorts each slice, then counts its runs: as ``sort``, and a comparison per element.
    n = x[dim] if x else 1
    return OpCost(other=numel(x) * (max(1, (n - 1).bit_length()) + 1))


@register("isin", role="reduction")
def isin(elements: Shape, test: Shape, *_, out, **__) -> OpCost:
    # ATen compares every pair while the test set is small (under 10 * n^0.145 elements:
    # HF ``generate``'s check for end tokens), else sorts both together and compares
    # neighbours.
    n, m = numel(elements), numel(test)
    if m < 10.0 * n**0.145:
        return OpCost(other=n * m)
    return OpCost(other=(n + m) * (max(1, (n + m - 1).bit_length()) + 1))


@register("multinomial", role="reduction")
def multinomial(probs: Shape, samples: int, replacement: bool = False, *_, out, **__) -> OpCost:
    # Sampling a token: ATen divides each probability by an exponential draw (free, as
    # ``uniform``'s) and takes the largest, ``argmax`` for one sample, ``topk``'s heap for more
    # without replacement; with replacement, each row is summed into its distribution
    # function and normalised (2 per probability), then a binary search per sample.
    n = probs[-1] if probs else 1
    if not replacement or samples == 1:
        return OpCost(other=numel(probs) * (1 + max(1, (samples - 1).bit_length())))
    return OpCost(other=2 * numel(probs) + out_numel(out) * max(1, (n - 1).bit_length()))


@register("renorm", role="reduction")
def renorm(*_, out, **__) -> OpCost:
    # Each slice's norm (a square and an add per element), then the rescale (a multiply).
    return OpCost(other=3 * out_numel(out))


@register("embedding_renorm", role="reduction")
def embedding_renorm(weight: Shape, indices: Shape, *_, out, **__) -> OpCost:
    # ``nn.Embedding(max_norm=...)``: each looked-up row's norm and rescale, as ``renorm``
    # (a row looked up twice is renormed once by ATen; counted per index here).
    return OpCost(other=3 * numel(indices) * weight[-1])


@register("segment_reduce", role="reduction")
def segment_reduce(data: Shape, *_, out, **__) -> OpCost:
    # One add (or multiply, or comparison) per data element, into its segment.
    return OpCost(other=numel(data))


@register("kthvalue", "median", "nanmedian", role="reduction")
def select(x: Shape, *_, out, **__) -> OpCost:
    # A selection (quickselect, as topk's one pass): one comparison per element.
    return OpCost(other=numel(x))


EMBEDDING_BAG_SUM, EMBEDDING_BAG_MEAN, EMBEDDING_BAG_MAX = 0, 1, 2  # ATen's modes


@register("_embedding_bag", "_embedding_bag_forward_only", role="gather", kind="embedding_bag")
def embedding_bag(
    weight: Shape,
    indices: Shape,
    offsets=None,
    scale_grad_by_freq: bool = False,
    mode: int = EMBEDDING_BAG_SUM,
    sparse: bool = False,
    per_sample_weights=None,
    *_,
    out,
    **__,
) -> OpCost:
    # Each looked-up row (indices x dim elements) is added into its bag (sum, mean) or compared
    # with it (max): 1; scaled by its per-sample weight first: 1 more; a mean then divides
    # each bag (bags x dim, the first output) by its size.
    looked_up = numel(indices) * weight[-1]
    per_sample = looked_up if isinstance(per_sample_weights, Shape) else 0
    mean = out_numel(out) if mode == EMBEDDING_BAG_MEAN else 0
    return OpCost(other=looked_up + per_sample + mean)


# Scatter-adds: each source element is added into the row its index names (torch 2.4's
# EmbeddingBag backward is an index_add); alpha != 1 scales each source element first.
@register("index_add", role="reduction", kind="index_add")
def index_add(x: Shape, dim, index: Shape, source: Shape, alpha=1, *_, out, **__) -> OpCost:
    return OpCost(other=(1 + int(alpha != 1)) * numel(source))


@register("scatter_add", role="reduction", kind="scatter_add")
def scatter_add(x: Shape, dim, index: Shape, src: Shape, *_, out, **__) -> OpCost:
    return OpCost(other=numel(index))  # one add per index, from the src element it names


@register("index_reduce", role="reduction", kind="scatter_reduce")
def index_reduce(x: Shape, dim, index: Shape, source: Shape, reduce: str, *_, out, **__) -> OpCost:
    # Each source element into the row its index names (prod, amax, amin, mean: a multiply or
    # comparison or add), then mean divides each output element by its count.
    return OpCost(other=numel(source) + (out_numel(out) if reduce == "mean" else 0))


@register("scatter_reduce", role="reduction", kind="scatter_reduce")
def scatter_reduce(x: Shape, dim, index: Shape, src: Shape, reduce: str, *_, out, **__) -> OpCost:
    # sum, prod, amax, amin: one add, multiply or comparison per index; mean then divides each
    # output element by its count.
    return OpCost(other=numel(index) + (out_numel(out) if reduce == "mean" else 0))


# Writes that add only when asked to: a copy otherwise, at zero FLOPs, so their role stays
# ``view`` (an accumulating call still makes its node elementwise, by its FLOPs). ``scatter``
# with ``reduce`` ('add' or 'multiply', a src tensor or one value): one FLOP per index, as
# ``scatter_add``. ``index_put`` with ``accumulate`` (indexing's backward): one add per
# element of the values (a broadcast value counts its own elements only).
@register("scatter", role="view")
def scatter(x: Shape, dim, index: Shape, src=None, *_, out, reduce=None, **__) -> OpCost:
    return OpCost(other=numel(index) if reduce is not None else 0)


@register("index_put", "_unsafe_index_put", "put", role="view")
def index_put(x: Shape, indices, values: Shape, accumulate=False, *_, out, **__) -> OpCost:
    # put (take's backward): flat indices, the same adds with accumulate.
    return OpCost(other=numel(values) if accumulate else 0)


@register("col2im", role="reduction")
def col2im(
    cols: Shape, output_size, kernel_size, dilation, padding, stride, *_, out, **__
) -> OpCost:
    # nn.Fold: each column element is added into the image where its block and kernel offset
    # put it; those the padding puts outside are dropped. Per spatial dim, the (offset, block)
    # pairs that land inside; cols [N, C * prod(kernel), blocks] holds N*C planes of them.
    # (im2col, nn.Unfold, only copies: movement.py.)
    landed = 1
    for size, k, d, p, s in zip(output_size, kernel_size, dilation, padding, stride, strict=True):
        blocks = (size + 2 * p - d * (k - 1) - 1) // s + 1
        landed *= sum(0 <= j * s + i * d - p < size for i in range(k) for j in range(blocks))
    planes = numel(cols) // (prod(kernel_size) * cols[-1])
    return OpCost(other=planes * landed)


@workspace("logsumexp")
def logsumexp_scratch(x: Shape, *_, out, itemsize: int, **__) -> int:
    """ATen's CPU ``logsumexp``: the maxima (kept as dims) and ``exp(x - max)``, an
    input-sized temporary, beside the result (a 30% under eval of a small model without)."""
    return (numel(x) + numel(out)) * itemsize
