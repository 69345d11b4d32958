"""Budgets: markers and TOML keys -> checks -> findings. Pure functions, no pytest here.

Each limit key maps to the profile figure it bounds (``LIMITS``, from ``figures.TABLE``: adding
a figure or its marker is one entry there). ``check`` compares a profile with a ``Budget`` and
returns ``Finding``s; whoever calls it (the plugin, the CLI) decides how to show them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError, closest
from pytest_graphbudget.gate import figures
from pytest_graphbudget.gate.described import held_as, measured_as, priced_on
from pytest_graphbudget.gate.figures import Figure
from pytest_graphbudget.gate.ignored import missing_peak
from pytest_graphbudget.modes import request as variants
from pytest_graphbudget.modes.runtime import DEFAULT_RUNS, check_runs, noise_note
from pytest_graphbudget.units import format_exact, format_ratio, format_share, parse
from pytest_graphbudget.units import share as shares

LIMITS: dict[str, Figure] = figures.BY_BUDGET
"""Budget key -> the figure it bounds (``flops_max`` -> FLOPs), from ``figures.TABLE``."""
BOTTLENECK_KEYS = ("compute_bound_min", "memory_bound_max")
BOTTLENECK_BY = {"count": "share", "flops": "flops_share", "time": "time_share"}
SETTINGS = ("hardware", "execution", "tolerance", "name", "measure_runs", "measure_device")
MODEL_KEYS = (
    "input_shape",
    "seq_len",
    "batch",
    "factory",
    "model",
    "meta",
    "trust_pickle",
    *variants.KEYS,
    "decode",  # decode = true, context = N: the budgets check one generated token (decode.py)
    "context",
)
"""Keys of a ``[models."<name>"]`` table that say how to build (and profile) the model, not
what to check; ``variant.KEYS`` (mode, optimizer, dtype) are checked by ``build``."""

REGRESSION_FIGURES = figures.BASELINE
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
    execution: str = "eager"
    """How the model runs, which ``latency_max`` judges: "eager" or "compiled"."""
    tolerance: float = DEFAULT_TOLERANCE
    name: str | None = None
    lines: dict[str, int] = field(default_factory=dict)  # key -> line in its TOML file
    hardware_profiles: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """User hardware profiles (``[tool.graph_budget.hardware_profiles]``) that names may use."""
    allow_unsupported: bool | tuple[str, ...] = False
    """Ops without a cost formula that may still pass (``True``: all), as ``namespace.name``."""
    measure_runs: int = DEFAULT_RUNS
    """Timed runs when ``latency_measured_max`` makes the model run (``runtime.DEFAULT_RUNS``)."""
    measure_device: str | None = None
    """Where those runs run (``"cuda"``, ``"cuda:N"``, ``"cpu"``; None: where the model is)."""
    variant: variants.Variant = field(default_factory=variants.Variant)
    """How the model is profiled: mode, optimizer and dtype (``modes/request.py``)."""


@dataclass
class Finding:
    """One verdict on one figure: a failure, a warning (near the limit) or a notice."""

    severity: str  # "fail", "warn", "notice"
    key: str
    message: str
    value: float | None = None
    limit: float | None = None


def valid_keys() -> list[str]:
    return [*LIMITS, *BOTTLENECK_KEYS, "by", *SETTINGS, "allow_unsupported", *variants.KEYS]


def allowed_ops(value: Any, where: str) -> bool | tuple[str, ...]:
    """``allow_unsupported``'s value: true, false, an op name or a list of op names.

    Names are written ``aten.name``, ``aten::name``, ``ns::name``, ``ns.name`` or a bare ATen
    ``name``; an overload suffix (``aten.mm.out``) is dropped. They are kept as ``ns.name``.
    """
    if isinstance(value, bool):
        return value
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(
        isinstance(n, str) and n.strip() for n in names
    ):
        raise GraphBudgetError(
            f"allow_unsupported in {where}: true, false, an op name or a list of op names "
            f"(e.g. ['aten.nonzero', 'mylib::fused']), got {value!r}"
        )
    return tuple(dict.fromkeys(op_key(n) for n in names))


def op_key(name: str) -> str:
    """``aten::mm``, ``aten.mm.out``, ``mm`` -> ``aten.mm``; ``mylib::fused`` -> ``mylib.fused``."""
    parts = name.strip().replace("::", ".").split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else f"aten.{parts[0]}"


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
            figure = LIMITS[key]
            budget.limits[key] = parse(value, figure.unit, f"{key} in {where}", words=figure.words)
        elif key in BOTTLENECK_KEYS:
            share = shares(value, key, where, growth=False)
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
        elif key == "execution":
            budget.execution = variants.check_execution(value, where)
        elif key == "tolerance":
            budget.tolerance = shares(value, "tolerance", where)
        elif key == "name":
            if not isinstance(value, str):
                raise GraphBudgetError(f"name in {where}: a string, got {value!r}")
            budget.name = value
        elif key == "allow_unsupported":
            budget.allow_unsupported = allowed_ops(value, where)
        elif key == "measure_runs":
            budget.measure_runs = check_runs(value, f"measure_runs in {where}")
        elif key == "measure_device":
            from pytest_graphbudget.modes.device import check_name

            budget.measure_device = check_name(value, where)
        elif key in variants.KEYS:
            budget.variant = variants.with_value(budget.variant, key, value, where)
        elif key not in extra_keys:
            hint = closest(key, valid_keys() + list(extra_keys))
            raise GraphBudgetError(f"unknown budget key {key!r} in {where}{hint}")
    return budget


def measure_runs(budget: Budget) -> int | None:
    """The timed runs a budget asks for: ``measure_runs`` when it bounds the measured latency,
    else None (no other limit runs the model)."""
    return budget.measure_runs if "latency_measured_max" in budget.limits else None


def how_run(budget: Budget) -> tuple[int | None, str | None, str]:
    """How a budget has its model run: ``measure_runs(budget)``, the device they run on (only
    when they run: a project's ``measure_device`` had made every budget without a measured
    limit an error) and the execution its estimated latency prices."""
    runs = measure_runs(budget)
    return runs, budget.measure_device if runs else None, budget.execution


def figure(profile: Any, name: str) -> float | None:
    """A profile figure by name, from a ``Profile`` or its ``to_dict()``; None for a measured
    figure of a profile that was not measured."""
    if isinstance(profile, Mapping):
        return profile["totals"].get(name)
    known = figures.BY_KEY.get(name)
    if known is not None and known.measured:  # in the totals once the model has run
        return profile.to_dict()["totals"].get(name)
    return getattr(profile, name)


ROOT = "<root>"  # the model itself, in lists of modules

RANKED_BY: dict[str, str] = {f.key: f.ranked_by for f in figures.TABLE if f.ranked_by}
"""What the contributors to each figure are ranked by, as a failure message says it."""


def own_values(modules: Mapping[str, Any], key: str, total: float = 0) -> dict[str, float]:
    """A figure of each module's own (children excluded) from the inclusive figures of
    ``Profile.modules``; what no module holds (ops and parameters of the model itself) is
    ``<root>``'s, up to ``total``."""
    inclusive = {
        path: entry[key] if isinstance(entry, Mapping) else getattr(entry, key)
        for path, entry in modules.items()
    }
    own = dict(inclusive)
    for path, value in inclusive.items():
        parent = path.rpartition(".")[0] if "." in path else None
        if parent is not None and parent in own:
            own[parent] -= value
    found = {path or ROOT: value for path, value in own.items() if value > 0}
    unattributed = total - sum(found.values())
    if unattributed > 0:
        found[ROOT] = found.get(ROOT, 0) + unattributed
    return found


def owned_weights(data: Mapping[str, Any]) -> dict[str, int]:
    """Each module's own weight bytes (``Profile.to_dict()``'s), each weight once, under the
    module that registers it (a tied weight: its first name, where ``params`` counts it):
    the modules' ``weights_bytes``; a profile without them shares the model's
    ``weights_bytes`` out by each module's own params. The model's own weights are left out."""
    modules, totals = data["modules"], data["totals"]
    if any("weights_bytes" in m for m in modules.values()):
        held = {path: {"bytes": m.get("weights_bytes") or 0} for path, m in modules.items()}
        return {path: int(v) for path, v in own_values(held, "bytes").items()}
    held, params = int(totals["weights_bytes"]), int(totals["params"]) or 1
    return {path: int(v) * held // params for path, v in own_values(modules, "params").items()}


def subgraph_value(subgraph: Mapping[str, Any], figure: str, weights: bool = True) -> float:
    """What one subgraph (as in ``Profile.to_dict()``) contributes to a figure. Its peak
    memory: the activations it allocated that are live at the peak, and (``weights``) the
    weights its kernel reads, live then too; a split by module leaves those to the modules
    that hold them (``owned_weights``), or a weight two kernels read would count twice."""
    read = subgraph["bytes_weights"]
    if figure == "traffic_bytes":  # a weight two kernels read is moved twice: counted twice
        return subgraph["bytes_in"] + subgraph["bytes_out"] + read
    if figure == "weights_bytes":
        return read
    if figure == "peak_memory_bytes":
        return subgraph.get("peak_bytes", 0) + (read if weights else 0)
    if figure == "est_latency_s":
        return subgraph.get("est_latency_s", 0.0)
    return subgraph["macs" if figure == "macs" else "flops"]


def contributors(
    profile: Any, figure: str = "flops", n: int = 3
) -> tuple[str, list[tuple[str, float]]]:
    """What contributes most to a figure, and what they are ranked by: the subgraphs by
    their FLOPs, time, traffic or memory live at the peak, or the layers by their params
    (parameters belong to layers, not to kernels). Rows are (label, value), largest first."""
    data = profile if isinstance(profile, Mapping) else profile.to_dict()
    by = RANKED_BY.get(figure, RANKED_BY["flops"])
    if figure == "params":
        own = own_values(data["modules"], "params", data["totals"]["params"])
        rows = sorted(own.items(), key=lambda r: (-r[1], r[0]))
        return f"biggest layers by {by}", rows[:n]
    if figure not in RANKED_BY:
        figure = "flops"
    rows = [
        (f"{s['module'] or ROOT} ({s['kind']})", subgraph_value(s, figure))
        for s in data["subgraphs"]
    ]
    rows = [r for r in rows if r[1] > 0]
    rows.sort(key=lambda r: -r[1])
    return f"biggest subgraphs by {by}", rows[:n]


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
    if note := missing_peak(profile, {**budget.limits, **budget.bottleneck}):
        findings.append(Finding("notice", "hardware", note))
    return findings


def _check_limit(profile: Any, key: str, limit_value: float) -> Finding | None:
    limit = LIMITS[key]
    value = figure(profile, limit.key)
    if value is None:  # never a pass: nothing was compared with the limit
        return Finding(
            "fail",
            key,
            f"{key}: the model was not run, so there is no {limit.label} to check; "
            "measure it (graph_budget markers and budget files do so when the budget has "
            f"{key}; profile_model(..., measure=True) in Python)",
            None,
            limit_value,
        )
    shown, bound = limit.format(value), f"{key} {limit.format(limit_value)}"
    if shown == limit.format(limit_value):  # rounding would hide the difference: be exact
        exact = (format_exact(v, limit.key) for v in (value, limit_value))
        shown, bound = next(exact), f"{key} {next(exact)}"
    if limit.key == "est_latency_s" and (on := priced_on(profile)):
        shown += f" on {on}"
    if limit.key == "latency_measured_s" and (how := measured_as(profile)):
        shown += f" ({how})"
    if limit.key == "peak_memory_bytes" and (how := held_as(profile)):
        shown += f" ({how})"
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
        message = f"{limit.label} {shown} exceeds {bound} ({over} over{noise_note(profile, key)})"
        heading, rows = contributors(profile, limit.key) if limit.ranked_by else ("", [])
        if rows:
            top = ", ".join(f"{label} {limit.format(v)}" for label, v in rows)
            message += f"; {heading}: {top}"
        return Finding("fail", key, message, value, limit_value)
    if limit_value and value > WARN_AT * limit_value:
        share = format_share(value / limit_value)
        return Finding(
            "warn", key, f"{limit.label} {shown} is at {share} of {bound}", value, limit_value
        )
    return None


UNREGISTERED = "modules in a plain list or dict, unregistered: params leave them out, and \
model.parameters(), state_dict() and .to() miss them (nn.ModuleList or nn.ModuleDict registers \
them)"


def coverage_findings(profile: Any, budget: Budget, strict: bool = False) -> list[Finding]:
    """What the profile could not count, judged against the budget.

    - Nothing counted at all fails: a zero would pass every limit (a lookup's bytes count; an
      empty batch's, whose ops read their weights and write nothing, do not).
    - An op without a formula that may be a contraction (a floating-point input of rank 2 or
      more, or a name such as ``matmul``/``conv``/``attention``: ``costs.registry.may_contract``)
      fails, one finding per op: its uncounted FLOPs could be most of the model's. Listing
      it in ``allow_unsupported`` (or ``allow_unsupported = true``) accepts the undercount.
    - Any other op without a formula, or a module no figure but FLOPs counts (``UNREGISTERED``),
      warns (fails under ``--graph-budget-strict``); allowed ops are a notice.
    """
    data = profile if isinstance(profile, Mapping) else profile.to_dict()
    coverage = data["coverage"]
    findings = []
    totals, unsupported = data["totals"], coverage["unsupported_ops"]
    # an Embedding: bytes, 0 FLOPs; an empty batch reads its weights but writes nothing
    lookup = totals.get("traffic_bytes", 0) and totals.get("activation_peak_bytes", 1)
    empty = [i for i in data.get("inputs", []) if 0 in (i.get("shape") or [1])]
    if coverage["nodes"] == 0 or (totals["flops"] == 0 and not (lookup and not unsupported)):
        why = "the graph is empty or every op lacks a formula"
        if empty:
            why = f"input {empty[0]['name']!r} is empty (shape {list(empty[0]['shape'])})"
        findings.append(Finding("fail", "coverage", f"no operation was counted: {why}"))
    suspects = coverage.get("unsupported_contractions")
    if suspects is None:  # not recorded: any of them may be a contraction
        suspects = unsupported
    allowed = budget.allow_unsupported

    def is_allowed(op: str) -> bool:
        return allowed is True or (bool(allowed) and op_key(op) in allowed)

    accepted, other = [], []
    for op, count in sorted(unsupported.items()):
        if is_allowed(op):
            accepted.append(f"{op} x{count}")
        elif op in suspects:
            findings.append(
                Finding(
                    "fail",
                    "coverage",
                    f"{op} x{count} has no cost formula and may hide a contraction, so FLOPs "
                    f'are undercounted: accept it with allow_unsupported = ["{op}"] in the '
                    "budget (or the graph_budget marker)",
                )
            )
        else:
            other.append(f"{op} x{count}")
    severity = "fail" if strict else "warn"
    if other:
        findings.append(
            Finding(severity, "coverage", f"ops without a cost formula: {', '.join(other)}")
        )
    for where, size in coverage.get("unregistered", {}).items():
        findings.append(Finding(severity, "coverage", f"{where}: {size} params in {UNREGISTERED}"))
    if accepted:
        findings.append(
            Finding(
                "notice",
                "coverage",
                f"ops without a cost formula, allowed by allow_unsupported: {', '.join(accepted)}",
            )
        )
    return findings
