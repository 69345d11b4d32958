"""An exported graph's liveness against the tape's and by hand: export records no frees, so
the code it records tells a module's locals (held to its call's end) from the temporaries of
one expression (freed after their last reader), ``engine/liveness.py``."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402

ROW = 64 * 4  # bytes of one (1, 64) float32 activation


class OneExpression(nn.Module):
    """GPT-2's tanh GELU: nine element-wise ops in one expression."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


class Locals(nn.Module):
    """Each value bound to a name that a later statement reads: all live at the last add."""

    def forward(self, x):
        a = x * 2
        b = a + 1
        c = b * 3
        return a + c


class Embeddings(nn.Module):
    """Two submodules' results bound in the parent, then summed: GPT-2's embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens, self.positions, self.out = nn.Linear(64, 64), nn.Linear(64, 64), nn.ReLU()

    def forward(self, x):
        e = self.tokens(x)
        p = self.positions(x)
        h = e + p
        return self.out(h)


@pytest.mark.parametrize(
    ("model", "peak"),
    [
        # 0.5 * x lives through the expression; each later temporary is freed after the op
        # that reads it: at most 0.5 * x, the operand and the result.
        (OneExpression(), 3 * ROW),
        # a, b and c are locals until the forward returns, beside the result.
        (Locals(), 4 * ROW),
        # e and p are the forward's locals through the ReLU's call: e, p, h and the ReLU's.
        (Embeddings(), 4 * ROW),
    ],
    ids=["one-expression", "locals", "submodules-results"],
)
def test_an_exported_graph_frees_what_the_forward_frees(model, peak):
    x = torch.randn(1, 64)
    taped = profile_model(model, x, tier="eager")
    exported = profile_model(torch.export.export(model, (x,)), x)
    assert (taped.trace.method, exported.trace.method) == ("eager", "export")
    assert taped.activation_peak_bytes == exported.activation_peak_bytes == peak
