"""Which bytes of its storage a tensor covers, and the bytes a kernel moves through many views.

A view is a storage offset and a (size, stride) per dim. Its canonical form, in bytes, drops
the dims of size 1 and those of stride 0 (a broadcast reads the same bytes again), sorts the
others by stride, outermost first, and ends with the element's own bytes, ``(element_size,
1)``; a dim merges into the next inner one when its stride is that one's size times stride.
So ``x`` and ``x.t()`` have one form, and a form that ends as a single dim of stride 1 is one
run of bytes, ``[start, start + size)``: a part of ``torch.split`` along the first dim, a row
of ``unbind``, a whole tensor. Runs are unioned exactly; any other form (every other column)
counts its bytes once however often it is read, unless it lies inside a run already counted;
and the sum is capped at the storage's bytes.

A kernel reading q, k and v, three views of one qkv storage, is charged the three; one that
reads a single part of a split is charged that part: in every tier, since both build the
forms from the tensors an op takes and returns (``NodeCost.read_extents``, ``view_extents``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch


class StorageKey(int):
    """A storage's identity as a dict key: the address of its ``StorageImpl``, held by a weak
    reference for as long as the key lives, so that no storage made later takes the address
    (``torch.multiprocessing``'s ``StorageWeakRef`` does the same). An ``int``, so hashing and
    comparing one costs no Python call: ``StorageWeakRef``'s ``__hash__`` and ``__eq__`` are
    Python methods, called for every dict a storage is looked up in, thousands of times a
    forward. ``torch.UntypedStorage._expired(key)`` says whether the storage was freed."""

    __slots__ = ()

    def __new__(cls, storage: Any) -> StorageKey:
        return int.__new__(cls, storage._weak_ref())

    def __del__(self, _free: Any = torch.UntypedStorage._free_weak_ref) -> None:
        _free(self)

    def __reduce__(self) -> tuple:  # a copy is the address alone, holding nothing
        return int, (int(self),)


@dataclass(slots=True)
class Extent:
    """The views of one storage a node reads or returns: their forms, and the storage's bytes."""

    nbytes: int
    forms: set = field(default_factory=set)

    def merge(self, other: Extent) -> None:
        self.nbytes = max(self.nbytes, other.nbytes)
        self.forms |= other.forms

    @property
    def bytes(self) -> int:
        return covered(self.forms, self.nbytes)


def form(t: torch.Tensor) -> tuple | None:
    """``(start, ((size, stride), ...))`` in bytes, outermost dim first (the module docstring);
    None for an empty tensor, or one whose sizes are symbolic."""
    try:  # a symbolic size cannot be hashed, nor has it a form
        return _form(t.size(), t.stride(), t.storage_offset(), t.element_size())
    except TypeError:
        return None


@functools.lru_cache(maxsize=1 << 16)
def _form(size: tuple, stride: tuple, offset: int, esize: int) -> tuple | None:
    """``form`` of a view, memoised: a model's forward takes the same few views many times
    (a tenth of the taped forward's time went here)."""
    if type(offset) is not int or any(type(n) is not int for n in (*size, *stride)):
        return None
    dims = []
    for n, s in zip(size, stride, strict=True):
        if n == 0:
            return None
        if n != 1 and s != 0:
            dims.append((s * esize, n))
    dims.sort()
    inner_size, inner_stride = esize, 1
    merged: list[tuple[int, int]] = []
    for s, n in dims:  # innermost first
        if s == inner_size * inner_stride:
            inner_size *= n
        else:
            merged.append((inner_size, inner_stride))
            inner_size, inner_stride = n, s
    merged.append((inner_size, inner_stride))
    return offset * esize, tuple(reversed(merged))


def extents(tensors: list[torch.Tensor]) -> dict[Any, Extent]:
    """Each storage of ``tensors`` -> the forms of the views of it among them."""
    found: dict[Any, Extent] = {}
    for t in tensors:
        storage = t.untyped_storage()
        add(found, StorageKey(storage), storage, t)
    return found


def add(found: dict[Any, Extent], key: Any, storage: Any, t: torch.Tensor) -> None:
    """Add ``t``'s view to ``found`` (``key``: its ``storage``'s)."""
    extent = found.get(key)
    if extent is None:
        nbytes = storage.nbytes()
        found[key] = extent = Extent(nbytes if type(nbytes) is int else 0)
    shape = form(t)
    if shape is not None:
        extent.forms.add(shape)


def _run(shape: tuple) -> tuple[int, int] | None:
    start, dims = shape
    if len(dims) == 1 and dims[0][1] == 1:
        return start, start + dims[0][0]
    return None


def covered(forms: set, cap: int) -> int:
    """The bytes the views ``forms`` of one storage of ``cap`` bytes cover (module docstring)."""
    runs = sorted(r for shape in forms if (r := _run(shape)) is not None)
    merged: list[list[int]] = []
    for start, end in runs:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    total = sum(end - start for start, end in merged)
    for start, dims in forms:
        if len(dims) == 1 and dims[0][1] == 1:
            continue
        end = start + 1 + sum((n - 1) * s for n, s in dims)
        if not any(a <= start and end <= b for a, b in merged):
            count = 1
            for n, _ in dims:
                count *= n
            total += count
    return min(total, cap) if cap else total
