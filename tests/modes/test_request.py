"""One request, resolved once (issue 23): what to profile is one frozen ``Request``, the same
value whether keywords, a budget table or a test's markers ask for it, handed to exactly one
mode, which never calls ``profile_model`` back."""

from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path

import pytest
import torch
from torch import nn

import pytest_graphbudget
from pytest_graphbudget import ModelCase, profile_sweep
from pytest_graphbudget import hardware as hw
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate.budget_files import read
from pytest_graphbudget.gate.budgets import Budget, measure_runs
from pytest_graphbudget.modes import dispatch
from pytest_graphbudget.modes.request import Request, Variant
from pytest_graphbudget.pytest_plugin.markers import budget_from_markers
from pytest_graphbudget.run.profiler import Profiler

PACKAGE = Path(pytest_graphbudget.__file__).parent


def table_request(tmp_path: Path, body: str) -> Request:
    """The request of the one table of a budget file holding ``body``, as a budget run builds
    it (the file read, the table's budget built, its model keys taken)."""
    path = tmp_path / "budgets.toml"
    path.write_text(body, encoding="utf-8")
    (table,) = read(path, "budgets.toml", Budget())
    budget = table.budget(f"budgets.toml::{table.name}")
    return Profiler().table_request(
        table.table, table.name, budget.hardware, budget.variant, measure_runs(budget)
    )


def test_a_budget_table_asks_for_what_the_same_keywords_ask_for(tmp_path):
    from_toml = table_request(
        tmp_path,
        '[models."resnet18"]\nbatch = 2\nmode = "train"\noptimizer = "sgd"\n'
        'dtype = "bfloat16"\nhardware = "a100"\nflops_max = "1T"\n',
    )
    from_keywords = dispatch.request(
        "resnet18",
        hardware=hw.get("a100"),
        name="resnet18",
        batch=2,
        mode="train",
        optimizer="sgd",
        dtype="bfloat16",
    )
    assert from_toml == from_keywords
    assert hash(from_toml) == hash(from_keywords)
    assert from_toml.variant == Variant("train", "sgd", "bfloat16")
    assert from_toml.options == (("batch", 2),)
    assert from_toml.hardware.name == "a100"


def test_a_timed_table_asks_for_a_model_with_weights_as_measure_does(tmp_path):
    # latency_measured_max makes the model run 5 times: a zoo name is then built with real
    # weights (meta = false), as profile_model(name, measure=5) builds it.
    from_toml = table_request(
        tmp_path, '[models."resnet18"]\nlatency_measured_max = "1s"\nmeasure_runs = 5\n'
    )
    from_keywords = dispatch.request(
        "resnet18", hardware=hw.get("generic"), name="resnet18", measure=5
    )
    assert from_toml == from_keywords
    assert (from_toml.runs, from_toml.options) == (5, (("meta", False),))


def test_a_decode_table_asks_for_the_decode_step_as_the_keywords_do(tmp_path):
    from_toml = table_request(
        tmp_path, '[models."gpt2"]\ndecode = true\ncontext = 64\nflops_max = "1T"\n'
    )
    from_keywords = dispatch.request(
        "gpt2", hardware=hw.get("generic"), name="gpt2", decode=True, context=64
    )
    assert from_toml == from_keywords
    assert from_toml.decode and from_toml.options == (("context", 64),)


def test_a_tables_model_path_is_the_projects_wherever_the_run_starts(tmp_path, monkeypatch):
    # User trial: `cd tests && pytest --graph-budget ../budgets` looked for the table's
    # model path in tests/. It is the root's, as a factory is, for a decode step too.
    folder = tmp_path / "cfg_gpt2"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "gpt2"}')
    (tmp_path / "tests").mkdir()
    monkeypatch.chdir(tmp_path / "tests")
    profiler = Profiler()
    for table in ({"model": "cfg_gpt2"}, {"model": "cfg_gpt2", "decode": True, "context": 8}):
        request = profiler.table_request(table, "gpt", "generic", root=tmp_path)
        assert request.model == os.path.join("..", "cfg_gpt2")
    named = profiler.table_request({}, "cfg_gpt2", "generic", root=tmp_path)  # the table's name
    assert named.model == os.path.join("..", "cfg_gpt2")
    assert profiler.table_request({}, "resnet18", "generic", root=tmp_path).model == "resnet18"
    with pytest.raises(GraphBudgetError, match=r"^weights/best\.pt: no such file or directory"):
        profiler.table_request({"model": "weights/best.pt"}, "best", "generic", root=tmp_path)


def test_a_tests_markers_ask_for_what_the_same_keywords_ask_for(pytester):
    item = pytester.getitem(
        "import pytest\n"
        "@pytest.mark.flops_max('1G')\n"
        "@pytest.mark.graph_budget(mode='train', optimizer='adam', dtype='float16', "
        "hardware='t4')\n"
        "def test_func():\n"
        "    pass\n"
    )
    budget = budget_from_markers(item, Budget(), None)
    case = ModelCase(nn.Linear(4, 2), (torch.randn(1, 4),), name="lin")
    from_marker = Profiler().request(
        case, None, None, "lin", budget.hardware, budget.variant, measure_runs(budget)
    )
    from_keywords = dispatch.request(
        case, hardware=hw.get("t4"), name="lin", mode="train", optimizer="adam", dtype="float16"
    )
    assert from_marker == from_keywords
    assert from_marker.variant.tag("lin") == "lin@train+adam+float16"


def test_a_request_is_frozen_and_hashable():
    request = dispatch.request("resnet18", batch=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.name = "other"  # type: ignore[misc]
    assert {request: "found"}[dispatch.request("resnet18", batch=2)] == "found"
    assert request != dispatch.request("resnet18", batch=4)
    assert request != dispatch.request("resnet18", batch=2, dtype="float16")
    # A test's ModelCase (a dataclass of tensors) and a TOML list hash too.
    case = ModelCase(nn.Linear(4, 2), (torch.randn(1, 4),), {"extra": [1]}, "lin")
    assert {dispatch.request(case, dtype="float16"): "found"}[
        dispatch.request(case, dtype="float16")
    ] == "found"
    assert isinstance(hash(dispatch.request("resnet18", input_shape=[1, 3, 64, 64])), int)


def test_a_sweep_checks_its_request_before_it_builds_a_point():
    built = []

    def inputs(seq_len):
        built.append(seq_len)
        return torch.randn(1, seq_len, 4)

    with pytest.raises(GraphBudgetError) as caught:
        profile_sweep(nn.Linear(4, 2), seq_len=[2, 4], inputs=inputs, mode="training")
    assert str(caught.value) == "mode must be 'eval' or 'train', not 'training'"
    assert built == []  # refused once, for every point, before the first was made


def names_used(path: Path) -> set[str]:
    """Every name a module reads, imports or reaches as an attribute (docstrings excluded)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found.update(alias.name for alias in node.names)
            found.add(node.module or "")
    return found


@pytest.mark.parametrize("layer", ["modes", "run"])
def test_no_mode_and_no_budget_run_calls_profile_model(layer):
    # profile_model is the facade of the public API: the modes and the budget run hand a
    # Request to dispatch.profile, and only a sweep (above the dispatch) hands its points'.
    for path in sorted((PACKAGE / layer).glob("*.py")):
        if path.name == "dispatch.py":
            continue
        used = names_used(path)
        assert "profile_model" not in used, path.name
        if layer == "modes" and path.name != "sweep.py":
            assert "pytest_graphbudget.modes.dispatch" not in used, path.name
            assert "dispatch" not in used, path.name


def test_a_tier_is_checked_once_and_refused_where_it_would_be_ignored():
    """``tier`` picks how an eval forward is captured: a training step would ignore it."""
    import torch

    from pytest_graphbudget.errors import GraphBudgetError
    from pytest_graphbudget.modes import dispatch

    linear = torch.nn.Linear(4, 2)
    assert dispatch.request(linear, torch.randn(1, 4), tier="dynamo").tier == "dynamo"
    with pytest.raises(GraphBudgetError) as info:
        dispatch.request(linear, torch.randn(1, 4), mode="train", tier="dynamo")
    assert str(info.value) == (
        "tier='dynamo' picks how one eval forward is captured, not a training step: drop tier"
    )
    with pytest.raises(GraphBudgetError, match="tier must be one of dynamo, dynamo-breaks"):
        dispatch.request(linear, torch.randn(1, 4), tier="export")
    with pytest.raises(GraphBudgetError, match=r"'dynamo_breaks' \(did you mean 'dynamo-breaks'"):
        dispatch.request(linear, torch.randn(1, 4), tier="dynamo_breaks")  # a user trial's slip


@pytest.mark.parametrize(
    ("model", "given", "says"),
    [
        # user trial: a TypeError from the zoo's loader, or "only apply to zoo model names"
        ("resnet18", {"hardwre": "a100"}, "unknown keyword 'hardwre' (did you mean 'hardware'?)"),
        (nn.Linear(4, 4), {"seq_lenn": 8}, "unknown keyword 'seq_lenn' (did you mean 'seq_len'?)"),
        # a TypeError deep in the cast
        (nn.Linear(4, 4), {"kwargs": [1]}, "kwargs= takes the keyword inputs as a dict, got list"),
    ],
)
def test_a_misspelt_keyword_or_a_kwargs_list_is_one_line(model, given, says):
    with pytest.raises(GraphBudgetError) as info:
        dispatch.request(
            model, (torch.ones(2, 4),) if isinstance(model, nn.Module) else None, **given
        )
    assert str(info.value) == says


@pytest.mark.parametrize(
    ("model", "says"),
    [
        (nn.Linear, "got the class Linear; pass an instance, Linear(...)"),
        (
            (nn.Linear(4, 4), (torch.ones(2, 4),)),
            "got a tuple: a (module, inputs) pair is passed as profile_model(module, inputs)",
        ),
    ],
    ids=["class", "pair"],
)
def test_a_class_or_a_pair_given_as_the_model_says_how_to_pass_it(model, says):
    """User trial: ``profile_model(nn.Linear, x)`` said "got type", ``profile_model((model,
    inputs))`` "got tuple"."""
    inputs = None if isinstance(model, tuple) else (torch.ones(2, 4),)
    with pytest.raises(GraphBudgetError) as info:
        pytest_graphbudget.profile_model(model, inputs)
    assert str(info.value) == f"expected a torch.nn.Module, {says}"


def test_a_zoo_option_the_model_ignores_is_a_note_of_its_profile():
    """User trial: ``profile_model("resnet18", seq_len=64)`` dropped the zoo's "seq_len
    ignored" without a word: only the CLI's console said it. The profile carries it, in its
    JSON and its notebook cell, and reads it back."""
    from pytest_graphbudget import profile_model
    from pytest_graphbudget.engine.profile import profile_from_dict

    prof = profile_model("mobilenet_v3_small", seq_len=64, meta=True)
    assert prof.notes == ["seq_len ignored: mobilenet_v3_small takes images"]
    assert profile_from_dict(prof.to_dict()).notes == prof.notes
    assert "Note: seq_len ignored: mobilenet_v3_small takes images" in prof._repr_html_()
    plain = profile_model(torch.nn.Linear(2, 2), torch.randn(1, 2))
    assert plain.notes == [] and "notes" not in plain.to_dict()
