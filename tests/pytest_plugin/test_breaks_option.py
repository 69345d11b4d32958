"""``--graph-budget-breaks`` (issue 25): Dynamo with graph breaks only when asked.

A model FX cannot trace is priced from one taped forward by default; the option prices it
through Dynamo with graph breaks and puts each break in the JSON report. Two real pytest runs
(pytester, in-process) in one project with its profile cache: the second, with the option,
must not reuse the first run's taped profile.

The model is ``Linear(4, 4, bias=False)`` with all-ones weights on a ``(1, 4)`` input of ones,
then ``if y.sum() > 0: y * 2``: 1*4*4 = 16 MACs on either path.
"""

from __future__ import annotations

import json

import pytest

NETS = """
import torch
from torch import nn
from pytest_graphbudget import ModelCase

class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4, bias=False)

    def forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:  # a branch on a value: FX fails, Dynamo breaks the graph here
            return y * 2
        return y

def branchy():
    m = Branchy()
    nn.init.ones_(m.lin.weight)
    return ModelCase(m, (torch.ones(1, 4),), name="branchy")
"""
TEST = """
import pytest
from nets import branchy

@pytest.fixture
def model():
    return branchy()

@pytest.mark.macs_max(16)
def test_branchy(model):
    pass
"""


def _profile(pytester: pytest.Pytester, *args: str) -> dict:
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-json=out.json", *args
    )
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "out.json").read_text())
    (model,) = report["models"]
    return model["profile"]


def test_breaks_option_prices_through_dynamo_and_reports_each_break(pytester):
    from pytest_graphbudget.compat import dynamo_breaks_unavailable

    if why := dynamo_breaks_unavailable():
        pytest.skip(why)
    pytester.makepyprojecttoml("[tool.graph_budget]\n")
    pytester.makepyfile(nets=NETS, test_branchy=TEST)
    taped = _profile(pytester)
    broken = _profile(pytester, "--graph-budget-breaks")
    assert (taped["trace"]["method"], broken["trace"]["method"]) == ("eager", "dynamo-breaks")
    assert taped["trace"]["breaks"] == [] and len(broken["trace"]["breaks"]) >= 1
    assert taped["totals"]["macs"] == broken["totals"]["macs"] == 16


def test_the_base_is_profiled_with_graph_breaks_too(pytester):
    """``--graph-budget-base`` profiles the merge base in a pytest run of its own: without the
    option there, the base's model would be taped while HEAD's goes through Dynamo, and the
    two would be compared across tiers."""
    from pytest_graphbudget.pytest_plugin.base import command
    from pytest_graphbudget.run.settings import Settings

    asked = pytester.parseconfig(
        "--graph-budget", "--graph-budget-breaks", "--graph-budget-base=main"
    )
    plain = pytester.parseconfig("--graph-budget", "--graph-budget-base=main")
    assert "--graph-budget-breaks" in command(asked, Settings())
    assert "--graph-budget-breaks" not in command(plain, Settings())


def test_check_breaks_prices_through_dynamo(pytester, monkeypatch):
    """``graph-budget check --breaks``: the plugin's option, without pytest."""
    from pytest_graphbudget.compat import dynamo_breaks_unavailable

    if why := dynamo_breaks_unavailable():
        pytest.skip(why)
    from pytest_graphbudget import cli

    pytester.makepyprojecttoml("[tool.graph_budget]\n")
    pytester.makepyfile(nets=NETS)
    pytester.makefile(".toml", budget='[models.branchy]\nfactory = "nets:branchy"\nmacs_max = 16\n')
    monkeypatch.chdir(pytester.path)
    assert cli.main(["check", "budget.toml", "--breaks", "--no-cache", "--json", "out.json"]) == 0
    (model,) = json.loads((pytester.path / "out.json").read_text())["models"]
    assert model["profile"]["trace"]["method"] == "dynamo-breaks"
    assert model["profile"]["totals"]["macs"] == 16
