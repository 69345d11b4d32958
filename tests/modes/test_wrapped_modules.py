"""Modules users wrap before they hand them over: a ``torch.compile``'d module is profiled as
the module it wraps (Inductor's kernels would hide its pointwise ops from the capture), and
TorchScript is refused in one line, wherever it comes from, and so is a nested-tensor input."""

from __future__ import annotations

import sys
import warnings
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


class Parent(nn.Module):
    def __init__(self, in_place: bool):
        super().__init__()
        self.enc, self.head = nn.Sequential(nn.Linear(8, 16), nn.ReLU()), nn.Linear(16, 4)
        if in_place:
            self.enc.compile()
        else:
            self.enc = torch.compile(self.enc)

    def forward(self, x):
        return self.head(self.enc(x))


@pytest.mark.parametrize("in_place", [False, True], ids=["torch.compile(child)", "child.compile()"])
def test_a_submodule_compiled_apart_is_priced_as_the_module_it_wraps(in_place):
    """User trial: a compiled submodule of an eager parent was captured through Inductor's
    kernels: its ReLU's FLOPs vanished and its Linear's went to the wrapper. By hand at batch
    2: Linear(8, 16) 2 x 8 x 16 = 256 MACs, 512 FLOPs + 32 bias adds; ReLU 32; Linear(16, 4)
    128 MACs, 256 + 8: 840 FLOPs. Each layer keeps its own name, and the child its wrapper."""
    torch.manual_seed(0)
    model, x = Parent(in_place).eval(), torch.randn(2, 8)
    wrapped = model.enc
    found = profile_model(model, x)
    assert (found.macs, found.flops) == (256 + 128, 512 + 32 + 32 + 256 + 8)
    assert {m: found.modules[m].flops for m in ("enc.0", "enc.1", "head")} == {
        "enc.0": 512 + 32,
        "enc.1": 32,
        "head": 256 + 8,
    }
    assert model.enc is wrapped  # put back as it was
    assert (getattr(model.enc, "_compiled_call_impl", None) is not None) == in_place


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
def test_torchscript_is_refused_in_one_line(tmp_path: Path, monkeypatch, capsys):
    """A traced module from a factory ended in a traceback from ``inspect.signature`` (a
    ScriptMethod has none) after the model had been priced."""
    x = torch.randn(2, 8)
    with warnings.catch_warnings():  # torch.jit.trace is deprecated on newer releases (not 2.4)
        warnings.simplefilter("ignore", FutureWarning)
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


def test_a_nested_tensor_input_is_refused_in_one_line_before_any_tier(
    tmp_path: Path, monkeypatch, capsys
):
    """A jagged input was priced at 0 FLOPs by ``profile_model`` (its ops are the subclass's)
    and ended the CLI's warm-up in a RecursionError blamed on the model's forward."""
    parts = "[torch.ones(3, 16), torch.ones(5, 16)], layout=torch.jagged"
    x = torch.nested.nested_tensor([torch.ones(3, 16), torch.ones(5, 16)], layout=torch.jagged)
    for mode in ("eval", "train"):
        with pytest.raises(GraphBudgetError, match="input 0 is a nested tensor .* dense"):
            profile_model(nn.Linear(16, 16), x, mode=mode)

    (tmp_path / "jagged_models.py").write_text(
        "import torch\ndef jagged():\n    return torch.nn.Linear(16, 16), "
        f"(torch.nested.nested_tensor({parts}),)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "jagged_models", raising=False)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["profile", "jagged_models:jagged"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "forward raised" not in err
    assert err.splitlines()[-1].endswith(
        "input 0 is a nested tensor (torch.nested), which "
        "graph-budget does not support as an input: pass padded dense tensors"
    )
