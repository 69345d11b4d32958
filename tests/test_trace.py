"""The tracer's warm-up: lazy state ends up real, everything else is left exactly as it was."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.trace import Example, warm_up  # noqa: E402


class Lazy(nn.Module):
    """Like YOLO's Detect head: builds a tensor on its first forward and reuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.grid = None

    def forward(self, x):
        if self.grid is None or self.grid.shape != x.shape:
            self.grid = torch.arange(x.numel(), dtype=x.dtype).reshape(x.shape)
        return self.proj(x) + self.grid


def test_lazy_state_is_initialised_on_real_tensors():
    model = Lazy()
    assert warm_up(model, Example((torch.randn(2, 8),), {})) == "real"
    assert type(model.grid) is torch.Tensor  # not a fake tensor left behind
    assert torch.equal(model.grid, torch.arange(16.0).reshape(2, 8))


def test_a_model_without_lazy_state_is_left_untouched():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    weight, before = model[0].weight, dict(vars(model[0]))
    assert warm_up(model, Example((torch.randn(2, 8),), {})) == "fake"
    assert model[0].weight is weight and dict(vars(model[0])) == before


def test_lazy_model_is_traced_after_its_state_exists():
    # After warm-up the grid is a constant: the traced graph adds it, it does not rebuild it
    # (no arange in the profile's nodes), as every real forward after the first does.
    prof = profile_model(Lazy(), torch.randn(2, 8))
    assert prof.macs == 2 * 8 * 8
    assert not any(n.kind == "arange" for n in prof.node_info)
