"""Workspaces of the CPU's selections: the copies ATen's kernels select in (``kthvalue``,
``median``) and the counts and prefix sums ``masked_select`` (and ``masked_scatter``'s
backward, which selects) writes before its result; the contiguous copy ``index_select``
gathers rows from.
Registered and read as ``costs/scratch.py``'s are (bytes, during the op only, held to
``torch.profiler(profile_memory=True)``'s peak by ``tests/engine/test_selection_peak.py``).
"""

from __future__ import annotations

from math import prod

from pytest_graphbudget.costs import channels_last
from pytest_graphbudget.costs.conv_layout import MODELLED_THREADS
from pytest_graphbudget.costs.registry import Shape, numel, workspace

GRAIN_SIZE = 32768
"""ATen's ``internal::GRAIN_SIZE``: below it (or on one thread) a CPU kernel runs serially."""


@workspace("kthvalue")
def kthvalue_copies(x: Shape, *_, out, itemsize: int, **__) -> int:
    """ATen's CPU ``kthvalue`` selects in a contiguous copy of the input, beside an int64
    index for every element (``kthvalue_out_impl_cpu``: ``tmp_values``, ``tmp_indices``),
    whatever the dim: 12 bytes a float32 element held while it runs (a (4, 10, 16) kthvalue
    had read 7,680 B under the profiler's peak)."""
    return numel(x) * (itemsize + 8)


@workspace("median", "nanmedian")
def median_copies(x: Shape, *rest, out, itemsize: int, **kw) -> int:
    """``median`` and ``nanmedian`` select in a copy of the input: over every element always
    (``median_impl``: ``self.clone()``), by a dim (``median_with_indices_impl``) when the dim
    is not unit-strided, made contiguous with the dim moved last (a (4, 10, 16) median over
    dim 1 had read 2,560 B under; over a transposed input's unit-strided dim, no copy)."""
    if not rest and "dim" not in kw:
        return numel(x) * itemsize
    dim = (rest[0] if rest else kw["dim"]) % max(len(x), 1)
    strides = getattr(x, "strides", None) or [prod(x[d + 1 :]) for d in range(len(x))]
    return numel(x) * itemsize if strides[dim] > 1 else 0


@workspace("masked_select")
def masked_select_counts(x: Shape, mask: Shape, *_, out, itemsize: int, **__) -> int:
    """``masked_select_out_impl_cpu`` counts the mask first (``mask.sum()``, as int64: 8 bytes
    an element of the broadcast shape and the count's, freed before the result is made), then,
    unless the serial kernel can run (one thread or under ``GRAIN_SIZE`` elements, input and
    mask contiguous and of that shape), writes the mask as int64 and its prefix sum beside the
    result: 16 bytes an element. A (4, 10, 16) selection had read 3,820 B under in eval."""
    n, serial = _selection(x, mask)
    made = numel(out) * itemsize if all(type(d) is int for d in out or ()) else 0
    counted = max(8 + 8 * n - made, 0)  # the count, then the mask as int64 to sum
    return counted if serial else max(counted, 16 * n)


@workspace("masked_scatter_backward")
def masked_scatter_backward_selects(grad: Shape, mask: Shape, sizes, *_, out, itemsize, **__):
    """ATen's ``masked_scatter_backward`` (a training step through ``masked_scatter``: a VLM's
    image features merged into its text embeddings) selects the gradient by the mask, as
    ``masked_select`` does, then pads it with zeros to ``sizes`` and concatenates: the count
    (8 bytes an element), then, on the parallel path, the int64 mask and its prefix sum
    beside the selected elements, then the selected, the zeros and their concatenation, the
    result. How many the mask selects is data: taken at its bound, every element, so the
    parallel path reads at most (unselected x itemsize) over. A (4, 10, 16) step had read
    6,444 B under."""
    if not all(type(d) is int for d in sizes):  # symbolic: a comparison would guard on them
        return 0
    n, serial = _selection(grad, mask)
    size = prod(sizes) * itemsize
    selecting = 0 if serial else size + 16 * n
    return max(8 + 8 * n, selecting, 2 * size) - size


@workspace("index_select")
def index_select_copy(x: Shape, dim: int, index: Shape, *_, out, itemsize: int, **__) -> int:
    """Over dim 1 of a tensor of two dims or more, ATen's CPU ``index_select`` gathers each
    batch's rows with ``memcpy`` (``index_select_out_cpu_dim1_``) from a contiguous input: one
    that comes strided (``index_add``'s backward selects from the sum loss's expanded
    gradient, a transposed view) is copied whole first. A (4, 10, 16) step through
    ``index_add`` over dim 1 had read 2,560 B under."""
    if len(x) < 2 or dim % len(x) != 1 or not numel(index) or not numel(x):
        return 0
    return 0 if channels_last.contiguous(x) else numel(x) * itemsize


def _selection(x: Shape, mask: Shape) -> tuple[int, bool]:
    """The elements of ``x`` and ``mask`` broadcast, and whether ``masked_select``'s serial
    kernel runs (one thread or under ``GRAIN_SIZE`` elements, both contiguous, of that
    shape)."""
    rank = max(len(x), len(mask))
    shape = tuple(map(max, _padded(x, rank), _padded(mask, rank)))
    n = prod(shape)
    plain = all(tuple(s) == shape and channels_last.contiguous(s) for s in (x, mask))
    return n, plain and (MODELLED_THREADS == 1 or n < GRAIN_SIZE)


def _padded(shape: Shape, rank: int) -> tuple[int, ...]:
    """``shape`` with ones in front up to ``rank`` dims, as broadcasting reads it."""
    return (1,) * (rank - len(shape)) + tuple(shape)
