"""Workspaces of ATen's CPU resizes (``F.interpolate``, ``nn.Upsample``): what
``aten/src/ATen/native/cpu/UpSampleKernel.cpp`` allocates beside the input and output, read as
``costs/workspace.py``'s are (bytes, during the op only). Two kernels: a channels-last one,
which copies a contiguous input channels-last and its result back; and the generic one, which
first computes an index and weight table per resized dimension. Antialiased resizes run one
pass per resized dimension, each with its own tables, through a temporary between passes.
"""

from __future__ import annotations

from math import ceil

from pytest_graphbudget.costs import channels_last
from pytest_graphbudget.costs.conv_layout import MODELLED_THREADS
from pytest_graphbudget.costs.registry import Shape, numel, workspace

SMALL_RESIZE = 128
"""Output rows plus columns up to which ATen's CPU nearest and bilinear resizes take their
channels-last kernel (``_use_vectorized_kernel_cond_2d``), whatever the input's layout."""

TAPS = {"nearest": 1, "linear": 2, "cubic": 4}
"""Input positions one output position reads along each resized dimension, by mode."""


def _resize_tables(out: Shape, dims: int, mode: str, itemsize: int) -> int:
    """Bytes of the tables ATen's generic CPU resize (``upsample_generic_Nd_kernel_impl``)
    computes before it runs: for each output position of each resized dimension, ``TAPS``
    int64 indices and as many weights of the input's dtype (a linear resize to 96 columns:
    96 x 2 x (8 + 4) bytes)."""
    return TAPS[mode] * (8 + itemsize) * sum(out[-dims:])


def _channels_last_kernel(x: Shape, out: Shape, mode: str) -> bool:
    """Whether a 2-D or 3-D nearest or linear resize takes ATen's channels-last CPU kernel: a
    channels-last input of more than 3 channels; in 2-D, an output of at most
    ``SMALL_RESIZE`` rows plus columns, or, bilinear on one intra-op thread
    (``conv_layout.MODELLED_THREADS``), an image's 3 channels."""
    if mode == "cubic" or len(x) not in (4, 5):
        return False
    if not channels_last.copied(x) and x[1] > 3:
        return True
    if len(x) == 5:
        return False
    return out[-2] + out[-1] <= SMALL_RESIZE or (
        mode == "linear" and MODELLED_THREADS == 1 and x[1] == 3
    )


def _resize_held(x: Shape, out, mode: str, itemsize: int) -> int:
    """A resize's buffers beside its input and output: on the channels-last kernel, a
    contiguous input copied channels-last and the result written so, then copied into the
    contiguous output (a 32x32 map upsampled twice held twice what the tool counted); on the
    generic kernel, its index and weight tables."""
    if not isinstance(out, Shape) or len(x) != len(out) or len(x) < 3:
        return 0
    if _channels_last_kernel(x, out, mode):
        if not channels_last.copied(x):  # channels-last already: its output is too
            return 0
        return (numel(x) + channels_last.copied(out)) * itemsize
    return _resize_tables(out, len(x) - 2, mode, itemsize)


@workspace(
    *("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d"),
    *("_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d"),
)
def nearest_resize(x: Shape, *_, out, itemsize: int, **__) -> int:
    return _resize_held(x, out, "nearest", itemsize)


@workspace("upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d")
def linear_resize(x: Shape, *_, out, itemsize: int, **__) -> int:
    return _resize_held(x, out, "linear", itemsize)


@workspace("upsample_bicubic2d")
def cubic_resize(x: Shape, *_, out, itemsize: int, **__) -> int:
    return _resize_held(x, out, "cubic", itemsize)


def _aa_scale(n_in: int, n_out: int, align_corners: bool, scale) -> float:
    """ATen's ``area_pixel_compute_scale``: input positions per output position."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1 / scale if scale else n_in / n_out


def _aa_tables(n_out: int, scale: float, taps: int, itemsize: int) -> int:
    """One pass's tables (``_compute_index_ranges_weights``): per output position its first
    index, count, stride and weights' offset (int64), and weights for the widest filter, whose
    support widens by the downscale factor (``ceil(support) * 2 + 1`` taps)."""
    support = taps / 2 * max(scale, 1.0)
    return n_out * (4 * 8 + (ceil(support) * 2 + 1) * itemsize)


def _antialiased_held(taps: int):
    def held(x: Shape, size=None, align_corners=False, *scales, out, itemsize: int, **__) -> int:
        """The passes of ``separable_upsample_generic_Nd_kernel_impl``: the width first, into
        an ``H_in x W_out`` temporary when the height is resized too, then the height into
        the output; each pass holds its own tables (a 64x64 image to 30x30: 46 KB of
        temporary and 1.8 KB of tables beside 120 KB)."""
        if not isinstance(out, Shape) or len(x) != 4:
            return 0
        given = list(scales[0]) if scales and isinstance(scales[0], (list, tuple)) else scales
        given = [*given, None, None][:2]
        passes = [
            _aa_tables(o, _aa_scale(i, o, align_corners, s), taps, itemsize)
            for i, o, s in zip(x[-2:], out[-2:], given, strict=True)
            if i != o
        ]
        temp = numel(x) // x[-1] * out[-1] if len(passes) == 2 else 0
        return temp * itemsize + max(passes, default=0)

    return held


workspace("_upsample_bilinear2d_aa")(_antialiased_held(2))
workspace("_upsample_bicubic2d_aa")(_antialiased_held(4))
