"""Convolution workspaces in dtypes other than float32 on the modelled CPU: bfloat16's float32
buffers on oneDNN, and the slow path that float16 and float64 take, one group at a time when
grouped (``costs/workspace.py`` picks the path, ``OTHER_DTYPES``). Measured with
``torch.profiler(profile_memory=True)`` on one thread of an AVX-512 CPU with BF16
instructions, torch 2.14 (``benchmarks/peak_half.py``)."""

from __future__ import annotations

from math import ceil, prod

from pytest_graphbudget.costs import channels_last
from pytest_graphbudget.costs import conv_layout as layout
from pytest_graphbudget.costs.registry import Shape, numel

BF16_ACCUMULATOR_EXTRA = 128
"""Bytes oneDNN allocates beside a bfloat16 1x1 convolution's float32 result of one image."""


def bf16_accumulator(w: Shape, out: Shape, groups: int, block: int) -> int:
    """Bytes of the float32 result of one image a bfloat16 1x1 convolution (2-D or 3-D)
    accumulates into (its output channels rounded up to the block), and 128 more, beside the
    reordered input, weight and result (measured at 7x7 to 64x64, 24 to 2048 channels, any
    batch)."""
    if groups > 1 or any(k != 1 for k in w[2:]):
        return 0
    return layout.padded((1, *out[1:]), block) * 4 + BF16_ACCUMULATOR_EXTRA


BF16_WEIGHT_GRAD_EXTRA = 8_580
"""Bytes oneDNN's bfloat16 weight gradient takes beside its buffers, whatever the shapes (4 more
for a kernel wider than 3)."""


def bf16_weight_scratch(grad_out: Shape, x: Shape, w: Shape, stride, block: int, bias: bool):
    """Bytes of the buffers oneDNN's bfloat16 weight gradient of a 2-D convolution takes beside
    its reordered operands: the gradient (and the bias's) accumulated in float32, and for a
    kernel wider than 1x1 one image of the output's gradient transposed and, from a block of
    input channels up, one image of the input with its rows widened by the kernel (a row of it
    again in float32 when strided); output channels rounded up to the block, input channels
    too from one block up. Measured at 3 to 128 channels, 8x8 to 64x64, kernels 1 to 7,
    strides 1 and 2; a strided 1x1 kernel takes more at some sizes (16 KiB at 64 channels,
    16x16; none at 32x32)."""
    rounded = lambda n: ceil(n / block) * block  # noqa: E731
    cout, cin = rounded(w[0]), rounded(w[1]) if w[1] >= block else w[1]
    accumulated = (cout * cin * prod(w[2:]) + (cout if bias else 0)) * 4
    if all(k == 1 for k in w[2:]):
        return accumulated + 128
    source = 0
    if x[1] >= block:  # every group's channels
        channels = rounded(x[1])
        source = channels * x[2] * (x[3] + w[3] - 1) * 2
        source += channels * x[3] * 4 if any(s > 1 for s in stride) else 0
    gradient = cout * prod(grad_out[2:]) * 2
    return accumulated + gradient + source + BF16_WEIGHT_GRAD_EXTRA + (4 if w[3] > 3 else 0)


def slow_grouped_backward(
    grad_out: Shape, x: Shape, w: Shape, stride, padding, groups: int, mask
) -> int:
    """Elements a grouped convolution's backward holds beside its gradients on the slow path:
    one group at a time, its output gradient's and input's channels copied (``_slice``),
    unfolded, beside the groups' gradients so far; then those concatenated into the gradients.
    It makes no whole copy of an operand dense in no layout (a sum loss's expanded gradient),
    which the cost pass adds (the registry's ``contiguous``): taken off here."""
    x_g, w_g = (x[0], x[1] // groups, *x[2:]), (w[0] // groups, *w[1:])
    sliced = _slice(x, groups) + _slice(grad_out, groups)
    columns = layout.unfolded(x_g, w_g, tuple(grad_out[2:]), stride, padding)
    grads = (numel(x) if mask[0] else 0) + (numel(w) if mask[1] else 0)
    whole = sum(numel(t) for t in (grad_out, x) if not channels_last.dense(t))
    return max(sliced + columns, grads + (w[0] if mask[2] else 0)) - whole


def _slice(t: Shape, groups: int) -> int:
    """Elements of one group's channels of ``t`` made contiguous: none for a contiguous batch
    of one, whose channel slice is contiguous as it is."""
    return 0 if t[0] == 1 and channels_last.contiguous(t) else numel(t) // groups


def slow_grouped(x: Shape, w: Shape, out: Shape, stride, padding, groups: int) -> int:
    """Elements a grouped convolution holds beside its output on the slow path (float16 and
    float64), which runs one group at a time (``_convolution_nogroup``): the group's input
    channels copied (``_slice``) and unfolded beside the outputs of the groups so far; then
    those outputs concatenated into the output."""
    x_g, w_g = (x[0], x[1] // groups, *x[2:]), (w[0] // groups, *w[1:])
    return max(
        _slice(x, groups) + layout.unfolded(x_g, w_g, tuple(out[2:]), stride, padding), prod(out)
    )


def bf16_channels_last_scratch(grad_out: Shape, x: Shape, w: Shape, groups: int, stride, block):
    """Bytes of bfloat16's channels-last weight-gradient buffers beside its blocked result: a
    dense kernel's as in blocks (``bf16_weight_scratch``), but a 1x1 one's: its gradient in
    float32 beside one image each of the input and of the output's gradient, and 384 bytes; a
    depthwise 3x3 one's gradient in float32 and 128 bytes. A depthwise kernel wider than 3
    takes more, not modelled (96 channels at 32x32, 7x7: 11.5 MB beside its rows of kernel
    values)."""
    if groups == 1 and all(k == 1 for k in w[2:]):
        return numel(w) * 4 + (prod(x[1:]) + prod(grad_out[1:])) * 2 + 384
    if groups == 1:
        return bf16_weight_scratch(grad_out, x, w, stride, block, False)
    if w[1] == 1 and w[-1] <= 3:
        return ceil(w[0] / block) * block * prod(w[2:]) * 4 + 128
    return 0
