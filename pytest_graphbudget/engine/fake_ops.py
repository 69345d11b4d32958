"""Fake ops answered from their layout: the taped tier's fast path on fake tensors.

A model on the meta device is taped on fake twins of its weights (``breaks.capture_eager``
with ``fake=True``), as FlopCounterMode's forward there runs: every op goes through
``FakeTensorMode``, whose dispatch (a cache key built from every argument, then the result
rebuilt from the cache) costs a hundred-odd microseconds, most of a fake forward. The tape
already knows what a result must look like once an op's signature has run: a functional op
(``meta_pass.functional``: it aliases and mutates nothing, and no value sizes its result)
lays its result out by its arguments' shapes, strides, dtypes and devices alone. So an op
whose signature (those, its other arguments, whether grad mode is on, torch's default dtype)
ran on fakes before, in this forward or an earlier one, gets fresh fake tensors of the layout
it gave then, built without the mode's dispatch (``compat.fake_results``); a view
(``transpose``, ``view``, a slice) gets one on its argument's storage, as the mode's own cache
rebuilds a view (``compat.fake_view``). gptj on the meta device: 0.50 s against 0.70 s a
profile; FlopCounterMode's forward 0.60 s.

Nothing of a value is lost: fakes have none. What a fake carries besides its layout is kept
out: an argument or result holding a constant (a small ``torch.tensor`` the mode computes on
for real, so that ``.item()`` works) never takes the fast path, nor does a result that shares
a storage, starts at an offset, or whose storage is not the bytes ``torch.empty_strided``
gives its layout. The figures are the mode's own (``tests/engine/test_fake_ops.py``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from pytest_graphbudget.compat import fake_results, fake_tensor_type, fake_view
from pytest_graphbudget.engine.meta_pass import PLAIN, functional

LAYOUTS: dict[Any, dict[Any, Any]] = {}
"""Each functional op's fake signatures and their results' layouts, for every fake tape of
this process (the mode's own cache is process-wide too). Only time depends on it."""

SIGNATURES = 65_536
"""How many signatures ``LAYOUTS`` keeps before it starts again (a few hundred per model)."""

ODD = object()
"""A signature whose result the fast path cannot rebuild: the mode answers it."""


class Unknown(Exception):
    """An argument the signature cannot describe."""


@functools.cache
def answerable(func: Any) -> bool:
    """Whether ``func``'s result is fixed by its arguments' layouts: functional with no
    randomness, or a view (``transpose``, ``view``: a result on its argument's storage)."""
    if not isinstance(func, torch._ops.OpOverload):
        return False
    return func.is_view or (functional(func) and torch.Tag.nondeterministic_seeded not in func.tags)


class FakeOps:
    """One fake forward's fast path (the tape's ``hollow``, whose interface it shares): ops
    answered from ``LAYOUTS`` are counted in ``answered``."""

    stopped = False  # a fake forward is never stopped: nothing it skips has a value

    def __init__(self, mode: Any) -> None:
        self.mode = mode
        self.fake = fake_tensor_type()
        self.answered = 0
        self._key: Any = None
        self._answered = False
        if sum(map(len, LAYOUTS.values())) > SIGNATURES:
            LAYOUTS.clear()

    def keep(self) -> None:
        """Nothing to keep: ``LAYOUTS`` is filled as the forward runs."""

    def run(self, func: Any, args: tuple, kwargs: dict, node: Any) -> Any:
        """``func``'s result: fresh fakes of the layout its signature gave before, else the
        mode's own."""
        self._answered, self._key = False, None
        table = LAYOUTS.get(func)
        if table is None and not answerable(func):
            return func(*args, **kwargs)
        try:
            key = self._key = self._signature(args, kwargs)
        except Unknown:
            return func(*args, **kwargs)
        recipe = table.get(key) if table else None
        if recipe is None or recipe is ODD:
            return func(*args, **kwargs)
        self._answered = True
        self.answered += 1
        source, many, specs = recipe
        if source is not None:  # a view: its one result on the storage of its one tensor
            return fake_view(self.mode, args[source], *specs)
        outs = fake_results(self.mode, specs)
        return tuple(outs) if many else outs[0]

    def learn(
        self, func: Any, work: int, out: Any, args: tuple, kwargs: dict, reads: set, made: Any
    ) -> None:
        """After an op the mode answered: the layout of its result, for its next call."""
        if self._answered or self._key is None:
            return
        LAYOUTS.setdefault(func, {}).setdefault(self._key, self._layout(func, out, args, kwargs))

    def _signature(self, args: tuple, kwargs: dict) -> Any:
        describe = self._describe
        return (
            torch.is_grad_enabled(),
            torch.get_default_dtype(),
            describe(args),
            describe(tuple(kwargs.items())) if kwargs else (),
        )

    def _describe(self, value: Any) -> Any:
        kind = type(value)
        if kind is self.fake:
            if value.constant is not None or value.layout is not torch.strided:
                raise Unknown
            return (
                value.shape,
                value.stride(),
                value.storage_offset(),
                value.dtype,
                value.device,
                value.requires_grad,
            )
        if kind is tuple or kind is list:
            return (kind, *map(self._describe, value))
        if kind in PLAIN:
            return (kind, value)
        raise Unknown

    def _layout(self, func: Any, out: Any, args: tuple, kwargs: dict) -> Any:
        """How to rebuild ``out``: (None, whether it was a tuple, each result's shape, stride,
        dtype, device and ``requires_grad``), for a view (the index of its one tensor argument,
        False, its shape, stride, offset and ``requires_grad``), or ``ODD``."""
        if func.is_view:
            tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
            if len(tensors) != 1 or type(out) is not self.fake or out.constant is not None:
                return ODD
            if out.layout is not torch.strided:
                return ODD
            if any(isinstance(v, torch.Tensor) for v in kwargs.values()):
                return ODD
            source = args[tensors[0]]
            if out.untyped_storage()._cdata != source.untyped_storage()._cdata:
                return ODD
            if out.dtype != source.dtype or out.device != source.device:
                return ODD
            if out.is_conj() or out.is_neg():
                return ODD
            view = (tuple(out.shape), out.stride(), out.storage_offset(), out.requires_grad)
            return tensors[0], False, view
        items = out if type(out) is tuple else (out,)
        tensors = [t for t in items if t is not None]
        if not tensors or any(
            type(t) is not self.fake or t.constant is not None or t.layout is not torch.strided
            for t in tensors
        ):
            return ODD
        storages = {t.untyped_storage()._cdata for t in tensors}
        taken = {
            a.untyped_storage()._cdata
            for a in (*args, *kwargs.values())
            if type(a) is self.fake and a.layout is torch.strided
        }
        if len(storages) < len(tensors) or storages & taken:  # fresh results only
            return ODD
        specs: list = []
        for t in items:
            if t is None:
                specs.append(None)
                continue
            spec = (tuple(t.shape), t.stride(), t.dtype, t.device, t.requires_grad)
            rebuilt = torch.empty_strided(spec[0], spec[1], dtype=spec[2], device="meta")
            nbytes = t.untyped_storage().nbytes()
            odd = t.storage_offset() or t.is_conj() or t.is_neg() or t.dtype.is_complex
            if odd or rebuilt.untyped_storage().nbytes() != nbytes:
                return ODD
            specs.append(spec)
        return None, type(out) is tuple, specs
