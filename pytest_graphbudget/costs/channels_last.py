"""Channels-last CPU convolutions: the memory format ATen reads from strides, and what oneDNN
holds in it.

``_convolution`` picks one memory format for a CPU convolution (``mkldnn_conv_use_channels_last``
and ``thnn_conv_use_channels_last``): channels-last when the input's or the weight's strides
suggest it (``suggest_memory_format``), else contiguous. It makes the input, the weight (and in
the backward the output's gradient) contiguous in that format, so a contiguous model fed a
channels-last image copies every weight while its convolution runs (ResNet-18's 512x512x3x3,
9.4 MB), and a channels-last model fed a contiguous image copies the image. oneDNN then reads
and writes channels-last tensors as they are: no reordered input, no blocked result, only the
weight reordered into its blocks (and a small scratchpad). Read off
``torch.profiler(profile_memory=True)`` for float32 on one thread with AVX-512 (torch 2.14):

- forward: the copies, the weight reordered (``blocked_weight``) and ``SCRATCH`` bytes, less
  for a depthwise or narrow grouped convolution (``scratch``);
- backward: the copies; for the input's gradient the weight reordered again (its input
  channels rounded up to the block) with ``BACKWARD_SCRATCH`` bytes; for the weight's, the
  blocked weight gradient and a copy of the gradient it is written into (a bias's scratch of
  a few hundred bytes is not counted).

A plain ``Shape`` (no strides) reads as contiguous: the figures of a contiguous model are
those of ``costs/workspace.py``'s blocked path.
"""

from __future__ import annotations

from math import ceil, prod

from pytest_graphbudget.costs.registry import Shape

SCRATCH = 8_216
"""Bytes of oneDNN's scratchpad for a channels-last forward (brgemm's), whatever the shapes."""
BACKWARD_SCRATCH = 8_344
"""Bytes of its scratchpad for the input's gradient of an unstrided convolution; a strided one
holds more (a buffer the size of about one image of the gradient), which is not modelled."""


class Strided(Shape):
    """A tensor argument's shape with its strides, for the workspaces of kernels that copy or
    reorder by memory format (``engine/tree.strided_shapes``), and whether it is complex (a
    complex-to-real kernel's temporary)."""

    strides: tuple[int, ...] | None
    complex: bool

    def __new__(cls, sizes, strides=None, complex: bool = False):
        shape = super().__new__(cls, sizes)
        shape.strides = None if strides is None else tuple(strides)
        shape.complex = complex
        return shape


def _strides(shape: Shape) -> tuple[int, ...]:
    """The shape's strides, contiguous ones for a plain ``Shape``."""
    found = getattr(shape, "strides", None)
    if found is not None:
        return found
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _order(shape: Shape) -> tuple[int, ...]:
    """The dimensions of a channels-last tensor from the innermost out: C, then W, H (D), N."""
    return (1, *range(len(shape) - 1, 1, -1), 0)


def suggests_channels_last(shape: Shape) -> bool:
    """ATen's ``suggest_memory_format`` is channels-last (``is_channels_last_strides_2d``/``3d``,
    ambiguous strides falling back to contiguous)."""
    if len(shape) not in (4, 5):
        return False
    strides = _strides(shape)
    if strides[1] == 0:
        return False
    low = 0
    for d in _order(shape):
        if shape[d] == 0 or strides[d] < low:
            return False
        if d == 0 and low == strides[1]:
            return False
        low = strides[d] * (shape[d] if shape[d] > 1 else 1)
    return True


def _dense(shape: Shape, order: tuple[int, ...]) -> bool:
    """Whether ``shape``'s strides are contiguous in the order of ``order`` (size-1 dimensions
    ignored), as ``is_contiguous(memory_format=...)`` reads them."""
    strides, expected = _strides(shape), 1
    for d in order:
        if shape[d] != 1:
            if strides[d] != expected:
                return False
            expected *= shape[d]
    return True


def dense(shape: Shape) -> bool:
    """Whether ``shape``'s elements fill their extent in some order of its dimensions, without
    gaps or broadcast (``is_non_overlapping_and_dense``): transposed yes, expanded no."""
    strides = _strides(shape)
    return _dense(shape, tuple(sorted(range(len(shape)), key=lambda d: strides[d])))


def channels_last(x: Shape, w: Shape) -> bool:
    """``_convolution``'s memory format for a CPU convolution is channels-last."""
    return suggests_channels_last(x) or suggests_channels_last(w)


def copied(shape: Shape) -> int:
    """Elements ``_convolution`` copies to make an operand channels-last (0 when it already is)."""
    return 0 if _dense(shape, _order(shape)) else prod(shape)


def contiguous(shape: Shape) -> bool:
    """Row-major strides (size-1 dimensions ignored), as ``Tensor.is_contiguous()`` reads them."""
    return _dense(shape, tuple(range(len(shape) - 1, -1, -1)))


def copied_dense(shape: Shape) -> int:
    """As ``copied``, for an operand the cost pass copies already when it is dense in no format
    (the registry's ``contiguous``): a contiguous one."""
    return copied(shape) if contiguous(shape) else 0


def copied_channels_last(shape: Shape) -> int:
    """Elements a contiguous convolution copies of an operand that comes channels-last: ATen
    makes it contiguous first. An output gradient in the backward (MLP-Mixer's patch embedding,
    flattened and transposed into tokens); an input, forward and backward, dense channels-last
    to ``is_contiguous`` but not to ``suggest_memory_format``, which reads a size-1 batch's
    stride (an attention's tokens reshaped into an image at batch 1). One dense in no format
    the cost pass copies already (``contiguous``)."""
    if len(shape) not in (4, 5) or contiguous(shape) or copied(shape):
        return 0
    return prod(shape)


def blocked_weight(w: Shape, groups: int, block: int, pad_inputs: bool = False) -> int:
    """Elements of the weight reordered for a channels-last kernel: its output channels rounded
    up to the block (its input channels too with ``pad_inputs``, the input gradient's kernel);
    a depthwise weight by its channels, a grouped one both ways per group."""
    kernel = prod(w[2:])
    rounded = lambda n: ceil(n / block) * block  # noqa: E731
    per_group_out, per_group_in = w[0] // groups, w[1]
    if groups == 1:
        return (w[0] * rounded(w[1]) if pad_inputs else rounded(w[0]) * w[1]) * kernel
    if per_group_out == 1 and per_group_in == 1:
        return rounded(groups) * kernel
    return groups * rounded(per_group_out) * rounded(per_group_in) * kernel


def weight_gradient(w: Shape, groups: int, block: int) -> int:
    """Elements of the blocked weight gradient: as ``blocked_weight``, its input channels
    rounded up too from one block up (24 to 32; 3 or 10 stay)."""
    if groups > 1 or w[1] < block:
        return blocked_weight(w, groups, block)
    return ceil(w[0] / block) * block * ceil(w[1] / block) * block * prod(w[2:])


def scratch(w: Shape, groups: int, block: int) -> bool:
    """Whether oneDNN's kernel takes its scratchpad: not a depthwise one, nor a grouped one of
    at most one block of input channels per group."""
    return groups == 1 or w[1] > block


def forward(x: Shape, w: Shape, groups: int, block: int, itemsize: int, pairs: bool = False):
    """Bytes a channels-last oneDNN convolution holds beside its input and output. ``pairs``:
    bfloat16's kernel reads input channels in pairs (an image's 3 padded to 4)."""
    padded = Shape((w[0], w[1] + 1, *w[2:])) if pairs and groups == 1 and w[1] % 2 else w
    held = (copied_dense(x) + copied(w) + blocked_weight(padded, groups, block)) * itemsize
    return held + (SCRATCH if scratch(w, groups, block) else 0)


DEPTHWISE_ROWS = 256
"""Rows of kernel values per channel in the buffer of a channels-last depthwise weight gradient
whose kernel is wider than 3 or dilated (``_depthwise_rows``)."""


def _depthwise_rows(w: Shape, groups: int, dilation) -> int:
    """Elements of the buffer oneDNN takes for the weight gradient of a channels-last 2-D
    depthwise convolution wider than 3 or dilated (ConvNeXt's 7x7 after its first downsample):
    ``DEPTHWISE_ROWS`` rows of the kernel's values per channel, whatever the batch, image or
    stride (measured at kernels 1x7 to 11x11, 17 to 320 channels; none for 3x3 or 7x1), with
    the bias's gradient beside it and no blocked weight gradient."""
    depthwise = len(w) == 4 and groups > 1 and w[0] == groups and w[1] == 1
    if not depthwise or (w[3] <= 3 and all(d == 1 for d in dilation)):
        return 0
    return groups * prod(w[2:]) * DEPTHWISE_ROWS


def backward(
    grad_out: Shape,
    x: Shape,
    w: Shape,
    groups: int,
    dilation,
    output_mask,
    block: int,
    itemsize: int,
    weight_scratch: int = 0,
) -> int:
    """Bytes a channels-last oneDNN convolution's backward holds beside its operands and
    gradients: the copies, then the larger of the input gradient's reordered weight and
    scratchpad and the weight gradient's blocked result (the bias's gradient beside it), copy
    and buffer. ``weight_scratch``: bytes of the weight gradient's own buffers beside its
    blocked result, before the plain one is written (bfloat16's, ``conv_half``)."""
    copies = (copied_dense(x) + copied(w) + copied_dense(grad_out)) * itemsize
    phases = [0]
    if output_mask[0]:
        data = blocked_weight(w, groups, block, pad_inputs=True) * itemsize
        phases.append(data + (BACKWARD_SCRATCH if scratch(w, groups, block) else 0))
    if output_mask[1]:
        rows = _depthwise_rows(w, groups, dilation)  # its kernel writes the gradient plain
        bias = w[0] if output_mask[2] else 0
        weight = (rows or weight_gradient(w, groups, block)) + bias
        phases.append(max((weight + prod(w)) * itemsize, weight_scratch))
    return copies + max(phases)
