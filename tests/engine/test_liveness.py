"""An exported graph's liveness against the tape's and by hand: export records no frees, so
the code it records tells a module's locals (held to its call's end) from the temporaries of
one expression (freed after their last reader), ``engine/liveness.py``."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.engine.unrecorded import UNRECORDED  # noqa: E402

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


class Residuals(nn.Module):
    """GPT-2's block: the name rebound after each residual add, so the old value is dropped
    there; the submodules' results the forward binds are held to its end."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2 = nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 64)
        self.up, self.down = nn.Linear(64, 256), nn.Linear(256, 64)

    def forward(self, x):
        residual = x
        x = self.norm1(x)
        a = self.attn(x)
        x = a + residual  # norm1's result is no one's now
        residual = x
        x = self.norm2(x)  # held by x to the end, though only up reads it
        f = self.down(torch.relu(self.up(x)))
        return residual + f


class Branch(nn.Module):
    """A rebinding in a branch not taken: the name keeps its value to the end."""

    def __init__(self, double: bool = False) -> None:
        super().__init__()
        self.a, self.b, self.double = nn.Linear(64, 64), nn.Linear(64, 64), double

    def forward(self, x):
        h = self.a(x)
        y = self.b(h)
        if self.double:
            h = h * 2
        return y + 1


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(64, 256), nn.Linear(256, 64)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class Blocks(nn.Module):
    """GPT-2's and T5's stacks: a loop over an ``nn.ModuleList`` that is never called, each
    turn's block rebinding x; after the loop, x rebound once more (T5's final norm)."""

    def __init__(self, head: int = 64) -> None:
        super().__init__()
        self.a, self.h = nn.Linear(64, 64), nn.ModuleList([Block(), Block()])
        self.norm, self.out = nn.Linear(64, 64), nn.Linear(64, head)

    def forward(self, x):
        x = self.a(x)
        for block in self.h:
            x = block(x)
        x = self.norm(x)  # the last block's result is no one's once this has run
        return self.out(x)


class LocalBlock(Block):
    def forward(self, x):
        h = self.up(x)  # a local: held until the block returns
        return self.down(torch.relu(h))


class Shared(nn.Module):
    """ALBERT's encoder: one block of an ``nn.ModuleList`` called in turn, x rebound by each
    call; the export tells its calls apart (``layer.0@1``), so each call's locals die when it
    returns."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.layer = nn.Linear(64, 64), nn.ModuleList([LocalBlock()])

    def forward(self, x):
        x = self.a(x)
        for _ in range(2):
            x = self.layer[0](x)
        return x


class Saved(nn.Module):
    """YOLO's loop: a layer's result kept in a list only where a later layer reads it
    (``y.append(x if m.i in self.save else None)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers, self.save = nn.ModuleList([Block() for _ in range(4)]), {0}

    def forward(self, x):
        y = []
        for i, m in enumerate(self.layers):
            x = m(x)
            y.append(x if i in self.save else None)
        return x + y[0]


class Joined(nn.Module):
    """DeBERTa's encoder: each layer's result joined to a tuple the forward keeps."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x):
        states = ()
        for m in self.layers:
            x = m(x)
            states = states + (x,)
        return x


class Called(nn.Module):
    """The same blocks in an ``nn.Sequential``, which is called: the caller's x holds a's
    result until the call returns, though the Sequential's own loop rebinds its argument."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.h = nn.Linear(64, 64), nn.Sequential(Block(), Block())

    def forward(self, x):
        x = self.a(x)
        x = self.h(x)
        return x


class Indexed(nn.Module):
    """T5's block: its layers indexed from an ``nn.ModuleList``, x rebound by each."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.ModuleList([nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 1024)])

    def forward(self, x):
        x = self.layer[0](x)
        x = self.layer[1](x)  # layer 0's result is no one's once this has run
        return self.layer[2](x)


class Res2Block(nn.Module):
    """res2net's block: a loop over a ``ModuleList`` of its own, then the shortcut read."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList([nn.Linear(64, 64) for _ in range(2)])

    def forward(self, x):
        out = x
        for conv in self.convs:
            out = conv(out)
        return out + x


class Stages(nn.Module):
    """timm's ResNet: ``x = self.layer1(x)`` in a branch (the other checkpoints), its blocks'
    own loops inside the call, which tell nothing of this function's statements."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.layer1 = nn.Linear(64, 64), nn.Sequential(Res2Block())
        self.layer2, self.checkpointing = nn.Linear(64, 1024), False

    def forward(self, x):
        x = self.stem(x)
        if self.checkpointing:
            x = torch.utils.checkpoint.checkpoint_sequential(self.layer1, 1, x)
        else:
            x = self.layer1(x)  # the stem's result is no one's once this has run
        return self.layer2(x)


class ShortcutAfter(nn.Module):
    """EdgeNeXt's block: ``if self.shortcut_after_dw: shortcut = x``, a branch not run, then
    x handed on through a view to the next rebinding."""

    def __init__(self) -> None:
        super().__init__()
        self.dw, self.norm = nn.Linear(64, 64), nn.LayerNorm(64)
        self.fc, self.out, self.after = nn.Linear(64, 1024), nn.Linear(1024, 64), False

    def forward(self, x):
        shortcut = x
        x = self.dw(x)
        if self.after:
            shortcut = x
        x = x.view(1, 64)
        x = self.norm(x)  # dw's result is no one's once this has run
        x = self.fc(x)
        return shortcut + self.out(x)


def _post_pool(x):
    """mvitv2's ``reshape_post_pool``: a view of its input, returned with a size."""
    return x.view(1, 64), x.shape[-1]


class Pooled(nn.Module):
    """mvitv2's attention: the pooled query handed on through a tuple (``q, size = ...``)."""

    def __init__(self) -> None:
        super().__init__()
        self.pool, self.norm, self.head = nn.Linear(64, 64), nn.LayerNorm(64), nn.Linear(64, 1024)

    def forward(self, x):
        q = self.pool(x)
        q, size = _post_pool(q)  # unpacked as mvitv2 unpacks it
        q = self.norm(q)  # the pool's result is no one's once this has run
        return self.head(q)


class Incremental(nn.Module):
    """timm HRNet's head: y bound in one branch of a loop's first turn and rebound in the
    other by each later turn, from a block called by name (``incre(x)``) and a
    ``Sequential``'s forward called directly (``down.forward(y)``), of which the export records
    no call: the frame of its forward is the only sign."""

    def __init__(self) -> None:
        super().__init__()
        self.incre = nn.ModuleList([nn.Linear(64, 1024), nn.Linear(64, 64), nn.Linear(64, 1024)])
        self.down = nn.ModuleList(
            [
                nn.Sequential(nn.Linear(1024, 64), nn.ReLU()),
                nn.Sequential(nn.Linear(64, 1024), nn.ReLU()),
            ]
        )

    def forward(self, x):
        y = None
        for i, incre in enumerate(self.incre):
            if y is None:
                y = incre(x)
            else:
                down = self.down[i - 1]
                y = incre(x) + down.forward(y)
        return y


class _Embed(nn.Module):
    """Twins' patch embedding: its result and the size of the map it came from."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        return self.fc(x), (x.shape[0], 64)


class _Sized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x, size):
        return self.fc(x).view(size)


class Pegged(nn.Module):
    """timm Twins' stages: ``x, size = embed(x)``, a call's two items, x the one the next
    line reads; then ``x = blk(x, size)`` in the blocks' loop, and in its first turn only ``x
    = pos_blk(x, size)``, whose result the next turn's ``blk`` reads and rebinds, before the
    rebinding after the loop (``x = norm(x)``) runs."""

    def __init__(self) -> None:
        super().__init__()
        self.embeds, self.drops = nn.ModuleList([_Embed()]), nn.ModuleList([nn.Linear(64, 64)])
        self.blocks = nn.ModuleList([nn.ModuleList([_Sized(), _Sized(), _Sized()])])
        self.pos, self.norms = nn.ModuleList([_Sized()]), nn.ModuleList([nn.LayerNorm(64)])
        self.head = nn.Linear(64, 4096)

    def forward(self, x):
        stages = zip(self.embeds, self.drops, self.blocks, self.pos, self.norms, strict=True)
        for embed, drop, blocks, pos_blk, norm in stages:
            x, size = embed(x)
            x = drop(x)
            for j, blk in enumerate(blocks):
                x = blk(x, size)
                if j == 0:
                    x = pos_blk(x, size)
            x = norm(x)
        return self.head(x)


class Mixed(nn.Module):
    """timm EVA's ``forward_features``: x bound outside any loop; the statements after it
    that bind it again stand first in a branch not taken (a loop's, itself in two
    branches), then in the loop of the other branch, whose first block's call rebinds it."""

    def __init__(self) -> None:
        super().__init__()
        self.mixed = self.checkpointing = False
        self.a, self.blocks = nn.Linear(64, 64), nn.ModuleList([Block(), Block()])
        self.norm, self.head = nn.LayerNorm(64), nn.Linear(64, 4096)

    def forward(self, x):
        x = self.a(x)
        if self.mixed:
            for blk in self.blocks:
                if self.checkpointing:
                    x = blk(x) * 2
                else:
                    x = blk(x) * 3
        else:
            for blk in self.blocks:
                if self.checkpointing:
                    x = blk(x) * 2
                else:
                    x = blk(x)
        x = self.norm(x)
        return self.head(x)


class _Sls(nn.Module):
    """SelecSLS's block: the first of a stage returns its result twice, the others their
    result and the skip they were handed (``x[1]``)."""

    def __init__(self, first: bool, wide: int = 64) -> None:
        super().__init__()
        self.first, self.conv = first, nn.Linear(64, wide)
        self.out = nn.Linear(wide if first else wide + 64, 64)

    def forward(self, x):
        d = self.conv(x[0])
        if self.first:
            out = self.out(d)
            return [out, out]
        return [self.out(torch.cat([d, x[1]], 1)), x[1]]


class _SequentialList(nn.Sequential):
    def forward(self, x):
        for module in self:
            x = module(x)
        return x


class Handed(nn.Module):
    """timm SelecSLS: blocks that hand back the skip they were handed, which no later op
    reads: the loop's x holds it through the next block's call, and what the last block
    hands back, the caller's x through the head."""

    def __init__(self, head: int = 64) -> None:
        super().__init__()
        blocks = _Sls(True), _Sls(False), _Sls(True, wide=4096), _Sls(False)
        self.features, self.head = _SequentialList(*blocks), nn.Linear(64, head)

    def forward(self, x):
        x = self.features([x])
        return self.head(x[0])


class Tokens(nn.Module):
    """ConViT's ``forward_features``: x bound before the blocks' loop, whose body rebinds it
    in one turn only (``if u == self.local_up_to_layer: x = torch.cat((cls, x), 1)``), then
    by the block's call in every turn."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.head = nn.Linear(64, 64), nn.Linear(64, 64)
        self.blocks = nn.ModuleList([Block(), Block(), Block()])

    def forward(self, x):
        x = self.a(x)
        for u, blk in enumerate(self.blocks):
            if u == 2:
                x = torch.cat((x[:, :32], x[:, 32:]), dim=1)
            x = blk(x)
        return self.head(x)


class _AppendList(nn.Sequential):
    """timm VoVNet's ``SequentialAppendList``: each layer's result appended to the list its
    caller passed in."""

    def forward(self, x, concat_list):
        for i, module in enumerate(self):
            if i == 0:
                concat_list.append(module(x))
            else:
                concat_list.append(module(concat_list[-1]))
        return torch.cat(concat_list, dim=1)


class Osa(nn.Module):
    """timm VoVNet's OSA block: ``output = [x]``, handed to ``self.conv_mid(x, output)``,
    which appends its layers' results to it: they live until the block returns, past the
    ``cat`` that last reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_mid = _AppendList(nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 64))
        self.concat, self.attn = nn.Linear(256, 1024), nn.Linear(1024, 64)

    def forward(self, x):
        output = [x]
        x = self.conv_mid(x, output)
        x = self.concat(x)
        return self.attn(x)


class Standardized(nn.Module):
    """timm's ``ScaledStdConv2d``: ``weight = F.batch_norm(...)`` of its weights, whose op
    also makes the batch's mean and inverse deviation, which nothing reads or names: freed at
    once, not held as ``weight`` is."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(1024, 64))

    def forward(self, x):
        weight = F.batch_norm(self.w.reshape(1, 1024, -1), None, None, training=True, eps=1e-6)
        return F.linear(x.expand(64, 64), weight.reshape_as(self.w))


class Permuted(nn.Module):
    """timm CSATv2's DCT stem: ``x = x.reshape(...)`` of a permuted tensor (a copy), then ``x
    = x[:, self.perm]``, an index of the name into itself: the copy is no one's once that has
    run."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.head = nn.Linear(64, 1024), nn.Linear(1024, 1024)
        self.register_buffer("perm", torch.arange(1023, -1, -1))

    def forward(self, x):
        x = self.up(x).reshape(1, 32, 32).permute(0, 2, 1)
        x = x.reshape(1, 1024)
        x = x[:, self.perm]
        x = x * 2
        return self.head(x)


class Pyramid(nn.Module):
    """torchvision RAFT's ``index_pyramid``: a loop over a list of tensors, no block to tell
    its turns apart, binding ``sampling`` at the body's first line: the body run from its
    start again is the next turn, which rebinds it, and after the loop, which nothing after
    rebinds it in, the last turn's lives until the function returns."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(192, 4096)

    def forward(self, x):
        levels = [x * 2, x * 3, x * 4]
        out = []
        for level in levels:
            sampling = level + 1
            out.append(sampling * 2)
        return self.head(torch.cat(out, 1))


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
        # At the ReLU: a, the add's, norm2's, up's (4 rows) and the ReLU's (4 rows); norm1's
        # was dropped when x was rebound to the add's.
        (Residuals(), 11 * ROW),
        # At the last add: h (not rebound, the branch not taken), y and the sum.
        (Branch(), 3 * ROW),
        # At the second block's ReLU: the block's argument, up's and the ReLU's (1 + 4 + 4
        # rows); a's result was dropped when the first block's call rebound x.
        (Blocks(), 9 * ROW),
        # One block called twice, h its local: at either call's down, its argument, h, the
        # ReLU's and down's (1 + 4 + 4 + 1 rows); the first call's h died when it returned.
        (Shared(), 10 * ROW),
        # At the last layer's ReLU: layer 0's (saved), its argument, up's and the ReLU's (1 + 1
        # + 4 + 4 rows); layers 1 and 2's, not saved, died when x was rebound.
        (Saved(), 10 * ROW),
        # At the last layer's ReLU: the two layers' results in the tuple, up's and the ReLU's.
        (Joined(), 10 * ROW),
        # At the second block's ReLU: a's result besides (1 + 1 + 4 + 4 rows).
        (Called(), 10 * ROW),
        # At the head: norm's result and the head's (1 + 16 rows); the last block's result was
        # dropped when norm's call rebound x, after the loop.
        (Blocks(head=1024), 17 * ROW),
        # At layer 2: its argument and its result (1 + 16 rows).
        (Indexed(), 17 * ROW),
        # At layer2: layer1's result and layer2's (1 + 16 rows).
        (Stages(), 17 * ROW),
        # At the sum: fc's 16 rows (x holds them), out's and the sum.
        (ShortcutAfter(), 18 * ROW),
        # At the head: norm's and the head's (1 + 16 rows).
        (Pooled(), 17 * ROW),
        # At the last turn's ReLU: y (1 row, the second turn's), incre's, down's first
        # Linear's and the ReLU's (16 rows each); the first turn's y (16 rows) died when the
        # second turn rebound it.
        (Incremental(), 49 * ROW),
        # At the head: norm's and the head's (1 + 64 rows); embed's, pos_blk's and the
        # blocks' results died as the next line rebound x.
        (Pegged(), 65 * ROW),
        # At the head: norm's and the head's (1 + 64 rows); a's result died when the first
        # block's call rebound x.
        (Mixed(), 65 * ROW),
        # At the wide block's out: the second block's result and the skip it handed back
        # (the loop's x holds both), the conv's 64 rows and out's.
        (Handed(), 67 * ROW),
        # At the head: the last block's result and the skip it handed back (the forward's x
        # holds both), and the head's 128 rows.
        (Handed(head=8192), 130 * ROW),
        # At a block's ReLU: its argument, up's and the ReLU's (1 + 4 + 4 rows); a's result
        # died when the first block's call rebound x.
        (Tokens(), 9 * ROW),
        # At concat: the three layers' results (output holds them), the cat's 4 rows and
        # concat's 16.
        (Osa(), 23 * ROW),
        # At the linear: the standardized weights (1024 rows), the result's 1024 and the
        # expanded input's copy the matmul makes (64).
        (Standardized(), 2112 * ROW),
        # Two of 16 rows at each op: its argument and its result.
        (Permuted(), 32 * ROW),
        # At the head: the levels and the list's (3 rows each), the last turn's sampling, the
        # cat's 3 rows and the head's 64; the other turns' sampling died as the next rebound it.
        (Pyramid(), 74 * ROW),
    ],
    ids=[
        *("one-expression", "locals", "submodules-results", "rebound", "branch-not-taken"),
        *("a-module-list-loop", "one-block-called-in-turn", "a-list-that-keeps-some"),
        *("a-tuple-that-keeps-all", "a-sequential-call", "rebound-after-the-loop"),
        *("indexed-module-list", "a-called-blocks-own-loop", "a-branch-alias-then-a-view"),
        *("handed-on-through-a-tuple", "a-forward-called-directly-in-a-branchy-loop"),
        *("a-call-unpacked-and-a-first-turn-only-rebinding", "rebound-past-branches-not-taken"),
        *("handed-back-to-the-loop", "handed-back-to-the-callers-caller"),
        *("rebound-in-one-turn-only-then-by-each-block", "appended-to-the-callers-list"),
        *("an-ops-own-outputs-no-name-holds", "indexed-into-its-own-name"),
        "a-loop-over-tensors-its-body-run-again",
    ],
)
def test_an_exported_graph_frees_what_the_forward_frees(model, peak):
    if isinstance(model, Shared) and not _numbers_calls():
        pytest.skip("this torch's export does not number a module's calls (torch 2.4)")
    x = torch.randn(1, 64)
    taped = profile_model(model, x, tier="eager")
    exported = profile_model(torch.export.export(model, (x,)), x)
    assert (taped.trace.method, exported.trace.method) == ("eager", "export")
    assert taped.activation_peak_bytes == exported.activation_peak_bytes == peak


def _numbers_calls() -> bool:
    """Whether this torch's export names a module's second call apart (``block@1``): 2.9 and
    later do, 2.4 does not (its calls then read as one call, over the tape)."""
    block = nn.Linear(2, 2)
    twice = nn.Sequential()
    twice.forward = lambda x: block(block(x))  # type: ignore[method-assign]
    twice.block = block
    program = torch.export.export(twice, (torch.randn(1, 2),))
    stacks = [n.meta.get("nn_module_stack") or {} for n in program.graph.nodes]
    return any("@" in str(key) for stack in stacks for key in stack)


def _scaled(x):
    """A helper with a local held past its last reader, as torchvision's
    ``shifted_window_attention`` holds its windows: an export records none of its lines
    unless this project asks (``engine/helper_frames.py``)."""
    h = x * 2
    g = torch.relu(h)  # h's last reader; h is a local until the helper returns
    g = g + 1  # the first g is dropped here
    return g * 3


class Helpers(nn.Module):
    """A forward FX cannot trace (a loop over a size), so ``tier="dynamo"`` exports it: a
    method's result unpacked into two names, a helper function's locals."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)

    def forward(self, x):
        for _ in range(x.shape[0]):  # FX cannot iterate over a traced size
            pass
        y, s = self._pair(x)
        y = _scaled(y)  # the pair's first is dropped once the helper returns
        return self.b(y) + s

    def _pair(self, x):
        a = self.a(x)
        return a, a.sum()


@pytest.mark.skipif(
    not hasattr(torch.fx.proxy, "_STACK_TRACE_ANCHORS"),
    reason="torch < 2.13 records only forwards' lines in an export",
)
def test_a_helper_functions_locals_live_until_it_returns():
    x = torch.randn(1, 64)
    taped = profile_model(Helpers(), x, tier="eager")
    exported = profile_model(Helpers(), x, tier="dynamo")
    assert (taped.trace.method, exported.trace.method) == ("eager", "dynamo")
    # At ``g * 3``: the pair's first and its sum (4 bytes), then the helper's h, g and the
    # product. Without the helper's lines h reads as one expression's temporary: 3 rows.
    assert taped.activation_peak_bytes == exported.activation_peak_bytes == 4 * ROW + 4


def _forward_lines_only() -> bool:
    """Whether this torch's export records only ``forward`` methods' lines: 2.9 and later do;
    2.4 records every frame, the helpers' too, and has nothing to name."""
    program = torch.export.export(Helpers(), (torch.randn(1, 64),))
    return ", in _scaled" not in str([n.meta.get("stack_trace") for n in program.graph.nodes])


def test_a_users_export_names_the_helpers_whose_locals_it_cannot_see():
    """A user's own export records ``forward`` lines only: ``_scaled``'s h reads as a
    temporary, one row under the tape at ``g * 3``, and the profile says so, naming it (not
    ``_pair``, whose ops are a submodule's and one sum). The tape sees every frame."""
    if not _forward_lines_only():
        pytest.skip("this torch's export records every frame (2.4): no helper goes unseen")
    x = torch.randn(1, 64)
    exported = profile_model(torch.export.export(Helpers(), (x,)), x)
    assert exported.activation_peak_bytes == profile_model(Helpers(), x).activation_peak_bytes - ROW
    [note] = exported.notes
    assert note.startswith(f"{UNRECORDED}: the graph records no lines of _scaled,")
    assert profile_model(Helpers(), x, tier="eager").notes == []


class Shifted(nn.Module):
    """timm's Swin block: its helper method ``_attn`` is handed norm's result, which the
    parameter holds until the method returns, and hands back a value bound in one branch of an
    ``if`` or the other (``x = torch.roll(...)``, else ``x = shifted``)."""

    def __init__(self, shift: int, head: int = 0) -> None:
        super().__init__()
        self.norm, self.fc, self.shift = nn.LayerNorm(64), nn.Linear(64, 64), shift
        self.head = nn.Linear(64, head) if head else nn.Identity()
        self.drop_path = nn.Identity()  # a submodule that runs no op: in no graph

    def forward(self, x):
        for _ in range(x.shape[0]):  # FX cannot iterate over a traced size
            pass
        x = x + self.drop_path(self._attn(self.norm(x)))
        return self.head(x)

    def _attn(self, x):
        if self.shift:
            shifted = torch.roll(x, self.shift, 1)
        else:
            shifted = x
        shifted = F.pad(shifted, (0, 0))
        out = self.fc(shifted)
        out = out * 2
        shifted = out.view(1, 64)
        shifted = shifted.contiguous() + 1
        if self.shift:
            x = torch.roll(shifted, -self.shift, 1)
        else:
            x = shifted  # an alias in a branch: read as one only where the branch ran
        return x


class Viewed(nn.Module):
    """A view bound to another name (``windows = shifted.view(-1, C)``, timm's window
    attention) holds the storage after the first name is bound again."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        for _ in range(x.shape[0]):  # FX cannot iterate over a traced size
            pass
        return self._attn(x)

    def _attn(self, x):
        shifted = F.pad(x * 2, (0, 0))
        windows = shifted.view(-1, 64)
        out = self.fc(windows)
        shifted = out * 2  # the pad's is no longer shifted's, but windows still holds it
        shifted = shifted + 1
        return shifted


class Biased(nn.Module):
    """timm's ``RelPosBias.get_bias``: a local handed on through a view, then returned as a
    copy (``.contiguous()``): the caller gets the copy, and the local dies with the call."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.head = nn.Linear(64, 64), nn.Linear(64, 1024)

    def forward(self, x):
        for _ in range(x.shape[0]):  # FX cannot iterate over a traced size
            pass
        bias = self._bias(x)
        y = self.fc(x) + bias.view(1, 64)
        return self.head(y)

    def _bias(self, x):
        b = x * 2
        b = b.view(8, 8).t()
        return b.contiguous()


class Scored(nn.Module):
    """ConViT's ``get_attention``: ``q, k = qk[0], qk[1]``, items of a local bound to two more
    names: all three are the helper's, dropped when it returns, not at its caller's end."""

    def __init__(self) -> None:
        super().__init__()
        self.qk, self.head = nn.Linear(64, 128), nn.Linear(64, 1024)

    def forward(self, x):
        for _ in range(x.shape[0]):  # FX cannot iterate over a traced size
            pass
        s = self._score(x)
        return self.head(s)

    def _score(self, x):
        qk = self.qk(x).reshape(1, 2, 64).permute(1, 0, 2)
        q, k = qk[0], qk[1]
        return q * k


class _Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)

    def forward(self, xs):
        return [self.a(xs[0]), self.b(xs[1])]


class Listed(nn.Module):
    """CrossViT's ``_embed``: each branch's embedding appended to a list the helper makes and
    returns; the blocks' loop then rebinds the list, each block's call holding the one
    before it."""

    def __init__(self) -> None:
        super().__init__()
        self.embeds = nn.ModuleList([nn.Linear(64, 64), nn.Linear(64, 64)])
        self.drop = nn.Dropout(0.0)  # eval: hands its argument on
        self.blocks, self.head = nn.ModuleList([_Pair(), _Pair()]), nn.Linear(64, 4096)

    def forward(self, x):
        for _ in range(x.shape[0]):  # FX cannot iterate over a traced size
            pass
        xs = self._embed(x)
        for blk in self.blocks:
            xs = blk(xs)
        return self.head(xs[0] + xs[1])

    def _embed(self, x):
        xs = []
        for embed in self.embeds:
            e = embed(x) * 2
            e = self.drop(e)
            xs.append(e)
        return xs


class _Roped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.up = nn.Linear(1024, 1024), nn.Linear(64, 1024)

    def forward(self, x, rope):
        return self.fc(x) + self.up(rope)


class Unpacked(nn.Module):
    """timm Qwen3-ViT's ``x, rope = self._pos_embed(x)``: a helper returns the tokens and a
    table every block reads; x holds the tokens until the first block's call rebinds it,
    rope holds the table to the end."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.table = nn.Linear(64, 1024), nn.Linear(64, 64)
        self.blocks, self.head = nn.ModuleList([_Roped(), _Roped()]), nn.Linear(1024, 64)

    def forward(self, x):
        for _ in range(x.shape[0]):  # FX cannot iterate over a traced size
            pass
        x, rope = self._pos_embed(x)
        for blk in self.blocks:
            x = blk(x, rope=rope)
        return self.head(x)

    def _pos_embed(self, x):
        table = self.table(x)
        x = self.embed(x) * 2
        return x, table


class _Posterior:
    def __init__(self, moments):
        self.mean, self.logvar = torch.chunk(moments, 2, dim=1)
        self.std = torch.exp(0.5 * self.logvar)

    def mode(self):
        return self.mean


class Posterior(nn.Module):
    """diffusers' AutoencoderKL: its ``DiagonalGaussianDistribution`` keeps ``std``, which no
    op reads, as long as the forward holds the posterior."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec = nn.Linear(64, 2048), nn.Linear(1024, 4096)

    def forward(self, x):
        for _ in range(x.shape[0]):  # FX cannot iterate over a traced size
            pass
        posterior = _Posterior(self.enc(x))
        return self.dec(posterior.mode())


@pytest.mark.skipif(
    not hasattr(torch.fx.proxy, "_STACK_TRACE_ANCHORS"),
    reason="torch < 2.13 records only forwards' lines in an export",
)
@pytest.mark.parametrize(
    ("model", "peak"),
    [
        # At the head: the bias (the copy ``_bias`` returned), y and the head's 16 rows.
        (Biased(), 18 * ROW),
        # At ``shifted + 1``: the pad's (windows), fc's, the product and the sum; x * 2 died
        # at the pad.
        (Viewed(), 4 * ROW),
        # At ``out * 2``: norm's result (``_attn``'s x holds it though no later line reads
        # it), the pad's, fc's and the product; the roll's, when shifted, died at the pad.
        (Shifted(shift=0), 4 * ROW),
        (Shifted(shift=1), 4 * ROW),
        # At the head: the sum and the head's 16 rows; what ``_attn`` returned died at the sum,
        # though the else branch, not run, would have bound it to x.
        (Shifted(shift=1, head=1024), 17 * ROW),
        # At the head: the last block's two results (the list xs holds them), their sum and
        # the head's 64 rows; the embeddings died with the first block's call.
        (Listed(), 67 * ROW),
        # At the head: the product and the head's 16 rows; qk (2 rows) died with ``_score``.
        (Scored(), 17 * ROW),
        # At either block's sum: its argument, rope's row, fc's, up's and the sum's (16 rows
        # each but rope); the helper's tokens died as the first block's call rebound x.
        (Unpacked(), 65 * ROW),
        # At the decoder: the moments (mean and logvar are views of them), std and the
        # decoder's 64 rows; ``0.5 * logvar`` died as exp read it.
        (Posterior(), 112 * ROW),
    ],
    ids=[
        *("a-local-returned-as-a-copy", "a-view-bound-to-another-name", "a-helpers-parameter"),
        *("a-helpers-parameter-shifted", "a-branch-alias-not-run", "appended-to-a-list-returned"),
        *("items-bound-to-names", "a-helpers-items-unpacked-by-place"),
        "an-objects-attribute-no-op-reads",
    ],
)
def test_a_helpers_names_hold_what_eager_holds(model, peak):
    x = torch.randn(1, 64)
    taped = profile_model(model, x, tier="eager")
    exported = profile_model(model, x, tier="dynamo")
    assert (taped.trace.method, exported.trace.method) == ("eager", "dynamo")
    assert taped.activation_peak_bytes == exported.activation_peak_bytes == peak


def test_the_anchor_registry_is_left_as_found():
    registry = getattr(torch.fx.proxy, "_STACK_TRACE_ANCHORS", None)
    if registry is None:
        pytest.skip("torch < 2.13 has no registry of functions whose lines an export records")
    before = set(registry)
    profile_model(Helpers(), torch.randn(1, 64), tier="dynamo")
    assert registry == before


class _Cast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        return self.fc(x).to(torch.float64)


class Cast(nn.Module):
    """A cast inside a module's call: ``.to`` runs as two ops, the first of which (torch's
    ``_assert_tensor_metadata``) records no line, and is the last to read fc's result."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = _Cast()

    def forward(self, x):
        return self.inner(x) * 2


NO_FILE = """
class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        return self.fc(x).to(torch.float64)


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x) * 2
"""


@pytest.mark.parametrize("where", ["a-file", "no-file"])
def test_an_op_with_no_line_ends_a_value_in_a_users_export(where):
    """Where the export records no line of the op that last reads a value (a model made by
    code with no file, ``python -c``; ``.to``'s first op), the value dies there."""
    if where == "a-file":
        model = Cast()
    else:
        namespace = {"nn": nn, "torch": torch}
        exec(compile(NO_FILE, "<string>", "exec"), namespace)
        model = namespace["Outer"]()
    x = torch.randn(1, 64)
    exported = profile_model(torch.export.export(model, (x,)), x)
    assert exported.activation_peak_bytes == profile_model(model, x).activation_peak_bytes
    # At the product: the cast's and the product's rows in float64 (2 + 2 rows).
    assert exported.activation_peak_bytes == 4 * ROW


class Features(nn.Module):
    """timm HRNet's ``forward_features``: a helper method whose ``x``, after its last reader
    (``self.stages(x)``), it holds to its end; an op of its own (HRNet's sums) leaves its
    lines unplaced (``engine/placed.py``)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.stages = nn.Linear(64, 1024), nn.Linear(1024, 64)
        self.post, self.head = nn.Linear(64, 64), nn.Linear(64, 64)

    def forward(self, x):
        return self.head(self._features(x))

    def _features(self, x):
        x = self.stem(x)
        y = self.stages(x)
        return self.post(y * 2)


class Chained(Features):
    """timm ResNet's ``forward_features``: x rebound at each line, each value dropped at its
    last reader, as the export reads it."""

    def forward(self, x):
        return self.head(self._chain(x))

    def _chain(self, x):
        x = self.stem(x)
        x = self.stages(x)
        return self.post(x)


def test_a_users_export_names_a_helper_that_holds_a_submodules_result():
    """The note reads the helper's source: ``_features`` holds x past its last reader, read
    freed after it (the tape's peak, at ``post``: x's 16 rows, y, ``y * 2`` and post's; the
    export's, at ``stages``: x and stages'), and is named; ``_chain`` drops each value at its
    last reader, equal to the tape, and is not. Neither helper's own ops read one another's."""
    if not _forward_lines_only():
        pytest.skip("this torch's export records every frame (2.4): no helper goes unseen")
    x = torch.randn(1, 64)
    held, chain = Features(), Chained()
    exported = profile_model(torch.export.export(held, (x,)), x)
    assert profile_model(held, x).activation_peak_bytes == 19 * ROW
    assert exported.activation_peak_bytes == 17 * ROW
    [note] = exported.notes
    assert note.startswith(f"{UNRECORDED}: the graph records no lines of _features, functions")
    exported = profile_model(torch.export.export(chain, (x,)), x)
    assert exported.activation_peak_bytes == profile_model(chain, x).activation_peak_bytes
    assert exported.notes == []


class Normalized(nn.Module):
    """swin v2's cosine attention: ``matmul`` of two permuted tensors copies both before its
    ``bmm``, and its call holds both normalized tensors meanwhile."""

    def forward(self, x):
        qkv = x.reshape(2, 8, 3, 2, 16).permute(2, 0, 3, 1, 4)  # 2 windows, 2 heads, 8 x 16
        q, k = qkv[0], qkv[1]
        return F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)


class CatThenCall(nn.Module):
    """densenet's ``bn_function``: a helper method joins its inputs, then calls submodules;
    the joined tensor is its local until it returns."""

    def __init__(self) -> None:
        super().__init__()
        self.act, self.fc = nn.ReLU(), nn.Linear(128, 64)

    def forward(self, x):
        return self._cat_then_call([x, x * 2])

    def _cat_then_call(self, inputs):
        joined = torch.cat(inputs, 1)
        return self.fc(self.act(joined))


def test_a_users_export_names_helpers_not_submodules_that_run_no_op():
    """``self.drop_path(self._attn(...))``: both are calls of ``self`` the graph has no line
    of, but ``drop_path`` is an attribute (an ``nn.Identity``), not a helper."""
    if not _forward_lines_only():
        pytest.skip("this torch's export records every frame (2.4): no helper goes unseen")
    x = torch.randn(1, 64)
    exported = profile_model(torch.export.export(Shifted(shift=1), (x,)), x)
    [note] = exported.notes
    assert note.startswith(f"{UNRECORDED}: the graph records no lines of _attn, functions")


class JoinedForCat(nn.Module):
    """DeiT III's ``_pos_embed``: the sum joined to a list only for ``torch.cat`` to read; the
    joined list is a temporary, not a container that keeps it."""

    def __init__(self) -> None:
        super().__init__()
        self.token, self.pos = nn.Parameter(torch.zeros(1, 64)), nn.Parameter(torch.zeros(1, 64))
        self.head = nn.Linear(64, 1024)

    def forward(self, x):
        to_cat = [self.token]
        x = x + self.pos
        x = torch.cat(to_cat + [x], 0)  # the sum is no one's once this has run
        return self.head(x)


class WindowAttention(nn.Module):
    """Twins' locally grouped attention: 5-D query, key and value, which CPU attention runs
    on ATen's math kernel, a composite of a scaled query, a ``matmul``, a softmax and another
    ``matmul``."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(64, 192)

    def forward(self, x):
        qkv = self.qkv(x).reshape(1, 2, 8, 3, 2, 32).permute(3, 0, 1, 4, 2, 5)
        q, k, v = qkv.unbind(0)  # each (1, 2, 2, 8, 32): 4,096 bytes
        return F.scaled_dot_product_attention(q, k, v)


class DroppedAttention(nn.Module):
    """Attention with dropout, which CPU torch also runs on the math kernel: the dropped
    weights, not the softmax's, are what the kernel keeps and its last ``matmul`` reads."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(64, 192)

    def forward(self, x):
        qkv = self.qkv(x).reshape(1, 16, 3, 2, 32).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (1, 2, 16, 32): 4,096 bytes
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)


class Unread(nn.Module):
    """DeBERTa's ``token_type_ids = torch.zeros(...)``, which no op reads: a local still,
    held until the forward returns."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.head = nn.Linear(64, 64), nn.Linear(64, 1024)

    def forward(self, x):
        ids = torch.zeros(1, 64)  # noqa: F841 (bound and never read, as DeBERTa's)
        h = self.fc(x)
        return self.head(h)


class Embedded(nn.Module):
    """CrossViT's ``forward_features``: ``_branches`` rebinds the list ``_embed`` makes at
    each block, and ``_embed`` appends each branch's embedding to it. In a program exported
    outside this project, their ops read as ``forward``'s one line; neither helper holds a
    name past its last read (``rebinding.holds_past_reads``), so what they make is not held
    through the blocks' calls."""

    def __init__(self) -> None:
        super().__init__()
        self.embeds = nn.ModuleList([nn.Linear(64, 64), nn.Linear(64, 64)])
        self.blocks = nn.ModuleList([_Pair(), _Pair(), _Pair()])
        self.head = nn.Linear(64, 64)

    def forward(self, x):
        xs = self._branches(x)
        return self.head(xs[0] + xs[1])

    def _branches(self, x):
        xs = self._embed(x)
        for blk in self.blocks:
            xs = blk(xs)
        return xs

    def _embed(self, x):
        xs = []
        for embed in self.embeds:
            e = embed(x) * 2
            xs.append(e)
        return xs


class _Cell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(1024, 1024)

    def forward(self, left, right):
        return self.fc(left) + right


class Cells(nn.Module):
    """timm PNASNet's ``forward_features``: each cell's result named and read by the next two
    cells; eager holds every name until the helper returns."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.head = nn.Linear(64, 1024), nn.Linear(1024, 64)
        self.cell_0, self.cell_1, self.cell_2 = _Cell(), _Cell(), _Cell()

    def forward(self, x):
        x = self.forward_features(x)
        return self.head(x)

    def forward_features(self, x):
        x_stem = self.stem(x)
        x_0 = self.cell_0(x_stem, x_stem)
        x_1 = self.cell_1(x_stem, x_0)
        x_2 = self.cell_2(x_0, x_1)
        return x_2


class Staged(nn.Module):
    """HRNet's ``forward_features`` less its own ops: the stem's result bound to x, which a
    helper's loop over the blocks reads (``yl = self.stages(x)``); x lives to the return."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.head = nn.Linear(64, 1024), nn.Linear(1024, 64)
        self.blocks = nn.ModuleList([nn.Linear(1024, 1024), nn.Linear(1024, 1024)])

    def forward(self, x):
        return self.head(self.forward_features(x))

    def forward_features(self, x):
        x = self.stem(x)
        y = self._stages(x)
        return y

    def _stages(self, x):
        for blk in self.blocks:
            x = blk(x)
        return x


@pytest.mark.parametrize(
    ("model", "x", "peak"),
    [
        # At the head: ids, h and the head's 16 rows.
        (Unread(), torch.randn(1, 64), 18 * ROW),
        # At the head: the two rows joined and the head's 2 x 16 rows.
        (JoinedForCat(), torch.randn(1, 64), 34 * ROW),
        # At the first bmm: qkv (12,288 bytes); the scaled query, a local of the kernel; the
        # scaled key and matmul's copies of both, held until that matmul returns; the 2 x 2 x
        # 8 x 8 scores.
        (WindowAttention(), torch.randn(1, 16, 64), 12288 + 4 * 4096 + 1024),
        # At the first bmm: qkv, the scaled query and key (views of them are matmul's
        # operands here: no copies), the 2 x 16 x 16 scores. At the last, less than that: the
        # softmax's weights died when dropout's product was bound in their place.
        (DroppedAttention(), torch.randn(1, 16, 64), 12288 + 2 * 4096 + 2048),
        # At the bmm: both normalized tensors (2 * 2 * 8 * 16 floats each), matmul's copy of
        # each, and the 2 * 2 * 8 * 8 scores.
        (Normalized(), torch.randn(2, 8, 96), 4 * 2048 + 1024),
        # At the Linear: x * 2 (the list holds it), the joined 2 rows, the ReLU's 2, the
        # Linear's 1. A program exported outside this project has no line of the helper's.
        (CatThenCall(), torch.randn(1, 64), 6 * ROW),
        # At any block: the list it was handed (2 rows) and its two results; the embeddings
        # died with the first block's call.
        (Embedded(), torch.randn(1, 64), 4 * ROW),
        # At the last cell's sum: the stem's, the two cells' before (the helper's names hold
        # them), fc's and the sum's, 16 rows each.
        (Cells(), torch.randn(1, 64), 80 * ROW),
        # At the second block: the stem's (x holds it), the first block's and its own.
        (Staged(), torch.randn(1, 64), 48 * ROW),
    ],
    ids=[
        *("a-local-no-op-reads", "a-list-joined-for-a-call", "a-math-attention-kernel"),
        *("a-math-attention-kernel-with-dropout", "a-composite-holds-its-arguments"),
        *("a-helpers-local-outlives-its-calls", "helpers-that-hold-no-name-past-its-read"),
        *("a-helper-that-only-calls-submodules", "a-helpers-helper-that-loops-over-blocks"),
    ],
)
def test_a_users_exported_program_holds_what_eager_holds(model, x, peak):
    program = torch.export.export(model, (x,))
    if isinstance(model, Unread) and "zeros" not in str([n.target for n in program.graph.nodes]):
        pytest.skip("this torch's export drops an op no one reads (2.4): nothing to hold")
    taped = profile_model(model, x, tier="eager")
    exported = profile_model(program, x)
    assert taped.activation_peak_bytes == exported.activation_peak_bytes == peak


def test_a_users_export_names_no_helper_whose_lines_it_placed():
    """``Cells``' helper runs submodules only: each call's line is placed, nothing read
    under, no note. ``Chained``'s, the same, and ``Features``' runs an op of its own: none
    placed, and the note names it (``test_a_users_export_names_a_helper_that_holds...``)."""
    x = torch.randn(1, 64)
    exported = profile_model(torch.export.export(Cells(), (x,)), x)
    assert exported.activation_peak_bytes == profile_model(Cells(), x).activation_peak_bytes
    assert exported.notes == []
