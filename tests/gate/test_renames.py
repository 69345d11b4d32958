"""Issue 21, item 7: a renamed test, fixture, parametrize id, TOML table or file never skips
the regression check without a word; and the reports' smaller items (an improvement shown
unfolded in the PR comment, the JSON report's line of a warning, the HTML per-layer table in
execution order).

A user project each time: its own ``pyproject.toml``, a baseline recorded with
``--graph-budget-update``, then the rename, and the model made heavier.

The model is ``Linear(8, W) -> ReLU -> Linear(W, 4)`` on a ``(2, 8)`` input. Its FLOPs, by
hand: the first Linear 2*2*8*W multiply-adds' FLOPs plus 2*W bias adds, the ReLU 2*W, the
second Linear 2*2*W*4 plus 2*4 bias adds. W = 16: 512 + 32 + 32 + 256 + 8 = 840. W = 32:
1024 + 64 + 64 + 512 + 8 = 1,672, +99.0% over 840. A rename with the model made heavier must
fail against the old entry, naming it.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

from pytest_graphbudget import cli

NARROW_FLOPS = 2 * 2 * 8 * 16 + 2 * 16 + 2 * 16 + 2 * 2 * 16 * 4 + 2 * 4  # 840
WIDE_FLOPS = 2 * 2 * 8 * 32 + 2 * 32 + 2 * 32 + 2 * 2 * 32 * 4 + 2 * 4  # 1,672

NETS = """
import torch
from pytest_graphbudget import ModelCase

WIDTH = {width}

def mlp():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 4){extra}
    )
    return ModelCase(net, (torch.randn(2, 8),), name="mlp")
"""
DEEPER = ", torch.nn.ReLU(), torch.nn.Linear(4, 4)"  # other module names: no longer the same

TESTS = """
import pytest
from nets import mlp

@pytest.fixture
def {fixture}():
    return mlp()

@pytest.mark.flops_max("1M")
@pytest.mark.parametrize("size", ["{param}"])
def {test}({fixture}, size):
    pass
"""
ORIGINAL = {"test": "test_mlp", "fixture": "model", "param": "small"}
OLD_ID = "tests/test_nets.py::test_mlp[small]::model"

TABLE = '[models.{name}]\nfactory = "nets:mlp"\nflops_max = "{limit}"\n'


@pytest.fixture(autouse=True)
def not_in_github_actions(monkeypatch: pytest.MonkeyPatch):
    for name in [n for n in os.environ if n.startswith("GITHUB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "120")
    yield
    sys.modules.pop("nets", None)  # the CLI runs in this process: never another test's model


def write(pytester: pytest.Pytester, name: str, text: str) -> None:
    path = pytester.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def nets(pytester: pytest.Pytester, width: int = 16, extra: str = "") -> None:
    write(pytester, "nets.py", NETS.format(width=width, extra=extra))


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A user project: nets.py (the model), tests/test_nets.py, a pyproject.toml."""
    write(
        pytester,
        "pyproject.toml",
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\npythonpath = ["."]\n\n'
        '[tool.graph_budget]\ntolerance = "2%"\n',
    )
    nets(pytester)
    write(pytester, "tests/test_nets.py", TESTS.format(**ORIGINAL))
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", *args)


def reports(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, str]]:
    """A run writing every report; the result and each report's text."""
    result = run(
        pytester,
        "--graph-budget-json=out/report.json",
        "--graph-budget-junit=out/junit.xml",
        "--graph-budget-markdown=out/comment.md",
        "--graph-budget-html=out/report.html",
        *args,
    )
    out = pytester.path / "out"
    texts = {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()}
    return result, texts


def record(pytester: pytest.Pytester, *args: str) -> None:
    """Record the baseline, as a user commits it."""
    run(pytester, "--graph-budget-update", *args).assert_outcomes(passed=1)
    assert (pytester.path / "budgets" / "baseline.toml").exists()


def section(result: pytest.RunResult) -> list[str]:
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"=+ graph budget =+", line))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("==="))
    return lines[start + 1 : end]


def models_of(texts: dict[str, str]) -> dict[str, dict]:
    return {m["id"]: m for m in json.loads(texts["report.json"])["models"]}


# -- item 7: renamed and heavier, the run fails against the old entry --------------------------


@pytest.mark.parametrize(
    ("renamed", "new_id"),
    [
        ({"test": "test_mlp_v2"}, "tests/test_nets.py::test_mlp_v2[small]::model"),
        ({"fixture": "net"}, "tests/test_nets.py::test_mlp[small]::net"),
        ({"param": "tiny"}, "tests/test_nets.py::test_mlp[tiny]::model"),
    ],
    ids=["test", "fixture", "parametrize-id"],
)
def test_a_renamed_heavier_model_fails_against_its_old_entry(project, renamed, new_id):
    record(project)
    write(project, "tests/test_nets.py", TESTS.format(**(ORIGINAL | renamed)))
    nets(project, width=32)
    result, texts = reports(project)

    result.assert_outcomes(failed=1)  # today: passed, "new", exit 0
    said = "FLOPs regressed +99.0% (840 -> 1.67k, tolerance 2.0%) against baseline entry"
    # A Sequential's children are named by their class beside the index: "0" alone says
    # nothing of which layer grew.
    grown = "0 (Linear) +544, 2 (Linear) +256, 1 (ReLU) +32"
    assert f"  {said} '{OLD_ID}' (renamed?); grew most: {grown}" in result.stdout.lines
    lines = section(result)
    assert (
        lines[0] == f"renamed? mlp was compared with baseline entry {OLD_ID}, whose model is gone"
    )
    title = "1 model over budget; 1 model compared with the baseline entry of another id: renamed?"
    assert title in lines  # the title, last before the files written

    model = models_of(texts)[new_id]
    assert model["passed"] is False and model["baseline_entry"] == OLD_ID
    assert model["baseline"]["flops"] == NARROW_FLOPS
    assert model["profile"]["totals"]["flops"] == WIDE_FLOPS
    doc = json.loads(texts["report.json"])
    assert doc["title"] == title and doc["passed"] is False
    assert doc["stale_baseline"] == [OLD_ID]

    comment = texts["comment.md"].splitlines()
    assert comment[1] == f"### ❌ Graph budget: {title}"
    assert (
        comment[3]
        == f"- renamed? `mlp` was compared with baseline entry `{OLD_ID}`, whose model is gone"
    )
    assert f"<title>graph budget: {title}</title>" in texts["report.html"]
    assert any(line.startswith("| `0 (Linear)` | +544 (+") for line in comment)  # grew most
    assert ">0 (Linear)</a> +544 FLOPs" in texts["report.html"]

    failure = ET.fromstring(texts["junit.xml"]).find(".//testcase/failure")
    assert f"against baseline entry '{OLD_ID}' (renamed?)" in failure.get("message")

    # The new id is recorded, the old entry dropped: the next run compares with its own.
    run(project, "--graph-budget-update").assert_outcomes(passed=1)
    baseline = (project.path / "budgets" / "baseline.toml").read_text()
    assert OLD_ID not in baseline and new_id.split("::", 1)[1] in baseline
    run(project).assert_outcomes(passed=1)


@pytest.mark.parametrize("move", ["file", "table"])
def test_a_renamed_budget_file_or_table_fails_against_its_old_entry(project, move, monkeypatch):
    """``budgets/nets.toml::mlp`` moved to ``budgets/vision.toml::mlp`` (a file that no longer
    exists is not run, so its entries were never even called stale) or to ``nets.toml::mlp2``."""
    (project.path / "tests" / "test_nets.py").unlink()
    write(project, "budgets/nets.toml", TABLE.format(name="mlp", limit="1M"))
    record(project, "budgets")
    (project.path / "budgets" / "nets.toml").unlink()
    if move == "file":
        write(project, "budgets/vision.toml", TABLE.format(name="mlp", limit="1M"))
        new_id = "budgets/vision.toml::mlp"
    else:
        write(project, "budgets/nets.toml", TABLE.format(name="mlp2", limit="1M"))
        new_id = "budgets/nets.toml::mlp2"
    nets(project, width=32)

    result = run(project, "budgets", "--graph-budget-json=report.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*against baseline entry 'budgets/nets.toml::mlp' (renamed?)*"])
    doc = json.loads((project.path / "report.json").read_text())
    assert doc["models"][0]["id"] == new_id
    assert doc["models"][0]["baseline_entry"] == "budgets/nets.toml::mlp"

    # graph-budget check reads the same ids, and fails the same way.
    monkeypatch.chdir(project.path)
    assert cli.main(["check", "budgets"]) == 1


def test_graph_budget_check_compares_a_renamed_table(project, capsys, monkeypatch):
    (project.path / "tests" / "test_nets.py").unlink()
    write(project, "budgets/nets.toml", TABLE.format(name="mlp", limit="1M"))
    monkeypatch.chdir(project.path)
    assert cli.main(["check", "--update", "budgets"]) == 0
    write(project, "budgets/nets.toml", TABLE.format(name="mlp_renamed", limit="1M"))
    nets(project, width=32)
    sys.modules.pop("nets", None)  # a new process would import the new code
    capsys.readouterr()
    assert cli.main(["check", "budgets"]) == 1  # today: 0
    out = capsys.readouterr().out
    assert "against baseline entry 'budgets/nets.toml::mlp' (renamed?)" in out
    assert out.splitlines()[-1].endswith(
        "1 model compared with the baseline entry of another id: renamed?"
    )


# -- item 7: when the model cannot be matched, every report says so ---------------------------


def test_a_rename_that_matches_no_entry_is_said_first_in_every_report(project, monkeypatch):
    """Renamed and given another layer: its module names differ from the old entry's, so it
    is compared with nothing, and the run is green; every report opens by saying so."""
    record(project)
    write(project, "tests/test_nets.py", TESTS.format(**(ORIGINAL | {"test": "test_deeper"})))
    nets(project, width=32, extra=DEEPER)
    summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result, texts = reports(project)
    result.assert_outcomes(passed=1)
    new_id = "tests/test_nets.py::test_deeper[small]::model"
    title = (
        "1 model within budget; "
        "1 model has no baseline and 1 baseline entry matched nothing: renamed?"
    )

    lines = section(result)
    assert lines[0] == f"renamed? no baseline: mlp; baseline entry that matched nothing: {OLD_ID}"
    assert title in lines  # the title, last before the files written
    doc = json.loads(texts["report.json"])
    assert doc["title"] == title
    assert models_of(texts)[new_id]["baseline"] is None
    comment = texts["comment.md"].splitlines()
    assert comment[1] == f"### ⚠️ Graph budget: {title}"  # not ✅: a check may be skipped
    assert (
        comment[3]
        == f"- renamed? no baseline: `mlp`; baseline entry that matched nothing: `{OLD_ID}`"
    )
    assert summary.read_text() == texts["comment.md"]
    assert f"<title>graph budget: {title}</title>" in texts["report.html"]
    out = ET.fromstring(texts["junit.xml"]).find(".//testcase/system-out").text
    assert out.splitlines()[0].startswith(
        f"notice: no baseline entry, while 1 baseline entry matched nothing ('{OLD_ID}'): renamed?"
    )
    result.stdout.fnmatch_lines(
        [
            "::warning file=tests/test_nets.py,line=*,"
            "title=Graph budget%3A mlp has no baseline%3A renamed?::no baseline entry*"
        ]
    )


def test_two_entries_with_the_same_modules_are_not_guessed_between(project):
    """Two parametrize ids renamed at once, both models the same architecture: which old entry
    is which cannot be told, so neither is used, and the reports say so."""
    write(
        project, "tests/test_nets.py", TESTS.format(**ORIGINAL).replace('["small"]', '["a", "b"]')
    )
    run(project, "--graph-budget-update").assert_outcomes(passed=2)
    write(
        project, "tests/test_nets.py", TESTS.format(**ORIGINAL).replace('["small"]', '["c", "d"]')
    )
    nets(project, width=32)
    result, texts = reports(project)
    result.assert_outcomes(passed=2)
    models = models_of(texts)
    for model in models.values():
        assert model["baseline_entry"] is None and model["baseline"] is None
        said = [f["message"] for f in model["findings"] if f["key"] == "baseline.unmatched"]
        assert said and "2 entries whose model is gone have its modules" in said[0]
        assert "which one it was cannot be told" in said[0]
    title = (
        "2 models within budget; "
        "2 models have no baseline and 2 baseline entries matched nothing: renamed?"
    )
    assert json.loads(texts["report.json"])["title"] == title
    assert title in section(result)


def test_one_entry_compared_with_two_models_says_so_in_each(project):
    """One id split into two (``[small]`` into ``[a]`` and ``[b]``), the same model: each is
    compared with the old entry (unchanged: it passes), and each says the entry was shared."""
    record(project)
    write(
        project, "tests/test_nets.py", TESTS.format(**ORIGINAL).replace('["small"]', '["a", "b"]')
    )
    result, texts = reports(project)
    result.assert_outcomes(passed=2)
    for model in models_of(texts).values():
        assert model["baseline_entry"] == OLD_ID
        assert model["baseline"]["flops"] == NARROW_FLOPS  # = 840, its own figure: it passes
        shared = [
            f["message"] for f in model["findings"] if "was compared with 2 models" in f["message"]
        ]
        assert shared and "which one it was cannot be told" in shared[0]
    title = (
        "2 models within budget; 2 models compared with the baseline entry of another id: renamed?"
    )
    assert json.loads(texts["report.json"])["title"] == title


def test_models_of_no_submodule_are_never_matched_by_their_modules():
    """User trial: a new test of a bare Conv2d was compared with a deleted test's Linear
    entry (each names only the model itself), and judged "params dropped -94.6%". Such
    models are matched only with the same parameter count as well."""
    from pytest_graphbudget.gate.baseline import Entry
    from pytest_graphbudget.gate.renames import same_modules

    def entry(modules: dict[str, int], params: dict[str, int]) -> Entry:
        return Entry({"params": sum(params.values())}, modules, {"params": params})

    linear, conv = entry({"<root>": 136}, {"<root>": 36}), entry({"<root>": 9000}, {"<root>": 2})
    assert not same_modules(conv, linear)
    assert same_modules(entry({"<root>": 200}, {"<root>": 36}), linear)  # a renamed Linear
    mlp = entry({"0": 10, "2": 20}, {"0": 4, "2": 5})
    assert same_modules(entry({"0": 99, "2": 1}, {"0": 1, "2": 1}), mlp)  # wider, same names


def test_a_table_given_a_dtype_leaves_its_untagged_entry_stale(project, capsys, monkeypatch):
    """User trial: adding ``dtype = "bfloat16"`` to a table made its model
    ``...::mlp@bfloat16`` while its entry ``...::mlp`` was never called stale: no "renamed?",
    no error under strict, and ``--update`` kept it, to be compared again once the dtype
    went. The table's node id ran, which had counted as its entry's model running."""
    (project.path / "tests" / "test_nets.py").unlink()
    write(project, "budgets/nets.toml", TABLE.format(name="mlp", limit="1M"))
    monkeypatch.chdir(project.path)
    assert cli.main(["check", "--update", "budgets"]) == 0
    table = TABLE.format(name="mlp", limit="1M") + 'dtype = "bfloat16"\n'
    write(project, "budgets/nets.toml", table)
    capsys.readouterr()
    assert cli.main(["check", "budgets"]) == 0  # a new model, and a stale entry: a notice
    out = capsys.readouterr().out
    assert "stale baseline entry (its model is gone): budgets/nets.toml::mlp\n" in out, out
    assert cli.main(["check", "--strict", "budgets"]) == 1
    capsys.readouterr()
    result = run(project, "--graph-budget-strict", "budgets")
    result.assert_outcomes(failed=1)  # the model without an entry; the stale entry's a row
    assert "error: mlp: stale baseline entry: no model of this run has this id" in "\n".join(
        section(result)
    )
    assert cli.main(["check", "--update", "budgets"]) == 0
    baseline = (project.path / "budgets" / "baseline.toml").read_text("utf-8")
    assert '"budgets/nets.toml::mlp@bfloat16"' in baseline
    assert '"budgets/nets.toml::mlp"]' not in baseline
