"""The GPU families of ``hardware_profiles.toml``: what each kind of kernel reaches of a card's
datasheet peaks, the launch cost, and what a channels-last input does to a convolution, as
``benchmarks/gpu_fit.py`` and ``benchmarks/gpu_channels_last.py`` fitted them. ``hardware.py``
prices every card of a family with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TERA = 1e12
"""``hardware_table.TERA``: the shares are computed from FLOP/s, as ``compute_scale`` is."""


@dataclass(frozen=True)
class Family:
    """What kernels of each kind reach on one GPU family, as fractions of the datasheet's
    peak FLOP/s and bandwidth, and the fixed cost of a kernel launch, with where they come
    from (``benchmarks/gpu_fit.py``)."""

    name: str
    efficiency: Mapping[str, tuple[float, float]]
    launch_s: float
    source: str
    compiled: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """The fractions a compiled model's fused kernels reach (``execution = "compiled"``)."""
    matmul_share: float | None = None
    """The share of its float16 datasheet peak that a large matmul was measured to reach on
    the card the fractions were fitted on (``fitted_on``); None where none was measured."""
    bfloat16: bool = True
    """Whether its tensor cores run bfloat16 at the float16 rate and TF32 at half of it (ampere
    on; not turing): a card of the family without a bfloat16 or tf32 peak takes those."""
    memory_scale: float = 1.0
    """What a borrowing family's memory shares are of the lender's (hopper's were measured
    at about half ada's); already applied to ``efficiency`` and ``compiled``."""
    float32_share: float | None = None
    """The share of its float32 peak that a large float32 product (TF32 off) was measured to
    reach on that card (``matmul_tflops_float32``)."""
    channels_last: Mapping[str, float] = field(default_factory=dict)
    """Per convolution kind (``conv``, ``conv_grouped``, ``depthwise``): what an eager
    convolution's roofline time is multiplied by when its input is channels-last (cuDNN's
    NHWC kernels skip the transposes an NCHW input pays); none for a family not measured."""
    compute_capability: tuple[int, int] | None = None
    """A CUDA compute capability of its cards (``compute_capability``), which a card given
    only its family takes: a GPU's peak memory counts the workspaces it sets
    (``engine.allocator``); None for a family that is not CUDA's (cdna3)."""


def families(
    tables: Mapping[str, Any], gpus: Mapping[str, Any], layout: Mapping[str, Any]
) -> dict[str, Family]:
    """Each family of the data file; a ``borrowed`` one takes another's figures, its memory
    shares times its ``memory_scale`` where a card of it was timed (``fitted`` says how).
    ``layout``: the ``[channels_last]`` table, its ``factors`` for the ``families`` it names."""
    found = {}
    for name, table in tables.items():
        own = tables[table.get("borrowed", name)]
        card, share, share32 = gpus[own["fitted_on"]], None, None
        if "matmul_tflops" in card:  # in ``compute_scale``'s units and order: the fit card's 1.0
            measured, peak = float(card["matmul_tflops"]), float(card["peak_tflops"]["float16"])
            share = measured * TERA / (peak * TERA)
        if "matmul_tflops_float32" in card:
            share32 = float(card["matmul_tflops_float32"]) / float(card["peak_tflops"]["float32"])
        memory = float(table.get("memory_scale", 1.0))
        efficiency = {k: (float(c), float(m) * memory) for k, (c, m) in own["efficiency"].items()}
        compiled = {
            k: (float(c), float(m) * memory) for k, (c, m) in own.get("compiled", {}).items()
        }
        source = own["source"]
        if "borrowed" in table:
            source = f"{table['borrowed']}'s figures, borrowed (no public measured table of its "
            source += f"own): {own['source']}"
            if "fitted" in table:  # what a card of it, timed, changed of them
                source += f"; {table['fitted']}"
        launch = float(own["launch_us"]) * 1e-6
        bf16 = bool(table.get("bfloat16", True))
        nhwc = layout["factors"] if name in layout["families"] else {}
        cc = table.get("compute_capability")  # the family's own, not a lender's
        found[name] = Family(
            name, efficiency, launch, source, compiled, share, bf16, memory, share32,
            {str(k): float(v) for k, v in nhwc.items()},
            tuple(int(part) for part in cc.split(".")) if cc else None,
        )  # fmt: skip
    return found
