"""One truth across tiers: every model FX can trace is priced again through the taped forward
(``tier="eager"``), and the two profiles must give the same figures.

The FX tier prices a symbolic graph on fake or meta tensors; the tape prices the ATen ops of
one real forward. They share the registry of formulas, but not the path that reaches it: a
formula fed different arguments, an op one of them never sees (``out=``, in-place, views), a
kernel output one charges and the other cannot see (max_pool's indices), all show up here as a
figure that differs. Nothing is compared with our own earlier output: each model is its own
reference, through the other tier.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_graphbudget import profile_model

FIGURES = (
    "macs",
    "flops",
    "flops_contraction",
    "params",
    "weights_bytes",
    "traffic_bytes",
    "activation_peak_bytes",
    "peak_memory_bytes",
)
"""Every total a budget can be written on, besides latency (a function of these)."""


def figures(profile) -> dict[str, int]:
    totals = profile.to_dict()["totals"]
    return {name: totals[name] for name in FIGURES} | {"subgraphs": len(profile.subgraphs)}


def both_tiers(model: nn.Module, inputs: tuple) -> tuple[dict, dict]:
    fx = profile_model(model, inputs, tier="fx")
    eager = profile_model(model, inputs, tier="eager")
    assert fx.trace.method == "fx" and eager.trace.method == "eager"
    return figures(fx), figures(eager)


# Hand-written modules: the ops where the tiers' paths differ most.


class OutVariants(nn.Module):
    """``out=`` ops into tensors made from the input (FX folds ops on tensors made from
    nothing, ``torch.empty(10, 10)``, into constants at trace time: see the closing note of
    issue 35)."""

    def forward(self, x):
        y = torch.empty_like(x)
        torch.mm(x, x, out=y)
        z = torch.empty_like(x)
        torch.add(y, x, out=z)
        return torch.matmul(z, y)


class InPlaceAndViews(nn.Module):
    """In-place ops on views, a transpose read by a matmul, a reshape that copies."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        h = self.proj(x)
        h.relu_()
        h[:, :4].mul_(2.0)
        t = h.transpose(0, 1)
        s = t @ h
        return s.reshape(-1).add_(1.0).view(16, 16)


class ConvPool(nn.Module):
    """max_pool2d returns indices that nothing reads; batch norm in eval; a residual add."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        h = self.pool(torch.relu(self.bn(self.conv(x))))
        return h + self.conv2(h)


class NormMlp(nn.Module):
    """LayerNorm (whose mean and rstd nothing reads), GELU, a softmax over a matmul."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 32)

    def forward(self, x):
        h = self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))
        attn = torch.softmax(h @ h.transpose(-1, -2), dim=-1)
        return attn @ h


class Augmented(nn.Module):
    """``y += z`` and ``y *= 2``: FX records ``operator.add`` (a proxy has no ``__iadd__``),
    a new tensor where eager adds in place; the shape's own ``n += 1`` stays an int."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(256, 256), nn.Linear(256, 256)

    def forward(self, x):
        y, z = self.a(x), self.b(x)
        y += z
        y *= 2
        n = x.shape[0]
        n -= 1
        return y[:n]


class SharedAct(nn.Module):
    """One activation held by two blocks (ultralytics' ``Conv.default_act``): each block's
    call is charged to that block, in both tiers."""

    def __init__(self):
        super().__init__()
        act = nn.GELU()
        self.one, self.two = (
            nn.Sequential(nn.Linear(8, 8), act),
            nn.Sequential(nn.Linear(8, 8), act),
        )

    def forward(self, x):
        return self.two(self.one(x))


class MadeInForward(nn.Module):
    """Tensors the forward makes from constants, as an RNN's zero state at a fixed batch or a
    table of positions: FX runs each factory once while tracing and keeps a constant, where the
    tape makes them on every call. FX's graph reads a clone of each, where it is first used."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        state = torch.zeros(2, 10, 16)  # 1,280 B
        return self.proj(x + state) + torch.arange(16.0)  # 64 B


class ClassToken(nn.Module):
    """timm PiT's stage: a class token expanded to the batch and joined to the tokens, its
    length (``cls.shape[1]``) read after the blocks to slice it back out. The expand, a view
    of the weight, is read with the join that reads its data, not the slice that reads its
    size (FX's ``getattr`` node; nothing on the tape): the token's bytes counted once."""

    def __init__(self) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, 16))
        self.embed, self.block, self.head = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        x = self.embed(x)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        length = cls.shape[1]
        x = self.block(torch.cat((cls, x), dim=1))
        return self.head(x[:, :length])


def _fit_window(window: list, size: list) -> list:
    """torchvision swin3d's ``_get_window_and_shift_size``: clips the window to the input, in
    the list it is handed (FX hands a wrapped function immutable lists)."""
    for i in range(len(window)):
        if size[i] <= window[i]:
            window[i] = size[i]
    return window


torch.fx.wrap("_fit_window")


class WindowFitted(nn.Module):
    """A window fitted to the input by a function FX wraps: its graph's cost pass hands it
    plain lists, as the graph's code would."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        window = _fit_window([4, 16], [x.shape[0], x.shape[1]])
        return self.proj(x[: window[0], : window[1]])


class PositionAdded(nn.Module):
    """torchvision MViT v1's positional encoding: a table made from weights, added to in place
    and then joined (``pos.add_(...)``, ``torch.cat((cls, pos))``), and added to the tokens in
    place: what reads the table or the tokens after reads the in-place write, whose kernel it
    joins, as on the tape (FX's graph names the node before the write)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.norm = nn.Linear(16, 16), nn.LayerNorm(16)
        self.temporal, self.spatial = (
            nn.Parameter(torch.randn(2, 16)),
            nn.Parameter(torch.randn(4, 16)),
        )
        self.cls = nn.Parameter(torch.randn(1, 16))

    def forward(self, x):
        x = self.embed(x)
        pos = torch.repeat_interleave(self.temporal, 4, dim=0)
        pos.add_(self.spatial.unsqueeze(0).expand(2, -1, -1).reshape(-1, 16))
        pos = torch.cat((self.cls, pos), dim=0).unsqueeze(0)
        x.add_(pos)
        return self.norm(x)


HAND = {
    "augmented": (Augmented, lambda: (torch.rand(64, 256),)),
    "position_added": (PositionAdded, lambda: (torch.rand(1, 9, 16),)),
    "window_fitted": (WindowFitted, lambda: (torch.rand(2, 8),)),
    "class_token": (ClassToken, lambda: (torch.rand(2, 8, 16),)),
    "made_in_forward": (MadeInForward, lambda: (torch.rand(2, 10, 16),)),
    "shared_act": (SharedAct, lambda: (torch.rand(2, 8),)),
    "out_variants": (OutVariants, lambda: (torch.rand(10, 10),)),
    "in_place_and_views": (InPlaceAndViews, lambda: (torch.rand(16, 16),)),
    "conv_pool": (ConvPool, lambda: (torch.rand(2, 3, 16, 16),)),
    "norm_mlp": (NormMlp, lambda: (torch.rand(2, 8, 32),)),
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_hand_modules_agree(name):
    build, inputs = HAND[name]
    torch.manual_seed(0)
    fx, eager = both_tiers(build().eval(), inputs())
    assert eager == fx


def test_a_tensor_the_forward_makes_from_constants_is_made_on_every_call_in_fx_too():
    """By hand: input 1,280 B, weights 1,088 B; at the last add the zero state (a local, held
    until the forward returns), the projection's output, the positions and the sum are live:
    3 x 1,280 + 64 B, as the profiler measures. FX had kept the state and the positions as
    constants counted nowhere (2,624 B under), their kernels priced at nothing."""
    model, x = MadeInForward().eval(), torch.rand(2, 10, 16)
    graph = profile_model(model, (x,), tier="fx")
    assert graph.trace.method == "fx"
    assert graph.peak_memory_bytes == 1_280 + 1_088 + 3 * 1_280 + 64
    assert graph.to_dict()["totals"]["weights_bytes"] == 1_088  # the constants are no weights


def test_augmented_assignment_adds_in_place():
    """By hand: two 64 x 256 float32 outputs live at once, 2 x 65,536 B; ``y += z`` and
    ``y *= 2`` write into ``y`` (FX's out-of-place add held a third: 196,608 B)."""
    prof = profile_model(Augmented().eval(), (torch.rand(64, 256),), tier="fx")
    assert prof.activation_peak_bytes == 2 * 64 * 256 * 4


def test_a_shared_module_is_charged_to_each_caller():
    for tier in ("fx", "eager"):
        prof = profile_model(SharedAct().eval(), (torch.rand(2, 8),), tier=tier)
        # GELU: 5 FLOPs per element (docs/metrics.md), 16 elements per call
        assert prof.modules["one.1"].flops == prof.modules["two.1"].flops == 5 * 16, tier


TORCHVISION = (
    "resnet18",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "squeezenet1_0",
    "regnet_x_400mf",
    "shufflenet_v2_x0_5",
    "vit_b_16",
    "swin_t",
    "maxvit_t",
)
"""torchvision models of the suite that FX traces, small enough to profile twice quickly
(densenet121 and convnext_tiny agree too, at a few seconds each: ``make corpus`` territory)."""

TORCHVISION_APART: dict[str, str] = {}
"""Models whose tiers still differ, each with the reason: xfail(strict) until they agree."""


def agreeing_and_apart(agree: tuple[str, ...], apart: dict[str, str]) -> list:
    """``agree`` as they are, then ``apart`` as strict xfails with their reasons."""
    marked = [
        pytest.param(name, marks=pytest.mark.xfail(reason=why, strict=True))
        for name, why in sorted(apart.items())
    ]
    return [*agree, *marked]


def test_a_dataclass_output_is_written_by_its_kernels_in_every_tier():
    """User trial: a model returning its own dataclass had the last Linear's output (32 x 8
    float32: 1,024 bytes) written by no kernel under FX (the graph returned the constructor's
    node); the tape counted it."""
    from dataclasses import dataclass

    @dataclass
    class Out:
        logits: torch.Tensor
        feats: torch.Tensor

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(64, 256), nn.Linear(256, 8)

        def forward(self, x):
            feats = torch.relu(self.a(x))
            return Out(self.b(feats), feats)

    x = torch.randn(32, 64)
    found = {tier: profile_model(TwoHeads(), (x,), tier=tier) for tier in ("fx", "eager")}
    assert found["fx"].trace.method == "fx"
    for prof in found.values():
        assert [s.bytes_out for s in prof.subgraphs] == [32 * 256 * 4, 32 * 8 * 4]
    assert found["fx"].traffic_bytes == found["eager"].traffic_bytes


class FromDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)

    def forward(self, batch):
        return self.a(batch["x"])


class AddInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)

    def forward(self, x, y):
        return self.a(x) + y


def test_inputs_in_a_container_or_passed_twice_are_counted_once_in_every_tier():
    """User trial: under FX a tensor inside a dict input was left out of the input bytes,
    the traffic and the peak (0, 2,688, 2,688), and one tensor passed as two arguments was
    counted twice in the peak (2,112). By hand: a (4, 16) float32 input is 256 B; Linear(16,
    32)'s weights 2,176 B and output 512 B: traffic and peak 2,944. Linear(16, 16)'s weights
    1,088 B; x read by the linear and again by the add is one storage, inputs 256 B; at the
    add the linear's output and the sum's (256 B each) are live: peak 1,088 + 256 + 512."""
    x = torch.randn(4, 16)
    for tier in ("fx", "eager"):
        held = profile_model(FromDict(), ({"x": x},), tier=tier)
        assert held.trace.method == tier
        assert (held.input_bytes, held.traffic_bytes, held.peak_memory_bytes) == (256, 2944, 2944)
        twice = profile_model(AddInput(), (x, x), tier=tier)
        assert (twice.input_bytes, twice.peak_memory_bytes) == (256, 1088 + 256 + 512)


class DirectForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        return self.b.forward(self.a.forward(x))


def test_a_submodule_whose_forward_is_called_directly_is_charged_its_ops_in_every_tier():
    """User trial: ``self.b.forward(self.a.forward(x))`` is no module call to FX, and both
    linears' FLOPs went to the model (a: 0, b: 0); the tape charged each its own. A
    Linear(16, 16) on (4, 16): 2*4*16*16 + 4*16 = 2,112 FLOPs."""
    for tier in ("fx", "eager"):
        prof = profile_model(DirectForward(), (torch.randn(4, 16),), tier=tier)
        assert prof.trace.method == tier
        assert {path: m.flops for path, m in prof.modules.items()} == {"a": 2112, "b": 2112}


def test_the_models_own_hooks_are_priced_and_fx_says_it_cannot_see_them():
    """User trial: a forward hook on the model itself (``out @ W``) was left out by FX's trace
    of its ``forward``, which the hook wraps: 262,144 MACs for 393,216, without a word.
    Three 32x64 @ 64x64 products: 3 * 32 * 64 * 64 = 393,216 MACs."""
    from pytest_graphbudget.errors import TraceError

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).eval()
    model.register_forward_hook(lambda module, args, out: out @ module[2].weight)
    x = torch.randn(32, 64)
    found = profile_model(model, (x,))
    assert found.macs == 3 * 32 * 64 * 64 == profile_model(model, (x,), tier="eager").macs
    assert "forward hooks of its own" in found.trace.failures["fx"]
    with pytest.raises(TraceError, match="forward hooks of its own"):
        profile_model(model, (x,), tier="fx")
    scaled = nn.Sequential(nn.Linear(64, 64)).eval()
    scaled.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    # the pre-hook's multiply (32 * 64), the product (2 * 32 * 64 * 64) and its bias add
    assert profile_model(scaled, (x,)).flops == 32 * 64 + 2 * 32 * 64 * 64 + 32 * 64


@pytest.mark.parametrize("name", agreeing_and_apart(TORCHVISION, TORCHVISION_APART))
def test_torchvision_models_agree(name):
    torchvision = pytest.importorskip("torchvision")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = torchvision.models.get_model(name, weights=None).eval()
    fx, eager = both_tiers(model, (torch.rand(1, 3, 224, 224),))
    assert eager == fx


TIMM = (
    "mobilenetv3_small_050",
    "ghostnet_050",
    "deit_tiny_patch16_224",
    "regnety_002",
    "test_mambaout",
    "coat_lite_tiny",
    "xcit_nano_12_p16_224",
    "resnetv2_50d_evos",
)
"""A corpus sample: timm models FX traces, on the small side (where the tape is the cheaper
tier, so the two must agree for either to be chosen). convnext_tiny, efficientnet_b0 and
mixer_b16_224 agree too, at a second or more each, as do coat_small and
vit_dpwee_patch16_reg1_gap_256. test_mambaout reads the three torch.split parts of one
storage from different kernels (getitem nodes in FX, one split_with_sizes node on the tape);
coat_lite_tiny and xcit read q, k and v of one qkv storage; xcit and resnetv2_50d_evos build
tensors from shapes (``x.shape``: a node in FX, nothing on the tape)."""

TIMM_APART: dict[str, str] = {}
"""timm models whose tiers still differ: strict xfails with the reason, each to fix (none
now)."""


@pytest.mark.parametrize("name", agreeing_and_apart(TIMM, TIMM_APART))
def test_timm_sample_agrees(name):
    timm = pytest.importorskip("timm")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False).eval()
    shape = (1, *model.pretrained_cfg["input_size"])
    fx, eager = both_tiers(model, (torch.rand(shape),))
    assert eager == fx


def test_asking_for_one_tier_never_falls_back():
    # A forward FX cannot trace (a branch on a value): tier="fx" fails, saying why, where the
    # default falls back to the tape
    from pytest_graphbudget.errors import TraceError

    class Branchy(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    model, inputs = Branchy(), (torch.ones(3),)
    assert profile_model(model, inputs).trace.method == "eager"
    with pytest.raises(TraceError, match="fx: "):
        profile_model(model, inputs, tier="fx")


# The golden cases FX prices (tests/test_golden.py): each again through the tape


def _golden_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "test_golden.py"
    spec = importlib.util.spec_from_file_location("golden_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GOLDEN = _golden_module()
GOLDEN_FX = sorted(
    name
    for name, row in GOLDEN.load_golden()["cases"].items()
    if row["tier"] == "fx" and name not in TORCHVISION  # those agree above already
)
GOLDEN_APART: dict[str, str] = {}
"""Golden cases whose tiers still differ: every one a reason, and each to fix (none now)."""


@pytest.mark.parametrize(
    "name",
    agreeing_and_apart(tuple(n for n in GOLDEN_FX if n not in GOLDEN_APART), GOLDEN_APART),
)
def test_golden_cases_agree(name, monkeypatch):
    for package in GOLDEN.NEEDS[name]:
        pytest.importorskip(package)

    def profile_both(model, *inputs, **options):
        if isinstance(model, str):  # a zoo name: one model for both tiers
            from pytest_graphbudget import zoo

            case = zoo.resolve(model)
            model, inputs = case.model, case.inputs
        inputs = inputs or None
        fx = profile_model(model, inputs, tier="fx", **options)
        eager = profile_model(model, inputs, tier="eager", **options)
        return figures(fx), figures(eager)

    monkeypatch.setattr(GOLDEN, "_profile", profile_both)
    fx, eager = GOLDEN.CASES[name]()
    assert eager == fx


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
def test_inputs_the_model_cannot_run_fail_in_every_tier(dtype):
    """Meta kernels do not check dtypes: FX priced a float32 Linear fed int64 (or numpy's
    float64) at 64 MACs, where the model's forward raises."""
    from pytest_graphbudget.errors import ModelRunError

    x = torch.ones(2, 8, dtype=dtype)
    with pytest.raises(RuntimeError):
        nn.Linear(8, 4)(x)
    for tier in (None, "fx", "eager"):
        with pytest.raises(ModelRunError, match="must have the same dtype"):
            profile_model(nn.Linear(8, 4), (x,), tier=tier)
    conv = nn.Conv2d(3, 4, 3)
    with pytest.raises(ModelRunError, match="should be the same"):
        profile_model(conv, (torch.ones(1, 3, 8, 8, dtype=dtype),), tier="fx")
    assert profile_model(conv.double(), (torch.ones(1, 3, 8, 8, dtype=torch.float64),)).macs == (
        4 * 36 * 27  # 4 out channels x 6 x 6 pixels x 3 x 3 x 3
    )
