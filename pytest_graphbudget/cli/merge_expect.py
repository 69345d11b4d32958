"""What ``graph-budget merge`` expects its shards to have run, so that a shard that never ran
is an error rather than a smaller green.

``--expect PATH``: the models one unsharded run of PATH would check, as the plugin collects
them. PATH is what the unsharded run would be given (``budgets/``, ``tests/``, a test file):
pytest collects it in-process with ``--graph-budget --collect-only``, and the budget models are
the budget files' items and the tests with a budget marker. Nothing is profiled or run.

Without it, the shards' own reports: a shard split by pytest-split (``--splits``/``--group``)
or ``-k`` collects every test before it deselects the other shards', and its JSON lists them
(``collected_budget_nodeids``, ``deselected_budget_nodeids``): each must have run somewhere.

Either way, a model a shard kept, and neither reported nor skipped (``skipped_budget_nodeids``),
never ran there: its run stopped first (pytest interrupts a run whose collection failed, after
listing what it collected; ``-x``; a crashed worker). Unless another shard reported it, it is
``not run``, whatever that shard's ``passed`` says.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate import figures
from pytest_graphbudget.reports.json_report import Collection

SHOWN = 5
"""Missing node ids named in the one line; the reports list every one."""


def budget_markers() -> set[str]:
    """The markers that make a test a budgeted model (``pytest_plugin.markers.MARKERS``)."""
    return set(figures.markers()) | {"bottleneck", "graph_budget"}


class _Recorder:
    """A pytest plugin that keeps the collected items that are budget models."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.markers = budget_markers()

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        for item in items:
            toml = item.nodeid.split("::", 1)[0].endswith(".toml")
            if toml or any(m.name in self.markers for m in item.iter_markers()):
                self.ids.append(item.nodeid)


def expected(paths: list[str]) -> list[str]:
    """The node ids of the budget models pytest collects under ``paths``; ids of a run are
    these, or these followed by ``::label`` (a test that checks several models)."""
    if not paths:
        return []
    import pytest

    missing = [p for p in paths if not Path(p.split("::")[0]).exists()]
    if missing:  # pytest would say so on stderr, beside our own line
        raise GraphBudgetError(f"--expect {missing[0]}: no such file or directory")
    recorder = _Recorder()
    args = ["--graph-budget", "--collect-only", "-q", "-p", "no:cacheprovider", *paths]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = pytest.main(args, plugins=[recorder])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        text = out.getvalue().splitlines()
        named = [line[len("ERROR ") :] for line in text if line.startswith("ERROR ")]
        reason = [line[1:].strip() for line in text if line.startswith("E ")][:1]
        lines = [": ".join(named[:1] + reason)] if named else []
        lines = lines or [line.strip("= ") for line in text if "rror" in line][-1:]
        why = lines[0] if lines else f"pytest exit code {int(code)}"  # the module, and why
        raise GraphBudgetError(f"--expect {' '.join(paths)}: cannot collect: {why}")
    if not recorder.ids:
        raise GraphBudgetError(f"--expect {' '.join(paths)}: collects no budgeted model")
    return recorder.ids


def reported(model_id: str, seen: set[str]) -> bool:
    """Whether some shard reported the collected ``model_id`` (itself or one of its labels)."""
    return model_id in seen or any(s.startswith(f"{model_id}::") for s in seen)


def collection_of(documents: dict[str, dict[str, Any]]) -> Collection | None:
    """The shards' budgeted node ids together: every one some shard collected, and as
    deselected those that every shard which collected it deselected. None when no report
    lists them (``graph-budget check``'s reports, an earlier version's)."""
    found = [c for c in map(Collection.read, documents.values()) if c is not None]
    if not found:
        return None
    collected = frozenset().union(*(c.collected for c in found))
    ran = frozenset().union(*(c.collected - c.deselected for c in found))
    known = [c.skipped for c in found if c.skipped is not None]
    return Collection(collected, collected - ran, frozenset().union(*known) if known else None)


def never_ran(collection: Collection | None, nodeids: set[str], seen: set[str]) -> list[str]:
    """The node ids some shard collected and none ran (each shard deselected it, and no
    report has a model of it): a shard's report is missing."""
    if collection is None:
        return []
    lost = collection.deselected - nodeids
    return sorted(i for i in lost if not reported(i, seen))


def halted(documents: dict[str, dict[str, Any]], seen: set[str]) -> dict[str, list[str]]:
    """Per report, the budgeted node ids it kept (not deselected) and neither reported nor
    skipped, that no report has: its run stopped before them. A report that does not list
    its skipped ones (an earlier version's) says nothing here."""
    found = {}
    for path, document in documents.items():
        collection = Collection.read(document)
        if collection is None or collection.skipped is None:
            continue
        kept = collection.collected - collection.deselected - collection.skipped
        if lost := sorted(i for i in kept if not reported(i, seen)):
            found[path] = lost
    return found


def _shown(ids: list[str]) -> str:
    return ", ".join(ids[:SHOWN]) + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")


def halted_line(path: str, lost: list[str]) -> str:
    """The one line that says a report kept budgeted models it never ran."""
    many = "models" if len(lost) > 1 else "model"
    return (
        f"{path} kept {len(lost)} budgeted {many} it neither ran nor skipped: "
        f"{_shown(lost)} (not run); its run stopped before them (a collection error, -x, "
        "a crashed worker?): fix it and run that shard again"
    )


def never_ran_line(lost: list[str], paths: list[str]) -> str:
    """The one line that says which models no given report ran, and what to do."""
    many = "models" if len(lost) > 1 else "model"
    return (
        f"{len(lost)} budgeted {many} collected by the shards ran in none of "
        f"{', '.join(paths)}: {_shown(lost)} (not run); pass every shard's --graph-budget-json "
        "report (a shard that failed or was not uploaded?), or --expect PATH to name what "
        "must run"
    )


def expected_line(lost: list[str], expect: list[str], paths: list[str]) -> str:
    """The one line that says which models ``--expect`` collects and no report ran."""
    many = "models" if len(lost) > 1 else "model"
    return (
        f"{len(lost)} budgeted {many} that --expect {' '.join(expect)} collects ran in none "
        f"of {', '.join(paths)}: {_shown(lost)} (not run); pass every shard's "
        "--graph-budget-json report (a shard that failed or was not uploaded?)"
    )
