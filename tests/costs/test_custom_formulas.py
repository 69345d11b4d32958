"""A user's formula that raises fails in one line (issue 22, item 3), and the custom-op example
of docs/metrics.md runs as pasted (item 4).

The model is one custom op, ``gbraise::fused_mm`` (a matrix product and one add per output
element), on a (2, 8) input and an (8, 3) weight: a correct formula gives 2*8*3 = 48 MACs and
2*48 + 2*3 = 102 FLOPs. ``nn.Linear(8, 4)`` beside it, at (2, 8): 2*8*4 = 64 MACs, 2*64 + 2*4
bias adds = 136 FLOPs.
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytest_graphbudget import cli, profile_model, register_formula  # noqa: E402
from pytest_graphbudget.costs.registry import REGISTRY, FormulaError  # noqa: E402

DOCS = Path(__file__).parents[2] / "docs" / "metrics.md"


# The schema is given: torch 2.4's custom_op cannot read this module's string annotations.
@torch.library.custom_op(
    "gbraise::fused_mm", mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor"
)
def fused_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b + 1


@fused_mm.register_fake
def _(a, b):
    return a.new_empty(a.shape[0], b.shape[1])


class Fused(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 3))

    def forward(self, x):
        return torch.ops.gbraise.fused_mm(x, self.w)


@pytest.fixture(autouse=True)
def restored_registry():
    """Each test registers formulas of its own: take them out again afterwards."""
    saved = dict(REGISTRY)
    yield
    REGISTRY.clear()
    REGISTRY.update(saved)


def reads_tensor_shape(a, b, *, out=None, **kwargs):
    m, k = a.shape  # a is a Shape (a tuple), not a tensor
    return {"macs": m * k * b[1], "flops": 2 * m * k * b[1]}


def forgets_an_argument(a, *, out=None):
    return {"macs": 0, "flops": 0}


def macs_without_flops(a, b, *, out=None, **kwargs):
    return {"macs": 10, "flops": 19}


RAISED = "the formula registered for gbraise.fused_mm raised "
MISTAKES = {
    "reads-a-shape": (reads_tensor_shape, RAISED + "AttributeError: 'Shape' object has no attr"),
    "forgot-an-argument": (forgets_an_argument, RAISED + "TypeError: forgets_an_argument() takes"),
    "flops-below-2-macs": (
        macs_without_flops,
        "gbraise.fused_mm: flops=19 is less than 2 * macs=20; flops counts 2 per "
        "multiply-accumulate plus every other FLOP",
    ),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_formula_mistake_fails_the_profile_in_one_line(mistake):
    formula, start = MISTAKES[mistake]
    register_formula(torch.ops.gbraise.fused_mm.default)(formula)
    with pytest.raises(FormulaError) as info:
        profile_model(Fused(), (torch.randn(2, 8),))
    message = str(info.value)
    assert message.startswith(start), message
    assert "\n" not in message and "While executing" not in message and "tlparse" not in message


def one_error_line(err: str) -> str:
    """The single ``graph-budget: error:`` line of a run, which must also be its last line."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("graph-budget: error:")]
    assert len(errors) == 1, err
    assert err.rstrip().splitlines()[-1] == errors[0], err
    return errors[0]


@pytest.mark.parametrize("mistake", MISTAKES)
def test_the_command_line_says_it_in_one_error_line(mistake, tmp_path, capsys):
    formula, start = MISTAKES[mistake]
    path = tmp_path / "fused.pt2"
    torch.export.save(torch.export.export(Fused(), (torch.randn(2, 8),)), path)
    register_formula(torch.ops.gbraise.fused_mm.default)(formula)
    assert cli.main(["profile", str(path), "-q"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"graph-budget: error: {start}"), line


MODELS = """
import torch
from pytest_graphbudget import ModelCase, register_formula


@register_formula(torch.ops.gbraise.fused_mm.default)
def fused_mm(a, b, *, out=None, **kwargs):
    m, k = a.shape
    return {"macs": m * k * b[1], "flops": 2 * m * k * b[1]}


class Fused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 3))

    def forward(self, x):
        return torch.ops.gbraise.fused_mm(x, self.w)


def fused():
    return ModelCase(Fused(), (torch.randn(2, 8),), name="fused")


def plain():
    return ModelCase(torch.nn.Linear(8, 4), (torch.randn(2, 8),), name="plain")
"""

TESTS = """
import pytest

import models


@pytest.fixture
def fused():
    return models.fused()


@pytest.fixture
def plain():
    return models.plain()


@pytest.mark.flops_max("1G")
def test_fused(fused):
    pass


@pytest.mark.flops_max("1G")
def test_plain(plain):
    pass
"""


def test_pytest_reports_it_as_that_models_error_and_checks_the_others(pytester):
    pytester.makepyfile(models=MODELS, test_fused_formula=TESTS)
    pytester.syspathinsert()
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-json=report.json"
    )
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str()
    assert "While executing" not in output and "Traceback" not in output
    models = {
        m["label"]: m for m in json.loads((pytester.path / "report.json").read_text())["models"]
    }
    assert models["fused"]["verdict"] == "error"
    assert models["fused"]["error"].startswith(MISTAKES["reads-a-shape"][1])
    assert "\n" not in models["fused"]["error"]
    assert models["plain"]["verdict"] == "pass"
    assert models["plain"]["profile"]["totals"]["flops"] == 136


def test_the_custom_op_example_in_the_docs_runs_as_pasted(tmp_path, capsys):
    """The example defines ``mylib::fused_mm`` (an (8, 64) x (64, 32) product plus one add per
    output), registers its formula and profiles a model: 8*64*32 = 16,384 MACs and
    2*16,384 + 8*32 = 33,024 FLOPs, nothing unsupported."""
    blocks = [b.split("```", 1)[0] for b in DOCS.read_text().split("```python\n")[1:]]
    [example] = [b for b in blocks if "torch.library.custom_op" in b]
    assert "register_formula" in example and "profile_model" in example
    script = tmp_path / "custom_op_example.py"
    script.write_text(example)
    runpy.run_path(str(script), run_name="__main__")
    assert capsys.readouterr().out.split() == ["16384", "33024", "{}"]
