"""The tracer's warm-up: lazy state exists, on real tensors, before the model is traced."""

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
    assert warm_up(model, Example((torch.randn(2, 8),), {})) > 0
    assert type(model.grid) is torch.Tensor  # not a fake tensor
    assert torch.equal(model.grid, torch.arange(16.0).reshape(2, 8))


def test_meta_model_warms_up_without_weights():
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    prof = profile_model(model, torch.randn(2, 8))  # would fail on real inputs with meta weights
    assert prof.macs == 2 * 8 * 8 and prof.trace.cost_pass == "fake"
    assert model[0].weight.is_meta


def test_real_and_fake_cost_passes_agree():
    # A quick model is measured on real tensors, a meta-device one on fake tensors.
    real = profile_model(Lazy(), torch.randn(2, 8))
    assert real.trace.cost_pass == "real"
    with torch.device("meta"):
        meta = nn.Linear(8, 8)
    fake = profile_model(meta, torch.randn(2, 8))
    plain = profile_model(nn.Linear(8, 8), torch.randn(2, 8))
    assert (fake.flops, fake.traffic_bytes, fake.activation_peak_bytes) == (
        plain.flops,
        plain.traffic_bytes,
        plain.activation_peak_bytes,
    )


def test_lazy_model_is_traced_after_its_state_exists():
    # After warm-up the grid is a constant: the traced graph adds it, it does not rebuild it
    # (no arange in the profile's nodes), as every real forward after the first does.
    prof = profile_model(Lazy(), torch.randn(2, 8))
    assert prof.macs == 2 * 8 * 8
    assert not any(n.kind == "arange" for n in prof.node_info)


# --------------------------------------------------------------------------------------------
# Issue 11: no warm-up forward for a model without lazy state


CALLS: list[str] = []


class Counted(nn.Module):
    """Counts its forwards outside its own state (a list it does not own)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        CALLS.append("forward")
        return self.proj(x).relu()


def test_model_without_lazy_state_is_traced_without_a_warm_up():
    CALLS.clear()
    prof = profile_model(Counted(), torch.randn(2, 8))
    assert prof.trace.method == "fx"
    assert CALLS == ["forward"]  # the symbolic trace only: no real forward before it
    assert prof.macs == 2 * 8 * 8 and prof.flops == 2 * 2 * 8 * 8 + 2 * 8 + 2 * 8


class Appends(nn.Module):
    """Lazy state kept in a container the forward fills in place, not assigned."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.cache: list = []

    def forward(self, x):
        if not self.cache:
            self.cache.append(torch.arange(x.numel(), dtype=x.dtype).reshape(x.shape))
        return self.proj(x) + self.cache[0]


@pytest.mark.parametrize("make", [Lazy, Appends], ids=["assigned", "appended"])
def test_lazy_state_found_by_the_trace_is_built_on_real_tensors(make):
    model = make()
    prof = profile_model(model, torch.randn(2, 8))
    state = model.grid if make is Lazy else model.cache[0]
    assert type(state) is torch.Tensor  # the warm-up's tensor, not a proxy left by the trace
    assert torch.equal(state, torch.arange(16.0).reshape(2, 8))
    assert not any(n.kind == "arange" for n in prof.node_info)
    assert make is Lazy or len(model.cache) == 1


def test_lazy_module_is_warmed_up_before_it_is_traced():
    model = nn.Sequential(nn.LazyLinear(8), nn.ReLU())
    prof = profile_model(model, torch.randn(2, 4))
    assert prof.macs == 2 * 4 * 8 and prof.params == 4 * 8 + 8
