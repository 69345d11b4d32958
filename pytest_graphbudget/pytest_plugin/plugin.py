"""pytest hooks: markers, options, model fixtures, TOML budget items, verdicts.

Registered through the ``pytest11`` entry point. Without ``--graph-budget`` (or ``enabled =
true`` in ``[tool.graph_budget]``) this module only registers the markers, the options and the
ini settings, and counts the tests that carry budgets to say in one line that they went
unchecked: nothing else runs and torch is never imported. With it, a ``GraphBudget`` manager
is registered in ``pytest_configure``; its state hangs off ``config.stash``.

This is a thin layer: the check itself is ``gate/check.py`` (a profile against a budget and
a baseline entry, one ``ModelResult``), budget files are read by ``gate/budget_files.py`` and
made items by ``collect.py``, the markers are ``markers.py``, the stash keys ``state.py``,
profiling through the cache is ``run/profiler.py``, the end of the run ``run/session.py``, and
rendering ``reports/``.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

import pytest

# Re-exported: their home moved, ``from pytest_graphbudget.plugin import ModelResult`` stays.
from pytest_graphbudget.gate.check import ModelResult, budget_dict, internal_error
from pytest_graphbudget.pytest_plugin.collect import (
    BrokenBudget,
    BudgetFailure,
    BudgetFile,
    BudgetItem,
)
from pytest_graphbudget.pytest_plugin.markers import MARKERS, budget_markers
from pytest_graphbudget.pytest_plugin.state import STATE

if TYPE_CHECKING:
    pass

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
        help="a closed gate: ops without a cost formula, models without a baseline entry "
        "and stale baseline entries are errors",
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
        "--graph-budget-history",
        metavar="FILE",
        help="append one JSON line per model (commit, time, environment, figures) to FILE",
    )
    group.addoption(
        "--graph-budget-cache-clear", action="store_true", help="empty the profile cache first"
    )
    group.addoption("--graph-budget-no-cache", action="store_true", help="do not cache profiles")
    group.addoption(
        "--graph-budget-breaks",
        action="store_true",
        help="price models FX cannot trace through Dynamo with graph breaks, each break in the "
        "JSON report (default: one taped forward, no Dynamo)",
    )
    group.addoption(
        "--graph-budget-hardware", metavar="NAME", help="hardware profile for every model"
    )
    group.addoption(
        "--graph-budget-base",
        metavar="REF",
        help="compare with the models profiled at git merge-base REF HEAD, "
        "instead of the baseline file",
    )
    # the base run of --graph-budget-base: HEAD's profile cache, shared (run/base_ref.py)
    group.addoption("--graph-budget-cache-dir", metavar="DIR", help=argparse.SUPPRESS)
    from pytest_graphbudget.run.settings import INI, KEYS, ini_name

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
    refuse_bad_ini(config)
    if config.getoption("graph_budget") or gate_enabled(config):
        from pytest_graphbudget.compat import TorchTooOld, check_torch
        from pytest_graphbudget.pytest_plugin.manager import GraphBudget

        try:
            check_torch()
        except TorchTooOld as exc:
            raise pytest.UsageError(str(exc)) from None

        manager = GraphBudget(config)
        config.stash[STATE] = manager
        config.pluginmanager.register(manager, "graph-budget")
        from pytest_graphbudget.run.base_ref import IMPORTS_ENV

        if os.environ.get(IMPORTS_ENV):  # a --graph-budget-base run: base_ref.stray_imports
            config.pluginmanager.register(BaseImports(), "graph-budget-base-imports")
    else:
        config.pluginmanager.register(Dormant(), "graph-budget-dormant")


class BaseImports:
    """In the base's run (``--graph-budget-base``): writes the project's modules it imported
    from outside its own checkout, which the run that asked refuses."""

    @pytest.hookimpl
    def pytest_sessionfinish(self) -> None:
        from pytest_graphbudget.run.base_ref import report_stray_imports

        report_stray_imports()


class Dormant:
    """The plugin while the gate is off: it counts the tests that carry budget markers, so
    that the run ends saying, in one line, that their budgets were not checked."""

    def __init__(self) -> None:
        self.marked = 0

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if call.when == "setup" and budget_markers(item):
            report.graph_budget_marked = True  # goes with the report to the xdist controller
        return report

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup" and getattr(report, "graph_budget_marked", False):
            self.marked += 1

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.marked:
            terminalreporter.write_line(unchecked_hint(self.marked))


def unchecked_hint(count: int) -> str:
    """The line a run without the gate ends with when some tests carry budgets."""
    tests = (
        "1 test carries a budget and was" if count == 1 else f"{count} tests carry budgets and were"
    )
    return (
        f"graph-budget: {tests} not checked; run with --graph-budget "
        "or set enabled = true in [tool.graph_budget]"
    )


@pytest.fixture
def graph_profile(request: pytest.FixtureRequest):
    """``graph_profile(model, inputs, kwargs=None, name=None, hardware=None, execution=None,
    mode=None, optimizer=None, dtype=None, **zoo_options)`` -> Profile.

    With ``--graph-budget`` the profile is also checked against the test's markers
    (``hardware``, ``execution``, ``mode``, ``optimizer`` and ``dtype`` given here win over the
    ``graph_budget`` marker's). ``model`` may be a zoo name, built with its own example inputs
    unless ``inputs`` are given, and the zoo's options (``batch``, ``seq_len``) apply to it.
    """
    manager = request.config.stash.get(STATE, None)

    def run(
        model: Any,
        inputs: Any = (),
        kwargs: dict | None = None,
        *,
        name: str | None = None,
        hardware: str | None = None,
        execution: str | None = None,
        mode: str | None = None,
        optimizer: str | None = None,
        dtype: str | None = None,
        **zoo_options: Any,
    ):
        given = {"mode": mode, "optimizer": optimizer, "dtype": dtype, "execution": execution}
        how = {key: value for key, value in given.items() if value is not None}
        if isinstance(model, str) and isinstance(inputs, tuple) and not inputs:
            inputs = None  # a zoo name, with its own example inputs
        if manager is None:  # the gate off: the profiles of pytest's project, as with it on
            from pytest_graphbudget.hardware import get
            from pytest_graphbudget.modes.dispatch import profile_model
            from pytest_graphbudget.pytest_plugin.state import project_settings

            try:
                profiles = project_settings(request.config).hardware_profiles
            except pytest.UsageError as exc:  # one line, as with the gate on
                pytest.fail("; ".join(map(str, exc.args)), pytrace=False)
            card = get(hardware or "generic", profiles)
            return profile_model(
                model, inputs, kwargs, hardware=card, name=name, **how, **zoo_options
            )
        return manager.profile_for_item(
            request.node, model, inputs, kwargs, name, hardware, how, zoo_options
        )

    return run


# -- settings ----------------------------------------------------------------------------


def refuse_bad_ini(config: pytest.Config) -> None:
    """A ``graph_budget_*`` ini option that is none of ours (``graph_budget_baselin``), in the
    configuration file or ``-o``, is a usage error with the closest one, gate on or off: pytest
    only warns, and the run would go on without the setting (or without the gate). So is a
    boolean one pytest cannot read, named (pytest's own error names no option)."""
    from pytest_graphbudget.compat import ini_keys
    from pytest_graphbudget.run import settings

    where = f"{config.inipath}" if config.inipath else "pytest's configuration"
    given = dict.fromkeys(ini_keys(config), where)
    for option in config.getoption("override_ini", None) or ():
        given[str(option).split("=", 1)[0].strip()] = "-o"
    problems = settings.unknown_ini(given)
    for key in (key for key, kind in settings.INI.items() if kind == "bool"):
        try:
            config.getini(settings.ini_name(key))
        except (ValueError, pytest.UsageError) as exc:  # "invalid truth value 'maybe'"
            problems.append(f"{where}: {settings.ini_name(key)}: {exc}")
    if problems:
        raise pytest.UsageError(*problems)


def gate_enabled(config: pytest.Config) -> bool:
    """``[tool.graph_budget] enabled`` (or the ini option): check budgets without the flag."""
    from pytest_graphbudget.run import settings

    where = f"{config.inipath}" if config.inipath else "pytest's configuration"
    try:
        ini = config.getini(settings.ini_name("enabled"))
    except ValueError as exc:  # pytest's reading of a bool: "invalid truth value 'maybe'"
        raise pytest.UsageError(f"{where}: {settings.ini_name('enabled')}: {exc}") from None
    try:
        return settings.gate_enabled(config.rootpath, config.inipath, ini, where)
    except settings.SettingsError as exc:
        raise pytest.UsageError(*exc.problems) from None
