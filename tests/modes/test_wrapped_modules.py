"""Modules users wrap before they hand them over: a ``torch.compile``'d module is profiled as
the module it wraps (Inductor's kernels would hide its pointwise ops from the capture), and
TorchScript is refused in one line, wherever it comes from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from pytest_graphbudget import cli, profile_model
from pytest_graphbudget.errors import GraphBudgetError


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 64))


def test_a_compiled_module_is_priced_as_the_module_it_wraps():
    """Compiled and run, this MLP's GELU and LayerNorm vanished into Inductor's C++ kernels:
    only the two addmm calls were seen. By hand at batch 32: MACs 32 x (64 x 256 + 256 x 64)
    = 1,048,576, and its layers keep their own names, not ``_orig_mod.*``."""
    torch.manual_seed(0)
    model, x = mlp().eval(), torch.randn(32, 64)
    plain, compiled = profile_model(model, x), profile_model(torch.compile(model), x)
    assert compiled.macs == plain.macs == 32 * (64 * 256 + 256 * 64)
    assert compiled.flops == plain.flops
    assert compiled.flops - 2 * compiled.macs > 32 * 256 * 5  # GELU, LayerNorm, biases priced
    assert compiled.model == "Sequential" and set(compiled.modules) == set(plain.modules)
    assert "0" in compiled.modules and not any("_orig_mod" in m for m in compiled.modules)
    step = profile_model(torch.compile(model), x, mode="train")
    assert step.macs == profile_model(model, x, mode="train").macs


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
def test_torchscript_is_refused_in_one_line(tmp_path: Path, monkeypatch, capsys):
    """A traced module from a factory ended in a traceback from ``inspect.signature`` (a
    ScriptMethod has none) after the model had been priced."""
    x = torch.randn(2, 8)
    with pytest.warns(FutureWarning):  # torch.jit.trace is deprecated
        traced = torch.jit.trace(nn.Linear(8, 4), (x,))
    with pytest.raises(GraphBudgetError, match="is TorchScript .* profile the eager model"):
        profile_model(traced, x)

    (tmp_path / "scripted_models.py").write_text(
        "import torch\ndef scripted():\n    return torch.jit.script(torch.nn.Linear(8, 4))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "scripted_models", raising=False)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["profile", "scripted_models:scripted", "--input-shape", "2,8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "is TorchScript" in err.splitlines()[-1]
