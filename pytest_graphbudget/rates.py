"""Calibrated kernel rates: what one kind of kernel achieves on a machine that was measured
(``graph-budget hardware --calibrate``), the kinds a calibration times, and the ``[kernels]``
tables of a profile that hold them. ``hardware.Hardware`` carries them; ``engine/latency.py``
prices each op at its kind's rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_graphbudget.errors import GraphBudgetError, closest


@dataclass(frozen=True)
class KernelRate:
    """What one kind of kernel achieves on a calibrated machine: its FLOP/s, its bytes/s and a
    fixed cost per launch (on a CPU, eager dispatch: microseconds that dominate small ops)."""

    flops_per_s: float
    bytes_per_s: float
    overhead_s: float = 0.0

    def time(self, flops: float, traffic: float, summed: bool = False) -> float:
        """One launch: the overhead, then whichever of compute and memory takes longer, or
        (``summed``, ``SUMMED_KINDS``) both, one after the other."""
        compute, memory = flops / self.flops_per_s, traffic / self.bytes_per_s
        return self.overhead_s + (compute + memory if summed else max(compute, memory))


KERNEL_KEYS = ("flops_per_s", "bytes_per_s", "overhead_s")
COMPUTE_KINDS = (
    "conv_depthwise",
    "conv_depthwise_large",
    "conv_pointwise",
    "conv_pointwise_small_map",
    "conv_grouped",
    "conv_dense",
    "conv_dense_small_map",
    "conv_stem",
    "matmul",
    "attention",
    "attention_block",
    "nms",
    "roi_align",
    "sort",
    "compare",
)
"""The kinds whose measured rate is FLOPs per second; the others' is bytes per second."""
KERNEL_KINDS = (
    *COMPUTE_KINDS,
    "batch_norm",
    "pointwise",
    "pointwise_exp",
    "resample",
    "reduction",
    "pooling",
    "copy",
    "index",
    "select",
    "topk",
    "topk_heap",
    "view",
)
"""The kernel kinds a calibration times and ``engine/latency.py`` prices ops by. A profile
naming another is refused: a misspelt kind would otherwise leave its ops on the roofline."""
SUMMED_KINDS = frozenset({"pooling", "topk_heap", "index"})
"""Kinds whose FLOPs and bytes take their time one after the other: ATen's max pool spends
about 11 ns an output and 1.6 ns a comparison on one Xeon, whatever its stride, so neither
side alone prices 2x2, 3x3 and 5x5 windows at once (``modes.kernels.fit_sum``); a top-k's
heap spends its time per element read and per comparison, about 2.6 ns an element for a
router's top 1 of 128 experts and 4.6 for a detector's top 1,000 of 2,000,000 on one EPYC;
and an ``index``, per offset (its FLOPs: ``engine.lookups``) and per element copied, about
5 ns and 1 ns."""
KERNEL_DTYPES = ("float32", "bfloat16", "float16", "float64")
"""The dtypes of ``[kernels_<dtype>]`` tables, besides those the profile has a peak for."""


PRICED_BY_KERNELS = (
    "family", "efficiency", "launch_us", "matmul_tflops", "matmul_tflops_float32"
)  # fmt: skip
"""A profile's keys that price kernels without calibrated rates: beside ``kernels`` tables,
whose measured rates price every kernel, they would change nothing, and are refused."""


def kernel_tables(name: str, table: Mapping[str, object]) -> dict[str, dict[str, KernelRate]]:
    """``[kernels.<kind>]`` (float32) and ``[kernels_<dtype>.<kind>]`` tables: each kind's
    ``flops_per_s``, ``bytes_per_s`` and ``overhead_s``; a profile without them has none."""
    found: dict[str, dict[str, KernelRate]] = {}
    for key, kinds in table.items():
        if key != "kernels" and not str(key).startswith("kernels_"):
            continue
        dtype = "float32" if key == "kernels" else str(key).removeprefix("kernels_")
        if not isinstance(kinds, Mapping):
            raise GraphBudgetError(f"hardware {name!r}: {key} must be a table of kernel kinds")
        dtypes = (*KERNEL_DTYPES, *dict(table.get("peak_tflops", table.get("peak_flops", {}))))
        if dtype not in dtypes:
            hint = closest(dtype, dtypes)
            raise GraphBudgetError(f"hardware {name!r}: {key}: unknown dtype {dtype!r}{hint}")
        for kind in kinds:
            if kind not in KERNEL_KINDS:
                hint = closest(str(kind), KERNEL_KINDS) or f"; kinds: {', '.join(KERNEL_KINDS)}"
                raise GraphBudgetError(f"hardware {name!r}: {key}.{kind}: unknown kind{hint}")
        found[dtype] = {
            str(kind): _kernel_rate(name, f"{key}.{kind}", v) for kind, v in kinds.items()
        }
    others = [key for key in PRICED_BY_KERNELS if key in table]
    if others and any(found.values()):
        raise GraphBudgetError(
            f"hardware {name!r}: {', '.join(others)} would change nothing: the calibrated "
            "kernel rates of its kernels tables price every kernel; drop "
            f"{'it' if len(others) == 1 else 'them'}, or the kernels tables"
        )
    return found


def _kernel_rate(name: str, where: str, value: object) -> KernelRate:
    """One kind's measured rate: two rates above 0 and an overhead of 0 or more, each a TOML
    number (``true`` or a number in quotes is refused, as for every figure of a profile);
    a key besides ``KERNEL_KEYS`` is refused with its nearest (``overhead_us``)."""
    if not isinstance(value, Mapping):
        raise GraphBudgetError(
            f"hardware {name!r}: {where} must be a table of {', '.join(KERNEL_KEYS)}, got {value!r}"
        )
    for key in value:
        if key not in KERNEL_KEYS:
            hint = closest(str(key), KERNEL_KEYS) or f"; keys: {', '.join(KERNEL_KEYS)}"
            raise GraphBudgetError(f"hardware {name!r}: {where}: unknown key {key!r}{hint}")
    missing = [key for key in KERNEL_KEYS if key not in value]
    if missing:
        raise GraphBudgetError(
            f"hardware {name!r}: {where} needs numbers {', '.join(KERNEL_KEYS)}; "
            f"missing {', '.join(missing)}"
        )
    rate, bandwidth, overhead = (
        _figure(name, f"{where}.{key}", value[key], positive=key != "overhead_s")
        for key in KERNEL_KEYS
    )
    for key, figure in zip(KERNEL_KEYS, (rate, bandwidth, overhead), strict=True):
        low, high, unit = UNIT_SLIPS[key]
        if not low <= figure <= high:  # 90 meant as GFLOP/s, 30 as us: every kernel mispriced
            side = f"below {low:g}" if figure < low else f"above {high:g}"
            raise GraphBudgetError(
                f"hardware {name!r}: {where}.{key} = {value[key]!r} is {side}: give it in {unit}"
            )
    return KernelRate(rate, bandwidth, overhead)


UNIT_SLIPS = {
    "flops_per_s": (1e6, math.inf, "FLOP/s (9e10 for 90 GFLOP/s)"),
    "bytes_per_s": (1e6, math.inf, "bytes/s (2.2e10 for 22 GB/s)"),
    "overhead_s": (0.0, 0.1, "seconds (3e-05 for 30 us)"),
}
"""What a calibrated rate can be: rates from ``hardware_table``'s lowest figure (a slower
chip runs no model), an overhead under 0.1 s a kernel; outside, a figure written in another
unit. Accepted, 90 for 90 GFLOP/s and 30 for 30 us had priced ResNet-50 at 44 million
seconds. Above, no bound: a rate of 1e30 prices a side of the roofline at nothing, on
purpose."""


def _figure(name: str, where: str, value: object, positive: bool) -> float:
    """A finite number, as ``hardware_table.number`` checks the profile's other figures and
    words its error (a sibling layer: neither imports the other)."""
    figure = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            figure = float(value)
        except OverflowError:  # an integer beyond any float (legal TOML)
            figure = math.inf
    if not (math.isfinite(figure) and (figure > 0 if positive else figure >= 0)):
        bound = "> 0" if positive else ">= 0"
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}... (too large)"
        raise GraphBudgetError(f"hardware {name!r}: {where} must be a number {bound}, got {shown}")
    return figure
