"""A fake forward's ops answered from their layout (``engine.fake_ops``) give the mode's figures.

A model on the meta device is taped on fakes; an op whose signature ran on fakes before gets
fresh fakes of the layout it gave then (a view: one on its argument's storage) without
``FakeTensorMode``'s dispatch. The references: hand counts, and the same model priced by FX,
whose cost pass never takes that path.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.engine import fake_ops  # noqa: E402

FIGURES = ("macs", "flops", "params", "traffic_bytes", "activation_peak_bytes")


class Block(nn.Module):
    """A linear, a transpose and a slice read by a matmul (views: offsets, strides), a split
    into chunks, an in-place add on a view."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        h = self.fc(x)  # 8x16: 8*16*16 MACs
        s = h[:, 4:12] @ h[:, 4:12].transpose(0, 1)  # 8x8 by 8x8: 512 MACs
        a, b = h.chunk(2, dim=1)
        a.add_(1.0)
        return torch.cat([a * b, h], dim=1)[:, :16] + s.sum()


class Stack(nn.Module):
    """Four equal blocks: the second to fourth repeat the first's signatures."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[Block() for _ in range(4)])

    def forward(self, x):
        return self.blocks(x)


BLOCK_MACS = 8 * 16 * 16 + 8 * 8 * 8


def _meta(build):
    with torch.device("meta"):
        return build().eval()


def _figures(profile) -> dict:
    return {name: getattr(profile, name) for name in FIGURES}


def test_a_repeated_block_is_priced_as_the_mode_prices_it():
    """The second to fourth blocks take the fast path; the totals are FX's, and the hand
    count, in a cold process memo and a warm one."""
    model, x = _meta(Stack), torch.randn(8, 16, device="meta")
    fake_ops.LAYOUTS.clear()
    cold = profile_model(model, (x,), tier="eager")
    assert fake_ops.LAYOUTS  # learnt as the forward ran
    warm = profile_model(model, (x,), tier="eager")
    traced = profile_model(model, (x,), tier="fx")
    assert cold.trace.method == warm.trace.method == "eager"
    assert cold.macs == 4 * BLOCK_MACS
    assert _figures(cold) == _figures(warm) == _figures(traced)
    assert cold.to_dict() | {"trace": None} == warm.to_dict() | {"trace": None}


class Constant(nn.Module):
    """A scalar the mode computes for real (a ``torch.tensor`` constant), after a fake of the
    same layout: ``.item()`` must still read its value."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        ones = torch.ones((), dtype=x.dtype, device=x.device)
        root = ones.sqrt()  # learnt: a 0-d sqrt of a fake with no value
        scale = torch.tensor(16.0).sqrt().item()  # the same signature on a constant: 4.0
        return self.fc(x) * root * scale


def test_a_constant_keeps_its_value_through_the_same_signature():
    model, x = _meta(Constant), torch.randn(2, 4, device="meta")
    fake_ops.LAYOUTS.clear()
    for _ in range(2):
        profile = profile_model(model, (x,), tier="eager")
        assert profile.macs == 2 * 4 * 4  # fc: 2 rows x 4 out x 4 in
