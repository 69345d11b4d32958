"""The eager tape names each op after the module whose code runs it (``engine/frames.py``).

The tape reads the Python stack at every op, and reads again only the frames that ran since
the op before: these tests run the forwards where a frame runs without a new call below it (a
generator resumed by its caller, a loop calling the same module) and check each op's module,
written out by hand from the code. A factory op (``arange``) is one node: the tape holds no
reference to an op's output past the op, which would make torch detach it (one op more).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.engine.breaks import capture_eager  # noqa: E402
from pytest_graphbudget.engine.trace import Example  # noqa: E402


class Scale(nn.Module):
    def forward(self, x):
        return x * 2


class Pieces(nn.Module):
    """Ops in a generator of the module, and in its caller between two resumptions."""

    def __init__(self):
        super().__init__()
        self.a, self.b = Scale(), Scale()

    def pieces(self, x):
        for m in (self.a, self.b):
            yield m(x)
            x = x + 1  # the generator runs again: an op of this module

    def forward(self, x):
        out = []
        for y in self.pieces(x):
            out.append(y - 1)  # the caller ran between two resumptions: an op of this module
        return torch.cat(out)


class Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = Pieces()
        self.shared = Scale()
        self.blocks = nn.Sequential(self.shared, Scale(), self.shared)

    def forward(self, x):
        x = self.gen(x)
        x = _helper(self.shared, x)  # a function between two modules' frames
        return self.blocks(x).relu()


def _helper(module, x):
    return module(x.neg())


def _ops(model: nn.Module, *args) -> list[tuple[str, str]]:
    captured = capture_eager(model, Example(args, {}))
    return [(n.target, n.module) for n in captured.measured.nodes]


def test_each_op_is_named_by_the_module_whose_code_runs_it():
    assert _ops(Root().eval(), torch.randn(4)) == [
        ("aten.mul", "gen.a"),  # first resumption: self.a(x) inside the generator
        ("aten.sub", "gen"),  # y - 1 in Pieces.forward
        ("aten.add", "gen"),  # x + 1, the generator resumed
        ("aten.mul", "gen.b"),
        ("aten.sub", "gen"),
        ("aten.add", "gen"),
        ("aten.cat", "gen"),
        ("aten.neg", ""),  # _helper, called from Root.forward: the root's own op
        ("aten.mul", "shared"),  # shared's first name, called from the root
        ("aten.mul", "blocks.0"),  # the same module called by blocks: named under it
        ("aten.mul", "blocks.1"),
        ("aten.mul", "blocks.0"),  # blocks.2 is blocks.0: its first name under blocks
        ("aten.relu", ""),
    ]


class Factory(nn.Module):
    def forward(self, x):
        return torch.arange(4, dtype=x.dtype) * x


def test_a_factory_op_is_one_node():
    assert _ops(Factory().eval(), torch.randn(4)) == [
        ("aten.arange", ""),
        ("aten.mul", ""),
    ]


class Rebinds(nn.Module):
    """A caller that rebinds a local between two resumptions of a generator, with no op of
    its own in between: only the generator's ops see it."""

    def chunks(self, x):
        for _ in range(3):
            yield x.exp()

    def forward(self, x):
        if x.shape[0] != 16:  # a branch on a shape: FX cannot trace it, the tape runs
            raise ValueError("batch 16 only")
        y = x.cos()
        for y in self.chunks(x):  # noqa: B007  (y rebound: the tensor it held is freed)
            pass
        return y * 2


def test_a_local_rebound_between_two_resumptions_is_freed_then():
    # x: 16x64 float32, every result 4,096 bytes. cos -> c; exp -> e1 (c is freed when y is
    # rebound to e1); exp -> e2 (e1 freed when y is e2); exp -> e3; mul -> m.
    # Live at each op: c | c + e1 | e1 + e2 | e2 + e3 | e3 + m: the peak is two results, 8,192.
    # A tape that kept the caller's locals as they were at the first exp would hold c through
    # the third: c + e1 + e2 = 12,288.
    prof = profile_model(Rebinds().eval(), torch.randn(16, 64))
    assert prof.trace.method == "eager"
    assert prof.activation_peak_bytes == 2 * 4_096
