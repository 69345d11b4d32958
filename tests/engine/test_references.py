"""What a forward's statement does with a local's value (``engine/references.py``), read
from source written here: which names stand for the function's own submodules."""

from __future__ import annotations

import ast
import textwrap

from pytest_graphbudget.engine.references import escapes, statics, submodules

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


def test_a_return_hands_back_a_parameter_only_as_it_is(tmp_path):
    """SelecSLS's block returns its argument's item as it is; LayerScale's returns a method's
    result (``x.mul_(g)``, in place or not) or an operator's: a new value or the graph's op."""
    from pytest_graphbudget.engine.rebinding import returns_argument

    source = textwrap.dedent(
        """
        def block(self, x):
            return [self.conv6(torch.cat([x[0], x[1]], 1)), x[1]]

        def scale(self, x):
            return x.mul_(self.gamma) if self.inplace else x * self.gamma

        def passed(self, x, y):
            return (y, x) if self.swap else (x, y)
        """
    )
    file = tmp_path / "blocks.py"
    file.write_text(source)
    lines = {name: n + 2 for n, name in enumerate(source.splitlines()) if "def " in name}
    at = {name.split("(")[0].split()[-1]: line for name, line in lines.items()}
    assert returns_argument(f"{file}:block", at["block"], {})
    assert not returns_argument(f"{file}:scale", at["scale"], {})
    assert returns_argument(f"{file}:passed", at["passed"], {})


def test_names_no_op_of_the_forward_makes():
    source = textwrap.dedent(
        """
        def embed(self, x, ss: Tuple[int, int], y):
            B, N = x.shape[0], x.size(1)
            cls = self.cls_token_0 if B == 1 else self.cls_token_1
            cls = cls.expand(B, -1, -1)
            cu = int(round((N - ss[0]) / 2.0))
            h = self.fc(x)
            pos = resample(self.pos_embed, cu)
            z = y
            return h
        """
    )
    func = ast.parse(source).body[0]
    # Sizes, the module's attributes and their views, sizes of an annotated parameter; not
    # a submodule's or a function's result, nor an unannotated parameter or its alias.
    assert statics(func) == {"B", "N", "cls", "cu", "ss"}
