"""``--graph-budget-base`` reads the base's own code (issue 24, item 1, and the user trials
after it): a project on an absolute path, an installed copy, and a model the base could not
profile. The repository and its model are ``test_base_ref``'s (its module docstring has the
figures by hand); a file of its own so that the two halves run on two workers.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from test_base_ref import (
    NARROW_FLOPS,
    NETS,
    PYPROJECT,
    TABLE,
    WIDE_FLOPS,
    commit,
    git,
    models,
    repo,
    write,
)

from pytest_graphbudget import cli

__all__ = ["repo"]  # the fixture, shared


def test_the_base_runs_its_own_code_or_says_it_cannot(pytester, repo, tmp_path, monkeypatch):
    """The models live in ``src/``, on an absolute ``PYTHONPATH`` (what an editable install's
    path entry is): the base run imported HEAD's ``nets`` and compared it with itself, green.
    It now reads its own checkout's. A copy installed outside the repository, which the base's
    checkout cannot replace, is an error naming it, never a comparison of HEAD with HEAD."""
    (repo / "src").mkdir()
    git(repo, "mv", "nets.py", "src/nets.py")
    (repo / "pyproject.toml").write_text(PYPROJECT.replace('pythonpath = ["."]\n', ""))
    commit(repo, "src layout")
    git(repo, "branch", "-f", "main")
    (repo / "src" / "nets.py").write_text(textwrap.dedent(NETS.format(width=32)))
    commit(repo, "widen")
    monkeypatch.setenv("PYTHONPATH", str(repo / "src"))
    monkeypatch.syspath_prepend(str(repo / "src"))
    gate = ("--graph-budget", "--graph-budget-base", "main", "--graph-budget-json=out.json")
    result = pytester.runpytest(*gate)
    assert result.ret == 1, result.stdout.str()
    for model in models(repo / "out.json").values():
        assert model["baseline"]["flops"] == NARROW_FLOPS
    site = tmp_path / "site"
    site.mkdir()
    (site / "nets.py").write_text(textwrap.dedent(NETS.format(width=32)))
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setattr("sys.path", [str(site), *(p for p in sys.path if p != str(repo / "src"))])
    result = pytester.runpytest(*gate)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: *main@* imported nets from {site}*, not the copy in*"])


def test_a_table_the_base_could_not_read_is_not_compared_rather_than_new(
    pytester, repo, monkeypatch
):
    """User trial: the base's table has a typo (``flop_max``), so the base run could not profile
    it (as a factory that raises there, a module its checkout lacks); HEAD fixes it and widens
    the model. It read ``new`` in its row, ``1 near a limit`` and ``1 model not in the baseline
    (new?)`` in the title and ``baseline.new`` in JSON, at 0.17% of its 1M limit (1,672 FLOPs by
    hand, the module docstring), its growth never compared. Each now says "not compared",
    naming why, and under strict it is an error; ``check --base`` too."""
    (repo / "budgets" / "nets.toml").write_text(TABLE.replace("flops_max", "flop_max"))
    commit(repo, "a typo at the base")
    git(repo, "branch", "-f", "main")
    write(repo, width=32)  # the table fixed, the model wider
    commit(repo, "fix the typo, and widen")
    result = pytester.runpytest(
        "--graph-budget", "budgets", "--graph-budget-base", "main",
        "--graph-budget-json=out.json", "--graph-budget-markdown=out.md",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    short = git(repo, "rev-parse", "--short", "main").strip()
    title = (
        "1 model within budget; 1 model not compared (the base could not profile it); "
        f"compared with main@{short}"
    )
    doc = json.loads((repo / "out.json").read_text())
    assert doc["title"] == title
    assert doc["summary"]["warn"] == 1  # it warns, as the docs say: not compared
    (model,) = doc["models"]
    assert model["profile"]["totals"]["flops"] == WIDE_FLOPS
    (finding,) = model["findings"]
    assert finding["key"] == "baseline.not_compared" and finding["severity"] == "warn"
    assert finding["message"].startswith(f"not compared: main@{short} could not profile it (")
    assert "flop_max" in finding["message"]
    row = next(line for line in result.stdout.lines if line.startswith("mlp "))
    assert "not compared" in row and "new" not in row, row
    markdown = (repo / "out.md").read_text()
    assert f"### ⚠️ Graph budget: {title}\n" in markdown
    assert "| not compared |" in markdown and "Near a limit" not in markdown
    assert "#### ⚠️ Not compared with the base" in markdown
    monkeypatch.chdir(repo)  # graph-budget check --base says the same
    assert cli.main(["check", "--base", "main", "--json", "c.json"]) == 0
    assert json.loads((repo / "c.json").read_text())["title"] == title
    assert cli.main(["check", "--base", "main", "--strict", "--json", "s.json"]) == 1
    (model,) = models(repo / "s.json").values()
    assert model["verdict"] == "error" and "flop_max" in model["error"]
