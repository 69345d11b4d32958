"""The one interface every model family implements, and the options a name is resolved with.

A loader is a small object: ``family`` (a label such as ``"torchvision"``), ``names()`` (the
names it offers, for listings and "did you mean" hints), ``can_load(name)`` (cheap: never
builds a model, never touches the network) and ``load(name, options)`` (builds the model and
its example inputs). The built-in loaders and those of other packages are collected through the
``graphbudget_model_loaders`` hook (``pytest_graphbudget.hookspecs``).

Nothing here imports torch: a loader imports its framework inside ``load``.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_graphbudget.errors import GraphBudgetError, UnknownModelError

if TYPE_CHECKING:
    from pytest_graphbudget.case import ModelCase

# Models above this many parameters are built on the meta device when ``meta`` is left to the
# zoo (``meta=None``): no weight is allocated, and the profile is the same.
META_PARAMS_THRESHOLD = 300_000_000


class NotFound(UnknownModelError):
    """A loader took ``name`` but found no model: ``zoo.resolve`` words the message with the
    closest names the zoo knows (a loader never imports the zoo)."""

    def __init__(self, name: str):
        super().__init__(f"unknown model {name!r}")
        self.name = name


@dataclass(frozen=True)
class LoadOptions:
    """How to build a named model and its example inputs.

    ``seq_len`` and ``batch`` override a loader's defaults; ``input_shape`` replaces the shape of
    the model's main input (an image or video tensor, or ``(batch, seq_len)`` for text). Given
    together, they must agree: a ``batch`` other than ``input_shape``'s first dimension, or a
    ``seq_len`` other than the second of a ``(batch, seq_len)`` shape, is an error (one of them
    would be dropped). ``meta``: ``True`` builds on the meta device, ``False`` allocates real
    weights, ``None`` lets the zoo decide by size (above ``META_PARAMS_THRESHOLD`` parameters).
    ``trust_pickle`` allows full pickles (which run code from the file) to be loaded.
    """

    seq_len: int | None = None
    batch: int | None = None
    input_shape: tuple[int, ...] | None = None
    meta: bool | None = None
    trust_pickle: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.trust_pickle, bool):  # "no" in a TOML file must not mean yes
            raise GraphBudgetError(f"trust_pickle must be true or false, got {self.trust_pickle!r}")
        check_meta(self.meta)
        for key in ("seq_len", "batch"):
            value = getattr(self, key)
            if value is not None and (not _is_int(value) or value < 1):
                raise GraphBudgetError(f"{key} must be a positive integer, got {value!r}")
        if self.input_shape is not None:
            shape = self.input_shape
            if isinstance(shape, str):
                shape = tuple(part.strip() for part in shape.replace("x", ",").split(","))
            try:
                shape = tuple(_dim(dim) for dim in shape)
            except (TypeError, ValueError):
                raise GraphBudgetError(
                    f"input_shape must be a list of positive integers such as 1,3,224,224, "
                    f"got {self.input_shape!r}"
                ) from None
            if not shape or any(dim < 1 for dim in shape):
                raise GraphBudgetError(
                    f"input_shape must be a list of positive integers such as 1,3,224,224, "
                    f"got {self.input_shape!r}"
                )
            object.__setattr__(self, "input_shape", shape)
            self._refuse_disagreement(shape)

    def _refuse_disagreement(self, shape: tuple[int, ...]) -> None:
        """``batch`` or ``seq_len`` beside an ``input_shape`` that says otherwise: one of the two
        would be dropped without a word (a sweep's points all profiled at one shape)."""
        if self.batch is not None and shape[0] != self.batch:
            wanted = written_shape((self.batch, *shape[1:]))
            raise GraphBudgetError(
                f"batch {self.batch} disagrees with input_shape {written_shape(shape)}, whose "
                f"first dimension is the batch: give one or the other (input_shape {wanted} "
                f"alone, or batch without input_shape)"
            )
        if self.seq_len is not None and len(shape) == 2 and shape[1] != self.seq_len:
            wanted = written_shape((shape[0], self.seq_len))
            raise GraphBudgetError(
                f"seq_len {self.seq_len} disagrees with input_shape {written_shape(shape)}, "
                f"which is (batch, seq_len): give one or the other (input_shape {wanted} "
                f"alone, or seq_len without input_shape)"
            )

    def image_shape(self, default: Sequence[int]) -> tuple[int, ...]:
        """The shape of an image-like input: ``input_shape`` if given (a ``batch`` beside it
        agrees with it), else ``default`` with its first (batch) dimension replaced by
        ``batch`` when that is given. An ``input_shape`` of another rank than ``default`` is
        refused, echoed as written (``1,3,224``): torch would read it as an unbatched input
        and blame a shape the user never wrote."""
        if self.input_shape is not None:
            if len(self.input_shape) != len(default):
                raise GraphBudgetError(
                    f"input shape {written_shape(self.input_shape)} has "
                    f"{len(self.input_shape)} dimensions; the model's input has "
                    f"{len(default)}, such as {written_shape(default)}"
                )
            return tuple(self.input_shape)
        shape = tuple(default)
        if self.batch is not None:
            shape = (self.batch, *shape[1:])
        return shape


def check_meta(meta: object) -> None:
    """Refuse a ``meta`` other than ``True``, ``False`` or ``None`` (the zoo decides): the
    string ``"false"`` would build on the meta device, ``0`` would leave it to the zoo."""
    if meta is not None and not isinstance(meta, bool):
        raise GraphBudgetError(
            f"meta must be true or false (or left out: the zoo decides by size), got {meta!r}"
        )


def written_shape(shape: Sequence[int]) -> str:
    """A shape as ``--input-shape`` takes it: ``1,3,224,224``."""
    return ",".join(str(dim) for dim in shape)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dim(value: object) -> int:
    """One dimension of an ``input_shape``: an integer, or its digits; a float is refused,
    never truncated (TOML's ``32.9`` had been read as 32)."""
    if isinstance(value, str):
        return int(value)
    if not _is_int(value):
        raise TypeError(f"not an integer: {value!r}")
    return value  # type: ignore[return-value]


class ModelLoader(abc.ABC):
    """One model family. Subclass it (or provide the same four members) and return an instance
    from a ``graphbudget_model_loaders`` hook implementation."""

    #: A short label shown in listings and reports, e.g. ``"torchvision"``.
    family: str = ""

    @abc.abstractmethod
    def names(self) -> list[str]:
        """Every name this loader offers (may be empty for loaders that take paths)."""

    def can_load(self, name: str) -> bool:
        """Whether ``name`` is one of this loader's. Must be cheap and must not build a model."""
        return name in self.names()

    @abc.abstractmethod
    def load(self, name: str, options: LoadOptions) -> ModelCase:
        """Build the model (in eval mode) and its example inputs."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} family={self.family!r}>"


LOADER_MEMBERS = ("family", "names", "can_load", "load")


def check_loader(loader: object, source: str) -> None:
    """Refuse, with one line naming ``source``, an object that is not a usable loader."""
    missing = [member for member in LOADER_MEMBERS if not hasattr(loader, member)]
    if missing:
        raise GraphBudgetError(
            f"{source} returned {loader!r} as a model loader, but it lacks "
            f"{', '.join(missing)} (see pytest_graphbudget.zoo.base.ModelLoader)"
        )
