"""Workspaces: the bytes a kernel allocates and frees while it runs, beside its inputs and output.

They count toward the peak (``engine/partition.live_at_peak``) during the op only. Each function
gets the op's arguments as shapes, like its formula, and ``itemsize``; it returns bytes. The
figures are those of float32 convolutions on CPU, read off ``torch.profiler(profile_memory=True)``
(``benchmarks/peak.py --explain``); other dtypes and devices have none here (``docs/metrics.md``).

A CPU convolution takes one of two paths, chosen as ``ConvParams::use_mkldnn`` in ATen chooses:

- oneDNN (``mkldnn_convolution``): it computes in a blocked layout (channels in blocks of 16
  with AVX-512, of 8 below it), so it reorders the input and the weight into that layout,
  writes its result in it and copies that into the plain output;
- the slow path (``thnn_conv2d``): it unfolds the input into columns (im2col), one column per
  output position of C_in x kernel values, and multiplies them by the weight, except for an
  unstrided, unpadded 1x1 kernel, whose input already is its columns.
"""

from __future__ import annotations

from math import ceil, prod

from pytest_graphbudget.costs.registry import Shape, workspace

FIRST_LAYER_CHANNELS = 8
"""oneDNN reads a source with fewer input channels (an image's 3) in its plain layout."""


MODELLED_THREADS = 1
MODELLED_BLOCK = 16
"""The CPU the workspaces describe: one intra-op thread, oneDNN's AVX-512 block of 16 channels.
Fixed, never read from the machine profiling: a budget compares figures recorded on one
machine with figures of another (a laptop, a CI runner), and a peak that followed the thread
count or the vector width would move between them with the model unchanged. It is the setup
``benchmarks/peak.py`` measures against."""


def _cpu() -> tuple[int, int]:
    """The intra-op threads and oneDNN's channel block the workspaces are modelled for."""
    return MODELLED_THREADS, MODELLED_BLOCK


def _onednn(x: Shape, w: Shape, stride, dilation, groups: int, threads: int) -> bool:
    """ATen's choice of oneDNN for a float32 CPU convolution (``use_mkldnn``): the slow path
    is faster for a small input, and for an unstrided 1x1 kernel on one thread and a batch
    under 16."""
    one_by_one = all(k == 1 for k in w[2:])
    plain = all(s == 1 for s in stride) and all(d == 1 for d in dilation)
    if one_by_one and plain and x[0] < 16 and threads == 1:
        return False
    sizes = (*x, 1)[:4]  # a 1-D convolution runs as a 2-D one of height 1
    big_kernel = len(w) > 3 and w[-1] > 3 and w[-2] > 3
    return groups > 1 or big_kernel or x[0] > 1 or prod(sizes) > 20480


def _padded(shape: Shape, block: int, channels: int = 1) -> int:
    """Elements of ``shape`` with its channel dimension rounded up to whole blocks."""
    if not shape[channels]:
        return 0
    return prod(shape) // shape[channels] * ceil(shape[channels] / block) * block


def _columns(x: Shape, w: Shape, out_spatial: tuple, stride, padding, transposed: bool) -> int:
    """Elements of the slow path's im2col buffer: C_in x kernel values per output position."""
    kernel = tuple(w[2:])
    plain = all(s == 1 for s in stride) and not any(padding)
    if transposed or (all(k == 1 for k in kernel) and plain):
        return 0
    return x[0] * x[1] * prod(kernel) * prod(out_spatial)


@workspace("convolution", "_convolution")
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
    **__,
) -> int:
    """oneDNN: the reordered input (none below ``FIRST_LAYER_CHANNELS``), the reordered
    weight (output channels rounded to the block) and the blocked result are live at once,
    then the blocked result and the output; a transposed convolution also holds a copy of its
    input beside them, and ends with a contiguous copy of its output. Slow path: im2col."""
    if itemsize != 4 or len(x) < 3:
        return 0
    threads, block = _cpu()
    if not _onednn(x, w, stride, dilation, groups, threads):
        return _columns(x, w, tuple(out[2:]), stride, padding, transposed) * itemsize
    out_b = _padded(out, block)
    if transposed:
        held = 2 * _padded(x, block) + numel_w(w, block, transposed) + out_b
        return max(held - prod(out), out_b + prod(out)) * itemsize
    x_b = _padded(x, block) if x[1] >= FIRST_LAYER_CHANNELS else 0
    held = x_b + numel_w(w, block, transposed) + out_b
    return max(held - prod(out), out_b) * itemsize


def numel_w(w: Shape, block: int, transposed: bool) -> int:
    """Elements of the reordered weight: its output channels rounded up to the block."""
    return _padded(w, block, 1 if transposed else 0)


@workspace("convolution_backward")
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
    **__,
) -> int:
    """oneDNN: the output's gradient reordered, with the reordered input (for the weight's
    gradient) or the blocked input gradient (for the input's). Slow path: the columns again."""
    if itemsize != 4 or len(x) < 3:
        return 0
    threads, block = _cpu()
    if not _onednn(x, w, stride, dilation, groups, threads):
        return _columns(x, w, tuple(grad_out[2:]), stride, padding, transposed) * itemsize
    return (_padded(grad_out, block) + _padded(x, block)) * itemsize
