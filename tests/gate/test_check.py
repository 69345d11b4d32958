"""``check.py`` without pytest's machinery: a profile, a budget and a baseline entry in,
findings and a ``ModelResult`` out.

The profile is of ``nn.Linear(64, 32)`` on a ``(4, 64)`` input, counted by hand:
2*4*64*32 + 4*32 = 16,512 FLOPs, 4*64*32 = 8,192 MACs, 64*32 + 32 = 2,080 parameters.
"""

from __future__ import annotations

import pytest

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate.baseline import Baseline, Entry
from pytest_graphbudget.gate.budgets import build
from pytest_graphbudget.gate.check import Checker, ModelResult, budget_dict, findings, judge

FLOPS, MACS, PARAMS = 2 * 4 * 64 * 32 + 4 * 32, 4 * 64 * 32, 64 * 32 + 32


@pytest.fixture(scope="module")
def linear():
    import torch

    from pytest_graphbudget.api import profile_model

    torch.manual_seed(0)
    return profile_model(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear")


def checker(tmp_path, entries=None, problems=None, update=False) -> Checker:
    """A checker over a baseline read already (hand-built), so no file is involved."""
    found = Checker(tmp_path / "baseline.toml", "budgets/baseline.toml", update=update)
    found._baseline = Baseline(entries or {}, problems or {})
    return found


def result(budget, model_id="budgets/nets.toml::lin") -> ModelResult:
    return ModelResult(model_id, "lin", model_id, "budgets/nets.toml", 1, budget_dict(budget))


def test_findings_of_the_limits_on_hand_counts(linear):
    assert (linear.flops, linear.macs) == (FLOPS, MACS)
    assert findings(linear, build({"flops_max": 2 * FLOPS, "params_max": 2 * PARAMS}, "t")) == []
    at = findings(linear, build({"flops_max": FLOPS, "params_max": PARAMS}, "t"))
    assert [(f.severity, f.key) for f in at] == [("warn", "flops_max"), ("warn", "params_max")]
    (over,) = findings(linear, build({"flops_max": FLOPS - 1}, "t"))
    assert (over.severity, over.key, over.value, over.limit) == (
        "fail",
        "flops_max",
        FLOPS,
        FLOPS - 1,
    )
    (under,) = findings(linear, build({"macs_max": MACS * 1.05}, "t"))  # above 90%: a warning
    assert (under.severity, under.key) == ("warn", "macs_max")


def test_findings_against_a_baseline_entry(linear):
    budget = build({"tolerance": "1%"}, "t")
    same = Entry({"flops": FLOPS, "macs": MACS, "params": PARAMS})
    assert findings(linear, budget, same) == []
    smaller = Entry({"flops": FLOPS / 1.02})  # grew 2%, beyond the 1% tolerance
    (grew,) = findings(linear, budget, smaller, baseline_name="b.toml")
    assert (grew.severity, grew.key, grew.value) == ("fail", "baseline.flops", FLOPS)
    assert "b.toml" in grew.message


def test_judge_fills_the_result_and_update_judges_no_regression(linear, tmp_path):
    budget = build({"flops_max": "1M"}, "t")
    entries = {"budgets/nets.toml::lin": Entry({"flops": 1000.0}, {"<root>": 1000})}
    judged = judge(result(budget), linear, budget, checker(tmp_path, entries))
    assert judged.profile["totals"]["flops"] == FLOPS
    assert judged.baseline == {"flops": 1000.0} and judged.baseline_modules == {"<root>": 1000}
    assert [f["key"] for f in judged.findings] == ["baseline.flops"] and judged.failed
    updating = judge(result(budget), linear, budget, checker(tmp_path, entries, update=True))
    assert updating.findings == [] and not updating.failed


def test_a_baseline_entry_it_cannot_trust_is_the_models_error(linear, tmp_path):
    budget = build({}, "t")
    problems = {"budgets/nets.toml::lin": ["baseline.toml:3: flops: cannot be negative"]}
    judged = judge(result(budget), linear, budget, checker(tmp_path, problems=problems))
    assert judged.error == "baseline.toml:3: flops: cannot be negative" and judged.failed


def test_evaluate_turns_every_failure_into_a_result(tmp_path):
    budget = build({}, "t")

    def ours(hardware):
        raise GraphBudgetError("factory 'x:y' for lin: no module named x")

    def bug(hardware):
        return {}["missing"]

    first, second = result(budget), result(budget)
    assert checker(tmp_path).evaluate(first, budget, ours) is None
    assert first.error == "factory 'x:y' for lin: no module named x"
    assert checker(tmp_path).evaluate(second, budget, bug) is None
    assert second.error.startswith("internal error in pytest-graphbudget: KeyError: 'missing' at")
    assert second.error.endswith("this is a bug, please report it")
    assert "\n" not in second.error


def test_a_result_crosses_xdist_whole(linear):
    """``to_json``/``from_json`` are the one form a result takes between processes: every
    field, each set away from its default here, comes back, and the profile in it rebuilds
    into the very ``Profile.to_dict()`` it was (FLOPs 2*4*64*32 + 4*32 = 16,512, by hand)."""
    import dataclasses
    import json

    from pytest_graphbudget.engine.profile import profile_from_dict

    sent = ModelResult(
        id="t.py::test_lin",
        label="lin",
        nodeid="t.py::test_lin",
        path="t.py",
        line=7,
        budget={"max_flops": 20_000},
        findings=[{"severity": "fail", "key": "max_flops", "message": "over"}],
        profile=linear.to_dict(),
        baseline={"flops": 16_000.0},
        baseline_modules={"": 16_000},
        baseline_by_module={"": {"params": 2_080}},
        baseline_entry="t.py::test_old",
        error="boom",
        source="toml",
        graph_svg="<svg/>",
        graph_note="no Graphviz",
        layer_order=[""],
        no_baseline=True,
        compared_with="main@1a2b3c4",
        error_path="budgets/baseline.toml",
        error_line=15,
    )
    for f in dataclasses.fields(ModelResult):  # a field left at its default proves nothing
        default = f.default_factory() if callable(f.default_factory) else f.default
        assert getattr(sent, f.name) != default, f.name
    came = ModelResult.from_json(sent.to_json())
    assert came == sent
    assert came.profile["totals"]["flops"] == FLOPS
    again = profile_from_dict(came.profile).to_dict()
    assert json.dumps(again, sort_keys=True) == json.dumps(linear.to_dict(), sort_keys=True)


def test_growth_within_a_wide_tolerance_is_said_with_the_tolerance(linear):
    """User trial: ``tolerance = 0.5`` (50%, where 0.5% was likely meant) let a +21% model
    pass with nothing said. Growth past the default 1% but within the budget's tolerance is
    one notice naming each figure that grew and the tolerance. The baseline here: the same
    Linear with its FLOPs and MACs recorded 1.08 times smaller."""
    smaller = {"flops": FLOPS / 1.08, "macs": MACS / 1.08, "params": PARAMS}
    base = Entry(smaller)
    wide = findings(linear, build({"tolerance": 0.5}, "t"), base)
    (said,) = [f.message for f in wide]
    assert said == "grew within tolerance 50.0%: FLOPs +8.0%, MACs +8.0%"
    assert [
        f for f in findings(linear, build({"tolerance": "1%"}, "t"), base) if f.severity == "fail"
    ]
    same = Entry(dict(smaller, flops=FLOPS, macs=MACS))
    assert findings(linear, build({"tolerance": 0.5}, "t"), same) == []
