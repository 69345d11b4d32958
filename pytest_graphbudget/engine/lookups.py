"""What ATen's indexing kernel does for each index value: ``x[idx]`` and ``x[idx] = v``.

``index`` and ``index_put`` by integer tensors (and ``_unsafe_index``, an upsampling's
decomposition) and ``index_copy`` (a static KV cache's update) compute an offset for every
index value, then copy the elements it points to one by one: a row, the dims after the last
one indexed. On an AMD EPYC core that took about 5 ns an offset and 1 ns an element, where
``index_select`` and ``embedding`` copy each row with one ``memcpy`` at a copy's rate: as a
copy of its bytes SSDlite's ``boxes[keep]`` and Swin's relative position bias priced at 0.55x
and 0.10x of their time (``benchmarks/latency_ops.py``). ``engine.latency``'s ``index`` kind
prices both terms. ``index_fill`` is ``index_copy`` with one value: the same loop, the same
time an element (0.4-0.6 ns in rows of 256 floats, 1.7-3.3 ns one element a row).

``scatter`` and ``put`` (``WRITES``) write one element an index value, at an offset their loop
computes at a copy's pace (1.1-3.4 ns an element on the same EPYC, where an ``index`` offset
takes 5-6): no offsets, only the bytes they write. In place, a write is priced by those, not
by the tensor it writes into (a cache updated at two positions, not the whole cache)."""

from __future__ import annotations

from math import prod
from typing import Any

import torch

INDEXING = frozenset(
    {"index", "_unsafe_index", "index_put", "_unsafe_index_put", "index_copy", "index_fill"}
)
WRITES = frozenset({"scatter", "put"})


def add_lookups(node: Any, name: str, args: tuple) -> None:
    """Add one call's ``index_lookups`` to ``node`` (a ``NodeCost``): its ``lookups`` and
    ``lookup_bytes``."""
    offsets, copied = index_lookups(name, args)
    node.lookups += offsets
    node.lookup_bytes += copied


def index_lookups(name: str, args: tuple) -> tuple[int, int]:
    """``(offsets, bytes)`` of one call of ``name``: the offsets its indexing kernel computes
    and the bytes of the elements it copies from (``index``) or to (``index_put``,
    ``index_copy``, ``index_fill``) them; for ``scatter`` and ``put``, no offsets and the
    bytes they write. ``(0, 0)`` for any other op, an index by a boolean mask (a selection: a
    ``nonzero`` first), an ``index_put`` or ``put`` that accumulates (a scatter-add, priced by
    its adds), or symbolic sizes (reading them would specialize an export's dynamic dims)."""
    if name not in INDEXING | WRITES or len(args) < 2 or not isinstance(args[0], torch.Tensor):
        return 0, 0
    if name in ("index_copy", "index_fill"):
        return _index_copy(*args[:3]) if len(args) >= 3 else (0, 0)
    x, indices = args[0], args[1]
    if name.endswith("put") and len(args) > 3 and args[3]:  # accumulate=True
        return 0, 0
    if name in WRITES:  # scatter(x, dim, index, src) and put(x, index, source)
        index = args[2] if name == "scatter" and len(args) > 2 else indices
        if not isinstance(index, torch.Tensor) or not _plain(index.shape):
            return 0, 0
        return 0, index.numel() * x.element_size()
    used = [(dim, t) for dim, t in enumerate(indices) if isinstance(t, torch.Tensor)]
    if not used or any(t.dtype in (torch.bool, torch.uint8) for _, t in used):
        return 0, 0
    shapes = [tuple(t.shape) for _, t in used]
    if not _plain(x.shape, *shapes):
        return 0, 0
    picked = prod(torch.broadcast_shapes(*shapes))
    indexed = {dim for dim, _ in used}
    elements = picked * prod(size for dim, size in enumerate(x.shape) if dim not in indexed)
    row = prod(x.shape[max(indexed) + 1 :])
    return (elements // row if row else 0), elements * x.element_size()


def _index_copy(x: Any, dim: int, index: Any) -> tuple[int, int]:
    """``x.index_copy_(dim, index, source)`` (a static KV cache's update along its sequence)
    or ``x.index_fill_(dim, index, value)``: a row (the dims after ``dim``) an index value and
    each position of the dims before ``dim``."""
    if not _plain(x.shape, index.shape):
        return 0, 0
    dim = dim % max(x.dim(), 1)
    outer = prod(x.shape[:dim])
    row = prod(x.shape[dim + 1 :])
    return index.numel() * outer, index.numel() * outer * row * x.element_size()


def _plain(*shapes: tuple) -> bool:
    """Whether every size of ``shapes`` is an ``int``, not a symbol."""
    return all(type(size) is int for shape in shapes for size in shape)
