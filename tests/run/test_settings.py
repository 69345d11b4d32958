"""One config loader (issue 11): ``[tool.graph_budget]`` found the same way by the plugin and
the command line, and its flat settings also pytest ini options that ``pytest --help`` lists.

The model is the tiny one of ``test_plugin.py``: ``nn.Linear(64, 32)`` on a ``(4, 64)`` input;
what these tests look at is which settings applied (hardware, tolerance), read back from the
JSON report's budget, never the figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_graphbudget import cli
from pytest_graphbudget.run import settings

MODULE = "checkmod_settings_models"
MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear():
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear")
"""
BUDGET = f'[models.lin]\nfactory = "{MODULE}:linear"\nflops_max = "1M"\n'
NPU = """
[tool.graph_budget.hardware_profiles.my-npu]
peak_tflops = { float32 = 4.0 }
bandwidth_gbs = 100
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(**{MODULE: MODELS})
    pytester.syspathinsert()
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets/nets.toml").write_text(BUDGET)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return pytester


def budget_of(report: Path) -> dict:
    (model,) = json.loads(report.read_text())["models"]
    return model["budget"]


def test_pytest_help_lists_the_flat_settings(pytester):
    result = pytester.runpytest("-p", "no:cacheprovider", "--help")
    flat = ("hardware", "execution", "measure_device", "tolerance", "baseline", "cache_dir")
    for key, kind in [
        *((key, "string") for key in flat),
        ("budgets", "linelist"),
        ("strict", "bool"),
    ]:
        result.stdout.fnmatch_lines([f"*graph_budget_{key} ({kind}):*"])


def test_an_ini_option_applies_where_the_table_is_silent(project):
    project.makeini("[pytest]\ngraph_budget_hardware = a100\ngraph_budget_tolerance = 5%\n")
    result = project.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-json=r.json"
    )
    assert result.ret == 0, result.stdout.str()
    budget = budget_of(project.path / "r.json")
    assert (budget["hardware"], budget["tolerance"]) == ("a100", 0.05)


def test_an_ini_option_names_the_table_s_own_profile_and_sets_execution(project, capsys):
    """``graph_budget_hardware = "my-npu"`` was refused as an unknown hardware though the
    table defines it, and ``graph_budget_execution`` was no option at all (pytest warned of
    an unknown key, and every estimate stayed eager)."""
    project.makepyprojecttoml(
        "[tool.pytest.ini_options]\ngraph_budget_hardware = 'my-npu'\n"
        "graph_budget_execution = 'compiled'\n" + NPU.split("\n", 1)[1]
    )
    result = project.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-json=r.json"
    )
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    budget = budget_of(project.path / "r.json")
    assert (budget["hardware"], budget["execution"]) == ("my-npu", "compiled")
    assert cli.main(["check", "--json", "c.json"]) == 0, capsys.readouterr()
    assert budget_of(project.path / "c.json") == budget


def test_the_table_wins_over_the_ini_option(project, capsys):
    project.makepyprojecttoml(
        "[tool.pytest.ini_options]\ngraph_budget_hardware = 'a100'\ngraph_budget_tolerance = '5%'\n"
        "[tool.graph_budget]\nhardware = 'generic'\n"
    )
    result = project.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-json=p.json"
    )
    assert result.ret == 0, result.stdout.str()
    plugin = budget_of(project.path / "p.json")
    assert (plugin["hardware"], plugin["tolerance"]) == ("generic", 0.05)
    # The command line reads the same pyproject.toml the same way.
    assert cli.main(["check", "--json", "c.json"]) == 0, capsys.readouterr()
    assert budget_of(project.path / "c.json") == plugin


def test_a_bad_ini_option_is_one_line_naming_it(project, capsys):
    project.makeini("[pytest]\ngraph_budget_tolerance = lots\n")
    result = project.runpytest("-p", "no:cacheprovider", "--graph-budget")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*tox.ini (ini option graph_budget_tolerance): cannot read 'lots'*"]
    )
    assert "Traceback" not in result.stderr.str()


def test_the_command_line_finds_the_project_from_a_subdirectory(project, monkeypatch, capsys):
    """Before: the CLI read ./pyproject.toml only, so from src/ the project's profiles were
    unknown; now it finds the root upward, as pytest finds its rootdir."""
    project.makepyprojecttoml(NPU)
    (project.path / "src").mkdir()
    monkeypatch.chdir(project.path / "src")
    assert cli.main(["hardware", "--format", "json"]) == 0
    assert "my-npu" in capsys.readouterr().out


def test_discovery_stops_at_pytests_own_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    inner = tmp_path / "pkg" / "sub"
    inner.mkdir(parents=True)
    assert settings.discover(inner).root == tmp_path.resolve()
    (tmp_path / "pkg" / "setup.cfg").write_text("[metadata]\nname = x\n")  # not pytest's
    assert settings.discover(inner).root == tmp_path.resolve()
    (tmp_path / "pkg" / "pytest.ini").write_text("[pytest]\n")
    assert settings.discover(inner).root == (tmp_path / "pkg").resolve()
