"""Quantized ops: int8 and float8 matrix products, and quantizing and dequantizing tensors.

A quantized matrix product has the multiply-accumulates of the float one it replaces; its
bytes are those of its operands as stored (1 byte an element for int8 and float8), which the
cost pass reads from the tensors themselves. The FLOPs around it are counted per element:

- quantize (``x / scale + zero_point``, rounded and clamped): 2 FLOPs per element;
- dequantize (``(q - zero_point) * scale``): 2 FLOPs per element;
- dynamic quantization (the min and max of the input found first, then quantize): 4;
- a static int8 product's int32 sums requantized to the output's scale and zero point: 2;
- quantization-aware training's fake quantize (a quantize and a dequantize in one kernel) 4,
  and 3 more for the in-range mask its backward reads; fused with its observer (the default
  QAT qconfig), 2 more for the min and max and 10 per channel for the running statistics.

The other ops of a statically quantized model (``quantized::add``, ``hardswish``,
``batch_norm2d``, ``layer_norm``, ...) have the FLOPs of the float op they replace, their bytes
those of their quantized tensors (1 byte an element); ``quantized::cat`` moves data, as ``cat``.
A quantized embedding table (``quantized::embedding_byte``, ``embedding_bag_4bit``, ...) is a
lookup, as the float one: no FLOPs for a plain embedding, the float bag's adds for a bag.
"""

from __future__ import annotations

from math import prod

from pytest_graphbudget.costs import reduction
from pytest_graphbudget.costs.registry import OpCost, Shape, numel, out_numel, register, zero_cost


@register("quantize_per_tensor", "quantize_per_channel", role="pointwise", kind="quantize")
def quantize(x: Shape, *_, out, **__) -> OpCost:
    # x / scale + zero_point per element; the rounding and clamping are conversions.
    return OpCost(other=2 * numel(x))


@register("quantize_per_tensor_dynamic", role="reduction", kind="quantize")
def quantize_dynamic(x: Shape, *_, out, **__) -> OpCost:
    # min and max over x (2 comparisons per element), then quantize (2 per element).
    return OpCost(other=4 * numel(x))


@register("dequantize", role="pointwise", kind="dequantize")
def dequantize(x, *_, out, **__) -> OpCost:
    # (q - zero_point) * scale per element; a list of tensors dequantizes each.
    shapes = x if isinstance(x, (list, tuple)) and not isinstance(x, Shape) else [x]
    return OpCost(other=2 * sum(numel(s) for s in shapes))


# Quantization-aware training (``torch.ao.quantization.prepare_qat``): each fake quantize
# rounds a float tensor to the grid it will have, a quantize and a dequantize in one kernel
# (4 per element), keeping the in-range mask its backward multiplies by (two comparisons and
# their and: 3).
FAKE_QUANT, IN_RANGE = 2 + 2, 3


@register(
    "fake_quantize_per_tensor_affine_cachemask",
    "fake_quantize_per_channel_affine_cachemask",
    "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
    role="pointwise",
    kind="quantize",
)
def fake_quantize(x: Shape, *_, out, **__) -> OpCost:
    return OpCost(other=(FAKE_QUANT + IN_RANGE) * numel(x))


@register("_fused_moving_avg_obs_fq_helper", role="reduction", kind="quantize")
def fused_observe_fake_quantize(x: Shape, on, fq_on, running_min: Shape, *_, out, **__) -> OpCost:
    """The default QAT qconfig's ``FusedMovingAvgObsFakeQuantize``: the observer's min and max
    over the input (2 per element), its running min and max moved (3 each) and the scale and
    zero point made from them (4: a subtract and a divide, a divide and a subtract) per
    channel, then the fake quantize with its mask. Whether the observer and the fake quantize
    are on is data (two flag tensors): both are counted, as in a training step."""
    return OpCost(other=(2 + FAKE_QUANT + IN_RANGE) * numel(x) + 10 * max(numel(running_min), 1))


@register(
    "_fake_quantize_learnable_per_tensor_affine",
    "_fake_quantize_learnable_per_channel_affine",
    role="pointwise",
    kind="quantize",
)
def learnable_fake_quantize(x: Shape, *_, out, **__) -> OpCost:
    # LSQ: a fake quantize by a scale and zero point that train; the mask is not kept.
    return OpCost(other=FAKE_QUANT * numel(x))


@register(
    "_fake_quantize_learnable_per_tensor_affine_backward",
    "_fake_quantize_learnable_per_channel_affine_backward",
    role="reduction",
    kind="quantize",
)
def learnable_fake_quantize_backward(grad: Shape, *_, out, **__) -> OpCost:
    """ATen's kernel, per element on its in-range path: the element quantized again (2), the
    range checked (2), the input's gradient passed or zeroed (1), the scale's
    ``((q - zp) * scale - x) / scale * dy * grad_factor`` (5) and the zero point's (1), then
    the scale's and zero point's gradients summed (2)."""
    return OpCost(other=13 * numel(grad))


@register("quantized.linear_dynamic", "quantized.linear_dynamic_fp16", role="anchor", kind="linear")
def linear_dynamic(x: Shape, packed, *_, out: Shape, **__) -> OpCost:
    # (..., k) @ (k, n): numel(x) * n MACs, as the float linear. Around them: x quantized
    # dynamically (4 FLOPs per input element) and, per output element, the int32 sum rescaled
    # (1 multiply) and the bias added (1).
    return OpCost(macs=numel(x) * out[-1], other=4 * numel(x) + 2 * numel(out))


@register(
    "quantized.linear_relu_dynamic",
    "quantized.linear_relu_dynamic_fp16",
    role="anchor",
    kind="linear",
)
def linear_relu_dynamic(x: Shape, packed, *_, out: Shape, **__) -> OpCost:
    # linear_dynamic, then the fused ReLU: one more FLOP per output element.
    return linear_dynamic(x, packed, out=out) + OpCost(other=numel(out))


@register("_scaled_mm", role="anchor", kind="matmul")
def scaled_mm(
    a: Shape, b: Shape, scale_a=None, scale_b=None, bias=None, *_, out: Shape, **__
) -> OpCost:
    # (m, k) @ (k, n) in float8: m*k*n MACs; each output scaled by scale_a and scale_b
    # (2 multiplies) and the bias added when there is one. Torch 2.4's op also returns the
    # output's amax (scales as keywords): the product is its first result.
    product = out[0] if out and not isinstance(out[0], int) else out
    return OpCost(macs=numel(a) * b[-1], other=numel(product) * (2 + int(bias is not None)))


@register("_int_mm", role="anchor", kind="matmul")
def int_mm(a: Shape, b: Shape, *, out: Shape, **_) -> OpCost:
    # (m, k) int8 @ (k, n) int8 -> int32: m*k*n MACs and nothing else.
    return OpCost(macs=numel(a) * b[-1])


@register("_weight_int8pack_mm", role="anchor", kind="linear")
def weight_int8pack_mm(x: Shape, w: Shape, scales: Shape, *, out: Shape, **_) -> OpCost:
    # x (m, k) @ int8 w (n, k)^T: m*k*n MACs, then each output times its channel's scale.
    return OpCost(macs=numel(x) * w[0], other=numel(out))


@register("_weight_int4pack_mm", "_weight_int4pack_mm_for_cpu", role="anchor", kind="linear")
def weight_int4pack_mm(x: Shape, w, group_size, scales_zeros, *_, out: Shape, **__) -> OpCost:
    # x (m, k) @ packed int4 weight (n outputs): m*k*n MACs; each weight element dequantized
    # on the fly ((q - zero) * scale: 2 FLOPs per weight element read, k*n of them).
    k = x[-1]
    return OpCost(macs=numel(x) * out[-1], other=2 * k * out[-1])


def _unpacked(packed: object) -> tuple:
    """A static quantized op's packed weight and bias (``torch.ao``'s packed params)."""
    weight, bias = packed.unpack()  # type: ignore[attr-defined]
    return tuple(weight.shape), bias is not None


@register("quantized.conv1d", "quantized.conv2d", "quantized.conv3d", role="anchor", kind="conv")
def conv_static(x: Shape, packed, *_, out: Shape, **__) -> OpCost:
    # The float convolution's MACs: weight [C_out, C_in/groups, *kernel], C_in/groups * k per
    # output element. Per output element: the int32 sum requantized (its scale and zero
    # point: 2) and the bias added (1).
    weight, bias = _unpacked(packed)
    return OpCost(macs=numel(out) * prod(weight[1:]), other=numel(out) * (2 + int(bias)))


@register(
    "quantized.conv1d_relu",
    "quantized.conv2d_relu",
    "quantized.conv3d_relu",
    role="anchor",
    kind="conv",
)
def conv_relu_static(x: Shape, packed, *_, out: Shape, **__) -> OpCost:
    # conv_static, then the fused ReLU: one more FLOP per output element.
    return conv_static(x, packed, out=out) + OpCost(other=numel(out))


@register("quantized.linear", role="anchor", kind="linear")
def linear_static(x: Shape, packed, *_, out: Shape, **__) -> OpCost:
    # (..., k) @ (k, n): numel(x) * n MACs; per output element requantized (2) and the bias
    # added (1).
    _, bias = _unpacked(packed)
    return OpCost(macs=numel(x) * out[-1], other=numel(out) * (2 + int(bias)))


@register("quantized.linear_relu", role="anchor", kind="linear")
def linear_relu_static(x: Shape, packed, *_, out: Shape, **__) -> OpCost:
    # linear_static, then the fused ReLU.
    return linear_static(x, packed, out=out) + OpCost(other=numel(out))


@register(
    "quantized.conv_transpose1d",
    "quantized.conv_transpose2d",
    "quantized.conv_transpose3d",
    role="anchor",
    kind="conv",
)
def conv_transpose_static(x: Shape, packed, *_, out: Shape, **__) -> OpCost:
    # The float transposed convolution's MACs: weight [C_in, C_out/groups, *kernel], each input
    # element scattered to C_out/groups * k outputs. Per output element, as conv_static:
    # requantized (2) and the bias added (1).
    weight, bias = _unpacked(packed)
    return OpCost(macs=numel(x) * prod(weight[1:]), other=numel(out) * (2 + int(bias)))


# A static model's pointwise ops: the float op's FLOPs per output element (``elementwise.py``:
# add and mul 1, a fused ReLU 1 more, hardswish 4), on tensors of 1 byte an element.
def _per_element(cost: int):
    def formula(*_, out, **__) -> OpCost:
        return OpCost(other=cost * out_numel(out))

    return formula


for _cost, _names in (
    (1, "add add_out add_scalar mul mul_out mul_scalar"),
    (2, "add_relu add_relu_out add_scalar_relu mul_relu mul_relu_out mul_scalar_relu"),
    (4, "hardswish"),
):
    for _name in _names.split():
        _kind = _name.removesuffix("_out").replace("_scalar", "")
        register(f"quantized.{_name}", kind=_kind)(_per_element(_cost))

zero_cost("quantized.cat", kinds={"quantized.cat": "cat"})  # data movement, as ``cat``


@register("quantized.cat_relu", kind="cat")
def cat_relu(tensors, *_, out, **__) -> OpCost:
    # cat moves data; the fused ReLU is 1 FLOP per output element.
    return OpCost(other=out_numel(out))


@register(
    "quantized.batch_norm",
    "quantized.batch_norm1d",
    "quantized.batch_norm2d",
    "quantized.batch_norm3d",
    kind="bn",
)
def batch_norm_static(x: Shape, weight, bias, *_, out, **__) -> OpCost:
    # An eval batch norm over its running statistics, as the float one (``reduction.py``): 2
    # per element, + 1 with weight, + 1 with bias.
    return reduction.batch_norm_eval(x, weight, bias, out=out)


@register(
    "quantized.batch_norm_relu",
    "quantized.batch_norm1d_relu",
    "quantized.batch_norm2d_relu",
    "quantized.batch_norm3d_relu",
    kind="bn",
)
def batch_norm_relu_static(x: Shape, weight, bias, *_, out, **__) -> OpCost:
    # batch_norm_static, then the fused ReLU.
    return batch_norm_static(x, weight, bias, out=out) + OpCost(other=numel(out))


@register("quantized.layer_norm", role="reduction", kind="layer_norm")
def layer_norm_static(x: Shape, normalized_shape, weight=None, bias=None, *_, out, **__) -> OpCost:
    # The float layer norm's: 5 per element (mean, subtract, square, variance, scale), + 1 with
    # weight, + 1 with bias.
    return reduction.layer_norm(x, normalized_shape, weight, bias, out=out)


# A quantized embedding table's lookup: a ``gather`` of no FLOPs, as the float ``embedding``.
zero_cost(
    "quantized.embedding_byte quantized.embedding_4bit",
    role="gather",
    kinds=dict.fromkeys(("quantized.embedding_byte", "quantized.embedding_4bit"), "embedding"),
)


@register(
    "quantized.embedding_bag_byte",
    "quantized.embedding_bag_4bit",
    role="gather",
    kind="embedding_bag",
)
def embedding_bag(
    table,
    indices: Shape,
    offsets=None,
    scale_grad_by_freq: bool = False,
    mode: int = reduction.EMBEDDING_BAG_SUM,
    pruned_weights: bool = False,
    per_sample_weights=None,
    *_,
    out: Shape,
    **__,
) -> OpCost:
    # The float EmbeddingBag's (``reduction.embedding_bag``): each looked-up row (indices x dim,
    # dim the output's last) added into its bag, + 1 each with per-sample weights, and a mean's
    # divide per output element. The packed table is no shape: its rows' width is the output's.
    width = Shape((0, out[-1]))
    return reduction.embedding_bag(
        width, indices, offsets, scale_grad_by_freq, mode, False, per_sample_weights, out=out
    )
