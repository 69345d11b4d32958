"""A real forward without its heavy arithmetic (``engine/hollow.py``): a signature computed
once in this process is rebuilt, not run, in the forwards after it, with the figures of the
real forward; a value it did not compute that reaches Python, sizes a result or is written
into the model's state makes the forward run again in full. The MACs are counted by hand:
a 3x3 convolution of 16 to 16 channels on 32 x 32 is 16 * 16 * 9 * 32 * 32 = 2,359,296."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_graphbudget import profile_model
from pytest_graphbudget.engine import hollow
from pytest_graphbudget.engine.breaks import capture_eager
from pytest_graphbudget.engine.trace import Example
from pytest_graphbudget.engine.watch import watched

CONV_MACS = 16 * 16 * 9 * 32 * 32
BLOCKS = 32  # 64 leaf modules: taped first (``first.tape_first``)


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """No layout learnt and no model marked before the test: its first forward computes."""
    monkeypatch.setattr(hollow, "LAYOUTS", {})
    monkeypatch.setattr(hollow, "MATTERED", hollow.weakref.WeakKeyDictionary())


class Stack(nn.Module):
    """``BLOCKS`` identical convolutions and ReLUs; ``then`` decides what the forward does
    with their result (the cases below)."""

    def __init__(self, then: str = "") -> None:
        super().__init__()
        torch.manual_seed(0)
        layers = [m for _ in range(BLOCKS) for m in (nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())]
        self.body = nn.Sequential(*layers)
        self.extra = nn.Conv2d(16, 16, 3, padding=1)
        self.register_buffer("stat", torch.zeros(()))
        self.then = then

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x) + 1.0  # exactly 1 on hollow (zero) results, above it in places for real
        if self.then == "branch" and (y - 1).abs().sum() > 0:  # .item() of a computed value
            y = self.extra(y)
        if self.then == "tolist" and (y - 1).abs().sum().tolist() > 0:  # no ATen op shows it
            y = self.extra(y)
        if self.then == "nonzero":  # sized by values
            y = y.flatten()[torch.nonzero(y.flatten() > 1).flatten()]
        if self.then == "topk":  # gathered by indices: the result has their shape
            y = y.flatten(2)[:, :, y.flatten(2).mean(1).topk(8).indices[0]]
        if self.then == "assign" and not hasattr(self, "seen"):  # lazy state, from a value
            self.seen = (y - 1).abs().sum()
        if self.then == "buffer":  # written in place into the model's own state
            self.stat.copy_((y - 1).abs().mean())
        return y


def _x() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(1, 16, 32, 32)


def _tape(model: nn.Module, x: torch.Tensor):
    with watched(model) as watch:
        return capture_eager(model, Example((x,), {}), hollow=watch).measured


def test_a_signature_is_computed_the_first_time_and_rebuilt_after_with_the_same_figures():
    model, x = Stack().eval(), _x()
    first = profile_model(model, (x,))
    assert _tape(model, x).hollow == BLOCKS  # every convolution, after the first forward
    second = profile_model(model, (x,))
    assert second.trace.method == "eager"
    assert first.macs == second.macs == BLOCKS * CONV_MACS
    assert first.to_dict() | {"trace": None} == second.to_dict() | {"trace": None}
    assert first.activation_peak_bytes == second.activation_peak_bytes > 0


def test_the_first_forward_of_a_process_computes_every_op():
    model, x = Stack().eval(), _x()
    assert _tape(model, x).hollow == 0
    assert _tape(model, x).hollow == BLOCKS


def test_a_large_model_rebuilds_a_signature_already_in_its_first_forward(monkeypatch):
    monkeypatch.setattr(hollow, "LARGE_ELEMENTS", Stack().body[0].weight.numel())
    model, x = Stack().eval(), _x()
    assert _tape(model, x).hollow == BLOCKS - 1  # from the second block on
    assert profile_model(model, (x,)).macs == BLOCKS * CONV_MACS


@pytest.mark.parametrize("then", ["branch", "tolist"])
def test_a_value_read_from_a_hollow_result_runs_the_forward_again_in_full(then):
    model, x = Stack(then).eval(), _x()
    first = profile_model(model, (x,))
    second = profile_model(model, (x,))
    assert first.macs == second.macs == (BLOCKS + 1) * CONV_MACS  # the branch real values take
    assert model in hollow.MATTERED  # and the next profile does not try again
    assert _tape(model, x).hollow == 0


def test_a_result_sized_by_hollow_values_is_sized_by_real_ones():
    model, x = Stack("nonzero").eval(), _x()
    with torch.no_grad():
        kept = int((model(x).flatten() > 1).sum())
    profile_model(model, (x,))
    second = _tape(model, x)
    assert 0 < kept < x.numel() and second.hollow == 0
    gathered = [n for n in second.nodes if n.target == "aten.index"]
    assert gathered and gathered[-1].shapes == [(kept,)]


def test_tokens_gathered_by_hollow_scores_keep_the_forward_hollow():
    model, x = Stack("topk").eval(), _x()
    first = profile_model(model, (x,))
    assert _tape(model, x).hollow == BLOCKS
    assert model not in hollow.MATTERED
    assert profile_model(model, (x,)).to_dict() | {"trace": None} == first.to_dict() | {
        "trace": None
    }


@pytest.mark.parametrize("then", ["assign", "buffer"])
def test_state_the_forward_leaves_holds_real_values(then):
    model, x = Stack(then).eval(), _x()
    with torch.no_grad():
        model(x)
    real = (model.seen if then == "assign" else model.stat).clone()
    profile_model(model, (x,))
    if then == "assign":
        del model.seen  # built again by the next forward, whose convolutions are hollow
    profile_model(model, (x,))
    after = model.seen if then == "assign" else model.stat
    assert float(real) > 0
    torch.testing.assert_close(after, real)
