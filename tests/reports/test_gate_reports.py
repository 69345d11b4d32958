"""Errors are results (issue 9, item 2 and the unwritable report path).

A budget that could not be checked (a malformed budget file, an unknown key, a bad unit, a
marker used wrongly, a model that fails to profile) must be counted by every report: the
terminal table, JUnit, JSON (``passed`` false), markdown, the job summary and the GitHub
annotations, under one title. A report file that cannot be written is one line, the other
reports are still written, and a run that would have passed exits 4.

The one good model is ``nn.Linear(64, 32)`` on a ``(4, 64)`` input: 2*4*64*32 + 4*32 = 16,512
FLOPs, so under its ``flops_max = "20k"``.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "junit-10.xsd"
LINEAR_FLOPS = 2 * 4 * 64 * 32 + 4 * 32

MODELS = """
import torch
from pytest_graphbudget import ModelCase

class Broken(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("shape mismatch in my model")

def linear():
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear32")

def broken():
    return ModelCase(Broken(), (torch.randn(2),), name="broken")
"""

GOOD = """\
[models.fits]
factory = "models:linear"
flops_max = "20k"
"""

MALFORMED = """\
[models.oops
factory = "models:linear"
"""

KEYS = """\
[models.typo]
factory = "models:linear"
flop_max = "20k"

[models.unit]
factory = "models:linear"
flops_max = "10 parsecs"

[models.broken]
factory = "models:broken"
flops_max = "1G"
"""

MARKERS = """
import pytest
from models import linear

@pytest.fixture
def model():
    return linear()

@pytest.mark.flops_max("1k", "2k")
def test_two_limits(model):
    pass
"""

ERRORS = {  # result id -> what its error says
    "budgets/malformed.toml::<file>": "Expected ']' at the end of a table declaration",
    "budgets/keys.toml::typo": "unknown budget key 'flop_max'",
    "budgets/keys.toml::unit": "cannot read '10 parsecs'",
    "budgets/keys.toml::broken": "shape mismatch in my model",
    "test_markers.py::test_two_limits": "takes one limit, e.g. flops_max('22G')",
}
NAMES = {  # result id -> the name the reports show
    "budgets/malformed.toml::<file>": "malformed.toml",
    "budgets/keys.toml::typo": "typo",
    "budgets/keys.toml::unit": "unit",
    "budgets/keys.toml::broken": "broken",
    "test_markers.py::test_two_limits": "test_two_limits",
}
NO_BASELINE = "no baseline: regressions not checked"  # these projects have no baseline file
TITLE = f"6 models: 5 could not be checked, 1 within budget; {NO_BASELINE}"


@pytest.fixture(autouse=True)
def not_in_github_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("GITHUB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "100")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(models=MODELS)
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets" / "good.toml").write_text(GOOD)
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", *args)


def section(result: pytest.RunResult) -> list[str]:
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"=+ graph budget =+", line))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("==="))
    return lines[start + 1 : end]


def test_set_up_errors_are_counted_by_every_report(project, monkeypatch):
    (project.path / "budgets" / "malformed.toml").write_text(MALFORMED)
    (project.path / "budgets" / "keys.toml").write_text(KEYS)
    project.makepyfile(test_markers=MARKERS)
    summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run(
        project,
        "--graph-budget-json=out/report.json",
        "--graph-budget-junit=out/junit.xml",
        "--graph-budget-markdown=out/comment.md",
    )
    result.assert_outcomes(passed=1, failed=4, errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED

    # Terminal: a row per budget that could not be checked, its reason, and the title.
    lines = section(result)
    rows = {line.split()[0]: line.split() for line in lines[1:] if line and line[0] != " "}
    for name in NAMES.values():
        assert rows[name][-1] == "ERROR", lines
    assert rows["fits"][1:3] == ["16.5k/20k", "9.86kB"] and rows["fits"][-1] == "ok"
    for model_id, said in ERRORS.items():
        assert any(
            line.startswith(f"error: {NAMES[model_id]}: ") and said in line for line in lines
        ), (model_id, lines)
    assert TITLE in lines

    # JSON: passed is false, every error is a model with its reason, the title counts them.
    doc = json.loads((project.path / "out" / "report.json").read_text())
    assert doc["passed"] is False
    assert doc["title"] == TITLE
    assert doc["summary"] == {
        "models": 6,
        "pass": 1,
        "warn": 0,
        "fail": 0,
        "error": 5,
        "unchecked": 0,
    }
    models = {m["id"]: m for m in doc["models"]}
    assert set(models) == {*ERRORS, "budgets/good.toml::fits"}
    for model_id, said in ERRORS.items():
        entry = models[model_id]
        assert entry["verdict"] == "error" and entry["passed"] is False
        assert said in entry["error"]
    assert models["budgets/keys.toml::unit"]["source"] == "toml"
    # An error that names a key of its table points at that key's line.
    keys = KEYS.splitlines()
    assert models["budgets/keys.toml::typo"]["line"] == keys.index('flop_max = "20k"') + 1
    assert models["budgets/keys.toml::unit"]["line"] == keys.index('flops_max = "10 parsecs"') + 1
    assert models["test_markers.py::test_two_limits"]["source"] == "marker"
    assert models["budgets/good.toml::fits"]["profile"]["totals"]["flops"] == LINEAR_FLOPS

    # JUnit: valid against the schema, one <error> per budget that could not be checked.
    import xmlschema  # a dev dependency: never skipped

    junit = project.path / "out" / "junit.xml"
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(junit))
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "0", "5")
    import torch

    for suite in root.iter("testsuite"):  # what the figures were measured in, in every suite
        said = {p.get("name"): p.get("value") for p in suite.iter("property")}
        assert said["environment.torch"] == torch.__version__, said
    errors = {
        f"{suite.get('name')}::{case.get('name')}": case.find("error")
        for suite in root.iter("testsuite")
        for case in suite.iter("testcase")
    }
    for model_id, said in ERRORS.items():
        assert said in errors[model_id].get("message"), model_id
    assert errors["budgets/good.toml::fits"] is None

    # Markdown, and the same text in the job summary: the title and a section per error.
    comment = (project.path / "out" / "comment.md").read_text()
    assert comment.splitlines()[1] == f"### ❌ Graph budget: {TITLE}"
    for model_id, said in ERRORS.items():
        assert f"#### 💥 `{NAMES[model_id]}`" in comment
        assert said.replace("<", "&lt;") in comment or said in comment
    assert summary.read_text() == comment

    # Annotations: one ::error per budget that could not be checked, at its file.
    out = result.stdout.str()
    for model_id, said in ERRORS.items():
        name = NAMES[model_id].replace(":", "%3A")
        file = model_id.split("::", 1)[0]
        result.stdout.fnmatch_lines(
            [f"::error file={file},line=*,title=Graph budget%3A {name} could not be checked::*"]
        )
        assert any(
            line.startswith(f"::error file={file},") and said.replace("%", "%25") in line
            for line in out.splitlines()
        ), model_id
    assert out.count("::error ") == 5
    unit_line = models["budgets/keys.toml::unit"]["line"]
    assert f"::error file=budgets/keys.toml,line={unit_line},title=Graph budget%3A unit " in out


def test_a_budget_file_that_cannot_be_read_is_an_error_and_the_others_run(project):
    (project.path / "budgets" / "binary.toml").write_bytes(b"\xff\xfe[models.x]\n")
    result = run(project, "--graph-budget-json=report.json")
    result.assert_outcomes(passed=1, failed=1)
    doc = json.loads((project.path / "report.json").read_text())
    assert doc["passed"] is False
    assert doc["title"] == f"2 models: 1 could not be checked, 1 within budget; {NO_BASELINE}"
    (error,) = [m for m in doc["models"] if m["verdict"] == "error"]
    assert error["id"] == "budgets/binary.toml::<file>"
    assert error["error"].startswith("budgets/binary.toml: cannot read")
    assert "can't decode byte 0xff" in error["error"]
    assert "Traceback" not in result.stdout.str()


COLLECT_ERROR = """
import pytest

class Exploding(pytest.File):
    def collect(self):
        raise ValueError("this budget file blew up")

def pytest_collect_file(file_path, parent):
    if file_path.name == "exploding.toml":
        return Exploding.from_parent(parent, path=file_path)
"""


def test_a_collection_error_of_a_budget_file_is_counted(project):
    (project.path / "budgets" / "exploding.toml").write_text(GOOD)
    project.makeconftest(COLLECT_ERROR)
    result = run(project, "--graph-budget-json=report.json")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # pytest stops on collection errors
    doc = json.loads((project.path / "report.json").read_text())
    assert doc["passed"] is False
    # the budgets collected beside it never ran either: not run, no longer left out
    assert doc["title"] == "3 models could not be checked"
    errors = {m["id"]: m["error"] for m in doc["models"]}
    assert errors.pop("budgets/exploding.toml") == "ValueError: this budget file blew up"
    assert len(errors) == 2 and all(e.startswith("not run: ") for e in errors.values())


# -- titles -----------------------------------------------------------------------------------


def result(name: str, error: str | None = None, *findings: tuple[str, str]):
    from pytest_graphbudget.pytest_plugin.plugin import ModelResult

    profile = None if error else {"totals": {"flops": 1.0}, "bottleneck": {}, "subgraphs": []}
    return ModelResult(
        f"budgets/a.toml::{name}",
        name,
        f"budgets/a.toml::{name}",
        "budgets/a.toml",
        1,
        {"limits": {}, "bottleneck": {}},
        findings=[{"severity": s, "key": k, "message": f"{k} said so"} for s, k in findings],
        profile=profile,
        error=error,
        source="toml",
    )


@pytest.mark.parametrize(
    ("results", "title", "icon"),
    [
        ([], "no model was checked", "ℹ️"),
        ([result("a")], "1 model within budget", "✅"),
        ([result("a"), result("b")], "2 models within budget", "✅"),
        ([result("a", "no such key")], "1 model could not be checked", "❌"),
        (
            [
                result("a", "no such key"),
                result("b", None, ("fail", "flops_max")),
                result("c", None, ("fail", "flops_max"), ("warn", "params_max")),
                result("d", None, ("warn", "flops_max")),
                result("e", None, ("warn", "coverage")),
                result("f"),
            ],
            "6 models: 1 could not be checked, 2 over budget, 1 near a limit, "
            "1 with unpriced ops, 1 within budget",
            "❌",
        ),
        (  # ops without a cost formula are not "near a limit"
            [result("a", None, ("warn", "coverage")), result("b")],
            "2 models: 1 with unpriced ops, 1 within budget",
            "⚠️",
        ),
        (
            [result("a", None, ("warn", "coverage"), ("warn", "flops_max"))],
            "1 model near a limit",
            "⚠️",
        ),
        (  # the base could not profile it: counted by its limits, never "near a limit"
            [result("a", None, ("warn", "baseline.not_compared")), result("b")],
            "2 models within budget; 1 model not compared (the base could not profile it)",
            "⚠️",
        ),
        (  # and with a figure near its limit, both are said
            [result("a", None, ("warn", "baseline.not_compared"), ("warn", "flops_max"))],
            "1 model near a limit; 1 model not compared (the base could not profile it)",
            "⚠️",
        ),
    ],
)
def test_every_report_gives_the_same_title(results, title, icon):
    from pytest_graphbudget.reports import json_report, markdown
    from pytest_graphbudget.reports.terminal import render

    assert render(results)[-1] == title
    assert json_report.document(results, set())["title"] == title
    assert markdown.render(results).splitlines()[1] == f"### {icon} Graph budget: {title}"


def test_github_annotation_names_unpriced_ops_apart():
    from pytest_graphbudget.reports import github

    (command,) = github.annotations([result("a", None, ("warn", "coverage"))])
    assert command.startswith("::warning file=budgets/a.toml,line=1,")
    assert "title=Graph budget%3A a with unpriced ops::coverage said so" in command


# -- report files that cannot be written ------------------------------------------------------


def test_an_unwritable_report_path_is_one_line_and_exit_4(project):
    (project.path / "blocker").write_text("a file where a directory should be\n")
    result = run(
        project,
        "--graph-budget-junit=blocker/junit.xml",
        "--graph-budget-markdown=blocker/comment.md",
        "--graph-budget-json=out/report.json",
    )
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out
    blocker = project.path / "blocker"
    lines = section(result)
    for name in ("junit.xml", "comment.md"):
        assert (
            f"graph-budget: cannot write blocker/{name}: {blocker} is a file, not a directory"
            in lines
        ), lines
    assert out.count("graph-budget: cannot write") == 2
    # The table is still printed, and the other report still written (and said so).
    assert f"1 model within budget; {NO_BASELINE}" in lines
    assert "reports written: JSON out/report.json" in lines
    doc = json.loads((project.path / "out" / "report.json").read_text())
    assert doc["passed"] is True and doc["summary"]["pass"] == 1


@pytest.mark.parametrize("given", ["out/", "folder"])
def test_a_report_path_that_names_a_folder_is_refused_before_any_model(project, given):
    """User trial: ``--graph-budget-html out/`` wrote the page to a file named ``out`` and said
    "reports written: HTML out/"; an existing folder failed only once every model had been
    profiled."""
    (project.path / "folder").mkdir()
    result = run(project, f"--graph-budget-html={given}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --graph-budget-html {given} names a folder: *"])
    assert not (project.path / "out").exists() and "passed" not in result.stdout.str()


def test_an_unwritable_report_keeps_exit_1_of_a_failed_run(project, monkeypatch):
    (project.path / "budgets" / "good.toml").write_text(GOOD.replace('"20k"', '"10k"'))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(project.path / "no-such-dir" / "summary.md"))
    result = run(project, "--graph-budget-json=report.json")
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    summary = project.path / "no-such-dir" / "summary.md"
    result.stdout.fnmatch_lines(
        [f"graph-budget: cannot write {summary}: No such file or directory", "*1 failed*"]
    )
    assert "Traceback" not in result.stdout.str()
    assert json.loads((project.path / "report.json").read_text())["passed"] is False


OUR_SETUP_ERROR = """
import pytest

@pytest.fixture
def ours():
    pytest.fail("graph-budget usage error: a plugin of ours refused this test", pytrace=False)

@pytest.fixture
def model():
    raise ValueError("a fixture broke")

def test_ours(ours):
    pass

@pytest.mark.flops_max("1k")
def test_marked(model):
    pass

def test_unrelated(model):
    pass
"""


def test_a_set_up_failure_is_a_result_when_a_budget_goes_unchecked(project):
    (project.path / "budgets" / "good.toml").unlink()
    project.makepyfile(test_setup=OUR_SETUP_ERROR)
    result = run(project, "--graph-budget-json=report.json")
    result.assert_outcomes(errors=3)
    doc = json.loads((project.path / "report.json").read_text())
    # The unmarked test whose fixture broke is pytest's error alone: no budget went unchecked.
    errors = {m["id"]: m["error"] for m in doc["models"]}
    assert errors == {
        "test_setup.py::test_ours": (
            "graph-budget usage error: a plugin of ours refused this test"
        ),
        "test_setup.py::test_marked": (
            "not checked: the test's setup failed before its budget was checked "
            "(ValueError: a fixture broke)"
        ),
    }
    assert doc["title"] == "2 models could not be checked"


def test_an_unwritable_baseline_is_one_line_and_exit_4(project):
    (project.path / "blocker").write_text("a file where a directory should be\n")
    project.makepyprojecttoml('[tool.graph_budget]\nbaseline = "blocker/baseline.toml"\n')
    result = run(project, "--graph-budget-update", "--graph-budget-json=report.json")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out
    assert out.count("graph-budget: cannot write blocker/baseline.toml: ") == 1
    assert "baseline written" not in out
    assert "1 model within budget" in section(result)
    assert json.loads((project.path / "report.json").read_text())["passed"] is True


# -- a bug of ours is a result too ------------------------------------------------------------

BUGGED = """\
[models.fits]
factory = "models:linear"
flops_max = "20k"

[models.bugged]
factory = "models:mlp"
flops_max = "1G"
"""


def test_an_internal_error_is_a_result_and_the_other_models_keep_theirs(project, monkeypatch):
    """An exception from our own code (not the user's model) is one line that says it is our
    bug, an error in every report, and never costs another model its verdict."""
    from pytest_graphbudget.engine import partition as partition_module

    real = partition_module.partition

    def partition_with_a_bug(measured):
        # Fault injected into our own partitioner, for the model with a ReLU only.
        if any(node.kind == "relu" for node in measured.nodes):
            raise KeyError("group 7")
        return real(measured)

    monkeypatch.setattr(partition_module, "partition", partition_with_a_bug)
    project.makepyfile(
        models=MODELS
        + "\ndef mlp():\n    return ModelCase(torch.nn.Sequential(torch.nn.Linear(8, 8),"
        " torch.nn.ReLU()), (torch.randn(2, 8),))\n"
    )
    (project.path / "budgets" / "good.toml").write_text(BUGGED)
    result = run(project, "budgets/", "--graph-budget-json=out.json")
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output
    result.stdout.fnmatch_lines(
        [
            "*internal error in pytest-graphbudget: KeyError: 'group 7' at test_gate_reports.py:*"
            "this is a bug, please report it*"
        ]
    )
    report = json.loads((project.path / "out.json").read_text())
    models = {m["id"]: m for m in report["models"]}
    assert models["budgets/good.toml::bugged"]["verdict"] == "error"
    assert models["budgets/good.toml::fits"]["verdict"] == "pass"
    assert report["passed"] is False
    assert report["title"] == f"2 models: 1 could not be checked, 1 within budget; {NO_BASELINE}"
