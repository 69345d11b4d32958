"""What a run checks, as a new user meets it (issue 21, items 6 and 10 and the markers).

Each test is a user's project of its own (pytester, in-process): a ``pyproject.toml``, tests
under ``tests/``, budget files, and no git. Nothing may end green while a budget went
unchecked:

- item 6: an explicit path with budget files is checked, in pytest as ``graph-budget check``
  checks it (``pytest --graph-budget perf/`` collected nothing and exited 5; a configured
  project ran ``budgets/`` instead of the ``budgets_extra/`` it was given);
- item 10: ``[tool.graph_budget] enabled = true`` (or the ini option) turns the gate on
  without ``--graph-budget``; without either, the run says in one line how many tests carry
  budgets that were not checked;
- the markers: ``flops_max(limit="40M")`` as the docs write it, did-you-mean for ``"40m"``
  and ``FLOPS_MAX``, and a marker given twice is an error rather than a silent pick.

The model is ``nn.Linear(64, 32)`` on a ``(4, 64)`` input: 4*64*32 = 8,192 MACs, so
2*8,192 + 4*32 (bias adds) = 16,512 FLOPs, over ``"10k"`` and under ``"1M"``.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from pytest_graphbudget import cli

LINEAR_FLOPS = 2 * 4 * 64 * 32 + 4 * 32  # 16,512

MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear():
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear")
"""

TABLE = '[models.{name}]\nfactory = "models:linear"\nflops_max = "{limit}"\n'

MARKED = """
import pytest
from models import linear

@pytest.fixture
def model():
    return linear()

@pytest.mark.flops_max("10k")
def test_over(model):
    pass

@pytest.mark.flops_max("1M")
def test_fits(model):
    pass

@pytest.mark.graph_budget(hardware="a100")
@pytest.mark.memory_max("1GB")
def test_settings(model):
    pass

def test_plain():
    pass
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A user's project: ``models.py`` at its root (``pythonpath = ["."]``), no git."""
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()  # for the factories, read in-process
    pytester.mkdir("tests")
    return pytester


def write(pytester: pytest.Pytester, name: str, text: str) -> None:
    path = pytester.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def pyproject(pytester: pytest.Pytester, graph_budget: str = "", ini: str = "") -> None:
    pytester.makepyprojecttoml(
        f'[tool.pytest.ini_options]\ntestpaths = ["tests"]\npythonpath = ["."]\n{ini}\n'
        f"[tool.graph_budget]\n{textwrap.dedent(graph_budget).lstrip()}"
    )


def report(pytester: pytest.Pytester, name: str = "out.json") -> dict[str, dict]:
    """The JSON report's models by id."""
    doc = json.loads((pytester.path / name).read_text())
    return {model["id"]: model for model in doc["models"]}


# -- item 6: an explicit path with budget files is checked, in pytest as in check ------------


def test_a_folder_of_budget_files_named_on_the_command_line_is_checked(
    project, monkeypatch, capsys
):
    """``pytest --graph-budget perf/``: "no tests ran" (exit 5) while ``graph-budget check
    perf/`` checked the same files. Another tool's TOML file there is not a budget file."""
    pyproject(project)
    write(project, "perf/edge.toml", TABLE.format(name="edge", limit="1M"))
    write(project, "perf/vision/convs.toml", TABLE.format(name="conv", limit="10k"))
    write(project, "perf/ruff.toml", "line-length = 100\n[lint]\nselect = ['E']\n")

    result = project.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "perf/", "--graph-budget-json=out.json", "-v"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*perf/edge.toml::edge PASSED*"])
    result.stdout.fnmatch_lines(["*FLOPs 16.5k exceeds flops_max 10k*"])
    ids = {"perf/edge.toml::edge", "perf/vision/convs.toml::conv"}
    models = report(project)
    assert set(models) == ids
    assert {m["profile"]["totals"]["flops"] for m in models.values()} == {LINEAR_FLOPS}

    monkeypatch.chdir(project.path)
    assert cli.main(["check", "--no-cache", "perf/", "--json", "cli.json"]) == 1
    capsys.readouterr()
    assert set(report(project, "cli.json")) == ids  # the same files, the same ids


def test_a_path_given_in_a_configured_project_is_checked_beside_the_configured_ones(project):
    """``budgets = ["budgets"]`` and ``pytest --graph-budget budgets_extra/`` ran budgets/
    alone: the path given was never collected."""
    pyproject(project, 'budgets = ["budgets"]')
    write(project, "budgets/nets.toml", TABLE.format(name="lin", limit="1M"))
    write(project, "budgets_extra/more.toml", TABLE.format(name="extra", limit="10k"))
    result = project.runpytest("-p", "no:cacheprovider", "--graph-budget", "budgets_extra/", "-v")
    result.stdout.fnmatch_lines(["*budgets_extra/more.toml::extra FAILED*"])
    result.stdout.fnmatch_lines(["*budgets/nets.toml::lin PASSED*"])
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_budgets_folder_is_checked_beside_testpaths_when_no_path_is_given(project):
    """``testpaths = ["tests"]``, budgets in ``budgets/`` (not configured): ``pytest
    --graph-budget``, what the CI action now runs by default, checks both, as ``graph-budget
    check`` checks ``budgets/`` by default. A path given on the command line stays a choice."""
    pyproject(project)
    write(project, "tests/test_models.py", MARKED)
    write(project, "budgets/nets.toml", TABLE.format(name="lin", limit="1M"))
    result = project.runpytest("-p", "no:cacheprovider", "--graph-budget", "-v")
    result.stdout.fnmatch_lines(["*budgets/nets.toml::lin PASSED*"])
    result.assert_outcomes(passed=4, failed=1)  # test_over is over its 10k
    only = project.runpytest("-p", "no:cacheprovider", "--graph-budget", "tests/test_models.py")
    only.assert_outcomes(passed=3, failed=1)


# -- item 10: the gate without --graph-budget -------------------------------------------------


@pytest.mark.parametrize(
    ("graph_budget", "ini", "args"),
    [
        ("enabled = true", "", ()),
        ("", "graph_budget_enabled = true", ()),
        ("", "", ("-o", "graph_budget_enabled=true")),
    ],
    ids=["table", "ini", "-o"],
)
def test_enabled_turns_the_gate_on_without_the_flag(project, graph_budget, ini, args):
    pyproject(project, graph_budget, ini)
    write(project, "tests/test_models.py", MARKED)
    result = project.runpytest("-p", "no:cacheprovider", "--graph-budget-json=out.json", *args)
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*FLOPs 16.5k exceeds flops_max 10k*"])
    assert len(report(project)) == 3  # each marked test's model, checked and reported


def test_enabled_false_or_a_word_that_is_not_a_boolean(project):
    pyproject(project, "enabled = false")
    write(project, "tests/test_models.py", MARKED)
    project.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=4)
    pyproject(project, 'enabled = "yes"')
    result = project.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR: ")]
    assert len(errors) == 1 and "enabled must be true or false, got 'yes'" in errors[0], errors
    # misspelt, it left the gate off and every budget unchecked, without a word
    pyproject(project, "enable = true")
    result = project.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: unknown key 'enable' in *(did you mean 'enabled'?)"])


UNGATED = """
import pytest

@pytest.mark.flops_max("10k")
def test_over():
    pass

@pytest.mark.graph_budget(hardware="a100")
def test_settings():
    pass

@pytest.mark.memory_max("1GB")
@pytest.mark.flops_max("1M")
def test_two_limits():
    pass

def test_plain():
    pass
"""
HINT = (
    "graph-budget: 3 tests carry budgets and were not checked; run with --graph-budget "
    "or set enabled = true in [tool.graph_budget]"
)


@pytest.mark.parametrize("workers", [(), ("-p", "xdist", "-n", "2")], ids=["serial", "xdist"])
def test_a_run_without_the_gate_says_how_many_budgets_went_unchecked(project, workers):
    """The marked tests pass, and the run says in one line that their budgets were not
    checked (under xdist the workers' reports carry it to the controller). Without the gate
    nothing needs a model, nor torch."""
    pyproject(project)
    write(project, "tests/test_ungated.py", UNGATED)
    result = project.runpytest("-p", "no:cacheprovider", *workers)
    result.assert_outcomes(passed=4)
    said = [line for line in result.stdout.lines if line.startswith("graph-budget:")]
    assert said == [HINT]


def test_no_hint_when_no_test_carries_a_budget(project):
    pyproject(project)
    write(project, "tests/test_plain.py", "def test_plain():\n    pass\n")
    result = project.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "graph-budget" not in result.stdout.str()


# -- the markers as the docs write them, and their mistakes ----------------------------------


MARKER_MISTAKES = """
import pytest
from models import linear

@pytest.fixture
def model():
    return linear()

@pytest.mark.flops_max(limit="10k")
def test_keyword_limit(model):
    pass

@pytest.mark.flops_max("40m")
def test_lower_case_unit(model):
    pass

@pytest.mark.FLOPS_MAX("1G")
def test_upper_case_name(model):
    pass

@pytest.mark.flops_max("1M")
@pytest.mark.flops_max("10k")
def test_twice(model):
    pass

@pytest.mark.flops_max("10k")
class TestOverride:
    @pytest.mark.flops_max("1M")
    def test_method(self, model):
        pass
"""


def test_marker_mistakes_are_errors_that_say_the_fix(project):
    pyproject(project)
    write(project, "tests/test_markers_written.py", MARKER_MISTAKES)
    result = project.runpytest("-p", "no:cacheprovider", "--graph-budget", "-rA")
    # limit= is read (16.5k over 10k fails); the method's own marker overrides its class's
    result.assert_outcomes(passed=1, failed=1, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*graph budget failed for linear (*::test_keyword_limit::model):",
            "*FLOPs 16.5k exceeds flops_max 10k*",
        ]
    )
    result.stdout.fnmatch_lines(["PASSED *::TestOverride::test_method"])
    out = result.stdout.str()
    assert "cannot read '40m' (did you mean '40M'?)" in out
    assert "unknown marker @pytest.mark.FLOPS_MAX (did you mean 'flops_max'?)" in out
    assert "@pytest.mark.flops_max is given 2 times on the test" in out
