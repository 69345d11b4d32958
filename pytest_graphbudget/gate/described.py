"""How a figure was made, as the messages that show it say: the hardware and execution an
estimated latency was priced for, how a measured one ran, and what a peak memory was counted
as. A figure that does not say them cannot show it was judged as the budget asked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_graphbudget.units import format_bytes


def priced_on(profile: Any) -> str:
    """``maxq, compiled``: the hardware profile and execution an estimated latency was priced
    for, from a ``Profile`` or its ``to_dict()`` ("" when it says neither): a latency that
    does not say them cannot show it was judged on the hardware the budget asked for."""
    if isinstance(profile, Mapping):
        name = (profile.get("hardware") or {}).get("name")
        execution = profile.get("execution")
    else:
        name = getattr(getattr(profile, "hardware", None), "name", None)
        execution = getattr(profile, "execution", None)
    return ", ".join(str(part) for part in (name, execution) if part)


def measured_as(profile: Any) -> str:
    """``eager runs, not compiled``: how a measured latency ran, where the profile's estimate
    prices another execution (the timed forwards are never ``torch.compile``'d); "" where
    both are eager, so that a compiled budget's measured figure never reads as compiled."""
    if isinstance(profile, Mapping):
        execution = profile.get("execution")
    else:
        execution = getattr(profile, "execution", None)
    return "" if execution in (None, "eager") else "eager runs, not compiled"


def held_as(profile: Any) -> str:
    """``as a 9.0 GPU's CUDA caching allocator holds it, cuBLAS workspace 34.6MB``: a peak
    counted for a GPU (``Profile.cuda_memory``), whose workspaces can be most of a small
    model's peak; "" for one counted as on the host, unless it was priced for a GPU (its
    note says why: an AMD card, a training step). By compute capability, not profile name:
    a profile timed on a GPU is counted as that device's, whatever hardware it was priced on."""
    from pytest_graphbudget.engine.allocator import HOST_PEAK

    if isinstance(profile, Mapping):
        cuda, notes = profile.get("cuda_memory"), profile.get("notes") or []
    else:
        cuda, notes = getattr(profile, "cuda_memory", None), getattr(profile, "notes", [])
    if not cuda:
        host = [note for note in notes if note.startswith(HOST_PEAK)]
        return host[0].removeprefix("peak memory ") if host else ""
    spaces = [
        f"{what} workspace {format_bytes(cuda[key])}"
        for what, key in (("cuBLAS", "cublas_workspace_bytes"), ("cuDNN", "conv_workspace_bytes"))
        if cuda.get(key)
    ]
    capability = cuda["compute_capability"]
    held = f"as a compute capability {capability} GPU's CUDA caching allocator holds it"
    return ", ".join([held, *spaces])
