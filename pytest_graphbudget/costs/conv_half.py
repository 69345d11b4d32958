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
        return accumulated + 128 + _rows_1x1(grad_out, x, w, stride, block)
    source = 0
    if x[1] >= block:  # every group's channels
        channels = rounded(x[1])
        source = channels * x[2] * (x[3] + w[3] - 1) * 2
        source += channels * x[3] * 4 if any(s > 1 for s in stride) else 0
    gradient = cout * prod(grad_out[2:]) * 2
    return accumulated + gradient + source + BF16_WEIGHT_GRAD_EXTRA + (4 if w[3] > 3 else 0)


PERMUTED_FROM = 15
"""Output height and width from which oneDNN's bfloat16 1x1 weight gradient reads its plain
blocks with permutes (``uses_permw_transposition``) instead of transposing rows of them."""


def _rows_1x1(grad_out: Shape, x: Shape, w: Shape, stride, block: int) -> int:
    """Bytes of the rows a bfloat16 1x1 weight gradient under ``PERMUTED_FROM`` high or wide
    transposes (ResNet's strided 1x1 at 16x16, MobileNetV3's last stages): one image's output
    positions, rounded to pairs, by a block of channels, for as many blocks of output channels
    as it loads at once and of input channels as it broadcasts (``_blocking``), and 256 bytes;
    strided, the input's rows at those positions copied for the blocks it broadcasts, and 128
    bytes (``rtus``). Exact at 48 to 576 channels, 4x4 to 16x16, strides 1 and 2."""
    if len(w) != 4 or all(d >= PERMUTED_FROM for d in grad_out[2:]):
        return 0
    positions = prod(grad_out[2:])
    broadcast = _blocking(ceil(w[1] / block), 5)
    blocks = _blocking(ceil(w[0] / block), 16) + broadcast
    rows = (positions + positions % 2) * block * blocks * 2 + 256
    reduced = all(i == o * s for i, o, s in zip(x[2:], grad_out[2:], stride, strict=True))
    if any(s > 1 for s in stride) and reduced:
        rows += broadcast * positions * block * 2 + 128
    return rows


def _blocking(blocks: int, least: int) -> int:
    """oneDNN's ``best_divider(blocks, least, blocks, false)``: the smallest divisor of
    ``blocks`` from ``least`` up (all of them under ``least``)."""
    return next(d for d in range(min(least, blocks), blocks + 1) if blocks % d == 0)


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


def bf16_channels_last_scratch(
    grad_out: Shape, x: Shape, w: Shape, groups: int, stride, padding, dilation, block, bias
):
    """Bytes of bfloat16's channels-last weight-gradient buffers beside its blocked result: a
    dense kernel's as in blocks (``bf16_weight_scratch``), but a 1x1 one's: its gradient in
    float32 beside one image each of the input and of the output's gradient, and 384 bytes; a
    depthwise 3x3 one's gradient in float32 and 128 bytes; a depthwise one wider than 3 or
    dilated, the grouped kernel's buffers (``bf16_depthwise_wide``) beside its blocked result
    (``channels_last.DEPTHWISE_ROWS`` rows per channel), before the plain gradient is written."""
    if groups == 1 and all(k == 1 for k in w[2:]):
        return numel(w) * 4 + (prod(x[1:]) + prod(grad_out[1:])) * 2 + 384
    if groups == 1:
        return bf16_weight_scratch(grad_out, x, w, stride, block, False)
    if w[1] == 1 and w[-1] <= 3 and all(d == 1 for d in dilation):
        return ceil(w[0] / block) * block * prod(w[2:]) * 4 + 128
    if w[1] == 1 and w[0] == groups:
        blocked = (w[0] * prod(w[2:]) * channels_last.DEPTHWISE_ROWS - numel(w)) * 2
        return blocked + bf16_depthwise_wide(grad_out, x, w, stride, padding, dilation, block, bias)
    return 0


BF16_BACKWARD_WEIGHTS_EXTRA = 8_576
"""Bytes oneDNN's bfloat16 weight-gradient kernel books beside its buffers, whatever the shapes
(its barriers and the other small entries of its scratchpad)."""


def bf16_depthwise_wide(
    grad_out: Shape, x: Shape, w: Shape, stride, padding, dilation, block: int, bias: bool
) -> int:
    """Bytes of the scratchpad of a channels-last bfloat16 depthwise weight gradient wider than
    3 or dilated (ConvNeXt's 7x7), which oneDNN runs as a grouped convolution of one channel per
    group padded to a block each way (``jit_avx512_core_bf16_conv_bwd_weights``): per channel,
    one image of the input transposed into a block of channels with its rows padded
    (``_transposed_width``), one of the output's gradient with its rows rounded to pairs, the
    gradient (and the bias's) accumulated in float32 blocks; and ``tr_pad`` guard elements. The
    blocked result beside it is ``channels_last._depthwise_rows``'s. Exact to the byte at 7 to
    768 channels, 7x7 to 40x40, kernels 1x7 to 14x14, strides, paddings and dilations."""
    width, guard = _transposed_width(x[3], grad_out[3], padding[1], w[3], stride[1], dilation[1])
    source = block * x[2] * width * 2
    gradient = block * grad_out[2] * (grad_out[3] + grad_out[3] % 2) * 2
    accumulated = (block * block * prod(w[2:]) + (block if bias else 0)) * 4
    return w[0] * (source + gradient + accumulated) + guard * 2 + BF16_BACKWARD_WEIGHTS_EXTRA


def _transposed_width(iw: int, ow: int, left: int, kw: int, stride: int, dilation: int):
    """oneDNN's ``tr_iw`` and ``tr_pad``: the width of a transposed input row, and the padding
    its rows share, read two elements at a time (so up to one more on the right)."""
    right = max(0, (ow - 1) * stride + (kw - 1) * dilation + 1 - (iw + left))
    pad = max(left, right + 1)
    pad += pad % 2
    return (ceil(iw / stride) + pad + 1) // 2 * 2 * stride, pad


def bf16_strided_depthwise(w: Shape, groups: int, stride) -> bool:
    """Whether bfloat16's input gradient takes oneDNN's strided brgemm kernel
    (``brgconv_strided``): a 2-D depthwise convolution, strided, in either layout."""
    depthwise = len(w) == 4 and groups > 1 and w[0] == groups and w[1] == 1
    return depthwise and any(s > 1 for s in stride)


BRGEMM_STRIDED_EXTRA = 24_600
"""Bytes of the strided brgemm kernel's scratchpad beside its two buffers that grow with the
shapes: its batch of addresses and its mask of input blocks, a page each, and the pages its
entries are aligned to."""


def bf16_strided_depthwise_data(grad_out: Shape, x: Shape, w: Shape, stride, padding, dilation):
    """Bytes oneDNN's strided brgemm kernel holds beside the input's gradient it writes
    channels-last: the weight reordered, each channel padded to a block of 16 input by 2 output
    channels (``aCdeB16c2b``), and its scratchpad: the output's gradient with the rows and
    columns the kernel overhangs (``odp * ohp * owp``), a whole number of pages of 2-byte
    elements; a row of the result accumulated in float32 (16 channels by ``iw / stride``); and
    ``BRGEMM_STRIDED_EXTRA``. Exact at 1 to 288 channels, 8 to 256 wide, kernels 3x3 to 9x9,
    strides 2 and 4 (3 where it divides the width); a width the stride does not divide takes
    the kernel's transposing path, whose buffers (12 to 37 KB more at 16 and 32 channels) are
    not modelled."""
    weight = w[0] * 32 * prod(w[2:]) * 2
    spans = [
        _overhung(i, o, p, k, s, d)
        for i, o, p, k, s, d in zip(
            x[2:], grad_out[2:], padding, w[2:], stride, dilation, strict=True
        )
    ]
    pages = ceil(prod(spans) * w[0] / 4096) * 4096 * 2
    row = 16 * ceil(x[3] / stride[1]) * 4
    return weight + pages + row + BRGEMM_STRIDED_EXTRA


def _overhung(i: int, o: int, pad: int, k: int, stride: int, dilation: int) -> int:
    """Output positions of one dimension with those the kernel reaches past either end, in
    strides (oneDNN's ``ohp``, ``owp``: ``oh + t_ovf + b_ovf``)."""
    ext = (k - 1) * dilation + 1
    end = max(0, (o - 1) * stride + ext - (i + pad))
    return o + max(0, ext - 1 - pad) // stride + max(0, ext - 1 - end) // stride


def bf16_strided_depthwise_input(
    grad_out: Shape, x: Shape, w: Shape, stride, padding, dilation, mask
) -> int:
    """Elements (of two bytes) a contiguous strided depthwise bfloat16 convolution's input
    gradient holds beyond the op's gradients: computing, the output's gradient copied
    channels-last beside the kernel's buffers (``bf16_strided_depthwise_data``) and its
    channels-last result; then that result copied plain twice, one copy kept."""
    later = (numel(w) if mask[1] else 0) + (w[0] if mask[2] else 0)
    held = bf16_strided_depthwise_data(grad_out, x, w, stride, padding, dilation)
    computing = numel(grad_out) + ceil(held / 2) - later
    return max(computing, 2 * numel(x) - later, 0)
