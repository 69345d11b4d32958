"""Whether a forward read tensor values into Python: what decides if the path one real
forward took (the eager tape) depends on values, or on shapes alone as a graph does.

Values reach Python through ops a dispatch mode sees (``DATA_OPS``: ``.item()``, a branch on a
value, ``nonzero``) and through methods it does not (``VALUE_METHODS``: ``.tolist()``,
``.numpy()``), which ``value_reads`` watches while a forward runs.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

DATA_OPS = frozenset(
    {"_local_scalar_dense", "is_nonzero", "nonzero", "masked_select", "unique", "equal"}
)
"""Ops that hand a tensor's values to Python or size an output by them: fake tensors, which
have no values, cannot run a forward that calls one (a detector's ``.item()`` and NMS)."""

VALUE_METHODS = ("tolist", "numpy", "__array__", "__dlpack__")
"""Tensor methods that hand values to Python with no ATen op a dispatch mode would see."""


@contextlib.contextmanager
def value_reads() -> Any:
    """While it is open, a call of ``VALUE_METHODS`` on any tensor is noted in the list it
    yields: the method's name and the address of the tensor's storage (``extents.StorageKey``
    compares equal to it; None for a tensor without one). The methods are wrapped on
    ``torch.Tensor`` and put back on exit: a function mode would see them too, but its
    presence alone turns off fast paths (MultiheadAttention's checks ``has_torch_function``),
    so the forward would not be the one the model runs."""
    seen: list[tuple[str, int | None]] = []
    saved = {name: torch.Tensor.__dict__.get(name) for name in VALUE_METHODS}

    def noting(name: str) -> Any:
        method = getattr(torch.Tensor, name)

        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            try:
                seen.append((name, self.untyped_storage()._cdata))
            except (RuntimeError, NotImplementedError):  # no storage (sparse, nested)
                seen.append((name, None))
            return method(self, *args, **kwargs)

        return read

    for name in VALUE_METHODS:
        setattr(torch.Tensor, name, noting(name))
    try:
        yield seen
    finally:
        for name, value in saved.items():
            if value is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, value)


def reads_data(nodes: list) -> bool:
    """Whether a tape's nodes (``NodeCost``) called one of ``DATA_OPS``."""
    return any(node.target.rpartition(".")[2] in DATA_OPS for node in nodes)
