"""The forward after the one that built lazy state is replayed, not run again (issue 25).

A model whose first forward builds state (YOLO's anchors, ``MultiScaleRoIAlign``'s scales) is
priced as a later forward. That later forward used to be taped for real (twice the time of a
cold profile); now the first tape remembers every call and the second forward is answered
from it (``engine/replay.py``). The reference for every figure is the profile of the same
model warmed up beforehand, whose one taped forward is a later forward run for real. Kernels
that really run are counted with a custom op whose implementation counts its calls.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402

RUNS: list[int] = []


# The schema is given: torch 2.4's custom_op cannot read this module's string annotations.
@torch.library.custom_op(
    "graphbudget_test::counted", mutates_args=(), schema="(Tensor x) -> Tensor"
)
def counted(x: torch.Tensor) -> torch.Tensor:
    """``x + 1``, counting the times its kernel really runs."""
    RUNS.append(1)
    return x + 1


@counted.register_fake
def _(x):
    return torch.empty_like(x)


class Lazy(nn.Module):
    """Lazy state built from shapes (anchors) and through ``.item()`` (a scale), a branch on a
    value, and small tensors read with ``.tolist()`` (no op): the replay must take the path the
    real forward takes."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        nn.init.constant_(self.conv.weight, 0.1)  # y > 0 on ones: the multiplying branch
        self.anchors = None
        self.scale = 0.0

    def forward(self, x):
        if self.anchors is None:  # FX: a Proxy cannot be compared to None
            self.anchors = torch.arange(x.shape[-1] * x.shape[-2], dtype=x.dtype)
            self.scale = float(torch.tensor(float(x.shape[-1])).log2().round())
        y = self.conv(x)
        if y.sum() > 0:  # before the custom op: FX fails here, never running its kernel
            y = y * self.scale
        picks = counted(torch.arange(2)).tolist()  # [1, 2]: channels 1 and 2
        y = y[:, picks]
        return y.flatten(2) + self.anchors


def _figures(prof) -> dict:
    found = prof.to_dict()
    found.pop("seconds", None)
    found["trace"].pop("seconds")
    return found


def _warmed(model: nn.Module, x: torch.Tensor) -> nn.Module:
    with torch.no_grad():
        model(x)
    return model


def test_a_lazy_model_is_priced_as_a_later_forward_with_its_kernels_run_once():
    x = torch.ones(1, 3, 8, 8)
    fresh = Lazy().eval()
    reference = profile_model(_warmed(Lazy().eval(), x), (x,))
    RUNS.clear()
    replayed = profile_model(fresh, (x,))
    assert len(RUNS) == 1  # the first forward ran; the second was answered from its memo
    assert replayed.trace.method == reference.trace.method == "eager"
    assert _figures(replayed) == _figures(reference)
    # conv: 4 out x 64 pixels x 27 = 6912 MACs; sum and * scale on its 4 x 64 elements, > on
    # one, + anchors on the 2 x 64 picked (the custom op has no formula). The anchors (arange)
    # and the scale's log2 and round belong to the first forward only: not in the figures.
    assert replayed.macs == 4 * 64 * 27
    assert replayed.flops == 2 * 4 * 64 * 27 + 2 * (4 * 64) + 1 + 2 * 64
    # The state the model keeps is the real one its first forward built, not a stand-in.
    assert torch.equal(fresh.anchors, torch.arange(64, dtype=torch.float32))
    assert fresh.scale == 3.0


class Settling(Lazy):
    """A later forward calls an op the first one did not (a view): no replay can answer it."""

    def forward(self, x):
        if self.anchors is not None:
            x = x.view(x.shape)
        return super().forward(x)


class Keeping(Lazy):
    """The first forward keeps an activation as state: a later forward, which does not, frees
    it, and only a real one shows when."""

    def forward(self, x):
        y = super().forward(x)
        if not hasattr(self, "first"):
            self.first = y
        return y


@pytest.mark.parametrize("kind", [Settling, Keeping])
def test_a_forward_no_replay_can_stand_for_is_taped_again_for_real(kind):
    x = torch.ones(1, 3, 8, 8)
    fresh = kind().eval()
    reference = profile_model(_warmed(kind().eval(), x), (x,))
    RUNS.clear()
    taped = profile_model(fresh, (x,))
    assert len(RUNS) == 2
    assert _figures(taped) == _figures(reference)


def test_the_replay_names_numbers_and_frees_as_a_real_second_tape():
    from pytest_graphbudget.engine.breaks import capture_eager
    from pytest_graphbudget.engine.names import name_as_fx
    from pytest_graphbudget.engine.replay import replay_forward
    from pytest_graphbudget.engine.trace import Example
    from pytest_graphbudget.engine.watch import watched

    model, example = Lazy().eval(), Example((torch.ones(1, 3, 8, 8),), {})
    with watched(model) as watch:
        first = capture_eager(model, example, memo=True)
    replayed = replay_forward(model, example, first.measured, first.memo, watch.values)
    name_as_fx(replayed, model)  # as the tiers name every tape (capture_eager does it itself)
    real = capture_eager(model, example).measured
    assert len(replayed.nodes) < len(first.measured.nodes)

    def described(measured):
        keys = {}
        for node in measured.nodes:
            keys.update(dict.fromkeys(node.writes, len(keys)))
        frees = {keys[k]: i for k, i in measured.frees.items() if k in keys}
        nodes = [(n.name, n.index, n.target, n.module, n.inputs, n.shapes) for n in measured.nodes]
        return nodes, frees, sorted(measured.graph_outputs)

    assert described(replayed) == described(real)


class PerShape(Lazy):
    """YOLO's anchors: built again whenever the input's shape changes."""

    def forward(self, x):
        if self.anchors is not None and self.anchors.numel() != x.shape[-1] * x.shape[-2]:
            self.anchors = None
        return super().forward(x)


def test_a_model_profiled_before_is_priced_as_a_later_forward_at_a_new_shape():
    """Once a model's forward assigns nothing, its tape records no memo; when a new shape
    makes it build state again, the forward after it is taped for real, same figures."""
    small, large = torch.ones(1, 3, 8, 8), torch.ones(1, 3, 16, 16)
    model = PerShape().eval()
    profile_model(model, (small,))  # builds the anchors, replayed
    profile_model(model, (small,))  # assigns nothing: the model is settled
    RUNS.clear()
    again = profile_model(model, (large,))
    assert len(RUNS) == 2  # no memo to replay from: the later forward ran for real
    reference = profile_model(_warmed(PerShape().eval(), large), (large,))
    assert _figures(again) == _figures(reference)
    assert again.macs == 4 * 256 * 27
