"""Budgets: markers and TOML keys -> checks -> findings. Pure functions, no pytest here.

Each limit key maps to the profile figure it bounds (``LIMITS``); adding a marker is one entry.
``check`` compares a profile with a ``Budget`` and returns ``Finding``s; whoever calls it
(the plugin, the CLI) decides how to show them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.units import (
    format_bytes,
    format_count,
    format_ratio,
    format_seconds,
    parse,
)


@dataclass(frozen=True)
class Limit:
    """One budget key: the profile figure it bounds, how its values are written, which way."""

    figure: str
    kind: str  # units.parse kind: count, bytes, seconds, ratio
    label: str
    upper: bool = True  # a maximum (True) or a minimum (False)

    def format(self, value: float) -> str:
        if self.kind == "bytes":
            return format_bytes(value)
        if self.kind == "seconds":
            return format_seconds(value)
        if self.figure == "arithmetic_intensity":
            return f"{format_count(value)} FLOPs/B"
        return format_count(value)


LIMITS: dict[str, Limit] = {
    "flops_max": Limit("flops", "count", "FLOPs"),
    "macs_max": Limit("macs", "count", "MACs"),
    "params_max": Limit("params", "count", "params"),
    "memory_max": Limit("peak_memory_bytes", "bytes", "peak memory"),
    "weights_max": Limit("weights_bytes", "bytes", "weights"),
    "traffic_max": Limit("traffic_bytes", "bytes", "traffic"),
    "latency_max": Limit("est_latency_s", "seconds", "estimated latency"),
    "intensity_min": Limit("arithmetic_intensity", "count", "arithmetic intensity", upper=False),
}
BOTTLENECK_KEYS = ("compute_bound_min", "memory_bound_max")
BOTTLENECK_BY = {"count": "share", "flops": "flops_share", "time": "time_share"}
SETTINGS = ("hardware", "tolerance", "name")
MODEL_KEYS = ("input_shape", "seq_len", "batch", "factory", "model", "kwargs", "meta")
"""Keys of a ``[models."<name>"]`` table that say how to build the model, not what to check."""

REGRESSION_FIGURES = (
    "flops",
    "macs",
    "params",
    "peak_memory_bytes",
    "weights_bytes",
    "traffic_bytes",
)
"""Figures compared with the baseline: a growth beyond tolerance fails even under the limit."""

DEFAULT_TOLERANCE = 0.01
WARN_AT = 0.9  # a figure above 90% of its limit is worth a warning in CI


@dataclass
class Budget:
    """Everything one model is checked against."""

    limits: dict[str, float] = field(default_factory=dict)
    bottleneck: dict[str, float] = field(default_factory=dict)  # compute_bound_min, ...
    bottleneck_by: str = "count"
    hardware: str = "generic"
    tolerance: float = DEFAULT_TOLERANCE
    name: str | None = None
    lines: dict[str, int] = field(default_factory=dict)  # key -> line in its TOML file
    hardware_profiles: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """User hardware profiles (``[tool.graph_budget.hardware_profiles]``) that names may use."""


@dataclass
class Finding:
    """One verdict on one figure: a failure, a warning (near the limit) or a notice."""

    severity: str  # "fail", "warn", "notice"
    key: str
    message: str
    value: float | None = None
    limit: float | None = None


def closest(key: str, valid: list[str] | tuple[str, ...]) -> str:
    """' (did you mean X?)' for a misspelt key, or ''."""
    import difflib

    match = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def valid_keys() -> list[str]:
    return [*LIMITS, *BOTTLENECK_KEYS, "by", *SETTINGS]


def build(
    values: Mapping[str, Any],
    where: str,
    base: Budget | None = None,
    extra_keys: tuple[str, ...] = (),
    hardware_profiles: Mapping[str, Any] | None = None,
) -> Budget:
    """A ``Budget`` from marker or TOML keys, on top of ``base`` (defaults).

    Every value is parsed now, so a typo fails before any model is built; an unknown key is
    an error that names the closest valid key.
    """
    budget = (
        replace(
            base, limits=dict(base.limits), bottleneck=dict(base.bottleneck), lines=dict(base.lines)
        )
        if base
        else Budget()
    )
    if hardware_profiles is not None:
        budget.hardware_profiles = hardware_profiles
    for key, value in values.items():
        if key in LIMITS:
            budget.limits[key] = parse(value, LIMITS[key].kind, f"{key} in {where}")
        elif key in BOTTLENECK_KEYS:
            share = parse(value, "ratio", f"{key} in {where}")
            if share > 1:
                raise GraphBudgetError(f"{key} in {where}: a share between 0 and 1, got {value!r}")
            budget.bottleneck[key] = share
        elif key == "by":
            if not isinstance(value, str) or value not in BOTTLENECK_BY:
                raise GraphBudgetError(
                    f"by in {where}: one of {', '.join(map(repr, BOTTLENECK_BY))}, got {value!r}"
                )
            budget.bottleneck_by = value
        elif key == "hardware":
            from pytest_graphbudget.hardware import get

            if not isinstance(value, str):
                raise GraphBudgetError(f"hardware in {where}: a profile name, got {value!r}")
            try:
                budget.hardware = get(value, budget.hardware_profiles).name
            except GraphBudgetError as exc:
                raise GraphBudgetError(f"hardware in {where}: {exc}") from None
        elif key == "tolerance":
            budget.tolerance = parse(value, "ratio", f"tolerance in {where}")
        elif key == "name":
            if not isinstance(value, str):
                raise GraphBudgetError(f"name in {where}: a string, got {value!r}")
            budget.name = value
        elif key not in extra_keys:
            hint = closest(key, valid_keys() + list(extra_keys))
            raise GraphBudgetError(f"unknown budget key {key!r} in {where}{hint}")
    return budget


def figure(profile: Any, name: str) -> float:
    """A profile figure by name, from a ``Profile`` or its ``to_dict()``."""
    if isinstance(profile, Mapping):
        return profile["totals"][name]
    return getattr(profile, name)


def top_subgraphs(profile: Any, key: str = "flops", n: int = 3) -> list[tuple[str, float]]:
    """The subgraphs that contribute most to ``key`` ("flops", "traffic"), as (label, value)."""
    rows = []
    subgraphs = (
        profile["subgraphs"]
        if isinstance(profile, Mapping)
        else [s.to_dict() for s in profile.subgraphs]
    )
    for s in subgraphs:
        value = (
            s["flops"] if key == "flops" else s["bytes_in"] + s["bytes_out"] + s["bytes_weights"]
        )
        rows.append((f"{s['module'] or '<root>'} ({s['kind']})", value))
    rows.sort(key=lambda r: -r[1])
    return rows[:n]


def check(profile: Any, budget: Budget) -> list[Finding]:
    """Compare a profile with its budget: failures, and warnings above 90% of a limit."""
    findings = [
        f for key, value in budget.limits.items() if (f := _check_limit(profile, key, value))
    ]
    mix = profile["bottleneck"] if isinstance(profile, Mapping) else profile.bottleneck
    column = BOTTLENECK_BY[budget.bottleneck_by]
    for key, share in budget.bottleneck.items():
        side = "compute_bound" if key.startswith("compute") else "memory_bound"
        value = mix[side][column]
        minimum = key.endswith("_min")
        if value < share if minimum else value > share:
            relation = "below" if minimum else "above"
            what = f"{side.replace('_', '-')} share by {budget.bottleneck_by}"
            message = f"{what} {format_ratio(value)} is {relation} {key} {format_ratio(share)}"
            findings.append(Finding("fail", key, message, value, share))
    return findings


def _exact(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.6g}"


def _check_limit(profile: Any, key: str, limit_value: float) -> Finding | None:
    limit = LIMITS[key]
    value = figure(profile, limit.figure)
    shown, bound = limit.format(value), f"{key} {limit.format(limit_value)}"
    if shown == limit.format(limit_value):  # rounding would hide the difference: be exact
        shown, bound = _exact(value), f"{key} {_exact(limit_value)}"
    if not limit.upper:
        if value >= limit_value:
            return None
        under = format_ratio(1 - value / limit_value) if limit_value else "100%"
        return Finding(
            "fail",
            key,
            f"{limit.label} {shown} is below {bound} ({under} under)",
            value,
            limit_value,
        )
    if value > limit_value:
        over = format_ratio(value / limit_value - 1) if limit_value else "all"
        by_traffic = limit.kind == "bytes"
        top = ", ".join(
            f"{label} {format_bytes(v) if by_traffic else format_count(v)}"
            for label, v in top_subgraphs(profile, "traffic" if by_traffic else "flops")
        )
        message = f"{limit.label} {shown} exceeds {bound} ({over} over); biggest subgraphs: {top}"
        return Finding("fail", key, message, value, limit_value)
    if limit_value and value > WARN_AT * limit_value:
        share = format_ratio(value / limit_value)
        return Finding(
            "warn", key, f"{limit.label} {shown} is at {share} of {bound}", value, limit_value
        )
    return None
