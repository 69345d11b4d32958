"""pytest hooks: markers, options, model fixtures, TOML budget items, verdicts.

Registered through the ``pytest11`` entry point. Without ``--graph-budget`` this module only
registers the markers, the options and the ini settings: nothing else runs and torch is never
imported. With it, a ``GraphBudget`` manager is registered in ``pytest_configure``; its state
hangs off ``config.stash``.

This is a thin layer: the check itself is ``check.py`` (a profile against a budget and a
baseline entry, one ``ModelResult``), budget files are read by ``budget_files.py`` and made
items by ``collect.py``, the markers are ``markers.py``, profiling through the cache is
``profiler.py``, the end of the run ``session.py``, and rendering ``reports/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_graphbudget.budgets import Budget

# Re-exported: their home moved, ``from pytest_graphbudget.plugin import ModelResult`` stays.
from pytest_graphbudget.check import ModelResult, budget_dict, internal_error
from pytest_graphbudget.collect import BrokenBudget, BudgetFailure, BudgetFile, BudgetItem
from pytest_graphbudget.markers import MARKERS

if TYPE_CHECKING:
    from pytest_graphbudget.settings import Settings

__all__ = [
    "MARKERS",
    "BrokenBudget",
    "BudgetFailure",
    "BudgetFile",
    "BudgetItem",
    "ModelResult",
    "budget_dict",
    "internal_error",
]

STATE = pytest.StashKey["GraphBudget"]()
ITEM_MODELS = pytest.StashKey[list]()
ITEM_BUDGET = pytest.StashKey[Budget]()
ITEM_UNCHECKED = pytest.StashKey[list]()
ITEM_TYPOS = pytest.StashKey[list]()
ITEM_SENT = pytest.StashKey[int]()  # how many of ITEM_MODELS went out in a report
PROPERTY = "graph_budget"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graph-budget", "FLOP and memory budgets of PyTorch models")
    group.addoption("--graph-budget", action="store_true", help="profile models and check budgets")
    group.addoption(
        "--graph-budget-update",
        action="store_true",
        help="write the figures of every profiled model to the baseline file",
    )
    group.addoption(
        "--graph-budget-strict",
        action="store_true",
        help="fail a model whose graph has ops without a cost formula",
    )
    group.addoption("--graph-budget-junit", metavar="PATH", help="write a JUnit XML report")
    group.addoption("--graph-budget-json", metavar="PATH", help="write every profile as JSON")
    group.addoption(
        "--graph-budget-markdown", metavar="PATH", help="write the pull-request comment"
    )
    group.addoption(
        "--graph-budget-html",
        metavar="PATH",
        help="write an interactive, self-contained HTML report of every model",
    )
    group.addoption(
        "--graph-budget-cache-clear", action="store_true", help="empty the profile cache first"
    )
    group.addoption("--graph-budget-no-cache", action="store_true", help="do not cache profiles")
    group.addoption(
        "--graph-budget-hardware", metavar="NAME", help="hardware profile for every model"
    )
    from pytest_graphbudget.settings import INI, KEYS, ini_name

    for key, kind in INI.items():
        # default None: unset, so that the default of [tool.graph_budget] applies
        parser.addini(
            ini_name(key),
            f"pytest-graphbudget {key}: {KEYS[key]} ([tool.graph_budget] {key} wins)",
            type=kind,
            default=None,
        )


def pytest_configure(config: pytest.Config) -> None:
    # Registered always, so that --strict-markers never breaks a run without --graph-budget.
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    if config.getoption("graph_budget"):
        from pytest_graphbudget.manager import GraphBudget

        manager = GraphBudget(config)
        config.stash[STATE] = manager
        config.pluginmanager.register(manager, "graph-budget")


@pytest.fixture
def graph_profile(request: pytest.FixtureRequest):
    """``graph_profile(model, inputs, kwargs=None, name=None, hardware=None, mode=None,
    optimizer=None, dtype=None)`` -> Profile.

    With ``--graph-budget`` the profile is also checked against the test's markers (``mode``,
    ``optimizer`` and ``dtype`` given here win over the ``graph_budget`` marker's).
    """
    manager = request.config.stash.get(STATE, None)

    def run(
        model: Any,
        inputs: Any = (),
        kwargs: dict | None = None,
        *,
        name: str | None = None,
        hardware: str | None = None,
        mode: str | None = None,
        optimizer: str | None = None,
        dtype: str | None = None,
    ):
        given = {"mode": mode, "optimizer": optimizer, "dtype": dtype}
        how = {key: value for key, value in given.items() if value is not None}
        if manager is None:
            from pytest_graphbudget.profile import profile_model

            hardware = hardware or "generic"
            return profile_model(model, inputs, kwargs, hardware=hardware, name=name, **how)
        return manager.profile_for_item(request.node, model, inputs, kwargs, name, hardware, how)

    return run


# -- settings ----------------------------------------------------------------------------


def project_settings(config: pytest.Config) -> Settings:
    """The checked ``[tool.graph_budget]`` of the project; a problem there is a usage error
    (one line each, exit 4), never an INTERNALERROR."""
    from pytest_graphbudget import settings

    ini = {key: config.getini(settings.ini_name(key)) for key in settings.INI}
    where = f"{config.inipath}" if config.inipath else "pytest's configuration"
    try:
        return settings.load(config.rootpath, ini, where, config.inipath)
    except settings.SettingsError as exc:
        raise pytest.UsageError(*exc.problems) from None
