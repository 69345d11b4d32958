"""Workspaces: the bytes a kernel allocates and frees while it runs, beside its inputs and output.

They count toward the peak (``engine/liveness.live_at_peak``) during the op only. Each function
gets the op's arguments as shapes, like its formula, ``itemsize`` and ``dtype_name``; it returns
bytes. The figures are those of CPU convolutions (other kernels' are in ``costs/scratch.py``),
read off ``torch.profiler(profile_memory=True)`` (``benchmarks/peak.py --explain``): float32's
here, other dtypes' extras in ``costs/conv_half.py``; GPU kernels have none (``docs/metrics.md``).

A CPU convolution takes one of two paths, chosen as ``ConvParams::use_mkldnn`` in ATen chooses:

- oneDNN (``mkldnn_convolution``): it computes in a blocked layout (channels in blocks of 16
  with AVX-512, of 8 below it), so it reorders the input and the weight into that layout,
  writes its result in it and copies that into the plain output;
- the slow path (``thnn_conv2d``): it unfolds the input into columns (im2col), one column per
  output position of C_in x kernel values, and multiplies them by the weight, except for an
  unstrided, unpadded 1x1 kernel, whose input already is its columns.

A transposed convolution takes its own kernels on each path (``deconv.forward``,
``deconv.backward``, ``deconv.columns``): oneDNN's deconvolution, which pads no channels where a
strided one runs on brgemm, and reads an output gradient of fewer than 16 channels plain for the
input's gradient (of fewer than 4 for the weight's); ``slow_conv_transpose2d``, whose columns are
C_out x kernel values per input position."""

from __future__ import annotations

from math import ceil, prod

from pytest_graphbudget.costs import channels_last, conv_half, deconv
from pytest_graphbudget.costs import conv_layout as layout
from pytest_graphbudget.costs.registry import Shape, numel, workspace

OTHER_DTYPES = {"bfloat16": "onednn", "float16": "slow", "float64": "slow"}
"""The CPU path of a convolution in a dtype other than float32, on the modelled CPU (AVX-512
with BF16 and without FP16 instructions: ``mkldnn_bf16_device_check`` holds and
``mkldnn_fp16_device_check`` does not): ATen's ``use_mkldnn`` sends bfloat16 to oneDNN
whatever the shapes, float16 and float64 to the slow path."""


def _path(x: Shape, w: Shape, stride, dilation, groups: int, itemsize: int, dtype: str):
    """``"onednn"``, ``"slow"``, or None for a dtype whose kernels are not modelled (a
    caller without ``dtype_name`` at itemsize 4 means float32)."""
    if len(x) < 3:
        return None
    if dtype == "float32" or (not dtype and itemsize == 4):
        onednn = _onednn(x, w, stride, dilation, groups, layout.cpu()[0])
        return "onednn" if onednn else "slow"
    return OTHER_DTYPES.get(dtype)


def _onednn(x: Shape, w: Shape, stride, dilation, groups: int, threads: int) -> bool:
    """ATen's choice of oneDNN for a float32 CPU convolution (``use_mkldnn``): the slow path
    is faster for a small input, and for an unstrided 1x1 kernel on one thread and a batch
    under 16 (a 3-D kernel 1x1 in height and width, whatever its depth: R(2+1)D's 3x1x1)."""
    spatial = w[-2:] if len(w) == 5 else w[2:]
    one_by_one = all(k == 1 for k in spatial)
    plain = all(s == 1 for s in stride) and all(d == 1 for d in dilation)
    if one_by_one and plain and x[0] < 16 and threads == 1:
        return False
    sizes = (*x, 1)[:4]  # a 1-D convolution runs as a 2-D one of height 1
    big_kernel = len(w) > 3 and w[-1] > 3 and w[-2] > 3
    return groups > 1 or big_kernel or x[0] > 1 or prod(sizes) > 20480


@workspace("convolution", "_convolution", contiguous=(0,))
def convolution(
    x: Shape,
    w: Shape,
    bias,
    stride,
    padding,
    dilation,
    transposed: bool = False,
    output_padding=(),
    groups: int = 1,
    *_,
    out: Shape,
    itemsize: int,
    dtype_name: str = "",
    **__,
) -> int:
    """oneDNN: the reordered input (none below ``layout.FIRST_LAYER_CHANNELS``), the reordered
    weight (output channels rounded to the block) and the blocked result are live at once, then the
    blocked result and the output; in bfloat16 a 1x1 kernel's float32 result of one image beside
    them (``conv_half.bf16_accumulator``). Slow path: im2col. Transposed: ``deconv.forward``.
    A contiguous kernel's copy of an input that comes channels-last
    (``copied_channels_last``)."""
    path = _path(x, w, stride, dilation, groups, itemsize, dtype_name)
    if path is None:
        return 0
    _, block = layout.cpu()
    bf16 = dtype_name == "bfloat16"
    nhwc = not transposed and channels_last.channels_last(x, w)
    if path == "slow":
        if transposed:
            return deconv.columns(x, w) * itemsize
        copies = channels_last.copied_dense(x) + channels_last.copied(w) if nhwc else 0
        copies += 0 if nhwc or transposed else channels_last.copied_channels_last(x)
        if groups > 1:
            return (conv_half.slow_grouped(x, w, out, stride, padding, groups) + copies) * itemsize
        return (layout.unfolded(x, w, tuple(out[2:]), stride, padding) + copies) * itemsize
    if transposed:
        return deconv.forward(x, w, bias, stride, out, block, itemsize)
    if nhwc:
        return channels_last.forward(x, w, groups, block, itemsize, pairs=bf16)
    copy = channels_last.copied_channels_last(x)  # dense channels-last by a size-1 dimension
    if len(w) == 5 and groups > 1 and not layout.aligned(w, groups) and groups != w[0]:
        # 3-D groups not of fours (a depthwise multiplier too): one group of one depth slice
        # unfolded, then a plain result copied into the output
        return (max(layout.group_unfolded(out, w) + 32, prod(out)) + copy) * itemsize
    if groups > 1 and w[1] > 1:
        return _grouped_forward(x, w, groups, out, itemsize, bf16) + copy * itemsize
    if len(w) == 5 and groups == x[1] == w[0] > 1:
        return (_depthwise_3d(x, w, out, block) + copy) * itemsize
    out_b = layout.padded(out, block)
    blocked = _blocked_source(x, w, stride, groups, block)
    x_b = layout.padded(x, block) if blocked else 0
    weight = layout.padded(w, block, 0)
    if blocked and groups == 1:  # its input channels rounded up too
        weight = weight // w[1] * ceil(w[1] / block) * block
    elif bf16 and groups == 1:  # pairs of input channels (VNNI)
        weight = weight // w[1] * ceil(w[1] / 2) * 2
    held = x_b + weight + out_b + _unit_stride(x, w, stride, padding, block, itemsize)
    accumulator = conv_half.bf16_accumulator(w, out, groups, block) if bf16 else 0
    return max((held - prod(out)) * itemsize + accumulator, out_b * itemsize) + copy * itemsize


def _blocked_source(x: Shape, w: Shape, stride, groups: int, block: int) -> bool:
    """Whether oneDNN reorders the input into blocks, or reads it plain (a first layer's
    image): from ``layout.FIRST_LAYER_CHANNELS`` on for a 1x1 kernel (a 2-D one strided runs
    unstrided on a subsampled copy, ``_unit_stride``) and a grouped one, from a whole block on for a
    wider kernel or a strided 3-D 1x1 (3x3 kernels of 8 to 15 channels, 2-D and 3-D, read plain)."""
    one_by_one = all(k == 1 for k in w[2:])
    if groups > 1 or (one_by_one and (len(w) < 5 or all(s == 1 for s in stride))):
        return x[1] >= layout.FIRST_LAYER_CHANNELS
    return x[1] >= block


def _depthwise_3d(x: Shape, w: Shape, out: Shape, block: int) -> int:
    """Elements a 3-D depthwise convolution holds beside its output: the input copied and the
    weight reordered (channels rounded up to the block) beside the result, none of them
    padded; then the result, the output and a copy between them (measured at 4 to 32
    channels, kernels 3 and 5, strides 1 and 2)."""
    return max(numel(x) + layout.padded(w, block, 0) + prod(out), 3 * prod(out)) - prod(out)


def _grouped_forward(x: Shape, w: Shape, groups: int, out: Shape, itemsize: int, bf16: bool):
    """Bytes a grouped (not depthwise) convolution holds beside its output. Groups of a
    multiple of 4 channels each way are reordered unpadded (the input, the weight and the
    result, then the result beside the output: RegNet's groups of 8 read 1.12x its eval peak
    padded to 16); others unfold one group of one image (im2col) and 128 bytes more, then copy
    a plain result into the output (groups of 2 and 3 channels had read 24-37% under). In
    bfloat16 the group's result accumulates in float32 beside its columns, and 256 bytes more."""
    if layout.aligned(w, groups):
        return max(numel(x) + numel(w), numel(out)) * itemsize
    columns = layout.group_unfolded(out, w) * itemsize + 128
    if bf16:
        columns += prod(out[2:]) * (w[0] // groups) * 4 + 128
    return max(columns, prod(out) * itemsize)


UNIT_STRIDE_EXTRA = 128
"""Bytes oneDNN allocates beside ``_unit_stride``'s copy, at every size and dtype measured."""


def _unit_stride(x: Shape, w: Shape, stride, padding, block: int, itemsize: int = 4) -> int:
    """Elements of oneDNN's copy of one image subsampled by a strided 2-D 1x1 kernel ("reduce
    to unit stride", per thread): where the stride divides the input, with no padding, it runs
    as an unstrided 1x1 convolution over that copy (ResNet's downsampling shortcuts; without it
    their peak read 0.92 of the measured one). A 3-D one makes no such copy."""
    sizes = x[2:]
    if (
        x[1] < layout.FIRST_LAYER_CHANNELS
        or any(k != 1 for k in w[2:])
        or any(padding)
        or len(w) > 4
    ):
        return 0
    if all(s == 1 for s in stride) or any(d % s for d, s in zip(sizes, stride, strict=True)):
        return 0
    image = (1, x[1], *(d // s for d, s in zip(sizes, stride, strict=True)))
    return layout.padded(image, block) + UNIT_STRIDE_EXTRA // itemsize


@workspace("convolution_backward", contiguous=(0, 1))
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
    groups: int,
    output_mask,
    *_,
    out,
    itemsize: int,
    dtype_name: str = "",
    **__,
) -> int:
    """oneDNN: the larger of the input gradient's phases (``_input_phase``) and the weight
    gradient's (``_weight_phase``). Slow path: the columns again. Transposed:
    ``deconv.backward``. On every path ATen first makes the output's gradient and the input
    contiguous: a copy of one dense in no layout (the sum loss's expanded gradient, a channel
    slice), added by the cost pass, or of a channels-last one (``copied_channels_last``)."""
    path = _path(x, w, stride, dilation, groups, itemsize, dtype_name)
    if path is None:
        return 0
    _, block = layout.cpu()
    if path == "slow":
        if transposed:
            plain = all(k == 1 for k in w[2:]) and all(s == 1 for s in stride)
            # each gradient unfolds one image at a time (the forward, the whole batch)
            columns = deconv.columns(x, w) // max(x[0], 1)
            return 0 if plain and not any(padding) else columns * itemsize
        copies = channels_last.copied_channels_last(grad_out)
        copies += channels_last.copied_channels_last(x)
        if channels_last.channels_last(x, w):  # each gradient's kernel copies its own, in turn
            copies = channels_last.copied_dense(x) + channels_last.copied(w)
            copies += channels_last.copied_dense(grad_out)
        if groups > 1:
            grouped = conv_half.slow_grouped_backward(
                grad_out, x, w, stride, padding, groups, output_mask
            )
            return (grouped + copies) * itemsize
        return (layout.unfolded(x, w, tuple(grad_out[2:]), stride, padding) + copies) * itemsize
    if transposed:
        scratch = 0
        if dtype_name == "bfloat16" and groups == 1 and len(w) == 4 and output_mask[1]:
            # the weight's gradient is a convolution's from the output's gradient to the input
            found = conv_half.bf16_weight_scratch(x, grad_out, w, stride, block, output_mask[2])
            scratch = ceil(found / itemsize)
        return deconv.backward(grad_out, x, w, output_mask, block, scratch) * itemsize
    if channels_last.channels_last(x, w):
        found = 0
        if dtype_name == "bfloat16" and output_mask[1] and len(w) == 4:
            found = conv_half.bf16_channels_last_scratch(
                grad_out, x, w, groups, stride, padding, dilation, block, output_mask[2]
            )
        return channels_last.backward(
            grad_out, x, w, groups, dilation, output_mask, block, itemsize, found
        )
    if layout.aligned(w, groups):  # reordered unpadded
        block = 1
    held = 0
    if output_mask[1] and dtype_name == "bfloat16" and len(w) == 4:
        held = _bf16_weight_phase(grad_out, x, w, groups, stride, dilation, output_mask, block)
    elif output_mask[1]:
        held = _weight_phase(grad_out, x, w, groups, dilation, output_mask, block)
    if output_mask[0]:
        phase = (grad_out, x, w, stride, padding, dilation, groups, output_mask, block)
        held = max(held, _data_phase(*phase, dtype_name))
    copies = channels_last.copied_channels_last(grad_out) + channels_last.copied_channels_last(x)
    return (held + copies) * itemsize


def _data_phase(grad_out, x, w, stride, padding, dilation, groups, mask, block, dtype_name):
    """The input gradient's phase: bfloat16's strided depthwise runs on oneDNN's brgemm
    kernel (``conv_half.bf16_strided_depthwise_input``), every other on ``_input_phase``."""
    if dtype_name == "bfloat16" and conv_half.bf16_strided_depthwise(w, groups, stride):
        return conv_half.bf16_strided_depthwise_input(
            grad_out, x, w, stride, padding, dilation, mask
        )
    return _input_phase(grad_out, x, w, stride, dilation, groups, mask, block)


def _weight_phase(
    grad_out: Shape, x: Shape, w: Shape, groups: int, dilation, mask, block, scratch: int = 0
):
    """Elements oneDNN's weight gradient holds beyond the op's gradients: on its im2col kernel
    (``_im2col``), one group's columns, four copies of the weight and 64 more; else the input and
    the output's gradient reordered (``layout.reordered_operands``) with the gradient computed in
    blocks, then that blocked gradient (and the bias's) while the plain one is written (a 3x3 conv
    of 512 channels at 8x8 holds its 9.4 MB weight's gradient twice). ``scratch``: elements of the
    kernel's own buffers beside the reordered operands (bfloat16's)."""
    if _im2col(w, groups, dilation)[1]:
        return layout.group_unfolded(grad_out, w) + 4 * numel(w) + 64
    aligned = layout.aligned(w, groups)
    half = (
        block if scratch else layout.HALF_BLOCK_CHANNELS
    )  # bfloat16's kernel takes no half blocks
    blocked = numel(w) if aligned else _blocked_gradient(w, groups, block, half)
    bias = w[0] if mask[2] else 0
    reordered = layout.reordered_operands(x, grad_out, block, half) + blocked - numel(w) + scratch
    return max(reordered, blocked + bias)


def _bf16_weight_phase(
    grad_out: Shape, x: Shape, w: Shape, groups: int, stride, dilation, mask, block: int
) -> int:
    """Elements (of two bytes) bfloat16's weight gradient of a 2-D convolution holds beyond the
    op's gradients. Groups of other than a multiple of a block of channels, and a depthwise
    kernel wider than 3 or dilated, take the im2col kernel: one group's columns, four copies of
    the weight in float32 and 384 bytes (and the bias's gradient in float32 with 128 more). A
    depthwise 3x3 one accumulates its gradient (and its bias's) in float32 beside the
    reordered operands, with 128 bytes each; others take ``conv_half.bf16_weight_scratch``'s."""
    per_in, per_out, whole = (
        w[1],
        w[0] // groups,
        layout.cpu()[1],
    )  # ``block`` is 1 for aligned groups
    depthwise = per_in == 1 and groups > 1
    wide = depthwise and (w[-1] > 3 or any(d > 1 for d in dilation))
    if wide or (groups > 1 and not depthwise and (per_in % whole or per_out % whole)):
        bias = w[0] * 4 + 128 if mask[2] else 0
        return layout.group_unfolded(grad_out, w) + (numel(w) * 16 + 384 + bias) // 2
    if depthwise:
        channels = ceil(w[0] / block) * block
        found = (channels * prod(w[2:]) + (channels if mask[2] else 0)) * 4 + 128 * (1 + mask[2])
    else:
        found = conv_half.bf16_weight_scratch(grad_out, x, w, stride, block, mask[2])
    return _weight_phase(grad_out, x, w, groups, dilation, mask, block, ceil(found / 2))


def _blocked_gradient(w: Shape, groups: int, block: int, half: int | None = None) -> int:
    """Elements of oneDNN's blocked weight gradient: output channels rounded up to the block,
    input channels to the blocks their source is reordered in (``layout.reordered_operands``: half a
    block under a block's channels, none under ``layout.HALF_BLOCK_CHANNELS``); grouped, as
    channels-last."""
    if groups > 1:
        return channels_last.weight_gradient(w, groups, block)
    cin = w[1]
    size = 1 if cin < (half or layout.HALF_BLOCK_CHANNELS) else block // 2 if cin < block else block
    return ceil(w[0] / block) * block * ceil(cin / size) * size * prod(w[2:])


def _input_phase(
    grad_out: Shape, x: Shape, w: Shape, stride, dilation, groups: int, mask, block: int
) -> int:
    """Elements oneDNN's input gradient holds beyond the op's gradients made so far (the cost
    pass counts them all from the op's start, the weight's and bias's made after included).
    On its im2col kernel (``_im2col``): a plain result, then one group's columns and 32 more.
    Else in two phases:

    - computing: the output's gradient and the weight reordered (input channels rounded up to
      the block; a grouped weight as it is) and the result in oneDNN's layout, before any
      gradient exists;
    - writing the plain gradient: that result, and for a strided convolution (not a depthwise
      one, nor one of ``layout.aligned`` groups of up to 16 output channels) a second buffer of the
      input's size.

    The result is plain for a strided convolution that has the second buffer, blocked
    (channels rounded up) for another (12, 24 and 40 channels measured). Without the second buffer
    ConvNeXt's step, whose downsampling convolutions are strided 2x2 kernels, read 0.70 of the
    measured peak; with every buffer counted beside every gradient, a frozen convolution's
    read up to 1.23x."""
    later = (numel(w) if mask[1] else 0) + (w[0] if mask[2] else 0)
    unstrided = all(s == 1 for s in stride)
    if len(w) == 5 and groups > 1 and (w[1] == 1 or (unstrided and not layout.aligned(w, groups))):
        # 3-D depthwise, or groups not of fours unstrided: one group of one depth slice
        # unfolded beside a plain result
        return (
            max(numel(x) + layout.group_unfolded(grad_out, w) + 32, 2 * numel(x)) - numel(x) - later
        )
    if _im2col(w, groups, dilation, stride)[0]:
        return max(numel(x), layout.group_unfolded(grad_out, w) + 32) - later
    aligned, depthwise = layout.aligned(w, groups), groups > 1 and w[1] == 1
    wide_groups = not aligned or w[0] // groups > 16  # as ungrouped (ResNeSt's 32 -> 64)
    strided = not depthwise and wide_groups and any(s > 1 for s in stride)
    result = numel(x) if strided else layout.padded(x, block)
    weight = numel(w) if aligned else channels_last.blocked_weight(w, groups, block, True)
    if not (aligned or depthwise):  # input channels rounded up a group, as ungrouped
        weight = channels_last.blocked_weight(w, 1, block, True)
    computing = layout.padded(grad_out, block) + weight + result - numel(x) - later
    writing = result + (numel(x) if strided else 0) - later
    return max(computing, writing, 0)


WIDE_KERNEL = 15
"""Kernel width from which oneDNN computes any convolution's weight gradient on its im2col
kernel (ViT's 16x16 patches; 14x14 ones still reorder)."""


def _im2col(w: Shape, groups: int, dilation, stride=()) -> tuple[bool, bool]:
    """Whether oneDNN computes a 1-D or 2-D convolution's input gradient, and its weight
    gradient, on its im2col kernels instead of reordering into blocks (measured):

    - both, for groups of unequal input and output channels, under 8 input channels or not a
      multiple of 4 (FastViT's 7x7 downsampling, one input channel to two outputs), and for
      groups of as many channels each way, more than one and not a multiple of 4: 2 to 7, and
      from 9 on unstrided (10, 14, 22 measured; strided, they write a plain result);
    - the weight's, for groups whose channels are not a multiple of 8 (ResNeXt's 32x4d: 4), a
      depthwise kernel wider than 3 or dilated (ConvNeXt's 7x7, EfficientNet's 5x5, Mamba's
      1-D 4) and any kernel ``WIDE_KERNEL`` wide or more;
    - for a 3-D convolution, the weight's, for groups of fewer input channels than a block
      (3x3x3 kernels of 4 to 15 channels, groups of 4 and 8, depthwise ones)."""
    if len(w) == 5:  # 3-D: the weight's, for fewer than a block of input channels a group
        return False, w[1] < layout.cpu()[1]
    if len(w) not in (3, 4):
        return False, False
    if groups == 1:
        return False, w[-1] >= WIDE_KERNEL
    per_in, per_out = w[1], w[0] // groups
    small, aligned = per_in < 8, layout.aligned(w, groups)  # ResNeSt's 32 -> 64 reorders
    unstrided = all(s == 1 for s in stride)
    if per_in != per_out:
        data = small or not aligned
    else:
        data = not aligned and per_in > 1 and (small or unstrided)
    wide = per_in == 1 and (w[-1] > 3 or any(d > 1 for d in dilation))
    eights = per_in == 1 or per_in % 8 == 0  # groups of 8, 16, 24 channels reorder
    return data, data or wide or not eights or w[-1] >= WIDE_KERNEL
