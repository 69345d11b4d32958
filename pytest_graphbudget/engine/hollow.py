"""A real forward without its heaviest arithmetic: the taped tier's hollow ops.

The tape prices an op from its arguments' and its result's shapes, never their values. So
an op whose result only flows on into other ops need not compute it: a convolution of
resnet50 costs milliseconds, a zero-filled tensor of the same layout microseconds. An op is
hollowed when its signature (the op, its tensors' shapes, strides, dtypes and devices, its
other arguments, torch's default dtype) ran for real before, with at least ``HOLLOW_MACS``
multiply-accumulates and other FLOPs, and returned fresh tensors that ``torch.empty_strided``
rebuilds exactly (``hollowable``, and the checks of ``meta_pass.MetaCache``): the layout is
the CPU kernel's own, learnt from it, never a meta kernel's guess. Before means in an
earlier forward of this process, or, in a model of ``LARGE_ELEMENTS`` or more (whose
arithmetic dominates its forward), earlier in the same forward: a ViT's second to
twelfth blocks. A small model's first profile computes every op, so a cold start costs what
it did: a detector, whose NMS reads scores hollow convolutions would not compute, would
otherwise pay a stopped forward and a whole one. A model profiled again, or sharing blocks
with one profiled before (ResNets, ViTs of one width), runs without most of its arithmetic.

Values then differ from the real forward's, and they matter wherever they reach Python or
size a result. Every storage a hollow op wrote, and every storage written by an op that
read one of those, is tainted; an op of ``reads.DATA_OPS`` or tagged data-dependent
(``nonzero``, boolean indexing, ``.item()``) that reads a tainted storage, or an in-place or
``out=`` write of a tainted value into the model's own state, stops the forward
(``Hollowed``) before it runs, and the caller tapes the whole forward again for real. So does
a forward that raised, handed values to Python by a method no dispatch mode sees
(``.tolist()``), or assigned module state while anything was tainted. The figures are those
of the real forward (``tests/engine/test_hollow.py``); only time depends on the memo.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch

from pytest_graphbudget.engine.extents import StorageKey
from pytest_graphbudget.engine.meta_pass import PLAIN, Uncacheable, functional
from pytest_graphbudget.engine.reads import DATA_OPS

HOLLOW_MACS = 1_000_000
"""An op of fewer multiply-accumulates and other FLOPs always runs: below about a million,
filling its result with zeros costs about what the kernel does (tens of microseconds)."""

LARGE_ELEMENTS = 60_000_000
"""A model of this many weight, buffer and input elements or more hollows a signature from its
second call in a forward on: its first profile gains most of what a second would (vit_base
0.11 s cold against FX's 0.21 s; FlopCounterMode's forward 0.34 s), and few such models read
values that would stop the forward. A smaller one hollows only what an earlier forward ran."""

LIGHT = object()
"""The layout of a heavy op's result that ``torch.empty_strided`` cannot rebuild: it runs."""

LAYOUTS: dict[Any, dict[Any, Any]] = {}
"""Each heavy op's signatures and their result layouts, for every tape of this process: a kernel
lays its result out by its arguments' shapes, strides and dtypes alone, which cannot change
within a process. Only time depends on it."""

SIGNATURES = 65_536
"""How many signatures ``LAYOUTS`` keeps before it starts again (a few hundred per model)."""


MATTERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Models whose last hollow forward had to run again in full (a detector's NMS reads scores
its hollow convolutions did not compute): their next forward is taped in full straight away.
Only time depends on it."""


def worth_trying(model: Any) -> bool:
    """Whether ``model``'s forward may be hollow: not when values mattered the last time."""
    try:
        return model not in MATTERED
    except TypeError:  # a module that defines __eq__ without __hash__
        return True


def values_mattered(model: Any) -> None:
    with contextlib.suppress(TypeError):
        MATTERED[model] = True


class Hollowed(Exception):
    """A value computed from a hollow op was about to matter: tape the forward for real."""


@functools.cache
def reads_data(func: Any) -> bool:
    """Whether ``func`` hands values to Python or sizes its result by them."""
    tags = set(getattr(func, "tags", ()))
    name = func.name().partition("::")[2].partition(".")[0] if hasattr(func, "name") else ""
    return name in DATA_OPS or bool(
        tags & {torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output}
    )


INDEXING = frozenset({"index", "_unsafe_index", "index_put", "index_put_", "_index_put_impl_"})
"""Ops tagged as sized by values for their boolean masks alone: with integer indices their
result has the indices' shape (top-k tokens gathered by ``x[idx]``)."""


def sized_by_values(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether this call of ``func`` hands values to Python or sizes its result by them."""
    if not reads_data(func):
        return False
    if func._schema.name.partition("::")[2] not in INDEXING:
        return True
    indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
    return any(
        i is not None and (not isinstance(i, torch.Tensor) or not _integral(i.dtype))
        for i in indices
    )


def _integral(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype not in _MASKS


_MASKS = (torch.bool, torch.uint8)


@functools.cache
def hollowable(func: Any) -> bool:
    """Whether ``func`` may be rebuilt rather than run: functional (``meta_pass.functional``)
    and drawing no random numbers (a dropout or ``randn`` not run would leave the generator
    where the real forward does not)."""
    return functional(func) and torch.Tag.nondeterministic_seeded not in func.tags


def _describe(value: Any) -> Any:
    """A hashable description of one real argument; raises ``Uncacheable``. Asked of every
    argument of a heavy op's every call: the common types first, by identity."""
    kind = type(value)
    if kind is torch.Tensor or kind is torch.nn.Parameter:
        if value.layout is not torch.strided or value.is_meta or value.is_quantized:
            raise Uncacheable
        dtype = value.dtype
        if dtype.is_complex:  # conjugate and negative views are complex tensors' laziness
            raise Uncacheable
        return (value.shape, value.stride(), value.storage_offset(), dtype, value.device)
    if kind is list or kind is tuple:
        return (kind, *map(_describe, value))
    if isinstance(value, PLAIN):
        return (kind, value)
    if isinstance(value, (list, tuple)):  # torch.Size
        return (kind, *map(_describe, value))
    raise Uncacheable


def layout(out: Any, args: tuple, kwargs: dict) -> Any:
    """How to rebuild ``out`` (whether it was a tuple, and each tensor's shape, stride, dtype
    and device, None for a None), or ``LIGHT``: only fresh tensors, each its own storage from
    offset 0 and of exactly the bytes ``torch.empty_strided`` gives that shape and stride."""
    items = out if isinstance(out, tuple) else (out,)
    tensors = [t for t in items if t is not None]  # MultiheadAttention's weights not asked for
    if not tensors or not all(type(t) is torch.Tensor for t in tensors):
        return LIGHT
    storages = [t.untyped_storage().data_ptr() for t in tensors]
    taken = {
        t.untyped_storage().data_ptr()
        for t in (*args, *kwargs.values())
        if isinstance(t, torch.Tensor)
    }
    if len(set(storages)) < len(storages) or set(storages) & taken:
        return LIGHT
    specs: list = []
    for t in items:
        if t is None:
            specs.append(None)
            continue
        spec = (tuple(t.shape), t.stride(), t.dtype, t.device)
        rebuilt = torch.empty_strided(spec[0], spec[1], dtype=spec[2], device="meta")
        nbytes = t.untyped_storage().nbytes()
        if t.storage_offset() or t.dtype.is_complex or rebuilt.untyped_storage().nbytes() != nbytes:
            return LIGHT
        specs.append(spec)
    return isinstance(out, tuple), specs


class Hollow:
    """One forward's hollow ops and the storages they tainted (see the module's doc).

    ``state``: the storages of the model's weights and buffers, which no tainted value may
    be written into (asked for only when a tainted value is written in place); ``elements``:
    the model's and its inputs' (``LARGE_ELEMENTS``)."""

    def __init__(self, state: Callable[[], set[Any]], elements: int = 0) -> None:
        self.state = state
        self._held: set[Any] | None = None
        self.fresh: dict[Any, dict] = {}  # layouts learnt by this forward, kept after it
        self.large = elements >= LARGE_ELEMENTS  # ... and used in it
        self.tainted: set[Any] = set()
        self.stopped = False  # a ``Hollowed`` was raised (the model may have caught it)
        self.hollowed = 0
        self._key: Any = None
        self._hollow = False
        if sum(map(len, LAYOUTS.values())) > SIGNATURES:
            LAYOUTS.clear()

    def keep(self) -> None:
        """The layouts this forward learnt, for the forwards after it (``LAYOUTS``)."""
        for func, table in self.fresh.items():
            LAYOUTS.setdefault(func, {}).update(table)
        self.fresh.clear()

    def held(self) -> set[Any]:
        """The storages of the model's own state, found once."""
        if self._held is None:
            self._held = self.state()
        return self._held

    def run(self, func: Any, args: tuple, kwargs: dict, node: Any) -> Any:
        """``func``'s result: rebuilt from its layout when the op is heavy and known, else the
        op's own. ``node``: its ``NodeCost``, opened (the storages it reads). An op never
        heavy before costs a dict lookup: its signature is described only after it ran."""
        self._hollow, self._key = False, None
        if self.tainted and not self.tainted.isdisjoint(node.reads):
            written = _written(func, args, kwargs)
            if sized_by_values(func, args, kwargs) or (
                written and {StorageKey(t.untyped_storage()) for t in written} & self.held()
            ):
                self.stopped = True
                raise Hollowed(func.name())
        known = LAYOUTS.get(func)
        now = self.fresh.get(func) if self.large else None
        if known or now:
            key = self._key = _signature(args, kwargs)
            recipe = None if key is None else (known or {}).get(key) or (now or {}).get(key)
            if recipe is not None and recipe is not LIGHT:
                self._hollow = True
                self.hollowed += 1
                many, specs = recipe
                outs = tuple(None if spec is None else _zeros(*spec) for spec in specs)
                return outs if many else outs[0]
        return func(*args, **kwargs)

    def learn(
        self, func: Any, work: int, out: Any, args: tuple, kwargs: dict, reads: set, made: Any
    ) -> None:
        """After the op (``work``: its MACs and other FLOPs): the layout of a heavy one that
        ran, and the taint of what it wrote (``made``: the storages of its results)."""
        if work >= HOLLOW_MACS and not self._hollow and hollowable(func):
            key = self._key if self._key is not None else _signature(args, kwargs)
            if key is not None and key not in LAYOUTS.get(func, ()):
                self.fresh.setdefault(func, {}).setdefault(key, layout(out, args, kwargs))
        if self._hollow or (self.tainted and not self.tainted.isdisjoint(reads)):
            self.tainted.update(made)


def _signature(args: tuple, kwargs: dict) -> Any:
    """An op's arguments as a signature, with torch's default dtype; None if they cannot be."""
    try:
        described = _describe(args), _describe(tuple(sorted(kwargs.items())))
    except Uncacheable:
        return None
    return (torch.get_default_dtype(), *described)


def _zeros(shape: tuple, stride: tuple, dtype: torch.dtype, device: torch.device) -> Any:
    return torch.empty_strided(shape, stride, dtype=dtype, device=device).zero_()


@functools.cache
def _writes(func: Any) -> tuple[tuple[int, str], ...]:
    """The position and name of each argument ``func`` writes (in-place, ``out=``)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return ()
    return tuple(
        (i, a.name)
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    )


def _written(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors this call of ``func`` writes in place."""
    found = []
    for i, name in _writes(func):
        value = args[i] if i < len(args) else kwargs.get(name)
        found += [
            v
            for v in (value if isinstance(value, (list, tuple)) else (value,))
            if isinstance(v, torch.Tensor)
        ]
    return found
