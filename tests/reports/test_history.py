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
    from pytest_graphbudget.cli import history as history_cli
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
    # user trial: "(1 lines)", and no count of the lines that could not be checked
    assert listed[-1] == (
        "1 model over 4 commits (4 lines, 1 could not be checked): 6 moves past the tolerance"
    )
    assert history_cli.summary([line], 0) == (
        "1 model over 1 commit (1 line, 1 could not be checked): nothing moved past the tolerance"
    )
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
        ({"figures": {"flops": -5}}, "figures.flops is -5, negative: a figure is >= 0"),
        ({"environment": "x"}, "environment is not a table of versions"),
        (
            {"layers": {"flops": {"fc": "lots"}}},
            "layers is not a table of numbers by figure and module",
        ),
    ]:
        bad.write_text(json.dumps(good) + "\n" + json.dumps(good | edit) + "\n")
        assert cli.main(["history", str(bad), "--html", str(tmp_path / "x.html")]) == 2
        assert capsys.readouterr().err == f"graph-budget: error: {bad}:2: {says}\n"


def test_appending_to_a_file_without_its_last_newline_starts_a_new_line(tmp_path):
    """User trial: a history file edited by hand, its last newline gone, had the next run's
    line glued onto its last (``...}{"schema"...``), and ``history`` refused line 1. Both
    ``check --history`` and ``--graph-budget-history`` append through ``history.append``."""
    from pytest_graphbudget.gate.check import ModelResult
    from pytest_graphbudget.reports import history

    broken = ModelResult(
        "m", "m", "m", "budgets/m.toml", 1, {"limits": {}, "tolerance": 0.01}, error="raised",
    )  # fmt: skip
    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps(GOOD))  # no newline at the end
    assert history.append(path, [broken], tmp_path, {}) == 1
    assert history.append(path, [broken], tmp_path, {}) == 1  # and a file that has one
    lines = path.read_text().split("\n")
    assert len(lines) == 4 and lines[-1] == ""
    assert json.loads(lines[0]) == GOOD
    assert [json.loads(line)["error"] for line in lines[1:3]] == ["raised", "raised"]
    assert len(history.read(path)) == 3


def test_a_tolerance_of_100_percent_or_more_is_recorded_as_a_percentage(tmp_path, capsys):
    """A bare ``"tolerance": 2`` is refused (it would be 200%), so a budget's ``tolerance =
    "150%"`` is written as ``"150%"``, and read back as 1.5: 100 -> 240 FLOPs (+140%) is
    within it, 100 -> 260 (+160%) is not."""
    from pytest_graphbudget import cli
    from pytest_graphbudget.gate.check import ModelResult
    from pytest_graphbudget.reports import history

    broken = ModelResult(
        "m", "m", "m", "budgets/m.toml", 1, {"limits": {}, "tolerance": 1.5}, error="raised",
    )  # fmt: skip
    path = tmp_path / "history.jsonl"
    assert history.append(path, [broken], tmp_path, {}) == 1
    assert json.loads(path.read_text())["tolerance"] == "150%"
    assert history.read(path)[0]["tolerance"] == 1.5
    for flops, moved in ((240, 0), (260, 1)):
        after = GOOD | {"tolerance": "150%", "figures": {"flops": flops}}
        path.write_text(json.dumps(GOOD) + "\n" + json.dumps(after) + "\n")
        assert len(history.moves(history.read(path))) == moved
    assert cli.main(["history", str(path)]) == 0
    assert capsys.readouterr().out.endswith("1 move past the tolerance\n")


GOOD = {
    "schema": "graphbudget.history/1",
    "commit": "a" * 40,
    "time": "2026-01-01T00:00:00Z",
    "environment": {},
    "model": "m",
    "tolerance": 0.01,
    "figures": {"flops": 100},
    "layers": {"flops": {"fc": 100}},
}
"""A line of 100 FLOPs; the next, 150 (+50%), moved past its tolerance of 1%."""
MOVED = GOOD | {"commit": "b" * 40, "figures": {"flops": 150}, "layers": {"flops": {"fc": 150}}}
HUGE = 10**400  # 1 and 400 zeros: 401 characters, beyond a float (about 1.8e308)


def known(names) -> str:
    return ", ".join(names)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        # user trial: the commit's [:7] raised TypeError where a figure moved (also --html)
        ({"commit": 1234567}, "commit is 1234567, not a string or null"),
        ({"commit": ["b"]}, 'commit is ["b"], not a string or null'),
        # user trial: an integer beyond a float's range raised OverflowError
        (
            {"figures": {"flops": HUGE}},
            "figures.flops is 10000000000000000000... (401 characters), beyond a float's range",
        ),
        (
            {"tolerance": HUGE},
            "tolerance is 10000000000000000000... (401 characters), beyond a float's range",
        ),
        (
            {"layers": {"flops": {"fc": HUGE}}},
            "layers is not a table of numbers by figure and module",
        ),
        # user trial: each of these hid the move, "nothing moved past the tolerance"
        ({"tolerance": 2}, 'tolerance = 2 would be 200%: did you mean "2%" or 0.02?'),
        (
            {"tolerance": 1},
            'tolerance = 1 would be 100%: did you mean "1%" or 0.01? Write "100%" for 100%.',
        ),
        ({"figures": {"flop": 150}}, "figures.flop is not a figure (did you mean 'flops'?)"),
        ({"layers": {"flop": {"fc": 150}}}, "layers.flop is not a figure (did you mean 'flops'?)"),
        (
            {"figures": {}, "layers": {}},
            "figures is empty and no error says why (only a model that could not be checked "
            "has no figures)",
        ),
    ],
    ids=[
        "commit-int",
        "commit-list",
        "huge-figure",
        "huge-tolerance",
        "huge-layer",
        "tolerance-2",
        "tolerance-1",
        "figure-typo",
        "layer-typo",
        "empty-figures",
    ],
)
def test_hand_edits_that_raised_or_hid_a_move_are_one_line_and_exit_2(tmp_path, capsys, edit, says):
    from pytest_graphbudget import cli
    from pytest_graphbudget.gate.baseline import BY_MODULE
    from pytest_graphbudget.gate.figures import BASELINE

    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(MOVED | edit) + "\n")
    if "is not a figure" in says:  # and the names that are, as line_of writes them
        names = BASELINE if says.startswith("figures") else ("flops", *BY_MODULE)
        says += f"; the figures are {known(names)}"
    for html in ([], ["--html", str(tmp_path / "h.html")]):
        assert cli.main(["history", str(path), *html]) == 2
        assert capsys.readouterr().err == f"graph-budget: error: {path}:2: {says}\n"
    assert not (tmp_path / "h.html").exists()


def test_an_integer_too_long_for_python_is_not_a_json_line(tmp_path, capsys):
    """Python refuses to read an integer of over 4,300 digits (a ValueError, no
    JSONDecodeError): it had been a traceback."""
    from pytest_graphbudget import cli

    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps(GOOD).replace('"flops": 100', '"flops": 1' + "0" * 5000) + "\n")
    assert cli.main(["history", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"graph-budget: error: {path}:1: not a JSON line (an integer too long)\n"
    )


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
