"""The reports, from real pytest runs: terminal section, JUnit XML, JSON, markdown, GitHub.

The models are tiny and counted by hand (see ``tests/test_plugin.py``): ``nn.Linear(64, 32)``
on a ``(4, 64)`` input does 2*4*64*32 + 4*32 = 16,512 FLOPs with 2,080 parameters. The MLP
below is that layer (``encoder``), a ReLU and ``nn.Linear(32, 8)`` (``head``).
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "junit-10.xsd"  # Jenkins xUnit, MIT


def linear_flops(n_in: int, n_out: int, batch: int = 4) -> int:
    return 2 * batch * n_in * n_out + batch * n_out


def mlp_flops(hidden: int) -> int:
    return linear_flops(64, hidden) + 4 * hidden + linear_flops(hidden, 8)  # + ReLU


LINEAR_FLOPS = linear_flops(64, 32)  # 16,512
MLP_FLOPS = mlp_flops(32)  # 18,720

MODELS = """
import torch
from pytest_graphbudget import ModelCase

HIDDEN = 32

class MLP(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.encoder = torch.nn.Linear(64, hidden)
        self.head = torch.nn.Linear(hidden, 8)

    def forward(self, x):
        return self.head(torch.relu(self.encoder(x)))

def linear(width=32):
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, width), (torch.randn(4, 64),), name=f"linear{width}")

def mlp():
    torch.manual_seed(0)
    return ModelCase(MLP(HIDDEN), (torch.randn(4, 64),), name="mlp")
"""

BUDGET = """\
[defaults]
tolerance = "2%"

[models.mlp]
factory = "models:mlp"
flops_max = "30k"
memory_max = "1MB"
traffic_max = "1MB"

[models.tight]
factory = "models:linear"
flops_max = "10k"
"""

TESTS = """
import pytest
from models import linear

@pytest.fixture
def model():
    return linear()

@pytest.mark.flops_max("20k")
def test_fits(model):
    pass

@pytest.mark.flops_max("17k")
@pytest.mark.params_max(3000)
def test_near(model):
    pass

@pytest.mark.flops_max("10k")
def test_over(model):
    pass
"""


def line_of(text: str, needle: str, after: str = "") -> int:
    """1-based number of the first line holding ``needle`` (after the line holding ``after``)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i, line in enumerate(lines) if i >= start and needle in line) + 1


@pytest.fixture(autouse=True)
def not_in_github_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("GITHUB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "80")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(models=MODELS, test_models=TESTS)
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets" / "small.toml").write_text(BUDGET)
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", *args)


def section(result: pytest.RunResult) -> list[str]:
    """The lines of the ``graph budget`` section, up to pytest's closing line."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"=+ graph budget =+", line))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("==="))
    return lines[start + 1 : end]


# -- terminal ---------------------------------------------------------------------------------


def test_terminal_section_after_the_summary_fits_80_columns(project):
    result = run(project, ".")
    result.assert_outcomes(passed=3, failed=2)
    out = result.stdout.str()
    assert out.index("short test summary info") < out.index(" graph budget ")
    lines = section(result)
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert lines[0].split() == "model FLOPs/limit memory/limit params vs base verdict".split()
    rows = {line.split()[0]: line.split() for line in lines[1:] if line and line[0] != " "}
    # Failures first; the linear model appears in three tests, so its rows name the test.
    assert [line.split()[0] for line in lines[1:3]] == ["tight", "test_over::linear32"]
    assert rows["tight"] == ["tight", "16.5k/10k", "9.86kB", "2.08k", "new", "FAIL"]
    assert rows["test_near::linear32"] == [
        "test_near::linear32",
        "16.5k/17k",
        "9.86kB",
        "2.08k/3k",
        "new",
        "warn",
    ]
    assert rows["mlp"][1:3] == ["18.7k/30k", "11.4kB/1MB"] and rows["mlp"][-1] == "ok"
    # The limit the row has no column for follows on an indented line.
    assert any(line.strip() == "traffic 11.6kB/1MB" for line in lines)
    assert "warn: test_near::linear32: FLOPs 16.5k is at 97.1% of flops_max 17k" in lines
    # The title, broken after a clause to fit: the project has no baseline file.
    assert lines[-2:] == [
        "5 models: 2 over budget, 1 near a limit, 2 within budget;",
        "no baseline: regressions not checked",
    ]
    assert "::error" not in out  # annotations only in GitHub Actions


def test_terminal_table_shortens_long_names_to_the_width():
    from pytest_graphbudget.pytest_plugin.plugin import ModelResult
    from pytest_graphbudget.reports.terminal import render

    profile = {
        "totals": {"flops": 3.64e9, "peak_memory_bytes": 5.4e7, "params": 1.17e7},
        "bottleneck": {},
    }
    budget = {"limits": {"flops_max": 3.7e9, "memory_max": 1.2e8}, "bottleneck": {}}
    results = [
        ModelResult(
            f"budgets/{i}.toml::{name}",
            name,
            f"budgets/{i}.toml::{name}",
            "",
            1,
            budget,
            profile=profile,
            baseline={"flops": 3.5e9},
            source="toml",
        )
        for i, name in enumerate(["facebook/detr-resnet-50-with-a-much-longer-name", "r18"])
    ]
    for width in (80, 70):
        lines = render(results, width=width)
        assert all(len(line) <= width for line in lines), "\n".join(lines)
        assert lines[1].startswith("...") and lines[1].split()[1:] == [
            "3.64G/3.70G",
            "54MB/120MB",
            "11.7M",
            "+4.0%",
            "ok",
        ]
        assert lines[2].startswith("r18 ")


# -- JUnit ------------------------------------------------------------------------------------

BROKEN = """
import pytest, torch
from pytest_graphbudget import ModelCase

class Broken(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("shape mismatch in my model")

@pytest.fixture
def broken():
    return ModelCase(Broken(), (torch.randn(2),), name="broken")

@pytest.mark.flops_max("1G")
def test_broken(broken):
    pass
"""


def test_junit_report_is_valid_and_complete(project):
    import xmlschema  # a dev dependency: the schema check never skips

    project.makepyfile(test_broken=BROKEN)
    result = run(project, ".", "--graph-budget-junit=out/junit.xml", "--junitxml=out/pytest.xml")
    result.assert_outcomes(passed=3, failed=3)
    path = project.path / "out" / "junit.xml"
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(path))  # raises on any violation

    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "2", "1")
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"budgets/small.toml", "test_broken.py", "test_models.py"}

    toml = suites["budgets/small.toml"]
    assert [c.get("name") for c in toml.iter("testcase")] == ["mlp", "tight"]
    assert {c.get("classname") for c in toml.iter("testcase")} == {"budgets.small"}
    props = {p.get("name"): p.get("value") for p in toml.iter("property")}
    assert props["mlp.flops"] == str(MLP_FLOPS)
    assert props["tight.flops"] == str(LINEAR_FLOPS)
    assert props["tight.params"] == "2080"
    assert props["tight.verdict"] == "fail" and props["mlp.verdict"] == "pass"
    assert {"macs", "peak_memory_bytes", "traffic_bytes", "est_latency_s"} <= {
        name.split(".", 1)[1] for name in props
    }
    tight = next(c for c in toml.iter("testcase") if c.get("name") == "tight")
    failure = tight.find("failure")
    assert failure.get("type") == "graph-budget"
    assert failure.get("message").startswith("FLOPs 16.5k exceeds flops_max 10k (65.1% over)")
    assert "biggest subgraphs by FLOPs: <root> (linear) 16.5k" in failure.text  # the full message
    assert "FLOPs: 16.5k / limit 10k" in tight.find("system-out").text

    cases = {c.get("name"): c for c in suites["test_models.py"].iter("testcase")}
    assert set(cases) == {"test_fits::model", "test_near::model", "test_over::model"}
    assert cases["test_fits::model"].find("failure") is None
    assert "warn: FLOPs 16.5k is at 97.1%" in cases["test_near::model"].find("system-out").text
    error = next(suites["test_broken.py"].iter("testcase")).find("error")
    assert "shape mismatch in my model" in error.get("message")

    # pytest's own --junitxml carries the figures as properties of the test.
    pytest_xml = ET.parse(project.path / "out" / "pytest.xml").getroot()
    case = next(c for c in pytest_xml.iter("testcase") if c.get("name") == "test_near")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["graph_budget.flops"] == str(LINEAR_FLOPS)
    assert props["graph_budget.params"] == "2080"
    assert props["graph_budget.verdict"] == "warn"
    assert "graph_budget" not in props  # the plugin's transport stays out of the file


def test_pytests_junit_gives_a_setup_error_its_verdict_too(pytester: pytest.Pytester) -> None:
    """A budgeted test whose fixture raised: pytest's --junitxml had an <error> with no
    graph_budget.verdict, where every other could-not-check case carries "error"."""
    pytester.makepyfile(
        test_setup="""
        import pytest

        @pytest.fixture
        def model():
            raise RuntimeError("no weights here")

        @pytest.mark.flops_max("1G")
        def test_model(model):
            pass
        """
    )
    run(pytester, "--junitxml=pytest.xml").assert_outcomes(errors=1)
    case = next(ET.parse(pytester.path / "pytest.xml").getroot().iter("testcase"))
    assert case.find("error") is not None
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["graph_budget.verdict"] == "error"


# -- JSON -------------------------------------------------------------------------------------


def test_json_report_has_every_profile_and_verdict(project):
    result = run(project, ".", "--graph-budget-json=out/report.json")
    result.assert_outcomes(passed=3, failed=2)
    doc = json.loads((project.path / "out" / "report.json").read_text())
    assert doc["schema"] == "graphbudget.report/1"
    assert doc["tool"]["name"] == "pytest-graphbudget"
    assert doc["passed"] is False
    assert doc["summary"] == {
        "models": 5,
        "pass": 2,
        "warn": 1,
        "fail": 2,
        "error": 0,
        "unchecked": 0,
    }
    models = {m["id"]: m for m in doc["models"]}
    assert list(models) == sorted(models)
    tight = models["budgets/small.toml::tight"]
    assert tight["verdict"] == "fail" and tight["passed"] is False
    assert tight["source"] == "toml" and tight["path"] == "budgets/small.toml"
    assert tight["line"] == line_of(BUDGET, "flops_max", after="[models.tight]")
    assert tight["budget"]["limits"] == {"flops_max": 10000.0}
    assert tight["budget"]["tolerance"] == 0.02
    (finding,) = tight["findings"]
    assert finding["severity"] == "fail" and finding["key"] == "flops_max"
    assert (finding["value"], finding["limit"]) == (LINEAR_FLOPS, 10000.0)
    assert tight["profile"]["schema"] == "graphbudget.profile/1"
    assert tight["profile"]["totals"]["flops"] == LINEAR_FLOPS
    assert tight["baseline"] is None and tight["changes"] == {}
    near = models["test_models.py::test_near::model"]
    assert near["verdict"] == "warn" and near["passed"] is True
    assert near["source"] == "marker" and near["nodeid"] == "test_models.py::test_near"
    assert doc["stale_baseline"] == []


def test_reports_are_the_same_under_xdist(project):
    pytest.importorskip("xdist")
    (project.path / "budgets" / "baseline.toml").write_text(
        '[models."test_models.py::test_gone::model"]\nflops = 1\n'
    )
    args = (".", "--graph-budget-no-cache", "--graph-budget-history=history.jsonl")
    serial = run(
        project, *args, "--graph-budget-json=serial.json", "--graph-budget-junit=serial.xml"
    )
    parallel = run(
        project, *args, "-n", "2", "--graph-budget-json=par.json", "--graph-budget-junit=par.xml"
    )
    for result in (serial, parallel):  # the same terminal verdicts, and the entry nothing ran
        assert result.parseoutcomes() == serial.parseoutcomes()
        result.stdout.fnmatch_lines(
            ["*graph budget*", "*linear32*FAIL*", "*stale baseline entry*test_gone::model*"]
        )

    def verdicts(name: str) -> dict[str, tuple]:
        doc = json.loads((project.path / name).read_text())
        return {m["id"]: (m["verdict"], m["profile"]["totals"]["flops"]) for m in doc["models"]}

    assert verdicts("par.json") == verdicts("serial.json")
    assert len(verdicts("par.json")) == 5
    cases = [
        {c.get("name") for c in ET.parse(project.path / name).getroot().iter("testcase")}
        for name in ("serial.xml", "par.xml")
    ]
    assert cases[0] == cases[1] and len(cases[0]) == 5
    # the history: each run appended each model once (the controller, never a worker)
    lines = [
        json.loads(line) for line in (project.path / "history.jsonl").read_text().split("\n")[:-1]
    ]
    models = sorted(verdicts("serial.json"))
    assert [line["model"] for line in lines] == models + models
    assert [line["figures"]["flops"] for line in lines[:5]] == [
        verdicts("serial.json")[m][1] for m in models
    ]


# -- markdown ---------------------------------------------------------------------------------


def test_markdown_comment_shows_changes_and_grown_layers(project):
    run(project, ".", "--graph-budget-update")
    # The MLP's hidden layer grows from 32 to 48: under its maximum, over its baseline.
    project.makepyfile(models=MODELS.replace("HIDDEN = 32", "HIDDEN = 48"))
    result = run(project, ".", "--graph-budget-markdown=out/comment.md")
    result.assert_outcomes(passed=2, failed=3)
    text = (project.path / "out" / "comment.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "<!-- graph-budget -->"
    assert (
        lines[1] == "### ❌ Graph budget: 5 models: 3 over budget, 1 near a limit, 1 within budget"
    )

    growth = mlp_flops(48) / MLP_FLOPS - 1
    row = next(line for line in lines if line.startswith("| `mlp` |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "28.1k / 30k" and cells[2] == f"+{growth * 100:.1f}%"
    assert cells[-1] == "❌ fail"
    tight = next(line for line in lines if line.startswith("| `tight` |"))
    assert "16.5k / 10k | = |" in tight  # unchanged since the baseline

    # The failure names its line and the layers that grew, largest first.
    assert "biggest subgraphs by FLOPs: &lt;root> (linear) 16.5k" in text  # not an HTML tag
    mlp_line = line_of(BUDGET, "flops_max", after="[models.mlp]")
    assert f"#### ❌ `mlp` · `budgets/small.toml:{mlp_line}`" in lines
    assert f"- FLOPs regressed +{growth * 100:.1f}% (18.7k -> 28.1k, tolerance 2.0%)" in lines
    # One column per regressed figure that is recorded by layer (issue 9).
    table = lines.index("| layer | FLOPs | params | peak memory | traffic |")
    encoder = (linear_flops(64, 48) - LINEAR_FLOPS) / 1000
    head = (linear_flops(48, 8) - linear_flops(32, 8)) / 1000
    assert [row.split(" | ")[:3] for row in lines[table + 2 : table + 5]] == [
        ["| `encoder`", f"+{encoder:.2f}k (+50.0%)", "+1.04k (+50.0%)"],  # 64*16 + 16 params
        ["| `head`", f"+{head:.2f}k (+49.2%)", "+128 (+48.5%)"],  # 16*8 params
        ["| `<root>`", "+64 (+50.0%)", ""],  # the ReLU on 16 more channels; no parameter
    ]
    # Failures come before the near-limit section, and the passing model is folded away.
    assert text.index("#### ❌ `mlp`") < text.index("#### ⚠️ Near a limit")
    details = text[text.index("<details>") :]
    assert "<summary>✅ 1 model within budget</summary>" in details
    assert "| `test_fits::linear32` |" in details
    assert "| `test_fits::linear32` |" not in text[: text.index("<details>")]


def test_markdown_stays_readable_for_fifty_models(project):
    tables = "".join(
        f'[models.m{i:02}]\nfactory = "models:linear"\nflops_max = "{"10k" if i < 2 else "1M"}"\n'
        for i in range(50)
    )
    (project.path / "budgets" / "small.toml").write_text(tables)
    result = run(project, "budgets/", "--graph-budget-markdown=comment.md")
    result.assert_outcomes(passed=48, failed=2)
    text = (project.path / "comment.md").read_text()
    visible, folded = text.split("<details>", 1)
    assert "### ❌ Graph budget: 50 models: 2 over budget, 48 within budget" in visible
    assert visible.count("\n| `m0") == 2 and "#### ❌ `m00`" in visible
    assert len(visible.splitlines()) < 30
    assert "<summary>✅ 48 models within budget</summary>" in folded
    assert folded.count("\n| `m") == 48
    assert len(text) < 65_536


# -- GitHub Actions ---------------------------------------------------------------------------


def test_github_actions_annotations_and_job_summary(project, monkeypatch):
    summary = project.path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(project.path.parent))
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "octo/models")
    monkeypatch.setenv("GITHUB_SHA", "merge0")
    event = project.path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": "head1"}}}))
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    result = run(project, ".")
    result.assert_outcomes(passed=3, failed=2)
    where = project.path.name
    budget_line = line_of(BUDGET, "flops_max", after="[models.tight]")
    # The test's line is its first decorator's: the markers that set its limits.
    tests = (project.path / "test_models.py").read_text()
    over_line = line_of(tests, '@pytest.mark.flops_max("10k")')
    near_line = line_of(tests, '@pytest.mark.flops_max("17k")')
    result.stdout.fnmatch_lines(
        [
            f"::error file={where}/budgets/small.toml,line={budget_line},"
            "title=Graph budget%3A tight over budget::"
            "FLOPs 16.5k exceeds flops_max 10k (65.1%25 over); biggest subgraphs*",
            f"::error file={where}/test_models.py,line={over_line},"
            "title=Graph budget%3A test_over%3A%3Alinear32 over budget::FLOPs 16.5k exceeds*",
            f"::warning file={where}/test_models.py,line={near_line},"
            "title=Graph budget%3A test_near%3A%3Alinear32 near a limit::"
            "FLOPs 16.5k is at 97.1%25 of flops_max 17k",
        ]
    )
    assert result.stdout.str().count("::error ") == 2
    text = summary.read_text()
    assert text.startswith("earlier step\n<!-- graph-budget -->\n### ❌ Graph budget: 5 models: 2")
    # Failures link to their line in the pull request's head commit.
    link = f"https://github.com/octo/models/blob/head1/{where}/budgets/small.toml#L{budget_line}"
    assert f"#### ❌ `tight` · [`budgets/small.toml:{budget_line}`]({link})" in text
    run(project, ".")
    assert summary.read_text().count("<!-- graph-budget -->") == 2  # appended, not replaced


def test_workflow_command_escaping():
    from pytest_graphbudget.reports.github import command

    assert (
        command("error", "100% over\r\nsee: a, b", "budgets/a,b:c.toml", 3, "title: x, y")
        == "::error file=budgets/a%2Cb%3Ac.toml,line=3,title=title%3A x%2C y::"
        "100%25 over%0D%0Asee: a, b"
    )
    assert command("warning", "plain") == "::warning::plain"


def test_junit_keeps_control_characters_of_an_error_visible(tmp_path):
    """An exception's text may carry terminal colours or a NUL, which XML 1.0 cannot hold:
    they are written as ``#x1B`` (as pytest's own junitxml does), never dropped, and the
    document still validates."""
    import xmlschema

    from pytest_graphbudget.pytest_plugin.plugin import ModelResult
    from pytest_graphbudget.reports import junit

    error = "forward raised ValueError: \x1b[31mred\x1b[0m\x00"
    where = "budgets/small.toml"
    result = ModelResult(f"{where}::m", "m", f"{where}::m", where, 1, {"limits": {}}, error=error)
    path = tmp_path / "junit.xml"
    junit.write(path, [result])
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(path))
    root = ET.parse(path).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("1", "0", "1")
    shown = root.find("testsuite/testcase/error")
    assert shown.get("message") == "forward raised ValueError: #x1B[31mred#x1B[0m#x00"
    assert shown.get("type") == "graph-budget error"
