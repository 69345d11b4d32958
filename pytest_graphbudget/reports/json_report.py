"""``--graph-budget-json``: every profile and verdict, machine-readable.

Schema ``graphbudget.report/1`` (documented field by field in ``docs/ci.md``)::

    {"schema": "graphbudget.report/1",
     "tool": {"name": "pytest-graphbudget", "version": "0.1.0"},
     "environment": {"python": "3.12.3", "torch": "2.9.1", "pytest-graphbudget": "0.1.0"},
     "commit": "1a2b3c4...", "root": "",
     "settings": {"strict": false, "hardware": null, "breaks": false, "base": null},
     "passed": false,
     "title": "3 models: 1 over budget, 1 near a limit, 1 within budget",
     "summary": {"models": 3, "pass": 1, "warn": 1, "fail": 1, "error": 0, "unchecked": 0},
     "models": [{"id", "label", "nodeid", "path", "line", "source", "verdict", "passed",
                 "budget", "findings", "baseline", "baseline_modules", "changes",
                 "error", "profile", and, when an HTML report was asked too,
                 "graph_svg", "graph_note", "layer_order"}],
     "stale_baseline": ["budgets/old.toml::gone"],
     "collected_budget_nodeids": ["budgets/a.toml::a", "tests/test_b.py::test_b"],
     "deselected_budget_nodeids": ["tests/test_b.py::test_b"],
     "stale_entries": {"file": "budgets/baseline.toml", "update": "pytest ... --update",
         "entries": {"budgets/old.toml::gone": {"figures", "modules", "by_module"}}}}

Models are sorted by id, so two runs of the same code give the same file. The two ``*_nodeids``
keys are a pytest run's (``Collection``): ``graph-budget merge`` checks that its shards together
ran every budgeted test that each of them collected. ``stale_entries``, when entries matched
nothing, holds their figures: ``merge`` compares a model one shard ran as new with the entry
another shard found stale (a renamed model split across shards), as one run would.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_graphbudget.gate.budgets import REGRESSION_FIGURES
from pytest_graphbudget.reports import common, places

SCHEMA = "graphbudget.report/1"
GRAPH_KEYS = ("graph_svg", "graph_note", "layer_order")
"""A ``ModelResult``'s drawn graph: in the JSON only when the run drew it."""
COLLECTED, DESELECTED = "collected_budget_nodeids", "deselected_budget_nodeids"
SKIPPED = "skipped_budget_nodeids"


@dataclass(frozen=True)
class Collection:
    """The budgeted items (budget files' tables, tests with budget markers) of a pytest run,
    by node id: every one it collected, before any deselection, and those of them it then
    deselected (pytest-split's ``--group``, ``-k``, ``-m``, ``--deselect``). A shard collects
    every test of its paths, so its report names the models the other shards must run.
    ``skipped``: those it kept that skipped or xfailed (no verdict, so no model); any other
    kept one without a model never ran (a collection error stopped the run, ``-x``, a crashed
    worker). None in a report that does not say (an earlier version's)."""

    collected: frozenset[str] = frozenset()
    deselected: frozenset[str] = frozenset()
    skipped: frozenset[str] | None = None

    @classmethod
    def of(
        cls, collected: Iterable[str], kept: Iterable[str], skipped: Iterable[str] = ()
    ) -> Collection:
        """The node ids ``collected`` of which only ``kept`` ran, ``skipped`` skipping."""
        every, kept = frozenset(collected), frozenset(kept)
        return cls(every, every - kept, kept & frozenset(skipped))

    def to_dict(self) -> dict[str, list[str]]:
        found = {COLLECTED: sorted(self.collected), DESELECTED: sorted(self.deselected)}
        if self.skipped is not None:
            found[SKIPPED] = sorted(self.skipped)
        return found

    @classmethod
    def read(cls, document: dict[str, Any]) -> Collection | None:
        """A report's collection; None in a report without one (``graph-budget check``'s, or
        an earlier version's)."""
        if COLLECTED not in document:
            return None
        skipped = frozenset(document[SKIPPED]) if SKIPPED in document else None
        return cls(frozenset(document[COLLECTED]), frozenset(document.get(DESELECTED, ())), skipped)


def tool_version() -> str:
    # The root package's ``__version__``, read, not imported: Python imports the root before any
    # of its modules, and an import of it from here would be one upwards (it sits above every
    # layer).
    return sys.modules["pytest_graphbudget"].__version__


def model(result: Any) -> dict[str, Any]:
    entry = asdict(result)
    # The HTML report's graph, kept only when this run drew it (an HTML report was asked), so
    # that ``graph-budget merge --html`` of shards draws the page one unsharded run draws.
    drawn = {key: entry.pop(key) for key in GRAPH_KEYS}
    entry["verdict"] = common.verdict(result)
    # Each finding's line is its key's, as its GitHub annotation's; a model that only warns
    # points at the key that warned first.
    entry["findings"] = [f | {"line": places.finding_line(result, f)} for f in result.findings]
    warned = common.findings(result, "warn")
    if entry["verdict"] == common.WARN and warned:
        entry["line"] = places.finding_line(result, warned[0])
    if result.error is not None:  # where it is fixed: a bad baseline entry's line, there
        entry["path"], entry["line"] = places.error_place(result)
    # null: nothing was checked yet (no limit, no baseline entry), so neither passed nor failed
    entry["passed"] = None if entry["verdict"] == common.UNCHECKED else not result.failed
    entry["changes"] = (
        {key: common.change(result, key) for key in REGRESSION_FIGURES if result.baseline}
        if result.profile
        else {}
    )
    order = ["id", "label", "nodeid", "path", "line", "source", "verdict", "passed"]
    return (
        {key: entry[key] for key in order}
        | {key: v for key, v in entry.items() if key not in order}
        | {key: v for key, v in drawn.items() if v}
    )


def document(
    results: list[Any],
    stale: set[str],
    environment: Any = None,
    collection: Collection | None = None,
    orphans: Any = None,
    commit: str | None = None,
    prefix: str | None = None,
    settings: Any = None,
) -> dict[str, Any]:
    """The report; ``environment`` is what the figures were measured in (default: this
    process's, without the project's version); ``collection``: a pytest run's budgeted items;
    ``commit``: the code's (``merge`` refuses shards of two commits); ``prefix``: the run's
    root in its repository, where a merge finds the files its reports point at; ``settings``:
    the run's flags that change its figures or verdicts (``merge`` refuses shards that differ
    in them)."""
    from pytest_graphbudget.gate.environment import current

    verdicts = (common.PASS, common.WARN, common.FAIL, common.ERROR, common.UNCHECKED)
    summary = {"models": len(results)} | dict.fromkeys(verdicts, 0)
    for result in results:
        summary[common.verdict(result)] += 1
    return (
        {
            "schema": SCHEMA,
            "tool": {"name": "pytest-graphbudget", "version": tool_version()},
            "environment": dict(environment) if environment else current(),
            "commit": commit,
            "root": prefix,
            "settings": dict(settings) if settings is not None else None,
            # null, neither passed nor failed, when nothing was checked (a model's "unchecked")
            "passed": not any(r.failed for r in results) if results or stale else None,
            "title": common.title(results, stale),
            "summary": summary,
            "models": [model(r) for r in sorted(results, key=lambda r: r.id)],
            "stale_baseline": sorted(stale),
        }
        | (collection.to_dict() if collection is not None else {})
        | ({"stale_entries": orphans} if orphans else {})
    )


def write(
    path: Path,
    results: list[Any],
    stale: set[str],
    environment: Any = None,
    collection: Collection | None = None,
    orphans: Any = None,
    commit: str | None = None,
    prefix: str | None = None,
    settings: Any = None,
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    found = document(results, stale, environment, collection, orphans, commit, prefix, settings)
    text = json.dumps(finite(found), indent=2, allow_nan=False, default=str)
    path.write_text(text + "\n", "utf-8")


def finite(value: Any) -> Any:
    """The document with every infinite or NaN number as null: strict JSON, any reader."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
