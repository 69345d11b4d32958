"""The model's weights and buffers and its inputs as the caller had them, after profiling.

Profiling runs the forward to price it, and a forward may write its own state in place (an EMA
buffer, a cache, a weight clamped under ``no_grad``, an input it adds to). ``Kept`` holds a copy
of each tensor such a write reaches, made before the first write, and puts it back at the end.

Copying every tensor up front cost as much as the profile on a big model: resnet50's 102 MB
took 20 to 27 ms of a 60 ms profile, for a forward that writes none of them. So the first
taped forward (``tape.Tape``), through which every op of the forward passes, copies a tensor
only when an op is about to write it (``before``); every other forward a profile may run (a
second tape, FX's real pass, a warm-up) copies the rest first (``everything``). What no op
writes is never copied.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

_KEPT: ContextVar[Kept | None] = ContextVar("kept", default=None)


class Kept:
    """Copies of the tracked tensors (plain CPU tensors of the model and its inputs), each
    made before anything wrote it; ``put_back`` restores those that were written."""

    def __init__(self, tensors: list[Any], whole: bool = True) -> None:
        self.whole = whole  # False: too many bytes to copy up front (``everything`` copies none)
        self.tracked: dict[int, list[Any]] = {}  # storage -> the tracked tensors on it
        for tensor in tensors:
            self.tracked.setdefault(_storage(tensor), []).append(tensor)
        self.saved: dict[int, list[tuple[Any, int, Any]]] = {}  # storage -> (tensor, version, copy)
        self.written: set[int] = set()  # storages seen written by an op (``before``)
        self._writes: dict[int, tuple[tuple[int, str], ...]] = {}  # op id -> written arguments

    def before(self, func: Any, args: tuple, kwargs: dict) -> None:
        """Copy each tracked tensor that ``func`` is about to write (its schema says which
        arguments it writes: ``self`` of ``add_``, ``out=``)."""
        writes = self._writes.get(id(func))
        if writes is None:
            writes = self._writes[id(func)] = _written_arguments(func)
        for index, name in writes:
            value = args[index] if index < len(args) else kwargs.get(name)
            for tensor in value if isinstance(value, (list, tuple)) else (value,):
                key = _key(tensor)
                if key in self.tracked:
                    self.written.add(key)
                    self._save(key)

    def everything(self) -> None:
        """Copy every tracked tensor not copied yet: a forward follows that no tape watches."""
        if not self.whole:
            return
        for key in self.tracked:
            self._save(key)

    def put_back(self) -> None:
        """Each tensor written (its version moved, or an op was seen writing it) as it was."""
        import torch

        for key, saved in self.saved.items():
            for tensor, version, copy in saved:
                if tensor._version != version or key in self.written:
                    with torch.no_grad():
                        tensor.copy_(copy)

    def _save(self, key: int) -> None:
        if key not in self.saved:
            self.saved[key] = [(t, t._version, t.detach().clone()) for t in self.tracked[key]]


def _storage(tensor: Any) -> int:
    """Where a tensor's data lives, which every view of it shares; a sparse tensor, which has
    no storage to ask, by itself (no op's written argument then finds it: it is copied up
    front, by ``everything``)."""
    import torch

    if tensor.layout != torch.strided:
        return id(tensor)
    return tensor.untyped_storage().data_ptr()


def _key(value: Any) -> int | None:
    import torch

    if type(value) not in (torch.Tensor, torch.nn.Parameter) or value.device.type != "cpu":
        return None
    if value.layout != torch.strided:
        return None
    return _storage(value)


def _written_arguments(func: Any) -> tuple[tuple[int, str], ...]:
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.is_mutable:
        return ()
    return tuple(
        (i, arg.name)
        for i, arg in enumerate(schema.arguments)
        if arg.alias_info is not None and arg.alias_info.is_write
    )


def current() -> Kept | None:
    """The profile's ``Kept``, where one is open (``keeping``)."""
    return _KEPT.get()


def everything() -> None:
    """Copy what the profile's ``Kept`` has not copied yet, before a forward no tape watches."""
    kept = _KEPT.get()
    if kept is not None:
        kept.everything()


@contextlib.contextmanager
def keeping(tensors: list[Any], whole: bool = True) -> Iterator[Kept]:
    """A ``Kept`` of ``tensors`` for the forwards run inside; what they wrote put back after."""
    kept = Kept(tensors, whole)
    token = _KEPT.set(kept)
    try:
        yield kept
    finally:
        _KEPT.reset(token)
        kept.put_back()
