"""``run/session.stale_errors``: under strict, an entry no model of the run has is an error of
its own, and its message says how to resolve it where the entry lives: in a baseline file
(rewrite it) or in the base a branch is compared with (nothing to rewrite here)."""

from __future__ import annotations

from pytest_graphbudget.gate.check import Checker
from pytest_graphbudget.run.session import stale_errors


def test_a_stale_entry_of_a_file_says_how_to_remove_it(tmp_path):
    checker = Checker(tmp_path / "baseline.toml", "budgets/baseline.toml", strict=True)
    (error,) = stale_errors({"t.py::test_gone"}, checker)
    assert error.id == "t.py::test_gone"
    assert error.error.endswith("remove it with pytest --graph-budget --graph-budget-update")


def test_a_stale_entry_of_the_base_names_the_base_and_no_file_to_rewrite(tmp_path):
    checker = Checker(
        tmp_path / "baseline.toml", "main@1a2b3c4", strict=True, compared_with="main@1a2b3c4"
    )
    (error,) = stale_errors({"t.py::test_gone"}, checker)
    assert error.error.startswith("main@1a2b3c4 has a model that no model of this run has")
    assert "--graph-budget-update" not in error.error
    assert not stale_errors({"t.py::test_gone"}, Checker(tmp_path / "b.toml", "b", strict=False))
