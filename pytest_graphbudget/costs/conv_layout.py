"""The geometry every CPU convolution rule shares: the modelled CPU, oneDNN's channel blocks,
the slow path's and the im2col kernels' unfolded columns, the operands reordered for a weight
gradient (``costs/workspace.py`` dispatches; ``costs/conv_half.py`` and ``costs/deconv.py``
hold the rules of other dtypes and of transposed kernels)."""

from __future__ import annotations

from math import ceil, prod

from pytest_graphbudget.costs.registry import Shape

FIRST_LAYER_CHANNELS = 8
"""oneDNN reads a source with fewer input channels (an image's 3) in its plain layout."""


MODELLED_THREADS = 1


MODELLED_BLOCK = 16
"""The CPU the workspaces describe: one intra-op thread, oneDNN's AVX-512 block of 16 channels.
Fixed, never read from the machine profiling: a budget compares figures recorded on one
machine with figures of another (a laptop, a CI runner), and a peak that followed the thread
count or the vector width would move between them with the model unchanged. It is the setup
``benchmarks/peak.py`` measures against."""


def cpu() -> tuple[int, int]:
    """The intra-op threads and oneDNN's channel block the workspaces are modelled for."""
    return MODELLED_THREADS, MODELLED_BLOCK


def padded(shape: Shape, block: int, channels: int = 1) -> int:
    """Elements of ``shape`` with its channel dimension rounded up to whole blocks."""
    if not shape[channels]:
        return 0
    return prod(shape) // shape[channels] * ceil(shape[channels] / block) * block


def unfolded(x: Shape, w: Shape, out_spatial: tuple, stride, padding) -> int:
    """Elements of the slow path's im2col buffer: C_in x kernel values per output position."""
    kernel = tuple(w[2:])
    plain = all(s == 1 for s in stride) and not any(padding)
    if all(k == 1 for k in kernel) and plain:
        return 0
    return x[0] * x[1] * prod(kernel) * prod(out_spatial)


def aligned(w: Shape, groups: int) -> bool:
    """A grouped convolution (not a depthwise one) of a multiple of 4 channels a group each way,
    which oneDNN reorders without padding the channels (RegNet's groups of 8)."""
    per_in, per_out = w[1], w[0] // groups
    return groups > 1 and per_in > 1 and not per_in % 4 and not per_out % 4


def group_unfolded(grad_out: Shape, w: Shape) -> int:
    """Elements of one group of one image unfolded: every output position by the group's
    input channels times the kernel's values. The weight gradient's im2col buffer holds it,
    four copies of the weight and 64 more; the input gradient's, it and 32 more (measured at
    kernels 1x7 to 9x9, strides 1 and 2, 1 to 4 channels a group, any batch; exact). A 3-D
    one unfolds one depth slice of the output at a time."""
    return prod(grad_out[-2:] if len(w) == 5 else grad_out[2:]) * w[1] * prod(w[2:])


HALF_BLOCK_CHANNELS = 4
"""oneDNN's weight-gradient kernel reads a source (the convolution's input; a transposed
convolution's output gradient) of fewer channels than this in its plain layout, and one of
fewer than a block in blocks of half the size (its AVX2 kernel)."""


def reordered_operands(src: Shape, diff_dst: Shape, block: int, half: int | None = None) -> int:
    """Elements of the two operands of oneDNN's weight-gradient kernel, reordered: ``src`` and
    ``diff_dst`` (a convolution's input and output gradient; a transposed convolution's the
    other way round) in blocks of ``block`` channels, or both in half blocks when ``src`` has
    fewer than a block (``HALF_BLOCK_CHANNELS``), or only ``diff_dst`` when it has fewer than
    ``HALF_BLOCK_CHANNELS`` (``half``: bfloat16's kernel takes no half blocks, a block)."""
    channels = src[1]
    if channels < (half or HALF_BLOCK_CHANNELS):
        return padded(diff_dst, block)
    size = block // 2 if channels < block else block
    return padded(src, size) + padded(diff_dst, size)


def numel_w(w: Shape, block: int, transposed: bool) -> int:
    """Elements of the reordered weight: its output channels rounded up to the block."""
    return padded(w, block, 1 if transposed else 0)


def transposed_weight(w: Shape, block_in: int, block_out: int) -> int:
    """Elements of a transposed convolution's weight reordered, its C_in and C_out rounded up
    to the given blocks (1: not padded)."""
    return prod(w[2:]) * ceil(w[0] / block_in) * block_in * ceil(w[1] / block_out) * block_out
