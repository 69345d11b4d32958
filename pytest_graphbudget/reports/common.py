"""What every report says the same way: verdicts, names, figures, changes from the baseline.

The reports read ``ModelResult``s (``gate/check.py``) as plain data: ``profile`` is the profile's
JSON (``Profile.to_dict()``), ``baseline`` the recorded figures, ``findings`` the verdicts. Nothing
here knows about pytest.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from pytest_graphbudget.gate import figures
from pytest_graphbudget.gate.budgets import LIMITS, REGRESSION_FIGURES
from pytest_graphbudget.gate.check import NEW_KEY, NOT_COMPARED_KEY, UNCHECKED_KEY
from pytest_graphbudget.gate.described import measured_as, priced_on
from pytest_graphbudget.gate.figures import Figure
from pytest_graphbudget.gate.renames import UNMATCHED
from pytest_graphbudget.units import format_ratio

PASS, WARN, FAIL, ERROR = "pass", "warn", "fail", "error"
UNCHECKED = "unchecked"  # no limit and no baseline entry: nothing was checked yet
SEVERITY_ORDER = {ERROR: 0, FAIL: 1, WARN: 2, UNCHECKED: 3, PASS: 4}


FIGURES: dict[str, Figure] = figures.REPORTED
"""The totals the reports show, in ``figures.TABLE``'s order."""
LIMIT_OF = {f.key: key for key, f in LIMITS.items()}
"""Profile figure -> the budget key that bounds it (``flops`` -> ``flops_max``)."""


def verdict(result: Any) -> str:
    """``error`` (no profile), ``fail``, ``unchecked`` (no limit and no baseline entry: never
    "within budget"), ``warn`` (near a limit, or unpriced ops) or ``pass``."""
    if result.error is not None:
        return ERROR
    severities = {f["severity"] for f in result.findings}
    if "fail" in severities:
        return FAIL
    if is_unchecked(result):
        return UNCHECKED
    return WARN if "warn" in severities else PASS


def is_unchecked(result: Any) -> bool:
    return unchecked_message(result) is not None


def unchecked_message(result: Any) -> str | None:
    """Why the model's budget checked nothing yet (``check.unbaselined``'s notice), or None."""
    return next((f["message"] for f in result.findings if f["key"] == UNCHECKED_KEY), None)


def ordered(results: Iterable[Any]) -> list[Any]:
    """Errors and failures first, then warnings, then the rest; by id within each."""
    return sorted(results, key=lambda r: (SEVERITY_ORDER[verdict(r)], r.id))


def totals(result: Any) -> dict[str, float]:
    return dict(result.profile["totals"]) if result.profile else {}


def value(result: Any, key: str) -> float | None:
    return totals(result).get(key)


def limit(result: Any, key: str) -> float | None:
    """The budget's limit on a profile figure (``flops`` -> the ``flops_max`` value), if any."""
    budget_key = LIMIT_OF.get(key)
    return result.budget["limits"].get(budget_key) if budget_key else None


def change(result: Any, key: str) -> float | None:
    """Relative change of a figure from the baseline (0.041 for +4.1%); None without one."""
    if not result.baseline or not result.profile:
        return None
    old, new = result.baseline.get(key), value(result, key)
    if old is None or new is None:
        return None
    if not old:
        return 0.0 if not new else float("inf")
    return new / old - 1


def format_change(result: Any, key: str) -> str:
    """``+4.1%``, ``-0.5%``, ``=`` (under 0.05%), ``new`` (no baseline), ``not compared`` (the
    base could not profile it: not new) or ``""`` (no profile)."""
    if not result.profile:
        return ""
    if not result.baseline:
        return "not compared" if findings_of(result, NOT_COMPARED_KEY) else "new"
    delta = change(result, key)
    if delta is None:
        return ""
    if delta == float("inf"):
        return "+inf"
    if abs(delta) < 0.0005:
        return "="
    return f"{delta * 100:+.1f}%"


def figure_with_limit(result: Any, key: str, separator: str = "/") -> str:
    """``3.79G/3.70G``: the figure and, when budgeted, its limit; an estimated latency
    with the hardware and execution it was priced for (``70.0us/1ms on maxq, compiled``), a
    measured one beside a compiled estimate with how it ran (``(eager runs, not compiled)``)."""
    figure = FIGURES[key]
    shown = figure.format(value(result, key))
    bound = limit(result, key)
    shown = shown if bound is None else f"{shown}{separator}{figure.format(bound)}"
    if key == "est_latency_s" and result.profile and (on := priced_on(result.profile)):
        shown += f" on {on}"
    if key == "latency_measured_s" and result.profile and (how := measured_as(result.profile)):
        shown += f" ({how})"
    return shown


def extra_limits(result: Any, shown: Iterable[str]) -> list[str]:
    """``traffic 1.2MB/2MB``, ``compute-bound 40%/min 25%``: limits on figures a table leaves
    out (those not in ``shown``), so that every limit appears somewhere."""
    parts = []
    for bounded in LIMITS.values():
        if bounded.key in shown or limit(result, bounded.key) is None:
            continue
        parts.append(f"{bounded.heading} {figure_with_limit(result, bounded.key)}")
    if result.profile:
        from pytest_graphbudget.gate.budgets import BOTTLENECK_BY

        column = BOTTLENECK_BY.get(result.budget.get("by", "count"), "share")
        for key, share in result.budget.get("bottleneck", {}).items():
            side = "compute_bound" if key.startswith("compute") else "memory_bound"
            actual = result.profile["bottleneck"][side][column]
            bound = "min" if key.endswith("_min") else "max"
            parts.append(
                f"{side.replace('_', '-')} {format_ratio(actual)}/{bound} {format_ratio(share)}"
            )
    return parts


def names(results: Iterable[Any]) -> dict[str, str]:
    """A short, unique display name per result id, always holding the model's label.

    The label (``resnet18``) when no other result has it; else the label after its test
    (``test_fits::resnet18``) or its budget file (``budgets/vision.toml::resnet18``); else
    the whole id with the label: ``test_pair::left (linear32)``.
    """
    results = list(results)

    def in_test(r: Any) -> str:
        if r.source == "toml":
            return r.id
        return f"{r.nodeid.split('::', 1)[-1]}::{r.label}"

    def whole(r: Any) -> str:
        return r.id if r.id.endswith(f"::{r.label}") else f"{r.id} ({r.label})"

    shown: dict[str, str] = {}
    for attempt in (lambda r: r.label, in_test, whole):
        pending = [r for r in results if r.id not in shown]
        counts: dict[str, int] = {}
        for r in pending:
            counts[attempt(r)] = counts.get(attempt(r), 0) + 1
        for r in pending:
            if counts[attempt(r)] == 1:
                shown[r.id] = attempt(r)
    for r in results:
        shown.setdefault(r.id, whole(r))
    return {key: one_line(name) for key, name in shown.items()}


def one_line(text: str) -> str:
    """A name on one line, its breaks written ``\\n`` (a TOML table may be named
    ``"a\\nb"``): a break would end a heading or a table row, and the rest of the name
    would be read as markdown (a heading, a closing ``</details>``)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def findings(result: Any, *severities: str) -> list[dict[str, Any]]:
    return [f for f in result.findings if f["severity"] in severities]


def layer_name(profile: Mapping[str, Any] | None, path: str) -> str:
    """A module path as the reports name it: its class beside an index (``features.3
    (Conv2d)``), from the profile's ``modules``."""
    from pytest_graphbudget.engine.profile import layer_label

    module = ((profile or {}).get("modules") or {}).get(path) or {}
    return layer_label(path, module.get("type"))


def grown_layers(
    result: Any, n: int = 5, figure: str = "flops"
) -> list[tuple[str, int, float | None]]:
    """The modules whose own share of a figure (FLOPs, params, peak memory, traffic) grew
    most since the baseline: (module, growth, growth as a share of the module's baseline
    or None for a new module). Empty without a baseline, or one that does not record it."""
    if figure == "flops":
        base = getattr(result, "baseline_modules", None)
    else:
        base = (getattr(result, "baseline_by_module", None) or {}).get(figure)
    if not base or not result.profile:
        return []
    from pytest_graphbudget.gate.baseline import entry_from
    from pytest_graphbudget.gate.module_gaps import grew_most, lost

    current = entry_from(result.profile).layers(figure)
    if lost(current, base, (result.baseline or {}).get(figure)):  # a line deleted: not growth
        return []
    return [
        (module, delta, delta / base[module] if base.get(module) else None)
        for module, delta in grew_most(current, base, n)
    ]


def failed_figure(result: Any) -> str:
    """The profile figure of the result's first failure (``flops_max`` and ``baseline.flops``
    both give ``flops``); ``flops`` when no failure names a figure."""
    from pytest_graphbudget.gate.budgets import RANKED_BY

    for finding in findings(result, "fail"):
        key = finding["key"].removeprefix("baseline.")
        figure = LIMITS[key].key if key in LIMITS else key
        if figure in RANKED_BY:
            return figure
    return "flops"


def biggest_subgraphs(result: Any, n: int = 3) -> tuple[str, list[tuple[str, str]]]:
    """What contributes most to the figure that failed, and what it is ranked by:
    (``biggest subgraphs by FLOPs``, [(``module (kind)``, ``16.5k``)]). Empty rows without
    a profile."""
    from pytest_graphbudget.gate.budgets import contributors

    figure = failed_figure(result)
    if not result.profile:
        return "", []
    heading, rows = contributors(result.profile, figure, n)
    return heading, [(label, figures.format_value(figure, v)) for label, v in rows]


UNPRICED = "unpriced"
STATUS_ORDER = (ERROR, FAIL, WARN, UNPRICED, UNCHECKED, PASS)
STATUS_WORDS = {
    ERROR: "could not be checked",
    FAIL: "over budget",
    WARN: "near a limit",
    UNPRICED: "with unpriced ops",
    UNCHECKED: "with nothing checked yet",
    PASS: "within budget",
}
UNPRICED_KEYS = frozenset({"coverage"})
"""Keys of the findings that say an op has no cost formula: the figures may be low, which is
not the same as a figure near its limit."""


def status(result: Any) -> str:
    """``verdict`` with its warnings split: ``unpriced`` when every warning is about ops
    without a cost formula, ``warn`` when one is a figure near its limit. A model the base
    could not profile is counted by its limits alone (the title says it was not compared)."""
    kind = verdict(result)
    warned = [f for f in findings(result, "warn") if f["key"] != NOT_COMPARED_KEY]
    if kind == WARN and not warned:
        return PASS
    if kind == WARN and all(f["key"] in UNPRICED_KEYS for f in warned):
        return UNPRICED
    return kind


NO_BASELINE = "no baseline: regressions not checked"
NOTHING_CHECKED = (
    "no model was checked: no test that ran has a budget marker or uses graph_profile, and no "
    "budget file was collected; give pytest the paths that hold them (the budget paths, "
    "testpaths), or check the markers' names"
)
"""Why a run with the gate on checked nothing, where every report of it says so."""


def noting_no_baseline(title_of: Callable[..., str]) -> Callable[..., str]:
    """``title`` ending with ``; no baseline: regressions not checked`` when a model of the
    run had no baseline file to be compared with (the default path, absent; a configured
    one that is absent is every model's error instead): a green title must not hide that
    growth went unchecked."""

    @functools.wraps(title_of)
    def titled(results: list[Any], *args: Any, **kwargs: Any) -> str:
        text = title_of(results, *args, **kwargs)
        unchecked = any(getattr(r, "no_baseline", False) for r in results)
        text = f"{text}; {NO_BASELINE}" if unchecked else text
        # --graph-budget-base: which base the changes are from, in every report's title
        bases = sorted({r.compared_with for r in results if getattr(r, "compared_with", "")})
        return "; ".join([text, *(f"compared with {base}" for base in bases)])

    return titled


@noting_no_baseline
def title(results: list[Any], stale: Collection[str] = ()) -> str:
    """The one title every report gives a run, counting each model once by its status:
    ``5 models: 1 could not be checked, 2 over budget, 1 near a limit, 1 within budget``,
    ``1 model within budget``, ``no model was checked``; then what a rename left
    (``renamed``), given the run's stale baseline entries.

    A model that could not be checked is never counted as within budget, and an empty run
    never reads as a green one.
    """
    if not results:
        return "no model was checked"
    counts = dict.fromkeys(STATUS_ORDER, 0)
    for result in results:
        counts[status(result)] += 1
    parts = [(counts[k], STATUS_WORDS[k]) for k in STATUS_ORDER if counts[k]]
    noun = "model" if len(results) == 1 else "models"
    if len(parts) == 1:
        text = f"{len(results)} {noun} {parts[0][1]}"
    else:
        text = f"{len(results)} {noun}: " + ", ".join(f"{n} {words}" for n, words in parts)
    clauses = [renamed(results, stale), unrecorded(results), uncompared(results)]
    return "; ".join(filter(None, [text, *clauses]))


def title_icon(results: list[Any], stale: Collection[str] = ()) -> str:
    """The icon before the title: the worst status of the run (``ℹ️`` for an empty one);
    ``⚠️`` rather than ``✅`` when a model's regression check was skipped (a rename, a model
    new or not compared)."""
    if not results:
        return "ℹ️"
    kinds = {status(r) for r in results}
    if kinds & {ERROR, FAIL}:
        return "❌"
    skipped = renamed(results, stale) or unrecorded(results) or uncompared(results)
    if kinds & {WARN, UNPRICED} or skipped:
        return "⚠️"
    return "ℹ️" if UNCHECKED in kinds else "✅"


def _count(n: int, noun: str, plural: str = "") -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def unrecorded(results: list[Any]) -> str:
    """The title's clause for models the baseline file (or the base) has no entry for, and no
    rename explains: ``1 model not in the baseline (new?): growth not checked``; ``""`` when
    none. A deleted line, or a model new on the branch, would otherwise read as a green run."""
    new = [
        r
        for r in results
        if findings_of(r, NEW_KEY) and not findings_of(r, UNMATCHED) and r.baseline is None
    ]
    if not new:
        return ""
    where = "the base" if any(getattr(r, "compared_with", "") for r in new) else "the baseline"
    return f"{_count(len(new), 'model')} not in {where} (new?): growth not checked"


def uncompared(results: list[Any]) -> str:
    """The title's clause for models the base run could not profile: not new, and their
    growth not compared; ``""`` when none."""
    failed = [r for r in results if findings_of(r, NOT_COMPARED_KEY) and r.baseline is None]
    if not failed:
        return ""
    return f"{_count(len(failed), 'model')} not compared (the base could not profile it)"


def renamed(results: list[Any], stale: Collection[str] = ()) -> str:
    """The title's clause for renamed models (``gate/renames.py``): ``1 model compared with the
    baseline entry of another id: renamed?``, ``1 model has no baseline and 1 baseline
    entry matched nothing: renamed?``; ``""`` when neither."""
    compared = [r for r in results if getattr(r, "baseline_entry", None)]
    unmatched = [r for r in results if findings_of(r, UNMATCHED)]
    left = set(stale) - {r.baseline_entry for r in compared}
    parts = []
    if compared:
        parts.append(
            f"{_count(len(compared), 'model')} compared with the baseline entry of another "
            "id: renamed?"
        )
    if unmatched and left:
        has = "has" if len(unmatched) == 1 else "have"
        parts.append(
            f"{_count(len(unmatched), 'model')} {has} no baseline and "
            f"{_count(len(left), 'baseline entry', 'baseline entries')} matched nothing: renamed?"
        )
    return "; ".join(parts)


def rename_notes(
    results: list[Any], stale: Collection[str], names: dict[str, str], quote: Any = str
) -> list[str]:
    """The lines under the title that say what ``renamed`` counts: one per model compared
    with another id's entry, and one for the models without a baseline beside the entries
    that matched nothing. ``quote`` writes a name or an id (backticks in markdown)."""
    if not renamed(results, stale):
        return []
    lines = [
        f"renamed? {quote(names[r.id])} was compared with baseline entry "
        f"{quote(r.baseline_entry)}, whose model is gone"
        for r in sorted(results, key=lambda r: r.id)
        if getattr(r, "baseline_entry", None)
    ]
    unmatched = sorted(names[r.id] for r in results if findings_of(r, UNMATCHED))
    left = sorted(set(stale) - {r.baseline_entry for r in results if r.baseline_entry})
    if unmatched and left:
        lines.append(
            f"renamed? no baseline: {', '.join(map(quote, unmatched))}; baseline "
            f"{'entry' if len(left) == 1 else 'entries'} that matched nothing: "
            f"{', '.join(map(quote, left))}"
        )
    return lines


def drops(result: Any) -> list[dict[str, Any]]:
    """The notices of figures below the baseline beyond the tolerance: a lighter model."""
    moved = {f"baseline.{name}" for name in REGRESSION_FIGURES}  # not a new model's, a rename's
    return [f for f in findings(result, "notice") if f["key"] in moved]


def remarks(result: Any) -> list[dict[str, Any]]:
    """The notices of how the model was priced (``hardware``: a dtype the profile has no peak
    for; ``coverage``: ops allowed without a formula), not of a move: such a note had been
    filed under "lighter than the baseline", with no baseline at all."""
    return [f for f in findings(result, "notice") if f["key"] in ("hardware", "coverage")]


def findings_of(result: Any, key: str) -> list[dict[str, Any]]:
    """A result's findings with that key."""
    return [f for f in result.findings if f["key"] == key]
