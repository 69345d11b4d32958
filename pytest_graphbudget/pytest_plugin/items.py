"""What a test item holds for the gate: the models it received, the budget markers on it,
and whether a failure of it is a budget's."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_graphbudget.pytest_plugin.collect import BrokenBudget, BudgetItem, ours
from pytest_graphbudget.pytest_plugin.markers import MARKERS, budget_markers


def received(item: pytest.Item) -> dict[str, Any]:
    """The values a test received, by name: its own arguments, the fixtures its
    ``usefixtures`` names, and those its body fetched with ``request.getfixturevalue``.

    Not what those fixtures use themselves, nor autouse fixtures: a backbone another fixture
    builds, or a teacher an autouse fixture loads, is no model the test's markers speak of
    (``item.funcargs`` holds the whole closure: a backbone had failed its head's
    ``params_max``). A fetched fixture is in no ``funcargs``: its model had gone unchecked."""
    funcargs = getattr(item, "funcargs", {})
    info = getattr(item, "_fixtureinfo", None)
    asked = list(info.argnames) if info is not None else list(funcargs)
    for marker in item.iter_markers("usefixtures"):
        asked += [name for name in marker.args if isinstance(name, str)]
    request = getattr(item, "_request", None)
    closure = set(getattr(item, "fixturenames", ()))
    fetched = [n for n in getattr(request, "_fixture_defs", {}) if n not in closure]
    found = {name: funcargs[name] for name in asked if name in funcargs}
    for name in fetched:
        found[name] = request.getfixturevalue(name)  # cached: the value the body got
    return found


def marked(item: pytest.Item) -> tuple[int, ...]:
    """The budget markers on the test, as they stand: a fixture may add one at set-up
    (``request.node.add_marker``), after the budget was first read."""
    return tuple(id(mark) for mark in item.iter_markers() if mark.name in MARKERS)


def is_budget(item: pytest.Item, call: pytest.CallInfo) -> bool:
    """Whether a failure of this phase of the item is a budget that went unchecked: every
    phase of a budget file's item; the set-up of a test with budget markers, or one that
    failed with one of our errors (a marker that looks like ours, say)."""
    if isinstance(item, (BudgetItem, BrokenBudget)):
        return True
    if call.when != "setup":
        return False
    return bool(budget_markers(item)) or ours(call.excinfo)
