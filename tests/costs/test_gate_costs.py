"""Costs never come out silently as zero (issue 9, items 8 and 9).

Every expected count is hand-derived from the cost table (docs/metrics.md) and written as its
arithmetic; contraction FLOPs are also checked against torch's own ``FlopCounterMode`` where it
has a formula. Conventions: flops = 2 * macs + the per-element costs of everything else; a bias
or input add is 1 FLOP per output element; BatchNorm in eval is 2 + 2 (affine) per element.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.costs import Shape, price  # noqa: E402
from pytest_graphbudget.errors import GraphBudgetError  # noqa: E402


def figures(prof) -> dict:
    """A profile's JSON without its timing, which is the one thing allowed to differ."""
    data = prof.to_dict()
    data["trace"].pop("seconds")
    return data


# --------------------------------------------------------------------------------------------
# Item 1: inside torch.inference_mode() composite ops reach the cost pass whole


class ConvBnLinear(nn.Module):
    """conv -> batch norm -> linear -> layer norm: all four are composite ops (conv2d,
    batch_norm, linear, layer_norm) that inference_mode hands over undecomposed."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(8, 3)
        self.norm = nn.LayerNorm(3)

    def forward(self, x):
        return self.norm(self.fc(self.bn(self.conv(x)).flatten(1)))


# conv: out [1, 2, 2, 2] = 8 elements, 1 * 3 * 3 = 9 MACs each, + 1 bias each
# bn (eval, affine): 8 * (2 + 2); fc: 8 * 3 = 24 MACs + 3 bias; layer norm (affine): 3 * (5 + 2)
CONV_BN_LINEAR_MACS = 8 * 9 + 8 * 3
CONV_BN_LINEAR_FLOPS = 2 * CONV_BN_LINEAR_MACS + 8 + 8 * 4 + 3 + 3 * 7


def test_inference_mode_counts_the_hand_count(flop_counter):
    model, x = ConvBnLinear().eval(), torch.randn(1, 1, 4, 4)
    with torch.inference_mode():
        prof = profile_model(model, x)
    assert (prof.macs, prof.flops) == (CONV_BN_LINEAR_MACS, CONV_BN_LINEAR_FLOPS)
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops_contraction == sum(flop_counter(model, (x,)).values())


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 6, 3, 4, 4).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


CASES = {
    "conv-bn-linear": lambda: (ConvBnLinear(), (torch.randn(1, 1, 4, 4),)),
    "sdpa": lambda: (Attention(), (torch.randn(2, 6, 16),)),
    # control flow: FX fails, export traces it (export keeps composites whole in inference_mode)
    "encoder-layer": lambda: (
        nn.TransformerEncoderLayer(16, 4, 32, batch_first=True),
        (torch.randn(2, 6, 16),),
    ),
    "lstm": lambda: (nn.LSTM(4, 5, batch_first=True), (torch.randn(2, 3, 4),)),
}


@pytest.mark.parametrize("fake", [False, True], ids=["real-pass", "fake-pass"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_inference_mode_profile_equals_the_normal_one(case, fake, monkeypatch):
    from pytest_graphbudget.engine import tiers as engine

    # Small models are measured on real tensors; force each cost pass in turn.
    monkeypatch.setattr(engine, "REAL_PASS_SECONDS", 0.0 if fake else 1e9)
    torch.manual_seed(0)
    model, inputs = CASES[case]()
    model.eval()
    normal = profile_model(model, inputs)
    assert normal.flops > 0 and normal.coverage.unsupported_ops == {}
    with torch.inference_mode():
        # inputs made inside inference_mode are inference tensors: they must work too
        inside = profile_model(model, tuple(t.clone() for t in inputs))
    assert figures(inside) == figures(normal)


def test_the_cost_pass_decomposes_composites_it_is_handed():
    """The cost pass itself prices what a composite op decomposes into, as FlopCounterMode
    does: it sees aten.linear whole whenever autograd is off, whoever runs it."""
    from pytest_graphbudget.engine.measure import measure
    from pytest_graphbudget.engine.trace import Example, trace_fx

    model, x = ConvBnLinear().eval(), torch.randn(1, 1, 4, 4)
    traced = trace_fx(model, Example((x,), {}))
    for fake in (False, True):
        with torch.inference_mode():
            measured = measure(model, traced, [x], fake=fake)
        assert sum(n.macs for n in measured.nodes) == CONV_BN_LINEAR_MACS
        assert sum(n.flops for n in measured.nodes) == CONV_BN_LINEAR_FLOPS
        assert not any(n.unsupported for n in measured.nodes)


# --------------------------------------------------------------------------------------------
# Item 2: an op called with out= is counted, its out tensor is its output


class OutVariants(nn.Module):
    def forward(self, a, b):
        mm = a.new_empty(4, 3)
        torch.mm(a, b, out=mm)  # (4, 5) @ (5, 3): 4 * 3 * 5 MACs
        total = a.new_empty(4)
        torch.sum(a, 1, out=total)  # 1 per input element: 20
        added = a.new_empty(4, 3)
        torch.add(mm, mm, out=added)  # 1 per output element: 12
        values, indices = a.new_empty(4), a.new_empty(4, dtype=torch.long)
        torch.max(a, 1, out=(values, indices))  # 1 per input element: 20
        return added, total, values


def test_out_variants_are_counted(flop_counter):
    model, inputs = OutVariants().eval(), (torch.randn(4, 5), torch.randn(5, 3))
    prof = profile_model(model, inputs)
    macs = 4 * 3 * 5
    assert (prof.macs, prof.flops) == (macs, 2 * macs + 20 + 12 + 20)
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops_contraction == flop_counter(model, inputs)["aten.mm"]


# --------------------------------------------------------------------------------------------
# Item 3: the fused attention kernels' own ops, with their (B, S, H, D) layout

B, S, SK, H, D, DV = 2, 5, 7, 3, 8, 8
SCORES = B * H * S * SK  # one per (batch, head, query, key)
ATTENTION_MACS = SCORES * (D + DV)  # QK^T then AV
ATTENTION_OTHER = SCORES * (1 + 5)  # scale and softmax per score


def meta(*shape):
    return torch.empty(*shape, device="meta")


def _runs_on_meta(op: str) -> bool:
    """Whether ``op`` runs on the meta device (the reference below runs it there under
    FlopCounterMode): not before torch 2.5 for the CUDA attention kernels."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return has(op, "Meta") or has(op, "CompositeImplicitAutograd")


def test_flash_attention_forward_formula():
    from torch.utils.flop_counter import sdpa_flop_count

    q, k, v = meta(B, S, H, D), meta(B, SK, H, D), meta(B, SK, H, DV)
    args = (q, k, v, None, None, S, SK, 0.0, False, False)
    cost = price("_flash_attention_forward", shapes(args), {}, None)
    assert (cost.macs, cost.other) == (ATTENTION_MACS, ATTENTION_OTHER)
    # The op takes (B, S, H, D); torch's SDPA count of the same data in (B, H, S, D) is the
    # reference (FlopCounterMode's own formula for this op read it as (B, H, S, D) on torch
    # 2.9 and asserted on these shapes; torch 2.4 has no meta kernel to run it on)
    heads_first = [t.transpose(1, 2).shape for t in (q, k, v)]
    assert 2 * cost.macs == sdpa_flop_count(*heads_first)
    causal = price("_flash_attention_forward", shapes(args[:8] + (True, False)), {}, None)
    assert causal.other == ATTENTION_OTHER + SCORES  # the mask: 1 per score


@pytest.mark.skipif(
    not _runs_on_meta("aten::_scaled_dot_product_efficient_attention"),
    reason="this torch has no meta kernel for aten::_scaled_dot_product_efficient_attention",
)
def test_efficient_attention_forward_formula():
    from torch.utils.flop_counter import FlopCounterMode

    q, k, v = meta(B, S, H, D), meta(B, SK, H, D), meta(B, SK, H, DV)
    args = (q, k, v, None, None, None, S, SK, 0.0, 0)
    cost = price("_efficient_attention_forward", shapes(args), {}, None)
    assert (cost.macs, cost.other) == (ATTENTION_MACS, ATTENTION_OTHER)
    # FlopCounterMode reads this op's (B, S, H, D) as (B, H, S, D); its formula for the SDPA
    # op on the same data in (B, H, S, D) is the reference.
    with FlopCounterMode(display=False) as counter:
        torch.ops.aten._scaled_dot_product_efficient_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, False
        )
    assert 2 * cost.macs == counter.get_total_flops()
    causal = price("_efficient_attention_forward", shapes(args[:9] + (1,)), {}, None)
    assert causal.other == ATTENTION_OTHER + SCORES


def shapes(args: tuple) -> tuple:
    """Tensor arguments as the formulas see them."""
    return tuple(Shape(a.shape) if isinstance(a, torch.Tensor) else a for a in args)


@pytest.mark.parametrize("op", ["_flash_attention_forward", "_efficient_attention_forward"])
def test_packed_batches_are_not_guessed(op):
    """A packed batch's sequence lengths are data: the op is reported, not priced wrong."""
    q, k, v = Shape((10, H, D)), Shape((12, H, D)), Shape((12, H, DV))
    offsets = Shape((3,))
    args = (q, k, v, offsets, offsets, 5, 6, 0.0, False, False)
    if op == "_efficient_attention_forward":
        args = (q, k, v, None, offsets, offsets, 5, 6, 0.0, 0)
    with pytest.raises(ValueError, match="packed"):
        price(op, args, {}, None)


class FlashCall(nn.Module):
    """Calls the CUDA flash kernel's op directly, as some attention libraries do. Built on the
    meta device, so that it is profiled on fake tensors and runs without CUDA."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(D, D, bias=False, device="meta")

    def forward(self, q, k, v):
        out = torch.ops.aten._flash_attention_forward(q, k, v, None, None, S, SK, 0.0, True, False)
        return self.proj(out[0])


def test_flash_attention_forward_in_a_model():
    q, k, v = meta(B, S, H, D), meta(B, SK, H, D), meta(B, SK, H, DV)
    prof = profile_model(FlashCall(), (q, k, v))
    proj_macs = B * S * H * D * D
    assert prof.coverage.unsupported_ops == {}
    assert prof.macs == ATTENTION_MACS + proj_macs
    assert prof.flops == 2 * (ATTENTION_MACS + proj_macs) + ATTENTION_OTHER + SCORES


# The SDPA kernels' ops each read is_causal from their own argument list: q = k = v of
# [1, 2, 4, 8] on the meta device, 1*2*4*4 = 32 scores, 32*(8 + 8) = 512 MACs (QK^T and AV);
# per score 1 scale + 5 softmax: 2*512 + 32*6 = 1216 FLOPs; causal, the mask counted dense
# as for the other backends: + 32 = 1248.
SDPA_OPS = {
    "efficient": ("_scaled_dot_product_efficient_attention", (None, False, 0.0)),
    "flash": ("_scaled_dot_product_flash_attention", (0.0,)),
    # no compute_log_sumexp: (attn_bias, dropout_p, is_causal)
    "fused-overrideable": ("_scaled_dot_product_fused_attention_overrideable", (None, 0.0)),
    # from torch 2.5 the efficient kernel's arguments; the float8 overload puts three descales
    # before the flash kernel's
    "cudnn": ("_scaled_dot_product_cudnn_attention", (None, False, 0.0)),
    "flash-float8": ("_scaled_dot_product_flash_attention.quantized", (None, None, None, 0.0)),
}


class SdpaCall(nn.Module):
    def __init__(self, op, before, causal):
        super().__init__()
        self.op, self.before, self.causal = op, before, causal

    def forward(self, q, k, v):
        return self.op(q, k, v, *self.before, self.causal)[0]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", sorted(SDPA_OPS))
def test_sdpa_kernels_read_is_causal_from_their_own_arguments(case, causal):
    from pytest_graphbudget.compat import torch_version

    name, before = SDPA_OPS[case]
    packet, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, packet, None), overload or "default", None)
    if op is None or (case == "cudnn" and torch_version() < (2, 5)):
        pytest.skip(f"aten.{name} with these arguments is newer than this torch")
    q = meta(1, 2, 4, 8)
    try:
        op(q, q, q, *before, causal)
    except NotImplementedError:  # the overrideable kernel before its meta kernel (2.6's)
        pytest.skip(f"aten.{name} has no meta kernel in this torch")
    prof = profile_model(SdpaCall(op, before, causal), (q, q, q))
    assert prof.coverage.unsupported_ops == {}
    assert (prof.macs, prof.flops) == (512, 1248 if causal else 1216)


def test_the_cudnn_kernel_of_torch_2_4_is_read_as_the_flash_one():
    """torch 2.4's cuDNN op takes (q, k, v, dropout_p, is_causal, ...): the dropout_p of 0.0
    is no attention bias (a mask). The same 32 scores as above."""
    q = Shape((1, 2, 4, 8))
    for causal, other in ((False, 32 * 6), (True, 32 * 7)):
        cost = price("_scaled_dot_product_cudnn_attention", (q, q, q, 0.0, causal), {}, None)
        assert (cost.macs, cost.other) == (512, other)


# --------------------------------------------------------------------------------------------
# Item 4: alpha and beta other than 1 are multiplies too


class Call(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, a, b, c):
        return self.fn(c, a, b)


# (macs, other) by hand: out is the product's shape; per output element 1 add of the input
# (none when beta is 0), 1 multiply for alpha != 1, 1 for beta not in (0, 1).
SCALED = {
    "addmm": (
        lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2),
        ((3,), (4, 5), (5, 3)),
        (4 * 3 * 5, 12 * (1 + 1 + 1)),
    ),
    "addmm-beta0": (
        lambda c, a, b: torch.addmm(c, a, b, beta=0, alpha=2),
        ((4, 3), (4, 5), (5, 3)),
        (4 * 3 * 5, 12 * 1),
    ),
    "addmm-plain": (
        lambda c, a, b: torch.addmm(c, a, b),
        ((4, 3), (4, 5), (5, 3)),
        (4 * 3 * 5, 12 * 1),
    ),
    "baddbmm": (
        lambda c, a, b: torch.baddbmm(c, a, b, beta=2, alpha=3),
        ((2, 4, 3), (2, 4, 5), (2, 5, 3)),
        (2 * 4 * 3 * 5, 24 * 3),
    ),
    "addmv": (
        lambda c, a, b: torch.addmv(c, a, b, alpha=2),
        ((4,), (4, 5), (5,)),
        (4 * 5, 4 * 2),
    ),
    # the batch is contracted as k is: its sum is in the 2 * 5 MACs per output element, as
    # einsum("bmk,bkn->mn") counts it (it had been 12 * (2 - 1) adds more); the input add and
    # the beta multiply besides
    "addbmm": (
        lambda c, a, b: torch.addbmm(c, a, b, beta=0.5),
        ((4, 3), (2, 4, 5), (2, 5, 3)),
        (2 * 4 * 3 * 5, 12 * 2),
    ),
    "addbmm-as-einsum": (
        lambda c, a, b: c * 0.5 + torch.einsum("bmk,bkn->mn", a, b),
        ((4, 3), (2, 4, 5), (2, 5, 3)),
        (2 * 4 * 3 * 5, 12 * 2),
    ),
    # pointwise ops with a scale: a + alpha * b, a + value * b * c
    "add-alpha": (
        lambda c, a, b: torch.add(a, b, alpha=2) + torch.sub(a, b, alpha=1),
        ((1,), (4, 3), (4, 3)),
        (0, 12 * 2 + 12 + 12),  # add with alpha, sub without, the + between them
    ),
    "addcmul-value": (
        lambda c, a, b: torch.addcmul(c, a, b, value=0.5) + torch.addcdiv(c, a, b),
        ((4, 3), (4, 3), (4, 3)),
        (0, 12 * 3 + 12 * 2 + 12),
    ),
    # the outer product is addmm with k = 1
    "addr": (
        lambda c, a, b: torch.addr(c, a, b, alpha=2),
        ((4, 3), (4,), (3,)),
        (4 * 3, 12 * 2),
    ),
}


@pytest.mark.parametrize("case", sorted(SCALED))
def test_alpha_and_beta_are_counted(case, flop_counter):
    fn, in_shapes, (macs, other) = SCALED[case]
    torch.manual_seed(0)
    c, a, b = (torch.randn(*s) for s in in_shapes)
    model = Call(fn).eval()
    prof = profile_model(model, (a, b, c))
    assert (prof.macs, prof.flops) == (macs, 2 * macs + other)
    assert prof.coverage.unsupported_ops == {}
    counted = sum(flop_counter(model, (a, b, c)).values())
    if counted:  # FlopCounterMode has formulas for addmm and baddbmm only
        assert prof.flops_contraction == counted


# --------------------------------------------------------------------------------------------
# Item 9: profiling leaves the caller's training mode as it was


def modes(model: nn.Module) -> dict[str, bool]:
    return {name: m.training for name, m in model.named_modules()}


def test_training_mode_is_restored():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4))
    model.train()
    model[2].eval()  # a mixed state, restored flag by flag
    before = modes(model)
    profile_model(model, torch.randn(3, 4))
    assert modes(model) == before


class Raises(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        raise RuntimeError("boom")


def test_training_mode_is_restored_when_profiling_raises():
    model = Raises().train()
    with pytest.raises(GraphBudgetError, match="boom"):
        profile_model(model, torch.randn(3, 4))
    assert modes(model) == {"": True, "fc": True}


# --------------------------------------------------------------------------------------------
# Item 8, last part: an unsupported op that may hide a contraction fails the budget check
# unless the budget says allow_unsupported.
#
# The rule (registry.may_contract): an op without a formula may be a contraction when any input
# is a floating-point or complex tensor of rank >= 2, or when its name says so (mm, matmul,
# conv, einsum, attention, linear, dot, gemm, lstm, gru, rnn...). Other unsupported ops warn.


# The schema is given: torch 2.4's custom_op cannot read this module's string annotations.
@torch.library.custom_op("gbcosts::blend", mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor")
def blend(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A matrix product hidden in a custom op whose name does not say so."""
    return a @ b


@blend.register_fake
def _(a, b):
    return a.new_empty(a.shape[0], b.shape[1])


@torch.library.custom_op("gbcosts::bucket", mutates_args=(), schema="(Tensor x) -> Tensor")
def bucket(x: torch.Tensor) -> torch.Tensor:
    """1-D integer bookkeeping: nothing a contraction could hide in."""
    return x + 1


@bucket.register_fake
def _(x):
    return torch.empty_like(x)


class CustomOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.w = nn.Parameter(torch.randn(6, 3))

    def forward(self, x, idx):
        return torch.ops.gbcosts.blend(self.fc(x), self.w), torch.ops.gbcosts.bucket(idx)


@pytest.fixture(scope="module")
def custom_profile():
    torch.manual_seed(0)
    return profile_model(CustomOps(), (torch.randn(2, 4), torch.arange(5)))


def test_custom_ops_are_reported_under_their_namespace(custom_profile):
    coverage = custom_profile.coverage
    assert coverage.unsupported_ops == {"gbcosts.blend": 1, "gbcosts.bucket": 1}
    assert coverage.unsupported_contractions == {"gbcosts.blend": 1}
    assert custom_profile.to_dict()["coverage"]["unsupported_contractions"] == {"gbcosts.blend": 1}
    assert custom_profile.macs == 2 * 4 * 6  # the linear only: blend is not counted


def test_may_contract_rule():
    from pytest_graphbudget.costs.registry import may_contract

    floats2, floats1 = torch.empty(3, 4), torch.empty(4)
    ints2 = torch.empty(3, 4, dtype=torch.long)
    assert may_contract("mylib.blend", (floats1, floats2), {})
    assert may_contract("mylib.blend", (), {"x": torch.empty(2, 2, dtype=torch.complex64)})
    assert not may_contract("mylib.blend", (floats1, floats1, ints2), {})
    assert may_contract("mylib.vec_dot", (floats1, floats1), {})  # the name says so
    assert may_contract("aten.special_conv_thing", (), {})


def severities(findings) -> list[tuple[str, str]]:
    return [(f.severity, f.message) for f in findings]


def test_an_unsupported_contraction_fails_the_check(custom_profile):
    from pytest_graphbudget.gate.budgets import Budget, coverage_findings

    findings = coverage_findings(custom_profile, Budget())
    fails = [f.message for f in findings if f.severity == "fail"]
    assert len(fails) == 1 and "\n" not in fails[0]
    assert fails[0].startswith("gbcosts.blend x1 has no cost formula and may hide a contraction")
    assert 'allow_unsupported = ["gbcosts.blend"]' in fails[0]
    assert ("warn", "ops without a cost formula: gbcosts.bucket x1") in severities(findings)
    # the JSON form is judged the same way
    assert severities(coverage_findings(custom_profile.to_dict(), Budget())) == severities(findings)


@pytest.mark.parametrize(
    "allowed",
    [
        True,
        "gbcosts::blend",
        "gbcosts.blend",
        ["gbcosts::blend"],
        ["aten.mm", "gbcosts.blend.default"],
    ],
)
def test_allow_unsupported_accepts_the_op(custom_profile, allowed):
    from pytest_graphbudget.gate.budgets import build, coverage_findings

    budget = build({"allow_unsupported": allowed}, "test")
    findings = coverage_findings(custom_profile, budget)
    assert not [f for f in findings if f.severity == "fail"]
    notice = next(f.message for f in findings if f.severity == "notice")
    assert "gbcosts.blend x1" in notice and "allow_unsupported" in notice


@pytest.mark.parametrize("allowed", [False, "gbcosts.bucket", ["aten.blend"], "blend"])
def test_allow_unsupported_for_other_ops_still_fails(custom_profile, allowed):
    from pytest_graphbudget.gate.budgets import build, coverage_findings

    findings = coverage_findings(custom_profile, build({"allow_unsupported": allowed}, "test"))
    assert [f.key for f in findings if f.severity == "fail"] == ["coverage"]


def test_strict_fails_other_unsupported_ops_unless_allowed(custom_profile):
    from pytest_graphbudget.gate.budgets import build, coverage_findings

    budget = build({"allow_unsupported": "gbcosts.blend"}, "test")
    strict = coverage_findings(custom_profile, budget, strict=True)
    assert ("fail", "ops without a cost formula: gbcosts.bucket x1") in severities(strict)
    budget = build({"allow_unsupported": True}, "test")
    assert not [
        f for f in coverage_findings(custom_profile, budget, strict=True) if f.severity == "fail"
    ]


def test_a_profile_without_the_contraction_record_fails_every_unsupported_op(custom_profile):
    """A profile saved before the record existed: any unsupported op may be a contraction."""
    from pytest_graphbudget.gate.budgets import Budget, coverage_findings

    data = custom_profile.to_dict()
    del data["coverage"]["unsupported_contractions"]
    fails = [f.message for f in coverage_findings(data, Budget()) if f.severity == "fail"]
    assert [m.split(" ")[0] for m in fails] == ["gbcosts.blend", "gbcosts.bucket"]


@pytest.mark.parametrize("value", [1, "", ["ok", 2], {"op": True}, [" "]])
def test_allow_unsupported_values_are_checked(value):
    from pytest_graphbudget.gate.budgets import build

    with pytest.raises(GraphBudgetError) as caught:
        build({"allow_unsupported": value}, "budgets/x.toml [models.m]")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("allow_unsupported in budgets/x.toml [models.m]: true, false, an op")


def test_allow_unsupported_is_in_the_budget_dict():
    from pytest_graphbudget.gate.budgets import build
    from pytest_graphbudget.pytest_plugin.plugin import budget_dict

    assert budget_dict(build({}, "t"))["allow_unsupported"] is False
    assert budget_dict(build({"allow_unsupported": True}, "t"))["allow_unsupported"] is True
    listed = build({"allow_unsupported": ["gbcosts::blend", "aten::mm.out", "nonzero"]}, "t")
    assert budget_dict(listed)["allow_unsupported"] == ["gbcosts.blend", "aten.mm", "aten.nonzero"]


# -- through pytest: the marker keyword and the TOML key

MODELS = """
import torch
from pytest_graphbudget import ModelCase

class CustomOps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 6)
        self.w = torch.nn.Parameter(torch.randn(6, 3))

    def forward(self, x):
        return torch.ops.gbcosts.blend(self.fc(x), self.w)

def custom():
    torch.manual_seed(0)
    return ModelCase(CustomOps(), (torch.randn(2, 4),), name="custom")
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    return pytester


def test_the_marker_fails_an_unsupported_contraction_unless_allowed(project):
    project.makepyfile(
        test_custom="""
        import pytest
        from models import custom

        @pytest.fixture
        def model():
            return custom()

        @pytest.mark.flops_max("1G")
        def test_counted(model):
            pass

        @pytest.mark.flops_max("1G")
        @pytest.mark.graph_budget(allow_unsupported="gbcosts::blend")
        def test_allowed(model):
            pass

        @pytest.mark.graph_budget(allow_unsupported=["aten.mm"])
        def test_other_allowed(model):
            pass
        """
    )
    report = project.path / "report.json"
    result = project.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "-v", f"--graph-budget-json={report}"
    )
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*test_custom.py::test_allowed PASSED*"])
    result.stdout.fnmatch_lines(
        ["*gbcosts.blend x1 has no cost formula and may hide a contraction*"]
    )
    import json

    models = json.loads(report.read_text())["models"]
    budgets = {m["nodeid"].rsplit("::", 1)[-1]: m["budget"] for m in models}
    assert budgets["test_allowed"]["allow_unsupported"] == ["gbcosts.blend"]
    assert budgets["test_counted"]["allow_unsupported"] is False


def test_the_toml_key_allows_an_unsupported_contraction(project):
    project.mkdir("budgets")
    project.path.joinpath("budgets", "custom.toml").write_text(
        '[models.counted]\nfactory = "models:custom"\nflops_max = "1G"\n\n'
        '[models.allowed]\nfactory = "models:custom"\nflops_max = "1G"\n'
        'allow_unsupported = ["gbcosts::blend"]\n\n'
        '[models.everything]\nfactory = "models:custom"\nflops_max = "1G"\n'
        "allow_unsupported = true\n"
    )
    result = project.runpytest("-p", "no:cacheprovider", "--graph-budget", "budgets/", "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*budgets/custom.toml::counted FAILED*"])


def test_a_lookup_of_no_flops_is_counted_and_an_empty_graph_is_not():
    """User trial: an ``nn.Embedding(1000, 64)`` budget failed with "no operation was
    counted: the graph is empty or every op lacks a formula", though its one op was priced:
    a lookup computes nothing (0 FLOPs) and moves bytes. 4x16 indices read 64 rows of 64
    floats: 64 * 256 B read and 64 * 256 B written, and the 4x16 int64 indices (512 B)."""
    from pytest_graphbudget.api import profile_model
    from pytest_graphbudget.gate.budgets import Budget, coverage_findings

    table = profile_model(torch.nn.Embedding(1000, 64), (torch.randint(0, 1000, (4, 16)),))
    assert table.flops == 0 and table.params == 64_000
    assert table.traffic_bytes == 2 * 64 * 64 * 4 + 4 * 16 * 8
    assert [f for f in coverage_findings(table, Budget()) if f.severity == "fail"] == []
    empty = profile_model(torch.nn.Identity(), (torch.randn(4),))
    (fail,) = [f.message for f in coverage_findings(empty, Budget()) if f.severity == "fail"]
    assert fail.startswith("no operation was counted")


def test_an_empty_batch_counts_nothing_though_its_weights_are_read():
    """User trial: a model fed a batch of 0 (``torch.randn(0, 3, 16, 16)``) passed its
    ``flops_max`` at 0 FLOPs: its ops read their weights (896 B), which the lookup rule took
    for a count. It wrote nothing, and is no count."""
    from pytest_graphbudget.api import profile_model
    from pytest_graphbudget.gate.budgets import Budget, coverage_findings

    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU())
    empty = profile_model(conv, (torch.randn(0, 3, 16, 16),))
    assert empty.flops == 0 and empty.traffic_bytes == (8 * 27 + 8) * 4
    (fail,) = [f.message for f in coverage_findings(empty, Budget()) if f.severity == "fail"]
    assert fail == "no operation was counted: input 'input' is empty (shape [0, 3, 16, 16])"
