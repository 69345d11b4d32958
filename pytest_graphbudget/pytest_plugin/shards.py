"""What a shard of a split run collected, for ``graph-budget merge``: ``ShardBooks``.

Each shard's session collects every test of its paths before pytest-split (or ``-k``, ``-m``,
``--deselect``) deselects the others' shards' tests, so its JSON report can name the budgeted
models the other shards must run (``collected_budget_nodeids`` and
``deselected_budget_nodeids``), and those it kept that skipped (``skipped_budget_nodeids``);
``merge`` fails a model that some shard collected and no report ran, or that a shard kept and
neither ran nor skipped (its run stopped first). ``GraphBudget`` registers these books as a
plugin of their own and reads them at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_graphbudget.pytest_plugin.collect import BrokenBudget, BudgetItem
from pytest_graphbudget.pytest_plugin.markers import budget_markers
from pytest_graphbudget.pytest_plugin.state import WORKER_COLLECTION, _is_worker

if TYPE_CHECKING:
    from pytest_graphbudget.reports.json_report import Collection


class ShardBooks:
    """The budgeted items' node ids collected, before any deselection, and those kept (a
    worker's, under xdist, arrive at the controller in ``pytest_testnodedown``)."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.collected: set[str] = set()
        self.kept: set[str] = set()
        self.skipped: set[str] = set()  # skipped or xfailed: no verdict, and no model
        self.present: set[str] = set()  # every item before deselection: what is not stale

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]):
        # Around every plugin's modifyitems: the budgeted items before any of them deselects
        # (pytest-split's --group runs last, -k, -m and --deselect before it), and the ones
        # left after all of them. Each shard thus lists the models the others must run.
        every = list(items)
        result = yield
        budgeted = {item.nodeid for item in every if is_budgeted(item)}
        kept = budgeted & {item.nodeid for item in items}
        self.collected |= budgeted
        self.kept |= kept
        self.present |= {item.nodeid for item in every}
        if _is_worker(self.config):
            found = [sorted(budgeted), sorted(kept), sorted(self.present)]
            self.config.workeroutput[WORKER_COLLECTION] = found
        return result

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # On the controller under xdist too: the workers' reports arrive here.
        if report.skipped:
            self.skipped.add(report.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        found = getattr(node, "workeroutput", {}).get(WORKER_COLLECTION, ([], [], []))
        budgeted, kept, present = found
        self.collected.update(budgeted)
        self.kept.update(kept)
        # under xdist the controller collects nothing: a test -k or --deselect left out is
        # still the workers' (its baseline entry is not stale)
        self.present.update(present)

    def halted(self, seen: set[str]) -> list[str]:
        """The budgeted items this run kept and neither reported (``seen``: the results' ids)
        nor skipped: a worker crashed in them, or the run stopped first."""
        lost = self.kept - self.skipped
        return sorted(
            i for i in lost if i not in seen and not any(s.startswith(f"{i}::") for s in seen)
        )

    def collection(self) -> Collection:
        """What the JSON report says of the run's collection."""
        from pytest_graphbudget.reports.json_report import Collection

        return Collection.of(self.collected, self.kept, self.skipped)


def is_budgeted(item: pytest.Item) -> bool:
    """Whether the item is a budgeted model: a budget file's table (or the file's item when
    it could not be read), or a test with one of this plugin's markers."""
    return isinstance(item, (BudgetItem, BrokenBudget)) or bool(budget_markers(item))
