"""Issue 24, item 1: ``--graph-budget-base REF`` (and ``graph-budget check --base REF``)
compares HEAD with the models profiled at ``git merge-base REF HEAD``, with no baseline file.

Each test drives a real git repository in pytester's directory: a base commit on ``main``
with a small model, a marker test and a budget table, then a pull-request commit on a branch.
The base side runs in a subprocess (a pytest run in a temporary worktree), as it must.

The model is ``Linear(8, W) -> ReLU -> Linear(W, 4)`` on a ``(2, 8)`` input. Its FLOPs by
hand: the first Linear 2*2*8*W plus 2*W bias adds, the ReLU 2*W, the second Linear 2*2*W*4
plus 2*4 bias adds. W = 16: 512 + 32 + 32 + 256 + 8 = 840; W = 32: 1,672, +99.05%. Params:
8*W + W + 4*W + 4; W = 16: 212, W = 32: 420.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from pytest_graphbudget import cli

NARROW_FLOPS = 2 * 2 * 8 * 16 + 2 * 16 + 2 * 16 + 2 * 2 * 16 * 4 + 2 * 4  # 840
WIDE_FLOPS = 2 * 2 * 8 * 32 + 2 * 32 + 2 * 32 + 2 * 2 * 32 * 4 + 2 * 4  # 1,672
NARROW_PARAMS, WIDE_PARAMS = 8 * 16 + 16 + 16 * 4 + 4, 8 * 32 + 32 + 32 * 4 + 4  # 212, 420

NETS = """
import torch
from pytest_graphbudget import ModelCase

WIDTH = {width}

def mlp():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 4))
    return ModelCase(net, (torch.randn(2, 8),), name="mlp")
"""
TESTS = """
import pytest
from nets import mlp

@pytest.fixture
def model():
    return mlp()

@pytest.mark.flops_max("1M")
def {test}(model):
    pass
"""
TABLE = '[models.mlp]\nfactory = "nets:mlp"\nflops_max = "1M"\n'
PYPROJECT = '[tool.pytest.ini_options]\npythonpath = ["."]\ntestpaths = ["tests"]\n'


def git(where: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(where), *args], check=True, capture_output=True, text=True
    ).stdout


def write(root: Path, width: int = 16, test: str = "test_mlp") -> None:
    (root / "nets.py").write_text(textwrap.dedent(NETS.format(width=width)))
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test_nets.py").write_text(textwrap.dedent(TESTS.format(test=test)))
    (root / "budgets").mkdir(exist_ok=True)
    (root / "budgets" / "nets.toml").write_text(TABLE)
    (root / "pyproject.toml").write_text(PYPROJECT)


def commit(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


@pytest.fixture
def repo(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pytester's directory as a git repository: ``main`` holds the narrow model, and the
    work goes on on the branch ``pr``."""
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "t")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "t@example.com")
    root = pytester.path
    git(root, "init", "-q", "-b", "main")
    write(root)
    commit(root, "base")
    git(root, "checkout", "-q", "-b", "pr")
    return root


def models(path: Path) -> dict[str, dict]:
    return {m["id"]: m for m in json.loads(path.read_text())["models"]}


def test_a_widened_layer_fails_against_the_base_with_no_baseline_file(pytester, repo):
    write(repo, width=32)
    commit(repo, "widen")
    result = pytester.runpytest(
        "--graph-budget", "--graph-budget-base", "main", "--graph-budget-json=out.json"
    )
    assert result.ret == 1
    assert not (repo / "budgets" / "baseline.toml").exists()
    short = git(repo, "rev-parse", "--short", "main").strip()
    doc = json.loads((repo / "out.json").read_text())
    assert doc["title"].endswith(f"compared with main@{short}"), doc["title"]
    assert "no baseline" not in doc["title"]
    for model in doc["models"]:  # the marker test and the table: the same model
        assert model["passed"] is False and model["verdict"] == "fail"
        assert model["baseline"]["flops"] == NARROW_FLOPS
        assert model["changes"]["flops"] == pytest.approx(WIDE_FLOPS / NARROW_FLOPS - 1)
        assert model["changes"]["params"] == pytest.approx(WIDE_PARAMS / NARROW_PARAMS - 1)
        (last,) = [f for f in model["findings"] if f["severity"] == "fail"][-1:]
        assert last["message"].endswith(f"compared with main@{short}, no file to update")
    assert len(doc["models"]) == 2
    assert "git worktree" not in git(repo, "worktree", "list")  # the base's worktree is gone
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    # Again, now that HEAD's profile cache exists (a second push, a re-run): the base run is
    # told that folder, and must still profile the base's code and write in its own worktree.
    again = pytester.runpytest(
        "--graph-budget", "--graph-budget-base", "main", "--graph-budget-json=out.json"
    )
    assert again.ret == 1, again.stdout.str()
    assert not (repo / "budgets" / "baseline.toml").exists()
    for model in models(repo / "out.json").values():
        assert model["baseline"]["flops"] == NARROW_FLOPS


def add_probe(repo, limits: str) -> None:
    """A second model, ``Linear(8, 2)`` on a ``(1, 8)`` input (2*1*8*2 + 1*2 = 34 FLOPs), and
    its table ``extra`` with ``limits``."""
    with (repo / "nets.py").open("a") as nets:
        nets.write(
            "\ndef probe():\n    return ModelCase(torch.nn.Linear(8, 2), (torch.ones(1, 8),))\n"
        )
    with (repo / "budgets" / "nets.toml").open("a") as table:
        table.write(f'\n[models.extra]\nfactory = "nets:probe"\n{limits}')


def test_a_renamed_test_is_matched_with_its_model_at_the_base(pytester, repo):
    write(repo, test="test_perceptron")
    add_probe(repo, "")  # a model new here, and with no limit
    commit(repo, "rename")
    result = pytester.runpytest(
        "--graph-budget", "--graph-budget-base", "main", "-v", "--graph-budget-json=out.json"
    )
    assert result.ret == 0, result.stdout.str()
    found = models(repo / "out.json")
    renamed = found["tests/test_nets.py::test_perceptron::model"]
    assert renamed["baseline_entry"] == "tests/test_nets.py::test_mlp::model"
    assert renamed["baseline"]["flops"] == NARROW_FLOPS
    assert renamed["changes"]["flops"] == 0.0
    # the hints name no file to rewrite: against a base there is none
    (notice,) = [f["message"] for f in renamed["findings"] if f["key"] == "baseline.renamed"]
    assert "--graph-budget-update" not in notice
    assert notice.endswith("once merged, the base records it under its new id"), notice
    extra = [f["message"] for f in found["budgets/nets.toml::extra"]["findings"]]
    assert any(m.startswith("nothing checked yet: no limit, and not in main@") for m in extra)
    assert not any("--graph-budget-update" in m for m in extra), extra
    # the code is unchanged: HEAD's run took the base's profiles from its run's cache
    result.stdout.fnmatch_lines(["graph budget cache: 1 profiled and stored, 2 reused"])


def test_the_base_against_itself_is_zero_and_a_model_it_lacks_is_said_new(
    pytester, repo, monkeypatch, capsys
):
    """Every figure of a model the base has moves by 0. User trial: a table new on the branch,
    with a limit, read ``... within budget; compared with main@...`` under a plain green icon,
    ``new`` only in its folded row, where the baseline file's run says ``not in the baseline
    (new?)``. Its growth is not checked, and the title says so. ``Linear(8, 2)`` on a
    ``(1, 8)`` input: 2*1*8*2 + 1*2 = 34 FLOPs."""
    (repo / "budgets" / "baseline.toml").write_text("")  # a committed baseline: ignored
    # the base asked in addopts, which the base's own run reads too (and must not obey)
    (repo / "pyproject.toml").write_text(
        PYPROJECT + 'addopts = "--graph-budget --graph-budget-base=HEAD"\n'
    )
    commit(repo, "a baseline file, and the base in addopts")
    add_probe(repo, 'flops_max = "1k"\n')  # not committed: HEAD lacks it
    result = pytester.runpytest("--graph-budget-json=out.json", "--graph-budget-markdown=out.md")
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((repo / "out.json").read_text())
    new = "1 model not in the base (new?): growth not checked"
    assert new in doc["title"] and "(baseline file ignored)" in doc["title"]
    assert f"### ⚠️ Graph budget: {doc['title']}\n" in (repo / "out.md").read_text()
    found = models(repo / "out.json")
    extra = found.pop("budgets/nets.toml::extra")
    assert extra["profile"]["totals"]["flops"] == 2 * 1 * 8 * 2 + 1 * 2
    (notice,) = extra["findings"]
    assert notice["key"] == "baseline.new" and notice["severity"] == "notice"
    assert notice["message"].endswith(": its growth is not checked (new on this branch?)")
    for model in found.values():
        figures = model["changes"]
        assert {"flops", "macs", "params", "peak_memory_bytes"} <= set(figures)
        assert all(change == 0.0 for change in figures.values()), figures
    monkeypatch.chdir(repo)  # graph-budget check --base says the same of its tables
    capsys.readouterr()
    assert cli.main(["check", "--base", "HEAD"]) == 0
    assert new in capsys.readouterr().out


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("no-such-branch", "--graph-budget-base no-such-branch: unknown revision*"),
        ("orphan", "--graph-budget-base orphan: no merge base with HEAD (shallow clone?*"),
    ],
)
def test_a_base_that_cannot_be_profiled_is_an_error(pytester, repo, ref, why):
    git(repo, "checkout", "-q", "--orphan", "orphan")
    commit(repo, "unrelated history")
    git(repo, "checkout", "-q", "pr")
    result = pytester.runpytest("--graph-budget", "--graph-budget-base", ref)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {why}"])


def test_check_base_fails_the_widened_table_and_a_broken_base_is_exit_2(repo, monkeypatch, capsys):
    write(repo, width=32)
    commit(repo, "widen")
    monkeypatch.chdir(repo)
    sha = git(repo, "rev-parse", "main").strip()  # the action's base: auto, a full sha
    assert cli.main(["check", "--base", sha, "--json", "check.json"]) == 1
    doc = json.loads((repo / "check.json").read_text())
    assert doc["title"] == f"1 model over budget; compared with {sha[:7]}"
    (model,) = models(repo / "check.json").values()
    assert model["changes"]["flops"] == pytest.approx(WIDE_FLOPS / NARROW_FLOPS - 1)
    # a base whose settings cannot be read: it cannot be profiled, one line, exit 2
    (repo / "pyproject.toml").write_text(PYPROJECT + '[tool.graph_budget]\ntolerence = "1%"\n')
    commit(repo, "broken")
    (repo / "pyproject.toml").write_text(PYPROJECT)  # fixed in the work tree, not at the base
    capsys.readouterr()
    assert cli.main(["check", "--base", "HEAD"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "graph-budget check: error: --base HEAD: at HEAD@"
    ), err
    assert "tolerence" in err[0]
