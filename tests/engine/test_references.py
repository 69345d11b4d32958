"""What a forward's statement does with a local's value (``engine/references.py``), read
from source written here: which names stand for the function's own submodules."""

from __future__ import annotations

import ast
import textwrap

from pytest_graphbudget.engine.references import escapes, submodules

SOURCE = textwrap.dedent(
    """
    def forward_features(self, x, fn):
        down = self.downsamp_modules[0]
        for i, incre in enumerate(self.incre_modules):
            for j, f in enumerate(self.fuse_layers[i]):
                pass
        for outer in self.fuse_layers:
            for inner in outer:
                pass
        for name, stage in self.stages.items():
            pass
        made = self.make()
        twice = self.blocks[0]
        twice = torch.zeros(1)
        with self.ctx() as kept:
            pass
        return x
    """
)


def test_names_bound_to_the_functions_own_submodules():
    func = ast.parse(SOURCE).body[0]
    # Attributes of self, their items, items of items (outer's), the values of .items():
    # not a parameter (fn), a method's result (made, kept), nor a name rebound otherwise.
    assert submodules(func) == {"down", "i", "incre", "j", "f", "outer", "inner", "name", "stage"}


def test_a_submodules_call_keeps_nothing_another_objects_may():
    (stmt,) = ast.parse("y = incre(a) + down.forward(y)").body
    assert escapes(stmt, "y") is True  # down may be anything: it may keep y
    assert escapes(stmt, "y", frozenset({"self", "down"})) is False
