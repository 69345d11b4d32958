"""The check of one budget-file table: its model profiled through the run's ``Profiler``
and judged (``gate.check``); and the ``[growth]`` check of a swept table: its points profiled,
each figure fitted over them, its degree in each bounded axis judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate.budget_files import GROWTH_KEY, GrowthTable
from pytest_graphbudget.gate.budgets import how_run
from pytest_graphbudget.gate.check import Checker, ModelResult, _judge, budget_dict

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_graphbudget.gate.check import Checker, ModelResult
if TYPE_CHECKING:
    from pytest_graphbudget.gate.budget_files import Table
    from pytest_graphbudget.run.profiler import Profiler


def check_table(
    entry: Table,
    nodeid: str,
    path: Path,
    shown: str,
    checker: Checker,
    profiler: Profiler,
    hardware: str | None = None,
) -> ModelResult:
    """Check one ``[models."<name>"]`` table of the budget file at ``path`` (``shown`` as
    messages show it): build its model, profile it, judge it. A table whose budget cannot be
    built raises ``GraphBudgetError`` listing every bad key; ``hardware`` overrides its own."""
    from pytest_graphbudget.gate.budget_files import GrowthTable, failing_line

    if isinstance(entry, GrowthTable):
        return check_growth(entry, nodeid, path, shown, checker, profiler, hardware)
    budget = entry.budget(f"{shown}::{entry.name}", hardware)
    result = ModelResult(
        nodeid,
        budget.name or entry.name,
        nodeid,
        shown,
        entry.line(),
        budget_dict(budget),
        source="toml",
    )
    checker.evaluate(
        result,
        budget,
        lambda hw: profiler.profile(
            profiler.table_request(
                entry.table, entry.name, hw, budget.variant, *how_run(budget), root=checker.root
            )
        ),
    )
    checker.rematch([result])
    result.line = failing_line(result.findings, entry.lines) or result.line
    return result


def check_growth(
    entry: GrowthTable,
    nodeid: str,
    path: Path,
    shown: str,
    checker: Checker,
    profiler: Profiler,
    hardware: str | None = None,
) -> ModelResult:
    """Profile every point (the profiler's cache shares them with the points' own checks), fit
    each figure and judge its degree in each bounded axis. Shows the last point's figures."""
    from pytest_graphbudget.gate.check import ModelResult, budget_dict
    from pytest_graphbudget.modes.sweep import fits_of

    budget = entry.budget(f"{shown}::{entry.name}", hardware)
    tag = budget.variant.tag  # mode/optimizer/dtype: the points' own, in the id as theirs
    result = ModelResult(
        tag(nodeid),
        tag(entry.name),
        nodeid,
        shown,
        entry.lines.get(GROWTH_KEY, entry.line()),
        budget_dict(budget),
        source="toml",
    )
    target = hardware or budget.hardware
    try:
        profiles = [
            profiler.profile(
                profiler.table_request(
                    t.table,
                    t.name,
                    target,
                    budget.variant,
                    execution=budget.execution,
                    root=checker.root,
                )
            )
            for t in entry.points
        ]
        fits = fits_of(entry.axes, profiles)
    except GraphBudgetError as exc:
        result.error = str(exc)
        return result
    result.profile = profiles[-1].to_dict()
    result.findings = [
        finding for axis, word in entry.growth.items() for finding in _judge(fits, axis, word)
    ]
    return result
