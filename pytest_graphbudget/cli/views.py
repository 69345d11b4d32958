"""The small formatters every command's view uses: counts, bytes, shares, shapes, a profile's
headline. Pure functions of their arguments; torch is never imported, so the views also work on
saved profiles (``Profile.to_dict()``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def percent(value: float) -> str:
    """A share as a percentage that stays readable when tiny: ``0.97`` -> ``97.0%``,
    ``0.00077`` -> ``0.08%``, ``3e-8`` -> ``<0.01%``."""
    pct = value * 100
    if pct == 0:
        return "0.0%"
    if abs(pct) < 0.01:
        return "<0.01%"
    if abs(pct) < 0.1:
        return f"{pct:.2f}%"
    return f"{pct:.1f}%"


def intensity(value: float) -> str:
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def shape(dims: Sequence[int] | None) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]" if dims is not None else ""


def short_bound(label: str) -> str:
    return {"compute_bound": "compute", "memory_bound": "memory"}.get(label, label)


def inputs_text(inputs: Iterable[Any]) -> str:
    """``x 2x8 float32, mask scalar bool`` from ``InputInfo``s or their dictionaries."""
    parts = []
    for info in inputs:
        name, dims, dtype = _get(info, "name"), _get(info, "shape"), _get(info, "dtype")
        parts.append(f"{name} {'x'.join(str(d) for d in dims) or 'scalar'} {dtype}")
    return ", ".join(parts) or "none"


def _get(obj: Any, key: str) -> Any:
    return obj[key] if isinstance(obj, Mapping) else getattr(obj, key)


def headline(prof: Any) -> str:
    """The first line of ``profile`` and ``explore``: trace, partition and hardware."""
    nodes, subgraphs = prof.trace.nodes, len(prof.subgraphs)
    return (
        f"{prof.model}: {prof.trace.method} trace, {nodes} nodes in {subgraphs} subgraphs, "
        f"hardware {prof.hardware.name} (ridge point {prof.ridge_point:.1f} FLOPs/byte)"
    )
