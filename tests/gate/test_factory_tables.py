"""A ``factory`` table takes no option its model cannot take (a user's trial): ``batch``,
``seq_len``, ``meta`` and ``trust_pickle`` (the zoo's), a second ``model``, or an
``input_shape`` beside a factory that returns its own inputs were accepted and dropped, and
the factory's own figures checked, green, under a budget that said otherwise.

The factories: ``pair`` returns ``nn.Linear(8, 4)`` with a ``(2, 8)`` input, ``bare`` the
same module alone. Either way 2*8*4 = 64 MACs, so 2*64 + 2*4 (bias adds) = 136 FLOPs.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from pytest_graphbudget import cli
from pytest_graphbudget.gate.factories import factory_problems

MODULE = "factory_tables_models"
MODELS = """
import torch

def pair():
    return torch.nn.Linear(8, 4), (torch.randn(2, 8),)

def bare():
    return torch.nn.Linear(8, 4)
"""
FLOPS = 2 * (2 * 8 * 4) + 2 * 4  # 136

BUDGETS = f"""
[models.batch]
factory = "{MODULE}:pair"
batch = 64
flops_max = "1M"

[models.seq_len]
factory = "{MODULE}:pair"
seq_len = 512
flops_max = "1M"

[models.shape]
factory = "{MODULE}:pair"
input_shape = [1, 3, 224, 224]
flops_max = "1M"

[models.both]
factory = "{MODULE}:pair"
model = "resnet18"
flops_max = "1M"

[models.bare]
factory = "{MODULE}:bare"
input_shape = [2, 8]
flops_max = "1M"

[models.same_shape]
factory = "{MODULE}:pair"
input_shape = [2, 8]
flops_max = "1M"

[models.kwargs]
factory = "{MODULE}:pair"
kwargs = {{x = 1}}
flops_max = "1M"
"""
ERRORS = {
    "batch": "batch in budgets/nets.toml::batch ignored: factory = "
    f"'{MODULE}:pair' builds its own model and inputs",
    "seq_len": "seq_len in budgets/nets.toml::seq_len ignored: factory = "
    f"'{MODULE}:pair' builds its own model and inputs",
    "shape": f"input_shape in budget table shape ignored: factory '{MODULE}:pair' returned its "
    "own inputs ([2, 8]), not a bare module; remove input_shape from the table",
    "both": "model in budgets/nets.toml::both: give model or factory, not both; factory = "
    f"'{MODULE}:pair' builds the model, so model = 'resnet18' would never be checked",
    # a key every table accepted and nothing read: a forward's keyword arguments come from a
    # factory's ModelCase
    "kwargs": "unknown budget key 'kwargs' in budgets/nets.toml::kwargs",
}


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(**{MODULE: MODELS})
    pytester.syspathinsert()
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets/nets.toml").write_text(textwrap.dedent(BUDGETS).lstrip())
    return pytester


def by_label(report: dict) -> dict:
    return {model["label"]: model for model in report["models"]}


def test_options_a_factory_cannot_take_are_errors_in_pytest_and_the_cli(
    project, monkeypatch, capsys
):
    result = project.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-json=p.json", "budgets"
    )
    result.assert_outcomes(passed=2, failed=5)
    assert "Traceback" not in result.stdout.str()
    models = by_label(json.loads((project.path / "p.json").read_text()))
    for label, message in ERRORS.items():
        assert message in models[label]["error"], (label, models[label]["error"])
        assert "\n" not in models[label]["error"]
    # what legitimately works: input_shape feeds a bare module, and may repeat a pair's shape
    for label in ("bare", "same_shape"):
        assert models[label]["passed"] is True
        assert models[label]["profile"]["totals"]["flops"] == FLOPS
    monkeypatch.chdir(project.path)
    assert cli.main(["check", "--no-cache", "--json", "c.json"]) == 1
    capsys.readouterr()
    cli_models = by_label(json.loads((project.path / "c.json").read_text()))
    for label, message in ERRORS.items():
        assert message in cli_models[label]["error"], (label, cli_models[label]["error"])
    assert cli_models["bare"]["passed"] is True


@pytest.mark.parametrize(
    ("table", "lines", "expected"),
    [
        ({"factory": "m:f", "meta": True}, {"meta": 3}, ["meta in t.toml::x ignored"]),
        ({"factory": "m:f", "trust_pickle": True}, {}, ["trust_pickle in t.toml::x (set in"]),
        ({"factory": "m:f", "batch": 4, "decode": True, "context": 8}, {}, []),
        ({"model": "resnet18", "batch": 4, "seq_len": 8}, {}, []),
        ({"factory": "m:f", "model": "a", "batch": 2}, {"batch": 2}, ["model in", "batch in"]),
    ],
    ids=["meta", "inherited", "decode-batch", "zoo", "two"],
)
def test_factory_problems(table, lines, expected):
    """One line per key, naming the table; a [defaults] key says so; a zoo table and a
    decode step's ``batch`` are left alone."""
    problems = factory_problems(table, "t.toml::x", lines)
    assert len(problems) == len(expected), problems
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(start) and "\n" not in problem, problem


def test_a_factory_that_raises_is_the_users_error_not_ours(project, monkeypatch, capsys):
    """User trial: every report called a factory's own exception "internal error in
    pytest-graphbudget ...; this is a bug, please report it"."""
    (project.path / f"{MODULE}.py").write_text(
        MODELS + "\ndef broken():\n    raise RuntimeError('no weights here')\n"
    )
    (project.path / "budgets/nets.toml").write_text(
        f'[models.broken]\nfactory = "{MODULE}:broken"\nflops_max = "1M"\n'
    )
    said = f"factory '{MODULE}:broken' for broken raised RuntimeError: no weights here"
    result = project.runpytest("-p", "no:cacheprovider", "--graph-budget", "budgets")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{said}*"])
    assert "internal error" not in result.stdout.str()
    monkeypatch.chdir(project.path)
    assert cli.main(["check", "--no-cache"]) == 1
    out = capsys.readouterr().out
    assert said in out and "internal error" not in out


def test_a_bare_modules_input_shape_is_read_as_a_zoo_models(project, monkeypatch, capsys):
    """User trial: ``input_shape = [0, 3, 16, 16]`` beside a factory's bare module profiled an
    empty batch at 0 FLOPs and passed its ``flops_max``; ``[1, 3, 16.5, 16]`` and ``[true, ...]``
    failed as "internal error ... this is a bug"; ``["2", 8]`` was "ignored: the factory
    returned its own inputs". Each reads as a zoo model's ``input_shape`` now."""
    tables = {"empty": "[0, 8]", "half": "[2, 8.5]", "bool": "[true, 8]", "text": '["2", 8]'}
    (project.path / "budgets/nets.toml").write_text(
        "".join(
            f'[models.{n}]\nfactory = "{MODULE}:bare"\ninput_shape = {shape}\nflops_max = "1M"\n\n'
            for n, shape in tables.items()
        )
    )
    monkeypatch.chdir(project.path)
    assert cli.main(["check", "--no-cache", "--json", "c.json"]) == 1
    capsys.readouterr()
    models = by_label(json.loads((project.path / "c.json").read_text()))
    for label in ("empty", "half", "bool"):
        error = models[label]["error"]
        assert error.startswith("input_shape must be a list of positive integers"), error
    assert models["text"]["passed"] is True
    assert models["text"]["profile"]["totals"]["flops"] == FLOPS
