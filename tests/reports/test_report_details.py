"""Issue 21, the reports' smaller items: a lighter model is news in the PR comment (not only
a folded notice), the JSON report's ``line`` of a warning is the key that warned (as its
GitHub annotation's), and the HTML per-layer table lists layers in the order they run (as
``graph-budget profile`` does).

The model is ``Linear(8, W) -> ReLU -> Linear(W, 4)`` on a ``(2, 8)`` input. FLOPs by hand:
2*2*8*W + 2*W (first Linear and its bias), 2*W (ReLU), 2*2*W*4 + 2*4 (second Linear). W = 16:
512 + 32 + 32 + 256 + 8 = 840; W = 32: 1024 + 64 + 64 + 512 + 8 = 1,672. From 1,672 to 840
is 1 - 840/1672 = 49.76%, a drop of "-49.8%".
"""

from __future__ import annotations

import json
import os
import re
import textwrap

import pytest

NETS = """
import torch
from pytest_graphbudget import ModelCase

def mlp():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, {width}), torch.nn.ReLU(), torch.nn.Linear({width}, 4)
    )
    return ModelCase(net, (torch.randn(2, 8),), name="mlp")
"""
NEAR = """\
[models.near]
factory = "nets:mlp"
params_max = "10k"
flops_max = "900"
"""
NEAR_FLOPS = 2 * 2 * 8 * 16 + 2 * 16 + 2 * 16 + 2 * 2 * 16 * 4 + 2 * 4  # 840, 93.3% of 900


@pytest.fixture(autouse=True)
def not_in_github_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("GITHUB_")]:
        monkeypatch.delenv(name)


def write(pytester: pytest.Pytester, name: str, text: str) -> None:
    path = pytester.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    write(pytester, "pyproject.toml", '[tool.graph_budget]\ntolerance = "2%"\n')
    write(pytester, "nets.py", NETS.format(width=32))
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", *args)


def test_a_lighter_model_is_shown_unfolded_in_the_comment(project):
    write(project, "budgets/nets.toml", '[models.mlp]\nfactory = "nets:mlp"\nflops_max = "1M"\n')
    run(project, "budgets", "--graph-budget-update").assert_outcomes(passed=1)
    write(project, "nets.py", NETS.format(width=16))  # lighter: 1,672 -> 840 FLOPs
    run(project, "budgets", "--graph-budget-markdown=comment.md").assert_outcomes(passed=1)
    comment = (project.path / "comment.md").read_text()
    unfolded = comment.split("<details>", 1)[0]
    assert "#### 📉 Lighter than the baseline" in unfolded  # today: only inside <details>
    said = "- `mlp`: FLOPs dropped -49.8% (1.67k -> 840, tolerance 2.0%): tighten the baseline"
    assert said in unfolded


def test_a_note_on_how_a_model_was_priced_is_no_drop(project, monkeypatch):
    """User trial: t4 with ``dtype = "bfloat16"`` (turing has no bfloat16 peak) put its note
    under "Lighter than the baseline" and a ``::notice`` titled "below its baseline", with
    no baseline at all."""
    table = '[models.mlp]\nfactory = "nets:mlp"\nhardware = "t4"\ndtype = "bfloat16"\n'
    write(project, "budgets/nets.toml", table + 'latency_max = "1s"\n')
    summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run(project, "budgets", "--graph-budget-markdown=comment.md")
    result.assert_outcomes(passed=1)
    comment = (project.path / "comment.md").read_text()
    assert "Lighter than the baseline" not in comment
    assert "#### ℹ️ How they were priced" in comment and "t4 has no bfloat16 peak" in comment
    assert "priced with a note::hardware t4 has no bfloat16 peak" in result.stdout.str()
    assert "below its baseline" not in result.stdout.str()


def test_the_json_line_of_a_warning_is_the_key_that_warned(project):
    write(project, "budgets/nets.toml", NEAR)
    write(project, "nets.py", NETS.format(width=16))
    result = run(project, "budgets", "--graph-budget-json=report.json")
    result.assert_outcomes(passed=1)
    (model,) = json.loads((project.path / "report.json").read_text())["models"]
    assert model["verdict"] == "warn"
    assert model["profile"]["totals"]["flops"] == NEAR_FLOPS
    flops_max_line = NEAR.splitlines().index('flops_max = "900"') + 1  # 4, the header is 1
    assert model["line"] == flops_max_line  # today: 1, where the annotation says 4
    (warning,) = [f for f in model["findings"] if f["severity"] == "warn"]
    assert warning["key"] == "flops_max" and warning["line"] == flops_max_line


ORDERED = """
import pytest, torch
from torch import nn
from pytest_graphbudget import ModelCase


class Net(nn.Module):
    # Defined alpha first, named so that alpha sorts first too; the forward runs zeta first.
    def __init__(self):
        super().__init__()
        self.alpha = nn.Linear(16, 4)
        self.zeta = nn.Sequential(nn.Linear(8, 16), nn.ReLU())

    def forward(self, x):
        return self.alpha(self.zeta(x))


@pytest.fixture
def net():
    torch.manual_seed(0)
    return ModelCase(Net(), (torch.randn(2, 8),), name="net")


@pytest.mark.flops_max("1M")
def test_net(net):
    pass
"""


def test_the_html_layer_table_runs_in_execution_order(project):
    write(project, "test_ordered.py", ORDERED)
    run(project, "test_ordered.py", "--graph-budget-html=report.html").assert_outcomes(passed=1)
    page = (project.path / "report.html").read_text(encoding="utf-8")
    rows = re.findall(r'<tr class="layer[^"]*" data-module="([^"]+)"', page)
    # The forward: zeta (its Linear, then its ReLU), then alpha; parents before children.
    assert rows == ["zeta", "zeta.0", "zeta.1", "alpha"]  # today: alpha, zeta, zeta.0, zeta.1


def test_markdown_keeps_an_error_in_its_block_and_a_name_as_written():
    """User trial: an error holding a fence of its own closed the block, and what followed
    (a heading, an open ``<details>``) was read as markdown, folding away the rest of the
    comment; a name holding ``<b>`` showed ``&lt;b>`` in the table's code span."""
    from markdown_it import MarkdownIt

    from pytest_graphbudget.gate.check import ModelResult
    from pytest_graphbudget.reports import markdown

    error = "RuntimeError: bad\n```\n## INJECTED\n<details><summary>x"
    broken = ModelResult("t.py::test_a", "a", "t.py::test_a", "t.py", 1, {"limits": {}})
    broken.error = error
    text = markdown.render([broken])
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert "<h2>INJECTED</h2>" not in html and "<details>" not in html
    assert "## INJECTED" in html  # shown, as text in the block
    named = ModelResult("t.py::test_b[<b>&amp;</b>]", "m", "t.py::test_b", "t.py", 1, {})
    named.budget = {"limits": {}, "bottleneck": {}}
    row = markdown.table([named], {named.id: "t.py::test_b[<b>&amp;</b>]"})[2]
    assert row.startswith("| `t.py::test_b[<b>&amp;</b>]` |")


def test_a_name_with_a_line_break_and_a_cut_comment_stay_in_their_blocks():
    """User trial: a TOML table named ``"nl\\n### injected\\n</details>"`` made a heading and
    a closing ``</details>`` of its own in the comment, and split its terminal row; a comment
    cut at GitHub's limit inside an error's code block left the block open, so the cut's note
    and the footer read as code."""
    from markdown_it import MarkdownIt

    from pytest_graphbudget.gate.check import ModelResult
    from pytest_graphbudget.reports import markdown
    from pytest_graphbudget.reports.terminal import render

    label = "nl\n### injected heading\n</details>"
    named = ModelResult(f"b.toml::{label}", label, f"b.toml::{label}", "b.toml", 3, {})
    named.budget, named.error = {"limits": {}, "bottleneck": {}}, "RuntimeError: boom"
    parse = MarkdownIt("commonmark").enable("table").render
    html = parse(markdown.render([named]))
    assert "<h3>injected heading</h3>" not in html and "\n</details>" not in html
    assert "<code>nl\\n### injected heading\\n&lt;/details&gt;</code>" in html
    assert not any(line.startswith("### injected") for line in render([named]))
    many = []
    for i in range(300):  # 300 errors of ~230 characters: well past the 60,000 of a comment
        broken = ModelResult(f"t.py::test[{i}]", "m", f"t.py::test[{i}]", "t.py", 1, {})
        broken.budget, broken.error = {"limits": {}}, "RuntimeError: boom " + "x" * 150
        many.append(broken)
    text = markdown.render(many)
    fences = [line for line in text.splitlines() if line.startswith("```")]
    assert len(text) < 65_536 and len(fences) % 2 == 0
    assert "<em>… cut: the JSON report has every failure.</em>" in parse(text)
