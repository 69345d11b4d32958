"""The ``graph_budget_<key>`` ini options, as a user's trial met them:

- a misspelt one (``graph_budget_baselin``) got pytest's generic "Unknown config option"
  warning and the run went on without the baseline, green; ``graph-budget check`` said
  nothing at all. Now it is a usage error with "did you mean", as ``tolerence`` in the table is;
- ``-o graph_budget_tolerance=banana`` was never read where ``[tool.graph_budget]`` gives a
  tolerance (the table wins, so the ini value was skipped unchecked). Now every ini value is
  checked; the documented precedence stays (a table over the ini option, ``-o`` included).

The model is ``nn.Linear(64, 32)`` on a ``(4, 64)`` input; what these tests read is which
settings applied, from the JSON report's budget, never the figures.
"""

from __future__ import annotations

import json
import sys

import pytest

from pytest_graphbudget import cli
from pytest_graphbudget.run import settings

MODULE = "ini_options_models"
MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear():
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear")
"""
BUDGET = f'[models.lin]\nfactory = "{MODULE}:linear"\nflops_max = "1M"\n'
BASELIN = "unknown ini option 'graph_budget_baselin' (did you mean 'graph_budget_baseline'?)"


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(**{MODULE: MODELS})
    pytester.syspathinsert()
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets/nets.toml").write_text(BUDGET)
    (pytester.path / "test_plain_ini.py").write_text("def test_plain():\n    pass\n")
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return pytester


def errors(result: pytest.RunResult) -> list[str]:
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    return [line for line in result.stderr.lines if line.startswith("ERROR: ")]


@pytest.mark.parametrize("gate", [("--graph-budget",), ()], ids=["gate", "no-gate"])
def test_a_misspelt_ini_option_is_a_usage_error_in_pytest(project, gate):
    project.makepyprojecttoml(
        '[tool.pytest.ini_options]\ngraph_budget_baselin = "perf/baseline.toml"\n'
    )
    result = project.runpytest("-p", "no:cacheprovider", *gate)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    found = errors(result)
    assert found == [f"ERROR: {project.path / 'pyproject.toml'}: {BASELIN}"], found


def test_a_misspelt_ini_option_is_a_usage_error_of_graph_budget_check(project, monkeypatch, capsys):
    project.makeini("[pytest]\ngraph_budget_baselin = perf/baseline.toml\n")
    monkeypatch.chdir(project.path)
    capsys.readouterr()  # the pytest run's own
    assert cli.main(["check", "--no-cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"tox.ini: {BASELIN}"), err


@pytest.mark.parametrize(
    ("option", "problem"),
    [
        (
            "graph_budget_tolerence=5%",
            "-o: unknown ini option 'graph_budget_tolerence' "
            "(did you mean 'graph_budget_tolerance'?)",
        ),
        (
            "graph_budget_measure_runs=3",
            "-o: unknown ini option 'graph_budget_measure_runs': measure_runs is a key of "
            "[tool.graph_budget] only, not an ini option",
        ),
    ],
    ids=["misspelt", "table-only"],
)
def test_a_misspelt_override_is_a_usage_error(project, option, problem):
    result = project.runpytest("-p", "no:cacheprovider", "--graph-budget", "-o", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: {problem}"]


def test_an_ini_value_is_checked_where_the_table_gives_the_key(project, monkeypatch, capsys):
    project.makepyprojecttoml("[tool.graph_budget]\ntolerance = '2%'\n")
    result = project.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "-o", "graph_budget_tolerance=banana"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    found = errors(result)
    assert (
        len(found) == 1
        and "(ini option graph_budget_tolerance): cannot read 'banana'" in (found[0])
    ), found
    project.makepyprojecttoml(
        "[tool.pytest.ini_options]\ngraph_budget_tolerance = 'banana'\n"
        "[tool.graph_budget]\ntolerance = '2%'\n"
    )
    monkeypatch.chdir(project.path)
    capsys.readouterr()  # the pytest run's own
    assert cli.main(["check", "--no-cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "graph_budget_tolerance): cannot read 'banana'" in err[0], err


def test_a_boolean_ini_value_is_checked_and_named(project, monkeypatch, capsys):
    """pytest's own error for it named no option: ``ERROR: invalid truth value 'maybe'``."""
    project.makepyprojecttoml(
        "[tool.pytest.ini_options]\ngraph_budget_strict = 'maybe'\n"
        "[tool.graph_budget]\nstrict = false\n"
    )
    result = project.runpytest("-p", "no:cacheprovider", "--graph-budget")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    path = project.path / "pyproject.toml"
    assert errors(result) == [f"ERROR: {path}: graph_budget_strict: invalid truth value 'maybe'"]
    monkeypatch.chdir(project.path)
    capsys.readouterr()  # the pytest run's own
    assert cli.main(["check", "--no-cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "strict must be true or false, got 'maybe'" in err[0], err


@pytest.mark.parametrize(
    ("table", "expected"),
    [("", 0.5), ("tolerance = '3%'\n", 0.03)],
    ids=["ini-applies", "table-wins"],
)
def test_a_budget_table_s_tolerance_wins_over_the_ini_option(project, table, expected):
    """docs/budgets.md: a model's table, then [defaults], then [tool.graph_budget], whose
    ini option (``-o`` included) comes last."""
    (project.path / "budgets/nets.toml").write_text(BUDGET + table)
    result = project.runpytest(
        "-p",
        "no:cacheprovider",
        "--graph-budget",
        "--graph-budget-json=r.json",
        "-o",
        "graph_budget_tolerance=50%",
        "budgets",
    )
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    (model,) = json.loads((project.path / "r.json").read_text())["models"]
    assert model["budget"]["tolerance"] == expected


def test_unknown_ini_leaves_other_options_and_ours_alone():
    given = {
        "testpaths": "f",
        "graph_budget_baseline": "f",
        "graph_budget_enabled": "f",
        "Graph_Budget_Tolerance": "f",
        "graph-budget-hardware": "-o",
    }
    problems = settings.unknown_ini(given)
    assert problems == [
        "f: unknown ini option 'Graph_Budget_Tolerance' (did you mean 'graph_budget_tolerance'?)",
        "-o: unknown ini option 'graph-budget-hardware' (did you mean 'graph_budget_hardware'?)",
    ]


def test_a_pytest_ini_below_the_project_does_not_drop_its_settings(project, monkeypatch, capsys):
    """User trial: ``tests/pytest.ini`` (empty) made ``tests/`` pytest's rootdir, so the
    project's ``[tool.graph_budget]`` and its baseline were not read, and a run 17% over the
    baseline passed with "no baseline" in its title. A usage error now, with the ways out;
    with graph_budget_* options of its own, the folder is a project of its own."""
    project.makepyprojecttoml('[tool.graph_budget]\nbaseline = "perf/base.toml"\n')
    tests = project.path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text("def test_x():\n    pass\n")
    (tests / "pytest.ini").write_text("[pytest]\n")
    result = project.runpytest("-p", "no:cacheprovider", "--graph-budget", "tests")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = errors(result)
    assert (
        f"{tests / 'pytest.ini'} makes {tests} pytest's rootdir, so [tool.graph_budget] of " in line
    )
    assert f"is not read: run pytest with --rootdir {project.path}, or configure" in line
    monkeypatch.chdir(tests)
    capsys.readouterr()
    assert cli.main(["check", "--no-cache", "."]) == 2
    assert "is not read: run pytest with --rootdir" in capsys.readouterr().err
    (tests / "pytest.ini").write_text("[pytest]\ngraph_budget_tolerance = 5%\n")
    result = project.runpytest("-p", "no:cacheprovider", "--graph-budget", str(tests))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
