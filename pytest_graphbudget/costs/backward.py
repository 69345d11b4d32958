"""Backward ops: what the autograd engine runs for a training step (``modes/train.py``).

Linear layers need no entry of their own: their gradients are ``mm`` calls. The contractions
here count as FlopCounterMode counts them (``torch/utils/flop_counter.py``): a convolution's
input and weight gradients are each one convolution of the forward's size, counted only when
``output_mask`` asks for them; attention recomputes its scores and runs four more products.
Pointwise derivatives count the operations of their textbook formula, per element. A
gradient scattered back to where its output came from (a pad, an upsample, a grid sample)
costs an add per source it lands on, and a multiply by that source's weight when it has one.
"""

from __future__ import annotations

from math import ceil, inf, prod

from pytest_graphbudget.costs import channels_last
from pytest_graphbudget.costs.attention import SCALE, flash_blocks
from pytest_graphbudget.costs.reduction import EMBEDDING_BAG_MAX, EMBEDDING_BAG_MEAN, SOFTMAX
from pytest_graphbudget.costs.registry import (
    OpCost,
    Shape,
    numel,
    out_numel,
    register,
    workspace,
    zero_cost,
)


@register("convolution_backward", role="anchor", kind="conv_backward")
def convolution_backward(
    grad_out: Shape,
    x: Shape,
    w: Shape,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed: bool,
    output_padding,
    groups,
    output_mask,
    *_,
    out,
    **__,
) -> OpCost:
    # Each of the input and weight gradients costs the forward's MACs (see ``convolution``);
    # the bias gradient sums the output gradient over batch and space.
    forward = numel(x) * prod(w[1:]) if transposed else numel(grad_out) * prod(w[1:])
    macs = forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))
    return OpCost(macs=macs, other=numel(grad_out) if output_mask[2] else 0)


BACKWARD_PER_ELEMENT = {
    "threshold_backward": 1,  # select the gradient where the input was positive
    "hardtanh_backward": 1,
    "leaky_relu_backward": 1,
    "native_dropout_backward": 2,  # mask, scale
    "sigmoid_backward": 3,  # dy * y * (1 - y)
    "tanh_backward": 3,  # dy * (1 - y * y)
    "hardsigmoid_backward": 2,
    "hardswish_backward": 3,
    "elu_backward": 4,
    "softplus_backward": 4,
    "silu_backward": 8,  # sigmoid (4), then dy * s * (1 + x * (1 - s))
    # sigmoid (4), softplus (3), its tanh t, then dy * (t + x * s * (1 - t * t)): one CPU kernel
    # (priced as what it decomposes into, it held their temporaries: Mish's step read 1.9x)
    "mish_backward": 14,
    "log_sigmoid_backward": 4,  # dy * sigmoid(-x): exp, add, reciprocal, multiply
    "hardshrink_backward": 1,  # select the gradient outside [-lambd, lambd]
    "softshrink_backward": 1,
    "rrelu_with_noise_backward": 1,  # dy * noise in training; leaky_relu's (1) in eval
    "_prelu_kernel_backward": 2,  # dx as leaky_relu's (1); dw = x * dy where x <= 0 (1)
}
"""FLOPs per output element of the pointwise derivatives."""


def _pointwise(cost: int):
    def formula(*_, out, **__) -> OpCost:
        return OpCost(other=cost * out_numel(out))

    return formula


for _name, _cost in BACKWARD_PER_ELEMENT.items():
    register(_name, kind=_name.removesuffix("_backward") + "_bwd")(_pointwise(_cost))


@register("gelu_backward", kind="gelu_bwd")
def gelu_backward(grad: Shape, x: Shape, approximate: str = "none", *_, out, **__) -> OpCost:
    # exact: dy * (Phi(x) + x * phi(x)) = 8 (erf, exp and their scaling); tanh form: 14.
    return OpCost(other=(14 if approximate == "tanh" else 8) * out_numel(out))


@register("glu_backward", kind="glu_bwd")
def glu_backward(grad: Shape, x: Shape, *_, out, **__) -> OpCost:
    # ATen, per output element (half the input): s = sigmoid(b) (4), da = dy * s (1) and
    # db = (1 - s) * s * a * dy (4).
    return OpCost(other=9 * numel(grad))


NORM_BACKWARD = 9
"""Per element: the normalised input (subtract, multiply), dy * x_hat, the two sums, then
dx = w * invstd * (dy - mean(dy) - x_hat * mean(dy * x_hat)) (four); the weight and bias
gradients are the two sums."""


@register(
    "native_batch_norm_backward",
    "native_layer_norm_backward",
    "native_group_norm_backward",
    role="reduction",
    kind="norm_bwd",
)
def norm_backward(grad: Shape, x: Shape, *_, out, **__) -> OpCost:
    return OpCost(other=NORM_BACKWARD * numel(x))


@register("_softmax_backward_data", "_log_softmax_backward_data", role="reduction")
def softmax_backward(grad: Shape, y: Shape, *_, out, **__) -> OpCost:
    # softmax: y * (dy - sum(dy * y)); log-softmax: dy - exp(y) * sum(dy): 4 either way.
    return OpCost(other=4 * numel(y))


@register(
    "max_pool2d_with_indices_backward",
    "max_pool3d_with_indices_backward",
    "adaptive_max_pool2d_backward",  # adaptive_max_pool1d's too: it runs the 2-d kernel
    "adaptive_max_pool3d_backward",
    "fractional_max_pool2d_backward",
    "fractional_max_pool3d_backward",
    role="reduction",
    kind="max_pool_bwd",
)
def max_pool_backward(grad: Shape, *_, out, **__) -> OpCost:
    # Each output gradient is added to the input element that won its window.
    return OpCost(other=numel(grad))


@register("avg_pool2d_backward", "avg_pool3d_backward", role="reduction", kind="avg_pool_bwd")
def avg_pool_backward(grad: Shape, x: Shape, kernel_size, *_, out, **__) -> OpCost:
    # Each output gradient is divided by its window, then added to every element of it.
    kernel = list(kernel_size) if isinstance(kernel_size, (list, tuple)) else [kernel_size]
    window = prod(kernel * (len(x) - 2) if len(kernel) == 1 else kernel)
    return OpCost(other=numel(grad) * (1 + window))


@register(
    "_adaptive_avg_pool2d_backward",
    "_adaptive_avg_pool3d_backward",
    role="reduction",
    kind="avg_pool_bwd",
)
def adaptive_avg_pool_backward(grad: Shape, x: Shape, *_, out, **__) -> OpCost:
    # Every input element receives its window's gradient over the window size.
    return OpCost(other=numel(x))


@register(
    "upsample_nearest1d_backward",
    "upsample_nearest2d_backward",
    "upsample_nearest3d_backward",
    "_upsample_nearest_exact1d_backward",
    "_upsample_nearest_exact2d_backward",
    "_upsample_nearest_exact3d_backward",
    kind="upsample_bwd",
)
def upsample_nearest_backward(grad: Shape, *_, out, **__) -> OpCost:
    # Each output gradient is added into the input element it was copied from.
    return OpCost(other=numel(grad))


# Padding's, as nearest's: each output gradient is added into the input element it was
# copied from (a border's reflections or replicas land on the inputs they repeat).
register(
    *(f"{kind}_pad{d}d_backward" for kind in ("reflection", "replication") for d in (1, 2, 3)),
    kind="pad_bwd",
)(upsample_nearest_backward)


def _weighted(taps: int):
    def formula(grad: Shape, *_, out, **__) -> OpCost:
        # Each output gradient is weighted and added into its sources: 2 per tap.
        return OpCost(other=2 * taps * numel(grad))

    return formula


for _name, _taps in (
    ("upsample_linear1d_backward", 2),
    ("upsample_bilinear2d_backward", 4),
    ("upsample_trilinear3d_backward", 8),
    ("upsample_bicubic2d_backward", 16),
):
    register(_name, kind="upsample_bwd")(_weighted(_taps))


def _antialiased_backward(taps: int):
    """ATen's CPU kernel (``cpu_upsample_genNd_backward_aa``) does not run the forward's two
    passes: each output gradient is added, weighted by ``wx * wy``, into every input of its
    filter's 2-d window, ``ceil(taps * max(in / out, 1))`` inputs a side (2 taps bilinear, 4
    bicubic, widened by the downscale factor as in ``reduction._antialiased``): 2 per tap."""

    def formula(grad: Shape, output_size, input_size, *_, out, **__) -> OpCost:
        (h_in, w_in), (h_out, w_out) = input_size[-2:], grad[-2:]
        window = ceil(taps * max(h_in / h_out, 1)) * ceil(taps * max(w_in / w_out, 1))
        return OpCost(other=2 * window * numel(grad))

    return formula


register("_upsample_bilinear2d_aa_backward", kind="upsample_bwd")(_antialiased_backward(2))
register("_upsample_bicubic2d_aa_backward", kind="upsample_bwd")(_antialiased_backward(4))


@register("grid_sampler_2d_backward", "grid_sampler_3d_backward", kind="grid_sampler_bwd")
def grid_sampler_backward(
    grad: Shape,
    x: Shape,
    grid: Shape,
    mode,
    padding_mode,
    align_corners,
    output_mask,
    *_,
    out,
    **__,
) -> OpCost:
    # Priced as bilinear (trilinear), as the forward, per output element (N, C, *out): the
    # input's gradient, when output_mask asks, 2 per corner (weighted, added); each
    # coordinate's, as ATen's 2-d kernel writes it, gx += ((ne - nw) * s + (se - sw) * n) * dy:
    # per pair of corners along it a difference and a weight, the pairs' sum, * dy and the
    # sum over channels (7 in 2-d, 13 in 3-d); then each grid element scaled once.
    dims = grid[-1]
    pairs = 2 ** (dims - 1)
    scatter = 2 * 2**dims if output_mask[0] else 0
    return OpCost(other=(scatter + dims * (3 * pairs + 1)) * numel(grad) + numel(grid))


def _cdist_element(p: float) -> int:
    """FLOPs per pair and feature of the direct kernel's gradient, p not 2: the difference,
    ATen's ``backward(diff, grad, dist, p)`` and the add into x1's gradient."""
    if p == 0:
        return 0  # the gradient is zero: the kernel only fills it
    if p == 1:
        return 1 + 2 + 1  # grad * sign(diff)
    if p == inf:
        return 1 + 9 + 1  # grad * sign(diff) * (1 - min(1, ceil(|(|diff| - dist)|)))
    # p < 2: sign(diff) * |diff|^(p-1) * grad / dist^(p-1) (7); over 2 without the sign (6)
    return 1 + (7 if p < 2 else 6) + 1


@register("_cdist_backward", role="anchor", kind="cdist_bwd")
def cdist_backward(grad: Shape, x1: Shape, x2: Shape, p: float, *_, out, **__) -> OpCost:
    # The direct kernel's gradient of x1 (autograd calls it again, transposed, for x2's), per
    # pair (grad: batch x P x R) and feature. For p=2 a difference, then grad * diff / dist
    # added in: a divide and a MAC, as the forward's p=2 counts its multiply-add a MAC.
    elements = numel(grad) * x1[-1]
    if p == 2:
        return OpCost(macs=elements, other=2 * elements)
    return OpCost(other=_cdist_element(p) * elements)


@register("embedding_dense_backward", role="reduction", kind="embedding_bwd")
def embedding_backward(grad: Shape, *_, out, **__) -> OpCost:
    # Each looked-up row's gradient is added into the weight's gradient.
    return OpCost(other=numel(grad))


def _embedding_bag_grad(
    grad: Shape, indices: Shape, scale_grad_by_freq, mode: int, per_sample_weights
) -> OpCost:
    # Sum and mean: each looked-up row's weight gradient gets its bag's gradient added
    # (indices x dim), scaled by 1/bag size (mean), its per-sample weight and 1/its frequency
    # (scale_grad_by_freq), 1 each. Max: each bag's gradient goes to the row that won (bags x dim).
    if mode == EMBEDDING_BAG_MAX:
        return OpCost(other=numel(grad))
    scales = (
        int(mode == EMBEDDING_BAG_MEAN)
        + int(isinstance(per_sample_weights, Shape))
        + int(scale_grad_by_freq)
    )
    return OpCost(other=(1 + scales) * numel(indices) * grad[-1])


@register("_embedding_bag_backward", role="reduction", kind="embedding_bag_bwd")
def embedding_bag_backward(
    grad: Shape,
    indices: Shape,
    offsets,
    offset2bag,
    bag_size,
    maximum_indices,
    num_weights,
    scale_grad_by_freq,
    mode,
    sparse,
    per_sample_weights=None,
    *_,
    out,
    **__,
) -> OpCost:
    return _embedding_bag_grad(grad, indices, scale_grad_by_freq, mode, per_sample_weights)


@register("_embedding_bag_dense_backward", role="reduction", kind="embedding_bag_bwd")
def embedding_bag_dense_backward(
    grad: Shape,
    indices: Shape,
    offset2bag,
    bag_size,
    maximum_indices,
    num_weights,
    scale_grad_by_freq,
    mode,
    per_sample_weights=None,
    *_,
    out,
    **__,
) -> OpCost:
    return _embedding_bag_grad(grad, indices, scale_grad_by_freq, mode, per_sample_weights)


@register("_embedding_bag_per_sample_weights_backward", role="anchor", kind="embedding_bag_bwd")
def embedding_bag_per_sample_weights_backward(
    grad: Shape, weight: Shape, indices: Shape, *_, out, **__
) -> OpCost:
    # Each per-sample weight's gradient is the dot product of its row with its bag's gradient.
    return OpCost(macs=numel(indices) * weight[-1])


@register(
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention_backward",
    role="anchor",
    kind="attention_bwd",
)
def sdpa_backward(grad_out: Shape, q: Shape, k: Shape, v: Shape, *_, out, **__) -> OpCost:
    # Recompute the scores (QK^T), then dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q; per
    # score the scale and softmax again, and the softmax's backward (4) and the scale's (1).
    scores = prod(q[:-2]) * q[-2] * k[-2]
    macs = scores * (3 * q[-1] + 2 * v[-1])
    return OpCost(macs=macs, other=scores * (2 * SCALE + SOFTMAX + 4))


LSTM_CELL_BACKWARD = 25
"""FLOPs per hidden unit per step besides the products: the four gate derivatives through
their activations (4 each), the cell gradient carried back (dc * f, plus the tanh'(c) term,
5) and the bias gradient's sum over steps (4)."""


@register("mkldnn_rnn_layer_backward", role="anchor", kind="lstm_bwd")
def mkldnn_rnn_layer_backward(x: Shape, w_ih: Shape, w_hh: Shape, *_, out, **__) -> OpCost:
    # The CPU kernel computes the input, hidden and both weight gradients: twice the
    # forward's products (``mkldnn_rnn_layer``), per step and sample.
    steps = numel(x) // x[-1]
    hidden = w_hh[-1]
    macs = 2 * steps * (numel(w_ih) + numel(w_hh))
    return OpCost(macs=macs, other=steps * hidden * LSTM_CELL_BACKWARD)


@register("logit_backward", kind="logit_bwd")
def logit_backward(grad: Shape, x: Shape, eps=None, *_, out, **__) -> OpCost:
    # dy / (x * (1 - x)): subtract, multiply, divide; with ``eps``, 0 outside [eps, 1 - eps]
    # (two comparisons and a select).
    return OpCost(other=(3 + 3 * int(eps is not None)) * out_numel(out))


@register("_pdist_backward", role="anchor", kind="cdist_bwd")
def pdist_backward(grad: Shape, x: Shape, p: float, *_, out, **__) -> OpCost:
    # ``_cdist_backward``'s count per pair (grad: n(n-1)/2) and feature, and one more: ATen adds
    # each term into the first row's gradient and subtracts it from the second's.
    elements = numel(grad) * x[-1]
    if p == 2:
        return OpCost(macs=elements, other=3 * elements)
    return OpCost(other=(_cdist_element(p) + 1) * elements)


@register("_segment_reduce_backward", role="reduction")
def segment_reduce_backward(grad: Shape, output: Shape, data: Shape, *_, out, **__) -> OpCost:
    # Each data element handed its segment's gradient (sum; a compare or a multiply for the
    # others): 1 per element.
    return OpCost(other=numel(data))


# masked_scatter's gradient: ``masked_select`` of it, padded with zeros to the input's size
# (its peak: ``costs/selections.py``)
zero_cost("masked_scatter_backward", kinds={"masked_scatter_backward": "masked_select"})
# The gradients of views and lookups: a zero tensor with the gradient copied into its slot.
zero_cost(
    "select_backward slice_backward diagonal_backward unfold_backward index_select_backward",
    kinds={"select_backward": "copy", "slice_backward": "copy"},
)


@workspace("_scaled_dot_product_flash_attention_for_cpu_backward")
def flash_cpu_backward_buffer(grad: Shape, q: Shape, k: Shape, *_, out, itemsize: int, **__):
    """Each thread's block of scores and of their gradient and a row sum, and the output's
    gradient copied into the layout the kernel reads (batch, length, heads, dim: a gradient
    coming through ``transpose(1, 2)`` of the heads, as in a transformer, is in it already)."""
    if itemsize != 4 or len(q) != 4:
        return 0
    rows, cols = flash_blocks(q, k)
    strides = channels_last._strides(grad)
    order = (0, 2, 1, 3)  # heads inside the sequence, as the kernel reads it
    swapped = channels_last.Strided([grad[i] for i in order], [strides[i] for i in order])
    copy = 0 if channels_last.contiguous(swapped) else numel(grad)
    return (2 * rows * cols + rows + copy) * itemsize
