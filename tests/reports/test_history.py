"""``--graph-budget-history FILE`` and ``graph-budget history FILE --html OUT``, over a real
git repository: three commits (a tiny MLP, the same MLP widened, a comment changed), one run
of pytest at each, the JSON lines checked field by field and the page drawn in Chromium.

The MLP is counted by hand: ``encoder = nn.Linear(64, h)``, a ReLU in ``forward`` (the
model's own op, ``<root>``), ``head = nn.Linear(h, 8)``, on a ``(4, 64)`` input.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from test_html import browser as browser  # the headless Chromium of the HTML report's test

MODELS = """
import torch
from pytest_graphbudget import ModelCase

HIDDEN = {hidden}  # {comment}

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Linear(64, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, 8)

    def forward(self, x):
        return self.head(torch.relu(self.encoder(x)))

def mlp():
    torch.manual_seed(0)
    return ModelCase(MLP(), (torch.randn(4, 64),), name="mlp")

def linear():
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear")
"""
BUDGET = '[models.mlp]\nfactory = "models:mlp"\n'
PYPROJECT = (
    '[project]\nname = "demo"\nversion = "1.2.3"\n\n[tool.pytest.ini_options]\npythonpath = ["."]\n'
)


def layers(h: int) -> dict[str, int]:
    """FLOPs by top-level module: a linear is 2*batch*in*out + batch*out, the ReLU batch*h."""
    return {"<root>": 4 * h, "encoder": 2 * 4 * 64 * h + 4 * h, "head": 2 * 4 * h * 8 + 4 * 8}


def params(h: int) -> int:
    return 64 * h + h + h * 8 + 8


def git(path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=path,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def commit_and_check(path, hidden: int, comment: str) -> str:
    """Commit the MLP at ``hidden`` and run ``graph-budget check --history`` on it."""
    from pytest_graphbudget import cli

    (path / "models.py").write_text(MODELS.format(hidden=hidden, comment=comment))
    sys.modules.pop("models", None)
    git(path, "add", "-A", "models.py", "budgets", "pyproject.toml")
    git(path, "commit", "-q", "-m", comment)
    here = os.getcwd()
    os.chdir(path)
    try:
        assert cli.main(["check", "-q", "--no-cache", "--history", "out/history.jsonl"]) == 0
    finally:
        os.chdir(here)
        sys.modules.pop("models", None)
    return git(path, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Three runs at three commits: the history file's text, the commits, the start time."""
    path = tmp_path_factory.mktemp("repo")
    (path / "budgets").mkdir()
    (path / "budgets" / "mlp.toml").write_text(BUDGET)
    (path / "pyproject.toml").write_text(PYPROJECT)
    git(path, "init", "-q")
    start = datetime.now(timezone.utc).replace(microsecond=0)
    commits = [
        commit_and_check(path, 32, "first"),
        commit_and_check(path, 64, "widen the encoder"),
        commit_and_check(path, 64, "a comment"),
    ]
    return (path / "out" / "history.jsonl").read_text(), commits, start


@pytest.fixture
def three(built, tmp_path):
    """A copy of the history file (a test may rewrite it), the commits, the start time."""
    text, commits, start = built
    path = tmp_path / "history.jsonl"
    path.write_text(text)
    return path, commits, start


def test_each_run_appends_one_line_per_model_field_by_field(three):
    import torch

    path, commits, start = three
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["commit"] for line in lines] == commits  # one line per run, in run order
    for line, h in zip(lines, (32, 64, 64), strict=True):
        assert line["schema"] == "graphbudget.history/1"
        assert line["model"] == "budgets/mlp.toml::mlp"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", line["time"])
        when = datetime.fromisoformat(line["time"].replace("Z", "+00:00"))
        assert start <= when <= datetime.now(timezone.utc)
        assert line["environment"]["torch"] == torch.__version__
        assert line["environment"]["python"] == sys.version.split()[0]
        assert line["environment"]["project"] == "demo 1.2.3"
        assert "pytest-graphbudget" in line["environment"]
        assert line["tolerance"] == 0.01  # the default
        assert line["figures"]["flops"] == sum(layers(h).values())  # 18,720 then 37,408
        assert line["figures"]["params"] == params(h)  # 2,344 then 4,680
        assert line["layers"]["flops"] == layers(h)
        # params by top-level module: each linear's weight and bias
        assert line["layers"]["params"] == {"encoder": 64 * h + h, "head": h * 8 + 8}


def test_the_page_marks_the_widening_commit_and_names_the_encoder(three, capsys):
    from pytest_graphbudget import cli

    path, commits, _ = three
    out = path.parent / "history.html"
    assert cli.main(["history", str(path), "--html", str(out)]) == 0
    page = out.read_text()
    assert "default-src 'none'" in page
    flops = re.findall(
        r'<circle class="point( moved)?" data-figure="flops" data-commit="(\w+)"', page
    )
    assert flops == [("", commits[0]), (" moved", commits[1]), ("", commits[2])]
    # FLOPs 18,720 -> 37,408: +99.8%; the encoder's own FLOPs grew by 16,512, the most
    assert f"{commits[1][:7]}: FLOPs 18.7k -&gt; 37.4k (+99.8%); moved most: encoder" in page
    capsys.readouterr()
    assert cli.main(["history", str(path)]) == 0
    listed = capsys.readouterr().out.splitlines()
    said = f"{commits[1][:7]}: FLOPs 18.7k -> 37.4k (+99.8%); moved most: encoder"
    assert f"budgets/mlp.toml::mlp: {said}" in listed
    assert not [line for line in listed if commits[2][:7] in line]  # a comment moves nothing
    # the six figures: FLOPs, MACs, params, weights, peak and traffic all grew with the width
    assert listed[-1] == "1 model over 3 commits (3 lines): 6 moves past the tolerance"
    assert len(listed) == 6 + 1
    # a tolerance above the move marks nothing, and says so
    capsys.readouterr()
    assert cli.main(["history", str(path), "--tolerance", "100%"]) == 0
    said = "1 model over 3 commits (3 lines): nothing moved past the tolerance\n"
    assert capsys.readouterr().out == said


def test_a_commit_whose_model_could_not_be_checked_is_a_mark_not_a_gap(three, capsys, tmp_path):
    """A run whose model raised had no line: the broken commit vanished from the history.
    Its line now has no figures and its error; the moves skip it (the widening is measured
    from the first commit, across the broken one), the list and the page name it."""
    from pytest_graphbudget import cli
    from pytest_graphbudget.gate.check import ModelResult
    from pytest_graphbudget.reports import history

    path, commits, _ = three
    broken = ModelResult(
        "budgets/mlp.toml::mlp", "mlp", "budgets/mlp.toml::mlp", "budgets/mlp.toml", 1,
        {"limits": {}, "tolerance": 0.01}, error="the model's forward raised: shape mismatch",
    )  # fmt: skip
    appended = tmp_path / "appended.jsonl"
    assert history.append(appended, [broken], tmp_path, {"torch": "x"}) == 1
    line = json.loads(appended.read_text())
    assert (line["figures"], line["error"]) == ({}, "the model's forward raised: shape mismatch")
    first, *rest = path.read_text().splitlines()
    line["commit"] = "b" * 40
    path.write_text("\n".join([first, json.dumps(line), *rest]) + "\n")
    moved = history.moves(history.read(path))
    assert {(m.commit, m.figure) for m in moved if m.figure == "flops"} == {(commits[1], "flops")}
    capsys.readouterr()
    assert cli.main(["history", str(path)]) == 0
    listed = capsys.readouterr().out.splitlines()
    said = "budgets/mlp.toml::mlp: bbbbbbb: could not be checked: the model's forward raised"
    assert any(text.startswith(said) for text in listed)
    assert listed[-1] == "1 model over 4 commits (4 lines): 6 moves past the tolerance"
    out = tmp_path / "history.html"
    assert cli.main(["history", str(path), "--html", str(out)]) == 0
    page = out.read_text()
    assert "bbbbbbb: could not be checked: the model&#x27;s forward raised" in page
    points = re.findall(r'data-figure="flops" data-commit="(\w+)"', page)
    assert points == [commits[0], commits[1], commits[2]]  # no point for the broken commit


def test_a_torch_that_moved_between_lines_is_named_as_the_counter(three, capsys):
    import torch

    from pytest_graphbudget import cli

    path, commits, _ = three
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[0]["environment"]["torch"] = "2.0.0"  # the first run recorded under an older torch
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli.main(["history", str(path)]) == 0
    moved = [line for line in capsys.readouterr().out.splitlines() if "FLOPs" in line]
    assert moved == [
        f"budgets/mlp.toml::mlp: {commits[1][:7]}: FLOPs 18.7k -> 37.4k (+99.8%); "
        f"counter may have changed: torch 2.0.0 -> {torch.__version__}; moved most: encoder"
    ]


def test_outside_a_repository_the_commit_is_null(pytester):
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets" / "mlp.toml").write_text(BUDGET)
    pytester.makepyfile(models=MODELS.format(hidden=32, comment=""))
    pytester.syspathinsert()
    sys.modules.pop("models", None)
    args = ("-p", "no:cacheprovider", "--graph-budget", "--graph-budget-history=h.jsonl")
    env = {"GIT_CEILING_DIRECTORIES": str(pytester.path.parent)}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        assert pytester.runpytest(*args).ret == 0
    (line,) = [json.loads(text) for text in (pytester.path / "h.jsonl").read_text().splitlines()]
    assert line["commit"] is None and line["figures"]["flops"] == sum(layers(32).values())


def test_bad_history_files_are_one_line_and_exit_2(tmp_path, capsys):
    from pytest_graphbudget import cli

    missing = tmp_path / "none.jsonl"
    assert cli.main(["history", str(missing)]) == 2
    assert capsys.readouterr().err == f"graph-budget: error: {missing}: no such history file\n"
    bad = tmp_path / "bad.jsonl"
    good = {"schema": "graphbudget.history/1", "model": "m", "figures": {"flops": 1}}
    bad.write_text(json.dumps(good) + "\n{oops\n")
    assert cli.main(["history", str(bad), "--html", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"graph-budget: error: {bad}:2: not a JSON line (") and err.count("\n") == 1
    )
    assert not (tmp_path / "x.html").exists()
    bad.write_text(json.dumps(good | {"figures": 3}) + "\n")
    assert cli.main(["history", str(bad)]) == 2
    assert (
        capsys.readouterr().err == f"graph-budget: error: {bad}:1: figures missing or not a dict\n"
    )
    # User trial: hand-edited values were a traceback (exit 1), in the moves or the chart
    # User trial: --html into a missing folder made it (profile and compare refuse a typo)
    bad.write_text(json.dumps(good) + "\n")
    assert cli.main(["history", str(bad), "--html", str(tmp_path / "typo" / "x.html")]) == 2
    assert "--html" in capsys.readouterr().err and not (tmp_path / "typo").exists()
    for edit, says in [
        ({"figures": {"flops": "big"}}, 'figures.flops is "big", not a number'),
        # user trial: NaN and Infinity were a traceback, a tolerance "abc" read as 1%
        ({"figures": {"flops": float("nan")}}, "figures.flops is NaN, not a number"),
        ({"figures": {"flops": float("inf")}}, "figures.flops is Infinity, not a number"),
        ({"tolerance": "abc"}, 'tolerance is "abc", not a number'),
        ({"environment": "x"}, "environment is not a table of versions"),
        (
            {"layers": {"flops": {"fc": "lots"}}},
            "layers is not a table of numbers by figure and module",
        ),
    ]:
        bad.write_text(json.dumps(good) + "\n" + json.dumps(good | edit) + "\n")
        assert cli.main(["history", str(bad), "--html", str(tmp_path / "x.html")]) == 2
        assert capsys.readouterr().err == f"graph-budget: error: {bad}:2: {says}\n"


def test_history_page_in_headless_chromium(browser, three):
    """One point per commit on every series, no console error, no request but the file."""
    from pytest_graphbudget import cli

    path, commits, _ = three
    out = path.parent / "history.html"
    assert cli.main(["history", str(path), "--html", str(out)]) == 0
    browser.open(out.as_uri())
    per_series = browser.js(
        "[...document.querySelectorAll('svg.history')].map(s => [...new Set("
        "[...s.querySelectorAll('circle.point')].map(c => c.dataset.figure))].map("
        "f => [...s.querySelectorAll(`circle.point[data-figure=${f}]`)]"
        ".map(c => c.dataset.commit)))"
    )
    assert len(per_series) == 1 and len(per_series[0]) == 6  # six figures, one model
    assert all(series == commits for series in per_series[0])
    shown = browser.js("document.querySelector('ul.moves li').getBoundingClientRect().height")
    assert shown > 0
    assert browser.problems() == []
    assert browser.requests() == [out.as_uri()]
