"""Workspaces of ATen's CPU resizes (``F.interpolate``, ``nn.Upsample``): what
``aten/src/ATen/native/cpu/UpSampleKernel.cpp`` allocates beside the input and output, read as
``costs/workspace.py``'s are (bytes, during the op only). Two kernels: a channels-last one,
which copies a contiguous input channels-last and its result back; and the generic one, which
first computes an index and weight table per resized dimension. Antialiased resizes (their
own passes and tables) are not modelled.
"""

from __future__ import annotations

from pytest_graphbudget.costs import channels_last
from pytest_graphbudget.costs.registry import Shape, numel, workspace
from pytest_graphbudget.costs.workspace import MODELLED_THREADS

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
    (``workspace.MODELLED_THREADS``), an image's 3 channels."""
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
