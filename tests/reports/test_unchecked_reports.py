"""A budget that checks nothing is never "within budget" (issue 21, item 9), and strict is a
closed gate.

``@pytest.mark.graph_budget(hardware="a100")`` alone, or a TOML table with only ``factory``,
has no limit; before its model has a baseline entry nothing at all is compared. Every report
says "nothing checked yet" for it (terminal, JUnit, JSON, markdown, the job summary, the
GitHub annotations, HTML) and counts it apart in the title; once the baseline is recorded it
is checked against it. Under ``--graph-budget-strict`` such a model, a model with limits but
no baseline entry, and a baseline entry no model matches (a renamed table) are errors.

Each run is a user's project (pytester, in-process): a ``pyproject.toml``, ``budgets/`` with
the baseline, no git. The model is ``nn.Linear(64, 32)`` on ``(4, 64)``: 2*4*64*32 + 4*32 =
16,512 FLOPs, under the ``flops_max = "1M"`` of the one budget that has a limit.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_graphbudget import cli

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "junit-10.xsd"

MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear():
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear32")
"""

NETS = """\
[models.bare]
factory = "models:linear"

[models.lin]
factory = "models:linear"
flops_max = "1M"
"""

PROBE = """
import pytest
from models import linear

@pytest.fixture
def model():
    return linear()

@pytest.mark.graph_budget(hardware="a100")
def test_probe(model):
    pass
"""

UNCHECKED = {
    "budgets/nets.toml::bare": "bare",
    "tests/test_probe.py::test_probe::model": "linear32",
}
NO_BASELINE = "; no baseline: regressions not checked"  # the run's clause before one is written
TITLE = "3 models: 2 with nothing checked yet, 1 within budget" + NO_BASELINE


@pytest.fixture(autouse=True)
def not_in_github_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("GITHUB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "100")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n\n'
        '[tool.graph_budget]\nbudgets = ["budgets"]\n'
    )
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets" / "nets.toml").write_text(NETS)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_probe.py").write_text(PROBE)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", *args)


def section(result: pytest.RunResult) -> list[str]:
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"=+ graph budget =+", line))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("==="))
    return lines[start + 1 : end]


def test_a_budget_without_limit_or_baseline_is_nothing_checked_yet_in_every_report(
    project, monkeypatch
):
    summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run(
        project,
        "--graph-budget-json=out/report.json",
        "--graph-budget-junit=out/junit.xml",
        "--graph-budget-markdown=out/comment.md",
        "--graph-budget-html=out/report.html",
    )
    result.assert_outcomes(passed=3)  # not a failure: the first run has no baseline yet
    assert result.ret == pytest.ExitCode.OK

    # Terminal: an "unchecked" row for each, the reason, and the title counting them apart.
    lines = section(result)
    rows = {line.split()[0]: line.split() for line in lines[1:] if line and line[0] != " "}
    assert rows["bare"][-1] == "unchecked" and rows["linear32"][-1] == "unchecked", lines
    assert rows["lin"][-1] == "ok"
    for name in UNCHECKED.values():
        assert any(
            line.startswith(f"notice: {name}: nothing checked yet: no limit and no entry in ")
            for line in lines
        ), lines
    assert TITLE in lines

    # JSON: neither passed nor failed (null), counted apart; the run itself did not fail.
    doc = json.loads((project.path / "out" / "report.json").read_text())
    assert doc["title"] == TITLE and doc["passed"] is True
    assert doc["summary"] == {
        "models": 3,
        "pass": 1,
        "warn": 0,
        "fail": 0,
        "error": 0,
        "unchecked": 2,
    }
    models = {m["id"]: m for m in doc["models"]}
    for model_id in UNCHECKED:
        assert (models[model_id]["verdict"], models[model_id]["passed"]) == ("unchecked", None)
    lin = models["budgets/nets.toml::lin"]
    assert (lin["verdict"], lin["passed"]) == ("pass", True)
    assert lin["profile"]["totals"]["flops"] == 2 * 4 * 64 * 32 + 4 * 32

    # JUnit: valid, each a <skipped> case with the reason, never a plain pass.
    import xmlschema

    junit = project.path / "out" / "junit.xml"
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(junit))
    cases = {
        f"{suite.get('name')}::{case.get('name')}": case
        for suite in ET.parse(junit).getroot().iter("testsuite")
        for case in suite.iter("testcase")
    }
    for model_id in UNCHECKED:
        skipped = cases[model_id].find("skipped")
        assert skipped is not None and skipped.get("message").startswith("nothing checked yet")
    assert cases["budgets/nets.toml::lin"].find("skipped") is None

    # Markdown and the job summary: the title, and the models listed unfolded with the fix.
    comment = (project.path / "out" / "comment.md").read_text()
    assert comment.splitlines()[1] == f"### ℹ️ Graph budget: {TITLE}"
    listed = comment.split("#### ℹ️ Nothing checked yet", 1)[1].split("<details>", 1)[0]
    for name in UNCHECKED.values():
        assert f"- `{name}`: nothing checked yet: no limit and no entry in " in listed
    assert "1 model within budget</summary>" in comment
    assert summary.read_text() == comment

    # Annotations: a notice for each, naming it.
    for name in UNCHECKED.values():
        result.stdout.fnmatch_lines(
            [f"::notice file=*,title=Graph budget%3A {name} has nothing checked yet::*"]
        )

    # HTML: the page's title and each model's badge.
    page = (project.path / "out" / "report.html").read_text()
    assert f"<title>graph budget: {TITLE}</title>" in page
    assert page.count('data-verdict="unchecked"') >= 2
    assert page.count(">with nothing checked yet</span>") >= 2

    # With the baseline recorded, the same budgets are checked against it.
    run(project, "--graph-budget-update").assert_outcomes(passed=3)
    again = run(project)
    again.assert_outcomes(passed=3)
    assert section(again)[-1] == "3 models within budget"


def test_strict_makes_every_unchecked_model_and_stale_entry_an_error(project):
    fresh = run(project, "--graph-budget-strict", "--graph-budget-json=fresh.json")
    fresh.assert_outcomes(failed=3)  # no baseline: nothing is compared with one
    doc = json.loads((project.path / "fresh.json").read_text())
    assert doc["passed"] is False
    assert doc["title"] == "3 models could not be checked" + NO_BASELINE
    errors = {m["id"]: m["error"] for m in doc["models"]}
    assert "nothing checked yet" in errors["budgets/nets.toml::bare"]
    assert errors["budgets/nets.toml::lin"].startswith(
        "no entry in budgets/baseline.toml, so its regressions are not checked"
    )

    run(project, "--graph-budget-update").assert_outcomes(passed=3)
    closed = run(project, "--graph-budget-strict")
    closed.assert_outcomes(passed=3)  # every model has its entry: the closed gate is green
    assert closed.ret == pytest.ExitCode.OK

    # A new table: compared with no entry (none is left over to be its old one): an error.
    nets = project.path / "budgets" / "nets.toml"
    nets.write_text(NETS + '\n[models.extra]\nfactory = "models:linear"\nflops_max = "1M"\n')
    new = run(project, "--graph-budget-strict", "-rf")
    new.assert_outcomes(passed=3, failed=1)
    new.stdout.fnmatch_lines(
        ["*no entry in budgets/baseline.toml, so its regressions are not checked*"]
    )

    # A renamed table: compared with its old entry (renames.py), which is stale all the same:
    # a closed gate holds every figure under its model's id, so the entry is an error.
    nets.write_text(NETS.replace("models.lin]", "models.lin2]"))
    renamed = run(project, "--graph-budget-strict", "--graph-budget-json=renamed.json")
    renamed.assert_outcomes(passed=3)
    assert renamed.ret == pytest.ExitCode.TESTS_FAILED  # no test failed: the stale entry did
    doc = json.loads((project.path / "renamed.json").read_text())
    models = {m["id"]: m for m in doc["models"]}
    assert models["budgets/nets.toml::lin2"]["baseline_entry"] == "budgets/nets.toml::lin"
    stale = models["budgets/nets.toml::lin"]
    assert stale["error"].startswith("stale baseline entry: no model of this run has this id")
    assert stale["path"] == "budgets/baseline.toml"
    baseline = (project.path / "budgets" / "baseline.toml").read_text().splitlines()
    assert baseline[stale["line"] - 1] == '[models."budgets/nets.toml::lin"]'
    assert doc["passed"] is False


def test_the_command_line_check_is_the_same_closed_gate(project, monkeypatch, capsys):
    monkeypatch.chdir(project.path)
    assert cli.main(["check", "--no-cache", "--json", "first.json"]) == 0
    doc = json.loads((project.path / "first.json").read_text())
    bare = next(m for m in doc["models"] if m["id"] == "budgets/nets.toml::bare")
    assert (bare["verdict"], bare["passed"]) == ("unchecked", None)
    assert doc["title"] == "2 models: 1 with nothing checked yet, 1 within budget" + NO_BASELINE
    assert cli.main(["check", "--no-cache", "--update"]) == 0
    (project.path / "budgets" / "nets.toml").write_text(NETS.replace("models.bare]", "models.b]"))
    assert cli.main(["check", "--no-cache"]) == 0  # a stale entry alone is a notice
    capsys.readouterr()
    assert cli.main(["check", "--no-cache", "--strict"]) == 1
    out = capsys.readouterr().out
    assert "error: bare: stale baseline entry: no model of this run has this id" in out
