"""``graph-budget merge --expect PATH``: the models one unsharded run of PATH would check, as
the plugin collects them, so a shard that never ran is an error rather than a smaller green.

PATH is what the unsharded run would be given (``budgets/``, ``tests/``, a test file): pytest
collects it in-process with ``--graph-budget --collect-only``, and the budget models are the
budget files' items and the tests with a budget marker. Nothing is profiled or run.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate import figures


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

    recorder = _Recorder()
    args = ["--graph-budget", "--collect-only", "-q", "-p", "no:cacheprovider", *paths]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = pytest.main(args, plugins=[recorder])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        lines = [line for line in out.getvalue().splitlines() if "rror" in line]
        why = lines[-1].strip("= ") if lines else f"pytest exit code {int(code)}"
        raise GraphBudgetError(f"--expect {' '.join(paths)}: cannot collect: {why}")
    if not recorder.ids:
        raise GraphBudgetError(f"--expect {' '.join(paths)}: collects no budgeted model")
    return recorder.ids


def reported(model_id: str, seen: set[str]) -> bool:
    """Whether some shard reported the collected ``model_id`` (itself or one of its labels)."""
    return model_id in seen or any(s.startswith(f"{model_id}::") for s in seen)
