"""Hardware profiles and the roofline: peak FLOP/s per dtype, memory bandwidth, ridge point.

A subgraph whose arithmetic intensity (FLOPs per byte moved) reaches the ridge point
``peak / bandwidth`` is compute-bound; below it, memory-bound. Figures are the vendors'
published dense peaks (no structured sparsity); sources are listed in ``docs/metrics.md``.
Users add their own profiles from TOML tables (see ``from_table``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError, closest

TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True)
class KernelRate:
    """What one kind of kernel achieves on a calibrated machine: its FLOP/s, its bytes/s and a
    fixed cost per launch (on a CPU, eager dispatch: microseconds that dominate small ops)."""

    flops_per_s: float
    bytes_per_s: float
    overhead_s: float = 0.0

    def time(self, flops: float, traffic: float) -> float:
        """One launch: the overhead, then whichever of compute and memory takes longer."""
        return self.overhead_s + max(flops / self.flops_per_s, traffic / self.bytes_per_s)


@dataclass(frozen=True)
class Hardware:
    """One accelerator or CPU: dense peak FLOP/s per dtype and DRAM bandwidth in bytes/s."""

    name: str
    description: str
    peak_flops: Mapping[str, float]
    bandwidth: float
    source: str = ""
    aliases: tuple[str, ...] = field(default=())
    # measured rates by dtype, then kernel kind (``graph-budget hardware --calibrate``)
    kernels: Mapping[str, Mapping[str, KernelRate]] = field(default_factory=dict)

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype`` ("float32", "bfloat16", ...), falling back to float32."""
        return self.peak_flops.get(dtype) or self.peak_flops["float32"]

    def ridge_point(self, dtype: str = "float32") -> float:
        return self.peak(dtype) / self.bandwidth

    def time(self, flops: float, traffic: float, dtype: str = "float32") -> float:
        """Roofline time: whichever of compute and memory takes longer."""
        return max(flops / self.peak(dtype), traffic / self.bandwidth)

    def kernel(self, kind: str, dtype: str = "float32") -> KernelRate | None:
        """The calibrated rate of ``kind`` kernels in ``dtype`` (else float32's), if any."""
        rates = self.kernels.get(dtype) or self.kernels.get("float32") or {}
        return rates.get(kind)


BUILTIN: tuple[Hardware, ...] = (
    Hardware(
        name="generic",
        description="Reference machine, ridge point 10 FLOPs/byte (a round rule of thumb)",
        peak_flops={"float32": 1 * TERA, "float16": 1 * TERA, "bfloat16": 1 * TERA},
        bandwidth=100 * GIGA,
        source="convention: 1 TFLOP/s over 100 GB/s",
    ),
    Hardware(
        name="a100",
        description="NVIDIA A100 SXM4 80GB",
        peak_flops={
            "float32": 19.5 * TERA,
            "tf32": 156 * TERA,
            "float16": 312 * TERA,
            "bfloat16": 312 * TERA,
            "int8": 624 * TERA,
            "float64": 19.5 * TERA,
        },
        bandwidth=2039 * GIGA,
        source="NVIDIA A100 Tensor Core GPU datasheet (2021)",
        aliases=("a100-80gb", "a100-sxm"),
    ),
    Hardware(
        name="h100",
        description="NVIDIA H100 SXM5 80GB",
        peak_flops={
            "float32": 67 * TERA,
            "tf32": 494.7 * TERA,
            "float16": 989.4 * TERA,
            "bfloat16": 989.4 * TERA,
            "float8_e4m3fn": 1978.9 * TERA,
            "int8": 1978.9 * TERA,
            "float64": 34 * TERA,
        },
        bandwidth=3350 * GIGA,
        source="NVIDIA H100 Tensor Core GPU datasheet (2023), dense figures",
        aliases=("h100-sxm",),
    ),
    Hardware(
        name="t4",
        description="NVIDIA T4 16GB",
        peak_flops={"float32": 8.1 * TERA, "float16": 65 * TERA, "int8": 130 * TERA},
        bandwidth=320 * GIGA,
        source="NVIDIA T4 Tensor Core GPU datasheet (2019)",
    ),
    Hardware(
        name="epyc-9654",
        description="AMD EPYC 9654 (96 Zen 4 cores, 2.4 GHz base, 12 x DDR5-4800)",
        # 96 cores x 2 FMA pipes x 8 fp32 lanes (256-bit) x 2 FLOPs x 2.4 GHz
        peak_flops={
            "float32": 96 * 2 * 8 * 2 * 2.4 * GIGA,
            "bfloat16": 96 * 2 * 16 * 2 * 2.4 * GIGA,
        },
        bandwidth=12 * 4800e6 * 8,
        source="AMD EPYC 9004 product brief; peak from core count, FMA width and base clock",
        aliases=("cpu", "server-cpu"),
    ),
)


def profiles(extra: Mapping[str, Hardware] | None = None) -> dict[str, Hardware]:
    """Every known profile by name (built-ins, then the user's, which may override)."""
    table = {hw.name: hw for hw in BUILTIN}
    table.update(extra or {})
    return table


def get(name: str | Hardware, extra: Mapping[str, Hardware] | None = None) -> Hardware:
    """Look a profile up by name or alias; an unknown name lists the known ones."""
    if isinstance(name, Hardware):
        return name
    table = profiles(extra)
    key = name.lower()
    for hw in table.values():
        if key == hw.name or key in hw.aliases:
            return hw
    known = ", ".join(sorted(table))
    raise GraphBudgetError(f"unknown hardware {name!r}; known profiles: {known}")


def from_table(name: str, table: Mapping[str, object]) -> Hardware:
    """A user profile from TOML: ``peak_flops = {float32 = 1e13}`` (or ``peak_tflops``) and
    ``bandwidth_gbs`` (or ``bandwidth`` in bytes/s)."""
    try:
        if "peak_tflops" in table:
            peaks = {str(k): float(v) * TERA for k, v in dict(table["peak_tflops"]).items()}
        else:
            peaks = {str(k): float(v) for k, v in dict(table["peak_flops"]).items()}
        bandwidth = (
            float(table["bandwidth_gbs"]) * GIGA
            if "bandwidth_gbs" in table
            else float(table["bandwidth"])
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise GraphBudgetError(
            f"hardware {name!r}: needs peak_tflops (or peak_flops) per dtype and bandwidth_gbs "
            f"(or bandwidth): {exc}"
        ) from None
    except OverflowError:  # an integer beyond any float (legal TOML) is no figure either
        peaks, bandwidth = {"float32": math.inf}, math.inf
    if "float32" not in peaks:
        raise GraphBudgetError(f"hardware {name!r}: peak for float32 is required")
    figures = [*peaks.values(), bandwidth]
    if not all(math.isfinite(v) and v > 0 for v in figures):  # a ridge point needs both > 0
        raise GraphBudgetError(
            f"hardware {name!r}: peaks and bandwidth must be finite positive numbers"
        )
    return Hardware(
        name=name,
        description=str(table.get("description", name)),
        peak_flops=peaks,
        bandwidth=bandwidth,
        source="user profile",
        kernels=_kernel_tables(name, table),
    )


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
    "view",
)
"""The kernel kinds a calibration times and ``engine/latency.py`` prices ops by. A profile
naming another is refused: a misspelt kind would otherwise leave its ops on the roofline."""
KERNEL_DTYPES = ("float32", "bfloat16", "float16", "float64")
"""The dtypes of ``[kernels_<dtype>]`` tables, besides those the profile has a peak for."""


def _kernel_tables(name: str, table: Mapping[str, object]) -> dict[str, dict[str, KernelRate]]:
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
    return found


def _kernel_rate(name: str, where: str, value: object) -> KernelRate:
    try:
        figures = [float(value[k]) for k in KERNEL_KEYS]  # type: ignore[index]
    except (KeyError, TypeError, ValueError, OverflowError):
        raise GraphBudgetError(
            f"hardware {name!r}: {where} needs numbers {', '.join(KERNEL_KEYS)}"
        ) from None
    rate, bandwidth, overhead = figures
    if not (0 < rate < math.inf and 0 < bandwidth < math.inf and 0 <= overhead < math.inf):
        raise GraphBudgetError(
            f"hardware {name!r}: {where}: rates must be finite positive, overhead_s >= 0"
        )
    return KernelRate(rate, bandwidth, overhead)


def from_tables(tables: Mapping[str, Any]) -> dict[str, Hardware]:
    """User profiles from a table of tables (``[<prefix>.<name>]`` sections)."""
    found = {}
    for name, table in tables.items():
        if not isinstance(table, Mapping):
            raise GraphBudgetError(f"hardware {name!r}: must be a table, got {table!r}")
        found[str(name)] = from_table(str(name), table)
    return found
