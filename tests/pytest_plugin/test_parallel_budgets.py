"""Issue 27 plumbing: ``parallel`` and ``memory_per_rank_max`` from TOML budget keys and
markers to the profile and back as a verdict.

The model is ``nn.Linear(64, 32)`` at ``(4, 64)``: 2,080 parameters. Trained with fp32 Adam
and sharded by FSDP over 2 ranks, each rank holds 16 bytes per parameter / 2:
16 * 2,080 / 2 = 16,640 bytes of model state, so a per-rank limit of 16,000 bytes is below the
state alone and must fail, whatever the activations.
"""

from __future__ import annotations

import json

import pytest

MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear():
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear")
"""
STATE = 16 * 2_080 // 2


def project(pytester: pytest.Pytester, table: str) -> None:
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    path = pytester.path / "budgets" / "nets.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'[models.lin]\nfactory = "models:linear"\n{table}')


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-json=report.json", *args
    )
    report = json.loads((pytester.path / "report.json").read_text())
    return result, {m["id"]: m for m in report["models"]}


@pytest.mark.parametrize(("limit", "passed"), [("16kB", False), ("1MB", True)])
def test_toml_parallel_and_memory_per_rank_max(pytester, limit, passed):
    project(
        pytester,
        f'mode = "train"\noptimizer = "adam"\nparallel = {{fsdp = 2}}\n'
        f'memory_per_rank_max = "{limit}"\n',
    )
    result, models = run(pytester)
    result.assert_outcomes(passed=int(passed), failed=int(not passed))
    profile = models["budgets/nets.toml::lin@train+adam+fsdp=2"]["profile"]
    ranks = profile["parallel"]["ranks"]
    assert [r["model_state_bytes"] for r in ranks] == [STATE, STATE]
    assert profile["totals"]["peak_memory_per_rank_bytes"] == max(r["peak_bytes"] for r in ranks)
    if not passed:
        result.stdout.fnmatch_lines(["*peak memory per rank*"])


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('memory_per_rank_max = "1MB"\n', "*memory_per_rank_max in *needs parallel*"),
        ("parallel = {fsdp = 2}\n", "*parallel in *needs mode*"),
        ('mode = "train"\nparallel = {fsdp = 0}\n', "*fsdp must be a whole number of ranks*"),
    ],
)
def test_toml_bad_parallel_is_one_line(pytester, table, message):
    project(pytester, table)
    result = pytester.runpytest("-p", "no:cacheprovider", "--graph-budget")
    assert result.ret != 0
    result.stdout.fnmatch_lines([message])


MARKED = """
import pytest
from models import linear

@pytest.fixture
def lin():
    return linear()

@pytest.mark.memory_per_rank_max({limit!r})
@pytest.mark.graph_budget(mode="train", optimizer="adam", parallel={{"fsdp": 2}})
def test_lin(lin):
    pass
"""


def test_marker_memory_per_rank_max(pytester):
    project(pytester, "")
    pytester.makepyfile(test_sharded=MARKED.format(limit="16kB"))
    result, models = run(pytester, "test_sharded.py")
    result.assert_outcomes(failed=1)
    profile = models["test_sharded.py::test_lin::lin@train+adam+fsdp=2"]["profile"]
    assert profile["parallel"]["ranks"][0]["model_state_bytes"] == STATE


def test_a_bare_memory_per_rank_max_marker_is_an_error_not_a_failure(pytester):
    """User trial: without ``graph_budget(mode="train", parallel=...)`` the test failed "over
    budget", telling the user to measure the model; the TOML table's error says why."""
    project(pytester, "")
    unmarked = MARKED.replace('@pytest.mark.graph_budget(mode="train", optimizer="adam", '
                              'parallel={{"fsdp": 2}})\n', "")  # fmt: skip
    pytester.makepyfile(test_bare=unmarked.format(limit="4GB"))
    result, models = run(pytester, "test_bare.py")
    result.assert_outcomes(errors=1)
    (model,) = models.values()
    assert model["verdict"] == "error" and "needs parallel" in model["error"]


def test_the_markdown_report_shows_ranks_that_differ(pytester):
    # fsdp=3 splits the 32 rows of the weight (and bias) as 11, 11, 10: ranks 0 and 1 hold
    # 11 * (64 + 1) = 715 parameters' gradients, 2,860 bytes; rank 2 holds 10 * 65 = 650,
    # 2,600 bytes. A 1kB limit fails, and the failure shows both rows.
    project(
        pytester,
        'mode = "train"\noptimizer = "adam"\nparallel = {fsdp = 3}\nmemory_per_rank_max = "1kB"\n',
    )
    result, _ = run(pytester, "--graph-budget-markdown=comment.md")
    result.assert_outcomes(failed=1)
    text = (pytester.path / "comment.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith(("| rank ", "| ranks 0"))]
    assert [row.split(" | ")[0] for row in rows] == ["| ranks 0-1", "| rank 2"]
    assert "| 2.86kB |" in rows[0] and "| 2.60kB |" in rows[1]
