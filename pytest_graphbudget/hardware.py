"""Hardware profiles and the roofline: peak FLOP/s per dtype, memory bandwidth, ridge point.

A subgraph whose arithmetic intensity (FLOPs per byte moved) reaches the ridge point
``peak / bandwidth`` is compute-bound; below it, memory-bound. Figures are the vendors'
published dense peaks (no structured sparsity); sources are listed in ``docs/metrics.md``.
A GPU's kernels are priced at its family's fitted shares of those peaks, scaled by what a
large matmul was measured to reach on it (``matmul_tflops``). Users add their own profiles
from TOML tables (see ``from_table``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_graphbudget import hardware_table
from pytest_graphbudget.errors import GraphBudgetError, closest
from pytest_graphbudget.families import Family, families
from pytest_graphbudget.hardware_table import (
    GIGA,
    TERA,
    bandwidth_of,
    fractions,
    number,
    peaks_of,
    text,
)
from pytest_graphbudget.rates import PRICED_BY_KERNELS, KernelRate, kernel_tables


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
    family: str = ""
    """A GPU family (``FAMILIES``): its fitted efficiencies and launch cost price each kernel."""
    efficiency: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Per kind (``EFFICIENCY_KINDS``): the fractions of peak FLOP/s and of bandwidth reached."""
    launch_s: float = 0.0
    """The fixed cost of one kernel launch (seconds), on top of its roofline time."""
    compiled_efficiency: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """The same fractions for a compiled model's fused kernels, where they differ (a kind
    missing here takes ``efficiency``'s)."""
    compute_scale: float = 1.0
    """What the family's compute fractions were multiplied by for this card: its measured
    matmul's share of its datasheet over the family's fit card's (``matmul_tflops``)."""
    float32_share: float | None = None
    """The share of the float32 peak a large float32 product reaches off the tensor cores
    (``hardware_table.float32_share``): it anchors a float32 kernel's compute share, the
    family's shares (float16's) giving only each kind's share relative to a product's."""
    channels_last: Mapping[str, float] = field(default_factory=dict)
    """Its family's factors on an eager convolution's roofline time when its input is
    channels-last (``families.Family.channels_last``)."""
    compute_capability: tuple[int, int] | None = None
    """A CUDA GPU's compute capability (``(8, 9)``; its family's when not given): its peak
    memory is counted as the GPU's caching allocator counts it, with the cuBLAS and cuDNN
    workspaces the capability sets (``engine.allocator``). None: a CPU, or a GPU that is not
    CUDA's, whose memory is counted as on the host."""

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype`` ("float32", "bfloat16", ...), falling back to float32."""
        return self.peak_flops.get(dtype) or self.peak_flops["float32"]

    def ridge_point(self, dtype: str = "float32") -> float:
        return self.peak(dtype) / self.bandwidth

    def time(self, flops: float, traffic: float, dtype: str = "float32") -> float:
        """Roofline time: whichever of compute and memory takes longer."""
        return max(flops / self.peak(dtype), traffic / self.bandwidth)

    def kind_time(
        self,
        kind: str,
        flops: float,
        traffic: float,
        dtype: str = "float32",
        compiled: bool = False,
        channels_last: bool = False,
    ) -> float:
        """One kernel of efficiency ``kind``: the launch, then whichever of compute and memory
        takes longer at that kind's fractions of the peaks (1 where the profile has none); a
        compiled model's fused kernel at ``compiled_efficiency``'s fractions where it has
        the kind. A float32 kernel off the tensor cores takes its kind's share relative to a
        product's, times ``float32_share``. An eager convolution on a ``channels_last`` input
        takes its family's factor on its roofline time."""
        fractions = self.compiled_efficiency.get(kind) if compiled else None
        compute, memory = fractions or self.efficiency.get(kind, (1.0, 1.0))
        if self.float32_share and (dtype == "float32" or dtype not in self.peak_flops):
            # off the tensor cores the fit timed: float32, or a dtype without a peak of its own,
            # run at float32's (turing's bfloat16 and TF32, which its tensor cores lack)
            table = self.compiled_efficiency if fractions else self.efficiency
            compute *= self.float32_share / table.get("matmul", (1.0, 1.0))[0]
        roof = max(flops / (compute * self.peak(dtype)), traffic / (memory * self.bandwidth))
        if channels_last and not compiled:
            roof *= self.channels_last.get(kind, 1.0)
        return self.launch_s + roof

    def kernel(self, kind: str, dtype: str = "float32") -> KernelRate | None:
        """The calibrated rate of ``kind`` kernels in ``dtype`` (else float32's), if any."""
        rates = self.kernels.get(dtype) or self.kernels.get("float32") or {}
        return rates.get(kind)


def pricing_digest(hw: Any) -> str:
    """A short digest of everything a latency is priced from on ``hw`` (its peaks, family,
    fitted shares, launch cost, compute scale, calibrated kernel rates) and a GPU's memory
    counted by (its compute capability), so that ``compare`` can tell two profiles of one
    hardware name priced on an edited profile."""
    figures = {
        "peaks": dict(hw.peak_flops),
        "bandwidth": hw.bandwidth,
        "family": hw.family,
        "efficiency": dict(hw.efficiency),
        "compiled": dict(hw.compiled_efficiency),
        "launch_s": hw.launch_s,
        "compute_scale": hw.compute_scale,
        "float32_share": hw.float32_share,
        "kernels": {d: {k: asdict(r) for k, r in rates.items()} for d, rates in hw.kernels.items()},
    }
    if hw.compute_capability:  # what its peak memory is counted by (engine.allocator)
        figures["compute_capability"] = list(hw.compute_capability)
    return hashlib.sha256(json.dumps(figures, sort_keys=True).encode()).hexdigest()[:12]


EFFICIENCY_KINDS = tuple(
    "conv conv_grouped depthwise matmul matmul_small attention norm pool elementwise".split()
)
"""The kinds a GPU profile's efficiencies are given for (``engine/latency.py`` maps every
op's kernel kind to one): dense and pointwise convolutions, grouped and depthwise ones,
matrix products (``matmul_small``: under ``latency.SMALL_MATMUL`` FLOPs), attention,
normalizations and softmax, pooling, and elementwise ops and copies."""
DATA = "hardware_profiles.toml"
"""The shipped GPU profiles and each family's fitted efficiencies, inside the package."""


def _toml() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib


def _read_data() -> dict[str, Any]:
    return _toml().loads((Path(__file__).parent / DATA).read_text("utf-8"))


def profiles(extra: Mapping[str, Hardware] | None = None) -> dict[str, Hardware]:
    """Every known profile by name: the built-ins, less those a user's profile is named like
    (in any case), then the user's."""
    user = dict(extra or {})
    mine = {name.lower() for name in user}
    table = {hw.name: hw for hw in BUILTIN if hw.name.lower() not in mine}
    table.update(user)
    return table


def get(name: str | Hardware, extra: Mapping[str, Hardware] | None = None) -> Hardware:
    """Look a profile up by name or alias, in any case; an unknown name lists the known ones.
    Without ``extra``, the profiles of the nearest ``pyproject.toml`` with a
    ``[tool.graph_budget]`` table from the working directory up count too
    (``project_profiles``); pytest and ``graph-budget`` pass their project's.

    A name before any alias: a user's profile named like a shipped card (or its alias) is the
    user's. Then aliases, the user's first. A shipped card the user shadowed by name keeps its
    other aliases, and is returned under the alias asked for, so that looking its ``name`` up
    again (a budget keeps only the name) finds that card, not the user's."""
    if isinstance(name, Hardware):
        return name
    if not isinstance(name, str):
        raise GraphBudgetError(f"hardware must be a profile name (a string), got {name!r}")
    user = project_profiles() if extra is None else extra
    table = profiles(user)
    key = name.lower()
    for hw in table.values():
        if key == hw.name.lower():
            return hw
    for hw in (*user.values(), *BUILTIN):
        for alias in hw.aliases:
            if key == alias.lower():
                return hw if table.get(hw.name) is hw else replace(hw, name=alias, aliases=())
    known = ", ".join(sorted(table))
    hint = closest(name, [*table, *(a for h in table.values() for a in h.aliases)]) if name else ""
    raise GraphBudgetError(f"unknown hardware {name!r}{hint}; known profiles: {known}")


_PROJECT: dict[Path, tuple[int, dict[str, Hardware]]] = {}


def project_profiles(start: Path | None = None) -> dict[str, Hardware]:
    """The ``[tool.graph_budget.hardware_profiles]`` of the nearest ``pyproject.toml`` from
    ``start`` (the working directory) upward that has a ``[tool.graph_budget]`` table; ``{}``
    when none has. Read again only when the file changes. A profile the file gets wrong is a
    one-line error naming the file."""
    folder = (start or Path.cwd()).resolve()
    for place in (folder, *folder.parents):
        path = place / "pyproject.toml"
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            continue
        if path in _PROJECT and _PROJECT[path][0] == stamp:
            found = _PROJECT[path][1]
        else:
            found = _read_project(path)
            _PROJECT[path] = (stamp, found)
        if found is not None:
            return found
    return {}


def _read_project(path: Path) -> dict[str, Hardware] | None:
    """The profiles of one pyproject.toml; None when it has no ``[tool.graph_budget]``."""
    try:
        data = _toml().loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None  # the settings reader says what is wrong with it, where it is read
    table = data.get("tool", {}).get("graph_budget") if isinstance(data.get("tool"), dict) else None
    if not isinstance(table, dict):
        return None
    tables = table.get("hardware_profiles", {})
    if not isinstance(tables, dict):
        raise GraphBudgetError(f"{path}: [tool.graph_budget] hardware_profiles must be tables")
    try:
        return from_tables(tables)
    except GraphBudgetError as exc:
        raise GraphBudgetError(f"{path}: [tool.graph_budget.hardware_profiles]: {exc}") from None


TABLE_KEYS = (
    "description",
    "peak_tflops",
    "peak_flops",
    "bandwidth_gbs",
    "bandwidth",
    "family",
    "efficiency",
    "launch_us",
    "matmul_tflops",
    "matmul_tflops_float32",
    "matmul_source",
    "source",
    "aliases",
    "compute_capability",
)
"""The keys of a profile's table, besides its ``kernels`` tables (``rates.kernel_tables``)."""


def from_table(name: str, table: Mapping[str, object]) -> Hardware:
    """``read_table``'s profile, refused if named like a shipped GPU (or one of its aliases)
    with a datasheet alone (``check_names``): from Python it had priced the card as a bare
    roofline (ResNet-50 "on h100" in 0.2 ms for 2.7)."""
    found = read_table(name, table)
    check_names({name: found})
    return found


def read_table(name: str, table: Mapping[str, object]) -> Hardware:
    """A user profile from TOML: ``peak_flops = {float32 = 1e13}`` (or ``peak_tflops``) and
    ``bandwidth_gbs`` (or ``bandwidth`` in bytes/s); ``family = "ada"`` (``FAMILIES``) prices
    each kernel at that family's fitted efficiencies and launch cost, which ``launch_us`` and
    ``efficiency = {conv = [compute, memory], ...}`` may override; ``matmul_tflops`` scales
    the family's compute shares. A key it does not know is refused: misspelt, it would be
    silently left out of every estimate."""
    if not isinstance(name, str) or not name:
        raise GraphBudgetError(f"a hardware profile's name must be a string, got {name!r}")
    if not isinstance(table, Mapping):
        raise GraphBudgetError(f"hardware {name!r}: must be a table, got {table!r}")
    for key in table:
        if key not in TABLE_KEYS and key != "kernels" and not str(key).startswith("kernels_"):
            keys = (*TABLE_KEYS, "kernels", "kernels_<dtype>")
            hint = closest(str(key), keys) or f"; keys: {', '.join(keys)}"
            raise GraphBudgetError(f"hardware {name!r}: unknown key {key!r}{hint}")
    peaks = peaks_of(name, table)
    bandwidth = bandwidth_of(name, table)
    texts = {key: text(name, key, table[key]) for key in ("description", "source") if key in table}
    text(name, "matmul_source", table.get("matmul_source", ""))
    aliases = table.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise GraphBudgetError(
            f"hardware {name!r}: aliases must be a list of names, got {aliases!r}"
        )
    figures = _family_figures(name, table, peaks)
    family = FAMILIES[figures["family"]] if figures.get("family") else None
    cc = family.compute_capability if family else None
    if "compute_capability" in table:
        cc = hardware_table.capability(name, table["compute_capability"])
    if family and family.bfloat16:  # else float32's:
        peaks.setdefault("bfloat16", peaks["float16"])  # 2-16x slower than the card runs it
        peaks.setdefault("tf32", peaks["float16"] / 2)  # float32 convolutions, PyTorch's default
    return Hardware(
        name=name,
        description=texts.get("description", name),
        peak_flops=peaks,
        bandwidth=bandwidth,
        source=texts.get("source", "user profile"),
        aliases=tuple(aliases),
        kernels=kernel_tables(name, table),
        compute_capability=cc,
        **figures,
    )


def _family_figures(
    name: str, table: Mapping[str, object], peaks: Mapping[str, float]
) -> dict[str, Any]:
    """``family``, ``efficiency``, ``compiled_efficiency``, ``launch_s`` and ``compute_scale``
    of a profile: its family's, the compute fractions scaled by what its ``matmul_tflops``
    says it sustains, then its own (a kind the profile names in ``efficiency`` is priced at
    its own fractions, eager and compiled)."""
    if not any(k in table for k in PRICED_BY_KERNELS):
        return {}
    family = table.get("family")
    if family is not None and (not isinstance(family, str) or family not in FAMILIES):
        known = ", ".join(FAMILIES)
        hint = closest(family, list(FAMILIES)) if isinstance(family, str) else ""
        raise GraphBudgetError(
            f"hardware {name!r}: unknown family {family!r}{hint}; known: {known}"
        )
    if family and "float16" not in peaks:  # else float16 models would take the float32 peak
        raise GraphBudgetError(
            f"hardware {name!r}: family {family!r} needs the card's float16 tensor peak "
            "(peak_tflops.float16): the family's shares were fitted on it"
        )
    base = FAMILIES[family] if family else None
    scale = hardware_table.compute_scale(name, table, peaks, base and base.matmul_share)
    share = hardware_table.float32_share(name, table, peaks, base and base.float32_share, scale)
    efficiency = {k: (c * scale, m) for k, (c, m) in base.efficiency.items()} if base else {}
    compiled = {k: (c * scale, m) for k, (c, m) in base.compiled.items()} if base else {}
    own = table.get("efficiency", {})
    if not isinstance(own, Mapping):
        raise GraphBudgetError(f"hardware {name!r}: efficiency must be a table of kinds")
    for kind, pair in own.items():
        if kind not in EFFICIENCY_KINDS:
            hint = closest(str(kind), EFFICIENCY_KINDS) or f"; kinds: {', '.join(EFFICIENCY_KINDS)}"
            raise GraphBudgetError(f"hardware {name!r}: efficiency.{kind}: unknown kind{hint}")
        efficiency[str(kind)] = fractions(name, str(kind), pair)
        compiled.pop(str(kind), None)
    if share is not None and not efficiency:  # kind_time, which it scales, would never run
        raise GraphBudgetError(
            f"hardware {name!r}: matmul_tflops_float32 needs a family (or efficiency shares): "
            "it sets what a float32 product reaches of them"
        )
    launch = base.launch_s if base else 0.0
    if "launch_us" in table:
        launch = number(name, "launch_us", table["launch_us"]) * 1e-6
        if 0 < launch < 1e-8:  # seconds written where microseconds go
            raise GraphBudgetError(
                f"hardware {name!r}: launch_us = {table['launch_us']!r} is "
                f"{launch * 1e9:.2g} ns: launch_us is in microseconds (a GPU's is about 2 to 10)"
            )
    return {
        "family": family or "",
        "efficiency": efficiency,
        "compiled_efficiency": compiled,
        "launch_s": launch,
        "compute_scale": scale,
        "float32_share": share,
        "channels_last": dict(base.channels_last) if base else {},
    }


def from_tables(tables: Mapping[str, Any]) -> dict[str, Hardware]:
    """User profiles from a table of tables (``[<prefix>.<name>]`` sections)."""
    found: dict[str, Hardware] = {}
    for name, table in tables.items():
        if not isinstance(table, Mapping):
            raise GraphBudgetError(f"hardware {name!r}: must be a table, got {table!r}")
        found[str(name)] = read_table(str(name), table)
    check_names(found)
    return found


def check_names(found: Mapping[str, Hardware]) -> None:
    """User profiles whose names would leave a profile unreachable, or drop what a shipped
    card of that name was priced with, are refused (``hardware_table.check_names``)."""
    aliases = {alias.lower(): hw for hw in BUILTIN for alias in hw.aliases}
    hardware_table.check_names(found, {hw.name.lower(): hw for hw in BUILTIN}, aliases)


_DATA = _read_data()
FAMILIES: dict[str, Family] = families(_DATA["families"], _DATA["gpus"], _DATA["channels_last"])
"""Every GPU family by name (``family = ...`` in a profile)."""

BUILTIN: tuple[Hardware, ...] = (
    Hardware(
        name="generic",
        description="Reference machine, ridge point 10 FLOPs/byte (a round rule of thumb)",
        peak_flops={"float32": 1 * TERA, "float16": 1 * TERA, "bfloat16": 1 * TERA},
        bandwidth=100 * GIGA,
        source="convention: 1 TFLOP/s over 100 GB/s",
    ),
    *(
        replace(
            read_table(name, table),
            source="; measured matmul: ".join(
                [table["source"], *([table["matmul_source"]] if "matmul_source" in table else [])]
            ),
            aliases=tuple(table.get("aliases", ())),
        )
        for name, table in _DATA["gpus"].items()
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
