"""What the plugin's hooks, items and manager share: the run's ``GraphBudget`` and each
item's models, budget and typos on pytest's stashes, and the project's checked settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate.budgets import Budget

if TYPE_CHECKING:
    from pytest_graphbudget.run.settings import Settings

STATE = pytest.StashKey["GraphBudget"]()
ITEM_MODELS = pytest.StashKey[list]()
ITEM_BUDGET = pytest.StashKey[Budget]()
ITEM_UNCHECKED = pytest.StashKey[list]()
ITEM_TYPOS = pytest.StashKey[list]()
ITEM_MARKED = pytest.StashKey[tuple]()  # the budget markers read at set-up (items.marked)
ITEM_SENT = pytest.StashKey[int]()  # how many of ITEM_MODELS went out in a report
PROPERTY = "graph_budget"
# An xdist worker's budgeted node ids, collected and kept, in its ``workeroutput``.
WORKER_COLLECTION = "graph_budget_collection"


def project_settings(config: pytest.Config) -> Settings:
    """The checked ``[tool.graph_budget]`` of the project; a problem there is a usage error
    (one line each, exit 4), never an INTERNALERROR."""
    from pytest_graphbudget.run import settings

    ini = {key: config.getini(settings.ini_name(key)) for key in settings.INI}
    where = f"{config.inipath}" if config.inipath else "pytest's configuration"
    try:
        return settings.load(config.rootpath, ini, where, config.inipath)
    except settings.SettingsError as exc:
        raise pytest.UsageError(*exc.problems) from None


def given_hardware(config: pytest.Config, profiles: dict[str, Any]) -> str | None:
    """``--graph-budget-hardware``'s profile name, checked before any model is built: an
    unknown name (or ``""``) is a usage error (exit 4), never one error per model nor a
    silent fall back to each budget's own hardware."""
    from pytest_graphbudget import hardware as hw

    name = config.getoption("graph_budget_hardware")
    if name is None:
        return None
    try:
        return hw.get(name, profiles).name
    except GraphBudgetError as exc:
        raise pytest.UsageError(f"--graph-budget-hardware: {exc}") from None


REPORT_OPTIONS = ("junit", "json", "markdown", "html", "history")


def check_report_paths(config: pytest.Config) -> None:
    """A report option given an empty path (``--graph-budget-json="$OUT"`` with ``OUT``
    unset) is a usage error: the run had written no report and said nothing. So is a folder
    (``out/``, or one that exists), before any model is profiled, not once they all were."""
    from pathlib import Path

    from pytest_graphbudget.reports import names_a_folder

    for name in REPORT_OPTIONS:
        path = config.getoption(f"graph_budget_{name}")
        if path == "":
            raise pytest.UsageError(
                f"--graph-budget-{name}: the path is empty (a variable that is not set?)"
            )
        if path and (names_a_folder(path) or Path(config.invocation_params.dir, path).is_dir()):
            raise pytest.UsageError(
                f"--graph-budget-{name} {path} names a folder: give a file name in it"
            )


def profile_budget(
    budget: Budget, how: dict[str, Any], hardware: str | None, given: str | None, nodeid: str
) -> Budget:
    """``graph_profile``'s budget: the test's, with the keywords the call gives (``how``,
    ``hardware``) over its markers', and ``--graph-budget-hardware`` (``given``) over them all,
    as everywhere; the budget the reports show is the one the model was priced on. A bad
    keyword fails the test in one line, not with a traceback from inside the fixture."""
    from dataclasses import replace

    from pytest_graphbudget.modes.request import overridden

    try:
        budget = overridden(budget, how, f"graph_profile in {nodeid}")
    except GraphBudgetError as exc:
        pytest.fail(str(exc), pytrace=False)
    chosen = given or hardware
    return replace(budget, hardware=chosen) if chosen else budget


def check_marker_names(item: pytest.Item) -> None:
    """Raise the marker typos found when the test was collected."""
    typos = item.stash.get(ITEM_TYPOS, [])
    if typos:
        raise GraphBudgetError(f"{'; '.join(typos)} (on {item.nodeid})")


def manager_of(config: pytest.Config) -> Any:  # manager.GraphBudget

    return config.stash[STATE]


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")
