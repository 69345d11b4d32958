"""Issue 21, the smaller things a user meets on the command line: a fresh ``init`` budget that
passes without warnings, ``check -q``, one exit code for usage errors, and an
``--input-shape`` echoed as written. Every command runs in process through ``cli.main``.

The model is ``nn.Linear(64, 32)`` on a ``(4, 64)`` input: 2*4*64*32 + 4*32 = 16,512 FLOPs,
4*64*32 = 8,192 MACs, 64*32 + 32 = 2,080 params.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from pytest_graphbudget import cli

MODULE = "climistakes_models"
MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear():
    print("building the linear model")  # what a model library prints while it builds
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear")
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user project, its root the current directory."""
    (tmp_path / "pyproject.toml").write_text("[tool.graph_budget]\ncache_dir = '.cache'\n")
    (tmp_path / f"{MODULE}.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    monkeypatch.chdir(tmp_path)
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_a_fresh_init_budget_passes_without_a_warning(project, capsys):
    """With 10% headroom the FLOPs limit was 16,512 x 1.1 = 18,163, rounded up to "18.2k":
    16,512 / 18,200 = 90.7% of it, above the 90% warning line, so a fresh project opened
    with a warning. The default headroom keeps every figure below that line."""
    torch.save(torch.nn.Linear(64, 32), project / "tiny.pt")
    init = ["init", "tiny.pt", "--input-shape", "4,64", "--trust-pickle"]
    assert cli.main([*init, "-o", "budgets/models.toml"]) == 0
    assert cli.main(["check", "--json", "r.json"]) == 0
    out = capsys.readouterr().out
    report = json.loads((project / "r.json").read_text())
    (model,) = report["models"]
    assert model["verdict"] == "pass" and model["findings"] == [], model["findings"]
    assert report["summary"]["warn"] == 0 and "warn" not in out
    # Each limit init writes stands above today's figure / 90%; peak memory by hand: 8,320 B
    # of weights + 1,024 B input + 512 B output, all live at once = 9,856 B.
    figures = {"flops_max": 16_512, "macs_max": 8_192, "params_max": 2_080, "memory_max": 9_856}
    assert set(model["budget"]["limits"]) == set(figures)
    for key, figure in figures.items():
        assert figure / model["budget"]["limits"][key] < 0.9, key


def test_check_takes_q_and_then_keeps_what_models_print_off_stderr(project, capsys):
    (project / "budgets").mkdir()
    (project / "budgets/nets.toml").write_text(
        f'[models.lin]\nfactory = "{MODULE}:linear"\nflops_max = "1M"\n'
    )
    assert cli.main(["check", "--no-cache"]) == 0
    assert "building the linear model" in capsys.readouterr().err
    assert cli.main(["check", "-q", "--no-cache"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "1 model within budget" in captured.out  # the result is still on stdout


def test_check_usage_errors_exit_2_as_every_command(project, capsys):
    assert cli.main(["check", "nowhere"]) == 2
    assert cli.main(["check", "--no-such-flag"]) == 2
    assert cli.main(["profile", "--no-such-flag"]) == 2


def test_an_input_shape_of_the_wrong_rank_is_echoed_as_written(capsys):
    """resnet18 takes (batch, channels, height, width); torch read 1,3,224 as one unbatched
    image and blamed an input [1, 1, 3, 224] the user never wrote."""
    assert cli.main(["profile", "resnet18", "--input-shape", "1,3,224"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line == (
        "graph-budget: error: input shape 1,3,224 has 3 dimensions; the model's input has 4, "
        "such as 1,3,224,224"
    )


def test_execution_from_the_flag_or_the_project_and_a_bad_one_exits_2_in_one_line(project, capsys):
    """``--execution compiled`` reaches the profile; without it, ``[tool.graph_budget]
    execution``; ``--execution jit`` is one line and exit 2, before any model is built."""
    model = f"{MODULE}:linear"
    assert cli.main(["profile", model, "--execution", "compiled", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["execution"] == "compiled"
    assert cli.main(["profile", model, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["execution"] == "eager"
    (project / "pyproject.toml").write_text('[tool.graph_budget]\nexecution = "compiled"\n')
    assert cli.main(["profile", model, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["execution"] == "compiled"
    assert cli.main(["profile", model, "--execution", "jit"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "graph-budget: error: execution in the command line must be 'eager' or 'compiled', "
        "got 'jit'"
    )
