"""Eager torch's strides for an elementwise op's result: ``TensorIterator``'s rules, in Python.

Fake tensors lay out an elementwise result by rules of their own (the fake mode's fast path,
``torch._refs``), and ATen's meta kernels, handed a Python scalar, by others again. All agree
with eager torch except on the stride of a size-1 dimension, which no read of memory depends
on but ATen's ``suggest_memory_format`` does (``engine/fakes.py`` says where that matters).
This is how ``TensorIteratorBase`` (aten/src/ATen/TensorIterator.cpp) lays out a result it
allocates: ``fast_set_up`` where every operand has the result's shape and one layout, else
``compute_strides``, ``reorder_dimensions`` and ``allocate_or_resize_outputs``.
``tests/engine/test_strides.py`` holds it to eager torch on random layouts.
"""

from __future__ import annotations

from math import prod

Operand = tuple[tuple[int, ...], tuple[int, ...]]
"""An input's shape and strides; ``((), ())`` for a scalar ATen wraps into a tensor."""


def iterator_strides(shape: tuple[int, ...], operands: list[Operand]) -> tuple[int, ...] | None:
    """The strides eager torch gives an elementwise result of ``shape`` computed from
    ``operands``, in ATen's order (the result's own first argument first); None for an empty
    result, whose layout nothing reads."""
    if 0 in shape or not operands:
        return None
    fast = _fast(shape, operands)
    return fast if fast is not None else _reordered(shape, operands)


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(prod(shape[d + 1 :]) for d in range(len(shape)))


def _dense_in(shape: tuple, stride: tuple, order: tuple) -> bool:
    """``is_contiguous`` in the order of ``order`` (innermost first): size-1 dimensions ignored."""
    expected = 1
    for d in order:
        if shape[d] != 1:
            if stride[d] != expected:
                return False
            expected *= shape[d]
    return True


def _fast(shape: tuple, operands: list[Operand]) -> tuple | None:
    """``fast_set_up``: operands all of the result's shape, all contiguous (a row-major
    result), all channels-last (4-D only: a channels-last result), or all dense with one set of
    strides (those strides); None otherwise."""
    if any(tuple(s) != shape for s, _ in operands):
        return None
    ndim = len(shape)
    if all(_dense_in(s, t, tuple(range(ndim - 1, -1, -1))) for s, t in operands):
        return row_major(shape)
    if ndim == 4 and all(_dense_in(s, t, (1, 3, 2, 0)) for s, t in operands):
        return (shape[1] * shape[2] * shape[3], 1, shape[3] * shape[1], shape[1])
    dense = all(_dense_in(s, t, sorted(range(ndim), key=t.__getitem__)) for s, t in operands)
    if dense and all(tuple(t) == tuple(operands[-1][1]) for _, t in operands):
        return tuple(operands[0][1])
    return None


def _reordered(shape: tuple, operands: list[Operand]) -> tuple:
    """The result dense in the order ``reorder_dimensions`` sorts the dimensions into: by the
    operands' strides, innermost first, a broadcast (0) stride deciding nothing, equal
    strides putting the smaller dimension first, ties left in place (row-major)."""
    ndim = len(shape)
    rows = []  # each operand's strides over the result's dimensions, innermost first
    for sizes, strides in operands:
        offset, row = ndim - len(sizes), [0] * ndim
        for i, (size, stride) in enumerate(zip(sizes, strides, strict=True)):
            row[offset + i] = 0 if size == 1 and shape[offset + i] != 1 else stride
        rows.append(row[::-1])
    sizes = shape[::-1]

    def after(d0: int, d1: int) -> int:  # ATen's should_swap
        for row in rows:
            if row[d0] == 0 or row[d1] == 0:
                continue
            if row[d0] != row[d1]:
                return 1 if row[d0] > row[d1] else -1
            if sizes[d0] > sizes[d1]:
                return 1
        return 0

    perm = list(range(ndim))
    for i in range(1, ndim):  # insertion sort that leaves ambiguous pairs in place
        d1 = i
        for d0 in range(i - 1, -1, -1):
            order = after(perm[d0], perm[d1])
            if order > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif order < 0:
                break
    if perm == list(range(ndim)):
        return row_major(shape)
    inner, step = [0] * ndim, 1
    for d in perm:
        inner[d] = step
        step *= sizes[d]
    return tuple(inner[::-1])
