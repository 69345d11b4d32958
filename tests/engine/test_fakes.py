"""Fake tensors' views and elementwise results strided as eager torch strides them
(``engine/fakes.py``, ``engine/strides.py``): the stride of a size-1 dimension decides ATen's
``suggest_memory_format``, and so a convolution's kernel. The reference is eager torch."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.compat import dynamo_breaks_unavailable  # noqa: E402
from pytest_graphbudget.engine.fakes import eager_linear, elementwise, fake_mode, linear  # noqa: E402
from pytest_graphbudget.engine.measure_export import _as_eager  # noqa: E402
from pytest_graphbudget.engine.strides import iterator_strides  # noqa: E402


def test_tokens_viewed_as_an_image_at_batch_1_are_strided_as_eager():
    tokens = torch.empty(1, 1024, 64)
    image = tokens.transpose(-1, -2).reshape(1, 64, 32, 32)
    assert image.stride() == (64, 1, 2048, 64)  # eager torch: not channels-last to ATen
    mode = fake_mode()
    with mode:
        fake = mode.from_tensor(tokens).transpose(-1, -2).reshape(1, 64, 32, 32)
    assert fake.stride() == image.stride()
    assert fake.untyped_storage().nbytes() == tokens.untyped_storage().nbytes()  # still a view


def _map(tokens):
    """MetaFormer's tokens viewed as a batch-1 map: strided (C, 1, W * C, C), a batch stride
    that ATen's channels-last test reads."""
    return tokens.transpose(1, 2).view(1, 32, 14, 14)


@pytest.mark.parametrize(
    ("name", "op"),
    [
        # LayerNorm2d: eager's layer_norm allocates its result contiguous, so the permute
        # after it is channels-last to ATen and the next convolution runs so (caformer_s18's
        # downsample: an 11.8 MB workspace, read as 6.4 MB while the fake kept the input's)
        ("layer_norm", lambda t: F.layer_norm(_map(t).permute(0, 2, 3, 1), (32,))),
        ("log_softmax", lambda t: torch.log_softmax(_map(t).permute(0, 2, 3, 1), -1)),
        # batch norm allocates in the input's suggested format: channels-last here
        ("batch_norm", lambda t: F.batch_norm(_map(t), torch.zeros(32), torch.ones(32))),
    ],
)
def test_a_result_allocated_afresh_is_strided_as_eager(name, op):
    tokens = torch.empty(1, 196, 32)
    mode = fake_mode()
    with mode:
        fake = op(mode.from_tensor(tokens))
    assert fake.stride() == op(tokens).stride(), name


def _cases(count: int):
    """Permuted tensors of small sizes, many of them 1, and a shape of the same elements."""
    rng = random.Random(0)
    for _ in range(count):
        shape = [rng.choice([1, 1, 2, 3, 4]) for _ in range(rng.randint(1, 4))]
        order = list(range(len(shape)))
        rng.shuffle(order)
        numel, target = 1, []
        for n in shape:
            numel *= n
        for factor in (2, 3, 4):
            while numel % factor == 0 and rng.random() < 0.5:
                target.append(factor)
                numel //= factor
        target.append(numel)
        for _ in range(rng.randint(0, 2)):
            target.insert(rng.randint(0, len(target)), 1)
        yield shape, order, target


def test_views_are_strided_as_eager():
    # 300 permuted tensors viewed as other shapes of their elements, with size-1 dimensions
    # in both: torch's own fake mode strides 14 of the 229 viewable ones otherwise
    # (torch 2.14.1).
    mode, compared, wrong = fake_mode(), 0, []
    for shape, order, target in _cases(300):
        base = torch.empty(shape).permute(order)
        try:
            eager = base.view(target)
        except RuntimeError:
            continue  # eager refuses it: nothing to compare
        with mode:
            fake = mode.from_tensor(base).view(target)
        compared += 1
        if fake.stride() != eager.stride():
            wrong.append((shape, order, target, eager.stride(), fake.stride()))
    assert compared >= 200
    assert wrong == []


def _permuted(rng: random.Random, shape: list) -> torch.Tensor:
    order = list(range(len(shape)))
    rng.shuffle(order)
    inverse = [order.index(d) for d in range(len(order))]
    return torch.rand([shape[d] for d in order]).add_(0.5).permute(inverse)


def test_elementwise_results_are_strided_as_tensor_iterator_strides_them():
    # One to three operands of random layouts, some broadcast, some a wrapped scalar: the
    # sigmoid, sum or addcmul eager torch computes, against iterator_strides' layout.
    rng, wrong = random.Random(0), []
    for _ in range(3000):
        shape = [rng.choice([1, 1, 2, 3, 4]) for _ in range(rng.randint(1, 5))]
        operands = []
        for _ in range(rng.randint(1, 3)):
            sizes = [1 if rng.random() < 0.1 else n for n in shape]
            operands.append(_permuted(rng, sizes[rng.randint(0, 1) if rng.random() < 0.2 else 0 :]))
        if rng.random() < 0.2:
            operands = [operands[0], torch.tensor(2.0)]
        try:
            eager = [torch.sigmoid, torch.add, torch.addcmul][len(operands) - 1](*operands)
        except RuntimeError:
            continue  # shapes that do not broadcast
        layouts = [(tuple(t.shape), t.stride()) for t in operands]
        if iterator_strides(tuple(eager.shape), layouts) != eager.stride():
            wrong.append((layouts, eager.stride()))
    assert wrong == []


def test_every_elementwise_op_the_fakes_restride_is_strided_as_eager():
    # Each op elementwise() selects, called on random layouts of float operands where its
    # schema is that simple (most of them), on eager tensors and on fakes.
    rng, mode, wrong, ran = random.Random(11), fake_mode(), [], set()
    packets = (getattr(torch.ops.aten, name) for name in dir(torch.ops.aten))
    ops = [
        getattr(packet, overload)
        for packet in packets
        if isinstance(packet, torch._ops.OpOverloadPacket)
        for overload in packet.overloads()
    ]
    for op in filter(elementwise, ops):
        for _ in range(6):
            shape = [rng.choice([1, 1, 2, 3]) for _ in range(rng.randint(2, 4))]
            args = _arguments(rng, op, shape)
            try:
                eager = op(*args)
            except Exception:
                continue  # an argument this sketch cannot make (an integer tensor, ...)
            with mode:
                fake = op(
                    *[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
                )
            ran.add(op)
            if fake.stride() != eager.stride():
                wrong.append((str(op), [getattr(a, "shape", a) for a in args], eager.stride()))
    assert len(ran) > 100
    assert wrong == []


def _arguments(rng: random.Random, op, shape: list) -> list:
    """Positional arguments up to the first with a default: tensors of ``shape`` (or broadcast
    to it) in random layouts, and small numbers."""
    args = []
    for argument in op._schema.arguments:
        kind = str(argument.type)
        if argument.kwarg_only or argument.has_default_value():
            break
        if kind == "Tensor":
            args.append(_permuted(rng, [1 if rng.random() < 0.2 else n for n in shape]))
        elif kind in ("Scalar", "number", "float"):
            args.append(0.5)
        elif kind in ("int", "bool"):
            args.append(1 if kind == "int" else False)
        else:
            break
    return args


@pytest.mark.parametrize("make", ["empty_like", "zeros_like", "ones_like", "full_like"])
def test_tensors_made_like_another_are_strided_as_eager(make):
    # A source dense in some order keeps its strides, size-1 dimensions' included; torch's
    # own fake mode laid out a third of these otherwise (torch 2.14.1).
    rng, mode, wrong = random.Random(3), fake_mode(), []
    like = getattr(torch, make)
    extra = (2.0,) if make == "full_like" else ()
    for _ in range(300):
        shape = [rng.choice([1, 1, 2, 3, 4]) for _ in range(rng.randint(1, 5))]
        source = _permuted(rng, shape)
        if rng.random() < 0.3 and source.shape[-1] > 1:
            source = source[..., ::2]  # overlapping nothing, dense in no order
        eager = like(source, *extra)
        fake_source = mode.from_tensor(source)
        with mode:
            fake = like(fake_source, *extra)
        if fake.stride() != eager.stride():
            wrong.append((tuple(source.shape), source.stride(), eager.stride(), fake.stride()))
    assert wrong == []


class _Passing(TorchDispatchMode):
    """A dispatch mode that only runs each op: what every capture runs a forward under."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _allocations(call) -> list[int]:
    """The sizes of the allocations ``call`` makes, in order (the memory profiler's)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    return [e.nbytes() for e in sorted(events, key=lambda e: e.start_ns()) if e.nbytes() > 0]


def test_linear_allocates_under_a_mode_what_eager_torch_allocates_without_one():
    # ATen's linear adds the bias out of place on any tensor subclass, fakes and meta tensors,
    # and under any dispatch mode; in place on plain tensors, where its input is neither 2-D
    # nor contiguous. ``linear`` allocates, under a mode, what eager torch does without one.
    rng, differed = random.Random(5), 0
    weight, bias = torch.randn(6, 12), torch.randn(6)
    for _ in range(60):
        shape = [rng.choice([1, 2, 3]) for _ in range(rng.randint(0, 3))] + [12]
        x = _permuted(rng, shape)
        if rng.random() < 0.3:
            x = x.transpose(0, -1) if x.dim() > 1 else x
        if x.shape[-1] != 12:
            continue
        b = None if rng.random() < 0.2 else bias
        eager = _allocations(lambda x=x, b=b: torch.nn.functional.linear(x, weight, b))
        with _Passing():
            ours = _allocations(lambda x=x, b=b: linear(x, weight, b))
            torchs = _allocations(lambda x=x, b=b: torch.nn.functional.linear(x, weight, b))
        assert ours == eager, (tuple(x.shape), x.stride(), b is None)
        differed += torchs != eager
    assert differed >= 5  # torch's own linear under a mode: one allocation more


class _PermutedLinear(nn.Module):
    def __init__(self, functional: bool) -> None:
        super().__init__()
        self.fc, self.functional = nn.Linear(64, 32), functional

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        if self.functional:  # in the module's own code: a call_function node in FX's graph
            return nn.functional.linear(x, self.fc.weight, self.fc.bias)
        return self.fc(x)


@pytest.mark.parametrize("functional", [False, True])
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_linear_on_a_permuted_input_holds_one_output(functional, device):
    # 1x64x16x16 permuted channels-last: the product (1x16x16x32 floats, 32,768 bytes) with
    # its bias added in place, as eager torch adds it. Out of place, the sum was a second
    # output live beside the product: 32,768 bytes over, on real tensors and on fakes.
    with torch.device(device):
        model, x = _PermutedLinear(functional), torch.randn(1, 64, 16, 16)
    by_hand = x.nbytes + (64 * 32 + 32) * 4 + 1 * 16 * 16 * 32 * 4
    assert profile_model(model.eval(), x).peak_memory_bytes == by_hand


class _UntraceablePermutedLinear(_PermutedLinear):
    def forward(self, x):
        for _ in range(x.shape[0] - 1):  # a Proxy is no integer: FX fails, Dynamo captures it
            x = x * 1.0
        return super().forward(x)


@pytest.mark.parametrize(
    "tier",
    [
        "dynamo",
        pytest.param(
            "dynamo-breaks",
            marks=pytest.mark.skipif(
                dynamo_breaks_unavailable() is not None, reason=str(dynamo_breaks_unavailable())
            ),
        ),
    ],
)
def test_a_linear_on_a_permuted_input_holds_one_output_in_dynamos_graphs(tier):
    # Export's graph keeps ``aten.linear``, run under its fake mode: the bias was added out of
    # place there, the sum live beside the product (+31%, 32,768 bytes over).
    model, x = _UntraceablePermutedLinear(False), torch.randn(1, 64, 16, 16)
    profile = profile_model(model.eval(), x, tier=tier)
    assert profile.trace.method == tier and "fx" in profile.trace.failures
    assert profile.peak_memory_bytes == x.nbytes + (64 * 32 + 32) * 4 + 1 * 16 * 16 * 32 * 4


def test_linear_is_torchs_own_outside_the_capture():
    before = torch.nn.functional.linear
    with eager_linear():
        assert torch.nn.functional.linear is linear
    assert torch.nn.functional.linear is before is torch._C._nn.linear


class TokensToMap(nn.Module):
    """pvt_v2's MLP: tokens viewed as a batch-1 map, then a depthwise convolution, whose
    kernel copies an input ATen does not read as channels-last."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.dw = nn.Linear(64, 64), nn.Conv2d(64, 64, 3, padding=1, groups=64)

    def forward(self, x):
        x = self.fc(x)
        return self.dw(x.transpose(1, 2).view(1, 64, 16, 16))


def test_an_exported_graphs_view_is_strided_as_eager():
    x = torch.randn(1, 256, 64)
    program = torch.export.export(TokensToMap(), (x,))
    [view] = [n for n in program.graph.nodes if n.target is torch.ops.aten.view.default]
    source, recorded = view.args[0].meta["val"], view.meta["val"]
    eager = torch.empty(1, 256, 64).transpose(1, 2).view(1, 64, 16, 16)
    mode = torch._guards.detect_fake_mode([recorded])
    assert _as_eager(mode, source, recorded).stride() == eager.stride() == (64, 1, 1024, 64)
    # so the convolution's copy of its input is counted, as on the tape
    taped = profile_model(TokensToMap(), x, tier="eager").activation_peak_bytes
    assert profile_model(program, x).activation_peak_bytes == taped
