"""The budget markers: their documentation, the budget they spell, and their misspellings.

``@pytest.mark.flops_max("22G")`` and its kind are each a claim that some model is checked:
a marker that looks like ours but is not (``flop_max``) is an error of that test, never a
marker that silently checks nothing.
"""

from __future__ import annotations

import difflib
import re

import pytest

from pytest_graphbudget.errors import GraphBudgetError, closest
from pytest_graphbudget.gate import figures
from pytest_graphbudget.gate.budgets import LIMITS, Budget, build
from pytest_graphbudget.gate.ignored import refuse_idle_optimizer, refuse_idle_runs
from pytest_graphbudget.modes.request import KEYS as VARIANT_KEYS

MARKERS = {
    **figures.markers(),
    "bottleneck": "bottleneck(compute_bound_min=None, memory_bound_max=None, by='count'): "
    "bound the compute-/memory-bound mix (by 'count', 'flops' or 'time'); needs --graph-budget",
    "graph_budget": "graph_budget(hardware='generic', execution='eager', tolerance='1%', "
    "name=None, allow_unsupported=False, mode='eval', optimizer=None, dtype=None, parallel=None, "
    "measure_runs=20, "
    "measure_device=None): "
    "per-test settings of pytest-graphbudget",
}
KEYWORDS = {
    "bottleneck": ("compute_bound_min", "memory_bound_max", "by"),
    "graph_budget": (
        "hardware",
        "execution",
        "tolerance",
        "name",
        "allow_unsupported",
        *VARIANT_KEYS,
        "measure_runs",
        "measure_device",
    ),
}
"""The keyword-only markers and the keywords each takes."""


def registered_markers(config: pytest.Config) -> set[str]:
    """Names of the markers registered with pytest (``markers`` ini lines, plugins')."""
    return {re.split(r"[:(]", line, maxsplit=1)[0].strip() for line in config.getini("markers")}


SETTINGS = {
    key: marker for marker, keys in KEYWORDS.items() for key in keys if key not in ("name", "by")
}
"""A setting written as a marker of its own (``@pytest.mark.execution("compiled")``): pytest
only warns of an unknown marker, and the test would run with the default setting. ``name``
and ``by`` are words too common to claim."""
FIGURE_WORDS = {"flops", "macs", "params", "memory", "latency", "traffic", "weights", "intensity"}
BOUND_WORDS = {"max", "min", "limit", "budget", "maximum", "minimum"}
"""A marker naming a figure and a bound in other words (``max_flops``, ``flops_limit``) is a
misspelt one of ours: pytest only warns of an unknown marker, and the test would check nothing."""


def marker_typo(name: str, registered: set[str]) -> str | None:
    """The problem with a marker that looks like one of ours but is not (``flop_max``,
    ``bottlenek``), else None. Markers registered by the project or a plugin are theirs."""
    if name in MARKERS or name in registered:
        return None
    ours = list(MARKERS)
    lowered = name.lower()  # @pytest.mark.FLOPS_MAX: pytest's marker names are case-sensitive
    if lowered in SETTINGS:
        return (
            f"unknown marker @pytest.mark.{name} (did you mean "
            f"@pytest.mark.{SETTINGS[lowered]}({lowered}=...)?): it would set nothing"
        )
    words = set(lowered.split("_"))  # max_flops, flops_limit: a figure and a bound, reordered
    figure = [m for m in ours if words & FIGURE_WORDS & set(m.split("_"))]
    if not (
        lowered in MARKERS
        or lowered.endswith(("_max", "_min"))
        or (figure and words & BOUND_WORDS)
        or lowered.startswith(("graph_budget", "graphbudget"))
        or difflib.get_close_matches(lowered, ours, n=1, cutoff=0.75)
    ):
        return None
    match = [lowered] if lowered in MARKERS else figure[:1] if words & BOUND_WORDS else []
    match = match or difflib.get_close_matches(lowered, ours, 1, 0.7)
    hint = f" (did you mean {match[0]!r}?)" if match else f" (budget markers: {', '.join(ours)})"
    return f"unknown marker @pytest.mark.{name}{hint}: it would check nothing"


def budget_markers(item: pytest.Item) -> list[str]:
    """Names of this plugin's markers on the test: each is a claim that some model is checked."""
    return sorted({marker.name for marker in item.iter_markers() if marker.name in MARKERS})


def refuse_repeated(item: pytest.Item) -> None:
    """Raise for a budget marker given twice at one level (two ``flops_max`` on the test, or
    on its class): pytest would keep one of them, silently. A marker on the test itself still
    overrides the same marker on its class or module."""
    for node in item.listchain():
        names = [mark.name for mark in node.own_markers if mark.name in MARKERS]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            where = "the test" if node is item else f"{node.nodeid or node.name}"
            raise GraphBudgetError(
                f"@pytest.mark.{repeated[0]} is given {names.count(repeated[0])} times on "
                f"{where} ({item.nodeid}): give it once, with the one limit meant"
            )


def limit_of(marker: pytest.Mark, where: str) -> object:
    """The limit of ``flops_max("22G")`` or ``flops_max(limit="22G")``, as the docs write it.
    A setting beside the limit (``latency_max("2ms", hardware="t4")``, the first thing a user
    tries) is refused with the marker it belongs to: dropped, the latency would be priced on
    the default hardware."""
    if len(marker.args) == 1 and not marker.kwargs:
        return marker.args[0]
    if not marker.args and list(marker.kwargs) == ["limit"]:
        return marker.kwargs["limit"]
    example = LIMITS[marker.name].example  # in the marker's own unit: '3ms' for a latency
    settings = [key for key in marker.kwargs if key in SETTINGS]
    moved = (
        f"; {settings[0]}= goes in @pytest.mark.{SETTINGS[settings[0]]}({settings[0]}=...)"
        if settings
        else ""
    )
    raise GraphBudgetError(f"{where}: takes one limit, e.g. {marker.name}({example!r}){moved}")


def budget_from_markers(item: pytest.Item, defaults: Budget, hardware: str | None) -> Budget:
    """The test's budget from its markers, over the project's defaults."""
    where = f"@pytest.mark.{{}} on {item.nodeid}"
    refuse_repeated(item)
    budget = defaults
    for key in LIMITS:
        marker = item.get_closest_marker(key)
        if marker is not None:
            limit = limit_of(marker, where.format(key))
            budget = build({key: limit}, where.format(key), budget)
    for name, allowed in KEYWORDS.items():
        # the module's, then the class's, then the test's: a closer one overrides the keys it
        # gives and keeps the others (a test's execution= must not drop its module's hardware=)
        given: dict[str, object] = {}
        for marker in reversed(list(item.iter_markers(name))):
            if marker.args:
                raise GraphBudgetError(f"{where.format(name)}: takes keywords {', '.join(allowed)}")
            for key in marker.kwargs:
                if key not in allowed:
                    raise GraphBudgetError(
                        f"{where.format(name)}: unknown keyword {key!r}{closest(key, allowed)}"
                    )
            given.update(marker.kwargs)
        if not given:
            continue
        budget = build(given, where.format(name), budget)
        refuse_idle_runs(given, budget, where.format(name))
        refuse_idle_optimizer(budget, where.format(name), 'mode="train"')
    # a bare limit marker, with no graph_budget marker to check it: it had failed the test
    # "over budget", telling it to measure the model
    refuse_idle_optimizer(budget, where.format("memory_per_rank_max"), 'mode="train"')
    if hardware:
        budget.hardware = hardware
    return budget


def bare_module_error(label: str, kind: str) -> str:
    return (
        f"{label!r} is a bare torch.nn.Module ({kind}): nothing says what inputs to profile it "
        "at; return a ModelCase from the fixture, e.g. "
        "return ModelCase(model, (torch.randn(1, 3, 224, 224),))"
    )


def no_model_error(markers: list[str]) -> str:
    names = ", ".join(f"@pytest.mark.{name}" for name in markers)
    return (
        f"the test has {names} but no model was checked: give the test a fixture that returns "
        "ModelCase(model, (torch.randn(1, 3, 224, 224),)), or call "
        "graph_profile(model, inputs) in its body"
    )
