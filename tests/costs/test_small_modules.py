"""Small modules whose counts are derived by hand here, from the cost table in the contract
(docs/metrics.md): every expected number is written as the arithmetic that produces it.

Conventions of the table used below:
  flops = 2 * macs + the per-element costs of the non-contraction ops;
  conv / addmm / linear bias: +1 FLOP per output element;
  attention score element (B*H*L*S): +1 scale, +5 softmax, +1 when a mask is applied.
"""

from __future__ import annotations

import pytest
from conftest import transformers_major

torch = pytest.importorskip("torch")
from test_spectral import Fn as Unary  # noqa: E402  (a function of one tensor as a module)
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.compat import dynamo_breaks_unavailable  # noqa: E402
from pytest_graphbudget.errors import ModelRunError  # noqa: E402


class Fn(nn.Module):
    """Wraps a function of two to four tensors as a module (FX-traceable: no ``*args``)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, a, b, c=None, d=None):
        return self.fn(a, b, *[t for t in (c, d) if t is not None])


def profile(model, *inputs, kwargs=None):
    torch.manual_seed(0)
    return profile_model(model.eval(), tuple(inputs), kwargs)


def assert_counts(prof, macs, flops):
    assert (prof.macs, prof.flops) == (macs, flops), prof.coverage.unsupported_ops
    assert prof.flops_contraction == 2 * macs
    assert prof.coverage.unsupported_ops == {}


# --------------------------------------------------------------------------------------------
# Convolutions: N * C_out * prod(out_spatial) * (C_in / groups) * prod(kernel)


def test_grouped_conv():
    conv = nn.Conv2d(8, 16, 3, padding=1, groups=4, bias=False)
    prof = profile(conv, torch.randn(2, 8, 10, 10))  # out [2, 16, 10, 10]
    macs = 2 * 16 * (10 * 10) * (8 // 4) * (3 * 3)  # 57,600
    assert_counts(prof, macs, 2 * macs)
    assert prof.params == 16 * (8 // 4) * 3 * 3  # 288


def test_grouped_conv_with_bias():
    conv = nn.Conv2d(8, 16, 3, padding=1, groups=4, bias=True)
    prof = profile(conv, torch.randn(2, 8, 10, 10))
    macs = 2 * 16 * (10 * 10) * (8 // 4) * (3 * 3)
    assert_counts(prof, macs, 2 * macs + 2 * 16 * 10 * 10)  # + 1 per output element


def test_depthwise_strided_conv():
    conv = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=True)
    prof = profile(conv, torch.randn(1, 8, 16, 16))  # out [1, 8, 8, 8]
    macs = 1 * 8 * (8 * 8) * (8 // 8) * (3 * 3)  # 4,608
    assert_counts(prof, macs, 2 * macs + 1 * 8 * 8 * 8)  # 9,216 + 512 bias
    assert prof.params == 8 * 1 * 3 * 3 + 8


# Transposed: N * C_in * prod(in_spatial) * (C_out / groups) * prod(kernel)


@pytest.mark.parametrize("bias", [False, True])
def test_transposed_conv(bias):
    conv = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, bias=bias)
    x = torch.randn(1, 4, 5, 5)
    assert conv(x).shape == (1, 6, 10, 10)
    prof = profile(conv, x)
    macs = 1 * 4 * (5 * 5) * 6 * (3 * 3)  # 5,400
    bias_flops = 1 * 6 * 10 * 10 if bias else 0  # 600 output elements
    assert_counts(prof, macs, 2 * macs + bias_flops)


def test_grouped_transposed_conv():
    conv = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, bias=False)
    prof = profile(conv, torch.randn(1, 4, 5, 5))
    macs = 1 * 4 * (5 * 5) * (6 // 2) * (3 * 3)  # 2,700
    assert_counts(prof, macs, 2 * macs)


@pytest.mark.parametrize(
    "conv, shape",
    [
        (nn.Conv2d(8, 16, 3, padding=1, groups=4), (2, 8, 10, 10)),
        (
            nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
            (1, 4, 5, 5),
        ),
        (nn.Conv1d(3, 5, 4, stride=2, dilation=2), (2, 3, 20)),
        (nn.Conv3d(2, 4, (1, 3, 3), padding=(0, 1, 1)), (1, 2, 3, 6, 6)),
    ],
    ids=["grouped2d", "transposed-grouped", "conv1d-dilated", "conv3d"],
)
def test_convolutions_agree_with_pytorch_flop_counter(conv, shape, flop_counter):
    """PyTorch's FlopCounterMode prices convolutions (plain, grouped, transposed): exact match."""
    x = torch.randn(shape)
    counts = flop_counter(conv, (x,))
    prof = profile(conv, x)
    assert prof.flops_contraction == counts["aten.convolution"]


# The kernels behind convolution, called by name: (input, weight, kernel_size, bias, stride,
# padding[, output_padding][, dilation]), the kernel size before the bias. Same count:
# outputs * C_in * prod(kernel) (transposed: inputs * C_out * prod(kernel)), + 1 per output
# element with a bias.

aten = torch.ops.aten
SLOW_CONVS = {
    # x [1,3,6,6], w [4,3,3,3]: out [1,4,4,4], 64 outputs x 27 MACs = 1,728
    "_slow_conv2d_forward": (
        lambda x, w, b: aten._slow_conv2d_forward(x, w, [3, 3], b, [1, 1], [0, 0]),
        (1, 3, 6, 6),
        (4, 3, 3, 3),
        (4 * 4 * 4) * (3 * 3 * 3),
    ),
    # the public op, which decomposes into _slow_conv2d_forward
    "thnn_conv2d": (
        lambda x, w, b: aten.thnn_conv2d(x, w, [3, 3], b),
        (1, 3, 6, 6),
        (4, 3, 3, 3),
        (4 * 4 * 4) * (3 * 3 * 3),
    ),
    # x [1,3,4,6,6], w [4,3,3,3,3]: out [1,4,2,4,4], 128 outputs x 81 MACs (through
    # slow_conv3d_forward)
    "slow_conv3d": (
        lambda x, w, b: aten.slow_conv3d(x, w, [3, 3, 3], b),
        (1, 3, 4, 6, 6),
        (4, 3, 3, 3, 3),
        (4 * 2 * 4 * 4) * (3 * 3 * 3 * 3),
    ),
    # dilation 2 spans 5: out [1,4,2,2], 16 outputs x 27 MACs
    "slow_conv_dilated2d": (
        lambda x, w, b: aten.slow_conv_dilated2d(x, w, [3, 3], b, [1, 1], [0, 0], [2, 2]),
        (1, 3, 6, 6),
        (4, 3, 3, 3),
        (4 * 2 * 2) * (3 * 3 * 3),
    ),
    # padding 1: out [1,4,4,6,6], 576 outputs x 81 MACs
    "slow_conv_dilated3d": (
        lambda x, w, b: aten.slow_conv_dilated3d(x, w, [3, 3, 3], b, [1, 1, 1], [1, 1, 1]),
        (1, 3, 4, 6, 6),
        (4, 3, 3, 3, 3),
        (4 * 4 * 6 * 6) * (3 * 3 * 3 * 3),
    ),
    # weight [C_in, C_out, k]: 108 inputs x 4 * 9 = 3,888 MACs; out [1,4,8,8]
    "slow_conv_transpose2d": (
        lambda x, w, b: aten.slow_conv_transpose2d(x, w, [3, 3], b),
        (1, 3, 6, 6),
        (3, 4, 3, 3),
        (3 * 6 * 6) * (4 * 3 * 3),
    ),
    # 54 inputs x 4 * 27 MACs; out [1,4,4,5,5]
    "slow_conv_transpose3d": (
        lambda x, w, b: aten.slow_conv_transpose3d(x, w, [3, 3, 3], b),
        (1, 3, 2, 3, 3),
        (3, 4, 3, 3, 3),
        (3 * 2 * 3 * 3) * (4 * 3 * 3 * 3),
    ),
}


class SlowConv(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, w, b=None):
        return self.fn(x, w, b)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("name", sorted(SLOW_CONVS))
def test_convolution_kernels_called_by_name(name, bias):
    """``_slow_conv2d_forward`` was priced with the ``convolution`` formula, which read its
    kernel_size as a bias: 64 bias adds charged with no bias (3,520 FLOPs for 3,456)."""
    fn, x_shape, w_shape, macs = SLOW_CONVS[name]
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    b = torch.randn(4) if bias else None  # C_out = 4 throughout
    out = fn(x, w, b)
    prof = profile(SlowConv(fn), x, w, *([b] if bias else []))
    assert_counts(prof, macs, 2 * macs + (out.numel() if bias else 0))


def test_the_slow_kernel_counts_what_conv2d_counts():
    x, w = torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3)
    slow = profile(SlowConv(SLOW_CONVS["_slow_conv2d_forward"][0]), x, w)
    assert slow.flops == profile(Fn(F.conv2d), x, w).flops == 2 * 64 * 27  # 3,456


def test_depthwise_kernels_called_by_name():
    """CUDA's depthwise kernels, priced from their arguments as the other kernels: weight
    [C_out, 1, *kernel], one input channel per output channel."""
    from pytest_graphbudget.costs import Shape, price

    x, w, out = Shape((1, 3, 6, 6)), Shape((6, 1, 3, 3)), Shape((1, 6, 4, 4))
    cost = price("_conv_depthwise2d", (x, w, [3, 3], None, [1, 1], [0, 0], [1, 1]), {}, out)
    assert (cost.macs, cost.other) == (96 * 9, 0)  # 96 outputs x 9 MACs
    x, w, out = Shape((1, 3, 4, 6, 6)), Shape((6, 1, 3, 3, 3)), Shape((1, 6, 2, 4, 4))
    args = (x, w, [3, 3, 3], Shape((6,)), [1, 1, 1], [0, 0, 0], [1, 1, 1])
    cost = price("conv_depthwise3d", args, {}, out)
    assert (cost.macs, cost.other) == (192 * 27, 192)  # 192 outputs x 27 MACs, + the bias


# --------------------------------------------------------------------------------------------
# einsum decomposes into bmm


def test_einsum_batched_matmul():
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    prof = profile(Fn(lambda a, b: torch.einsum("bij,bjk->bik", a, b)), a, b)
    macs = 2 * 3 * 4 * 5  # b * i * j * k = 120
    assert_counts(prof, macs, 2 * macs)


def test_einsum_attention_scores():
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 7, 8)
    prof = profile(Fn(lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k)), q, k)
    macs = 1 * 2 * 5 * 7 * 8  # b * h * q * k * d = 560
    assert_counts(prof, macs, 2 * macs)


# --------------------------------------------------------------------------------------------
# scaled_dot_product_attention: macs = B*H*L*S*(E + Ev); per score: 1 scale + 5 softmax (+1 mask)


@pytest.mark.parametrize("Ev", [8, 12], ids=["Ev=E", "Ev!=E"])
def test_sdpa_no_mask_cross_attention(Ev):
    """L != S. With Ev != E PyTorch's CPU dispatcher cannot use the flash kernel and runs the
    math fallback, which decomposes into mul/bmm/softmax ops: priced as it runs (as the taped
    forward sees it), it scales q and k by sqrt(scale) each instead of every score once."""
    B, H, L, S, E = 2, 4, 16, 32, 8
    q, k, v = torch.randn(B, H, L, E), torch.randn(B, H, S, E), torch.randn(B, H, S, Ev)
    prof = profile(Fn(F.scaled_dot_product_attention), q, k, v)
    macs = B * H * L * S * (E + Ev)  # 2*4*16*32*(8 + Ev): 65,536 or 81,920
    scores = B * H * L * S  # 4,096
    scale = scores if Ev == 8 else B * H * (L + S) * E  # flash: every score; math: q and k
    assert_counts(prof, macs, 2 * macs + scale + scores * 5)
    # inputs made in the caller's inference_mode: autograd no longer splits SDPA before it
    # is priced, and FX priced it whole (every score scaled once): both tiers copy them out
    with torch.inference_mode():
        q, k, v = q.clone(), k.clone(), v.clone()
        for tier in ("fx", "eager"):
            found = profile_model(Fn(F.scaled_dot_product_attention), (q, k, v), tier=tier)
            assert found.flops == 2 * macs + scale + scores * 5


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_sdpa_with_attn_mask(dtype):
    B, H, L, S, E = 2, 4, 16, 32, 8
    q, k, v = torch.randn(B, H, L, E), torch.randn(B, H, S, E), torch.randn(B, H, S, E)
    mask = torch.rand(L, S) > 0.3 if dtype is torch.bool else torch.randn(L, S)
    mask[:, 0] = True if dtype is torch.bool else 0.0  # every query sees at least one key
    model = Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
    prof = profile(model, q, k, v, mask)
    macs = B * H * L * S * (E + E)  # 65,536
    scores = B * H * L * S
    # SDPA is priced as the kernels it runs: a boolean mask is first turned into an additive
    # one (a where over its L x S elements, one FLOP each), then added to every score.
    # (two ops before torch 2.6: logical_not, then masked_fill_ or where)
    from pytest_graphbudget.compat import torch_version

    ops = 1 if torch_version() >= (2, 6) else 2
    converted = ops * L * S if dtype is torch.bool else 0
    assert_counts(prof, macs, 2 * macs + scores * (1 + 5 + 1) + converted)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_causal_does_not_halve(causal):
    B, H, L, E = 1, 2, 16, 8
    q, k, v = (torch.randn(B, H, L, E) for _ in range(3))
    model = Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    prof = profile(model, q, k, v)
    macs = B * H * L * L * (E + E)  # 8,192 whether causal or not
    scores = B * H * L * L  # 512
    assert_counts(prof, macs, 2 * macs + scores * (1 + 5 + (1 if causal else 0)))


# --------------------------------------------------------------------------------------------
# nn.MultiheadAttention (eval + batch_first + self-attention + no grad: the fused fast path)


class SelfAttention(nn.Module):
    def __init__(self, embed_dim, heads, need_weights=False):
        super().__init__()
        self.mha = nn.MultiheadAttention(embed_dim, heads, batch_first=True)
        self.need_weights = need_weights

    def forward(self, x):
        return self.mha(x, x, x, need_weights=self.need_weights)[0]


@pytest.mark.parametrize("heads", [4, 8])
@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention(heads, need_weights, eager_aten_ops):
    B, L, E = 2, 10, 32
    S = L
    model, x = SelfAttention(E, heads, need_weights), torch.randn(B, L, E)
    assert "aten._native_multi_head_attention.default" in eager_aten_ops(model, (x,))
    prof = profile(model, x)
    macs = (
        B * L * E * E  # q projection
        + 2 * B * S * E * E  # k and v projections
        + B * L * S * E  # QK^T (all heads: H * L * S * E/H)
        + B * L * S * E  # AV
        + B * L * E * E
    )  # out projection
    # = 81,920 (projections) + 12,800 (attention) = 94,720 MACs whatever the number of heads
    bias = B * L * E + 2 * B * S * E + B * L * E  # 1 per projection output element: 2,560
    scores = B * heads * L * S * (1 + 5)  # scale + softmax, no mask
    # the weights asked for, averaged over the heads: a sum of the heads' scores, a divide
    averaged = (B * heads * L * S + B * L * S) if need_weights else 0
    assert_counts(prof, macs, 2 * macs + bias + scores + averaged)
    assert prof.params == 4 * E * E + 4 * E  # in_proj (3E x E) + out_proj (E x E), biases


# --------------------------------------------------------------------------------------------
# LSTM: per layer and direction, macs = T*B*(I*4H + H*4H), extra flops = T*B*H*30


def lstm_macs(T, B, I, H):  # noqa: E741 (I: input size, as in the contract)
    return T * B * (I * 4 * H + H * 4 * H)


def lstm_extra(T, B, H):
    return T * B * H * 30  # 12 bias/sum adds + 3 sigmoids*4 + 2 tanh + 3 cell + 1 hidden


@pytest.mark.parametrize(
    "layers, bidirectional",
    [(1, False), (2, False), (1, True), (2, True)],
    ids=["1-layer", "2-layers", "1-layer-bidir", "2-layers-bidir"],
)
def test_lstm(layers, bidirectional, eager_aten_ops):
    T, B, I, H = 5, 3, 16, 32  # noqa: E741
    dirs = 2 if bidirectional else 1
    lstm, x = nn.LSTM(I, H, num_layers=layers, bidirectional=bidirectional), torch.randn(T, B, I)
    assert "aten.mkldnn_rnn_layer.default" in eager_aten_ops(lstm, (x,))  # the CPU kernel
    prof = profile(lstm, x)
    macs = dirs * lstm_macs(T, B, I, H)  # first layer reads I features
    for _ in range(layers - 1):  # deeper layers read both directions' outputs: dirs * H
        macs += dirs * lstm_macs(T, B, dirs * H, H)
    extra = layers * dirs * lstm_extra(T, B, H)
    # e.g. 1 layer: 5*3*(16*128 + 32*128) = 92,160 MACs, 5*3*32*30 = 14,400 extra FLOPs
    assert_counts(prof, macs, 2 * macs + extra)


def test_lstm_without_bias_adds_no_bias():
    """``bias=False``: each of the 4 gates adds its two products, and no bias (8 adds fewer
    per hidden unit and step: 22 FLOPs besides the products, not 30)."""
    T, B, I, H = 6, 3, 4, 8  # noqa: E741
    prof = profile(nn.LSTM(I, H, bias=False), torch.randn(T, B, I))
    macs = lstm_macs(T, B, I, H)
    assert_counts(prof, macs, 2 * macs + T * B * H * (30 - 8))


@pytest.mark.parametrize("case", ["sdpa", "mha-fast-path", "lstm"])
def test_counts_where_flop_counter_is_blind(case, flop_counter):
    """On CPU, FlopCounterMode has no formula for ``_scaled_dot_product_flash_attention_for_cpu``,
    ``_native_multi_head_attention`` or ``mkldnn_rnn_layer``, and reports 0 (or part) of these
    models' contractions. Our count must be the hand-derived one; where FlopCounterMode does count
    something, that can only be part of ours."""
    if case == "sdpa":
        B, H, L, E = 1, 2, 16, 8
        model, inputs = Fn(F.scaled_dot_product_attention), [torch.randn(B, H, L, E)] * 3
        macs = B * H * L * L * (E + E)
    elif case == "mha-fast-path":
        B, L, E = 2, 10, 32
        model, inputs = SelfAttention(E, 4), [torch.randn(B, L, E)]
        macs = 4 * B * L * E * E + 2 * B * L * L * E
    else:
        T, B, I, H = 5, 3, 16, 32  # noqa: E741
        model, inputs = nn.LSTM(I, H), [torch.randn(T, B, I)]
        macs = lstm_macs(T, B, I, H)
    counted = sum(flop_counter(model.eval(), tuple(inputs)).values())
    prof = profile(model, *inputs)
    assert prof.flops_contraction == 2 * macs, f"FlopCounterMode: {counted:,}"
    assert counted <= prof.flops_contraction  # it can miss work, never invent it


# --------------------------------------------------------------------------------------------
# Elementwise and normalisation: per element of the output (or of the normalised tensor)

SHAPE = (2, 10, 64)
NUMEL = 2 * 10 * 64  # 1,280


@pytest.mark.parametrize(
    "module, per_element",
    [
        (nn.LayerNorm(64), 7),  # 5 + 1 weight + 1 bias
        (nn.LayerNorm(64, elementwise_affine=False), 5),
        (nn.LayerNorm(64, bias=False), 6),
        (nn.GELU(), 5),  # erf form
        (nn.GELU(approximate="tanh"), 9),
        (nn.Softmax(dim=-1), 5),
        (nn.SiLU(), 5),
        (nn.Sigmoid(), 4),
        (nn.ReLU(), 1),
        (nn.ELU(), 4),  # exp, sub, mul, select
        (nn.SELU(), 5),  # the same, and its scale (torch runs it as elu with scale=1.0507)
    ],
    ids=[
        "layernorm",
        "layernorm-no-affine",
        "layernorm-no-bias",
        "gelu",
        "gelu-tanh",
        "softmax",
        "silu",
        "sigmoid",
        "relu",
        "elu",
        "selu",
    ],
)
def test_elementwise_costs(module, per_element):
    prof = profile(module, torch.randn(SHAPE))
    assert (prof.macs, prof.flops) == (0, NUMEL * per_element)
    assert prof.coverage.unsupported_ops == {}
    # the same inside the caller's inference_mode, where autograd no longer splits a
    # composite op (selu) before it is priced: FX and the tape both see ordinary tensors
    with torch.inference_mode():
        x = torch.randn(SHAPE)
        for tier in ("fx", "eager"):
            assert profile_model(module, (x,), tier=tier).flops == NUMEL * per_element


def test_eval_batchnorm_then_relu():
    """Eval batch norm: 2 + 1 weight + 1 bias = 4 per element; ReLU 1."""
    model = nn.Sequential(nn.BatchNorm2d(3), nn.ReLU())
    prof = profile(model, torch.randn(2, 3, 4, 4))
    numel = 2 * 3 * 4 * 4  # 96
    assert (prof.macs, prof.flops) == (0, numel * 4 + numel * 1)


def test_linear_layer():
    """addmm: m*k*n MACs + 1 per output element for the bias."""
    prof = profile(nn.Linear(20, 30), torch.randn(7, 20))
    assert_counts(prof, 7 * 20 * 30, 2 * 7 * 20 * 30 + 7 * 30)
    assert prof.params == 20 * 30 + 30


# --------------------------------------------------------------------------------------------
# Parameters: tied weights counted once


class TiedLM(nn.Module):
    def __init__(self, vocab=100, dim=16, bias=False):
        super().__init__()
        self.encoder = nn.Embedding(vocab, dim)
        self.decoder = nn.Linear(dim, vocab, bias=bias)
        self.decoder.weight = self.encoder.weight  # tied: one [vocab, dim] tensor

    def forward(self, ids):
        return self.decoder(self.encoder(ids))


@pytest.mark.parametrize("bias", [False, True])
def test_tied_weights_counted_once(bias):
    model = TiedLM(bias=bias)
    assert model.decoder.weight is model.encoder.weight
    prof = profile(model, torch.randint(0, 100, (1, 5)))
    params = 100 * 16 + (100 if bias else 0)  # the shared table once (+ decoder bias)
    assert prof.params == params
    assert prof.weights_bytes == 4 * params
    assert prof.macs == 5 * 16 * 100  # the decoder matmul still runs: 8,000


# --------------------------------------------------------------------------------------------
# Tracing tiers


class ShapeBranch(nn.Module):
    """``if`` on a shape: symbolic_trace cannot evaluate a Proxy as a bool; export specialises."""

    def __init__(self):
        super().__init__()
        self.wide = nn.Linear(16, 32)
        self.narrow = nn.Linear(16, 4)

    def forward(self, x):
        if x.shape[-1] > 8:
            return self.wide(x)
        return self.narrow(x)


class RowLoop(nn.Module):
    """``range(x.size(0))``: symbolic_trace cannot turn a Proxy into an int; export unrolls."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        out = torch.zeros_like(x[0])
        for i in range(x.size(0)):
            out = out + self.lin(x[i])
        return out


def test_shape_control_flow_goes_to_the_taped_forward():
    prof = profile(ShapeBranch(), torch.randn(3, 16))
    assert prof.trace.method == "eager"
    # the branch actually taken: wide, 3 x 16 x 32
    assert_counts(prof, 3 * 16 * 32, 2 * 3 * 16 * 32 + 3 * 32)


def test_loop_over_batch_goes_to_the_taped_forward():
    prof = profile(RowLoop(), torch.randn(3, 16))
    assert prof.trace.method == "eager"
    macs = 3 * (16 * 16)  # three rows, one 16x16 matrix-vector product each
    bias = 3 * 16
    adds = 3 * 16  # out = out + ...
    assert_counts(prof, macs, 2 * macs + bias + adds)


class DataBranch(nn.Module):
    """``if`` on tensor *values*: FX cannot, and export refuses data-dependent control flow."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:
            return self.lin(x)
        return -x


def test_a_data_dependent_branch_names_the_tiers_that_failed_and_prices_the_path_taken():
    """FX and export both refuse the branch; the graph-break tier prices the path one real
    forward takes, and the profile keeps every whole-graph tier's one-line reason (export is
    tried only when asked for)."""
    model, x = DataBranch().eval(), torch.ones(2, 4)
    prof = profile_model(model, (x,), tier="dynamo")
    if why := dynamo_breaks_unavailable():  # the tape prices the path taken there, and says why
        assert prof.trace.method == "eager" and prof.trace.failures["dynamo-breaks"] == why
        pytest.skip(why)
    assert prof.trace.method == "dynamo-breaks"
    assert {"fx", "dynamo"} <= set(prof.trace.failures)
    for tier in ("fx", "dynamo"):
        reason = prof.trace.failures[tier]
        assert reason and "\n" not in reason
    # The test itself: x.sum() reads 8 elements (8 FLOPs, as every sum is priced), > 0 is one
    # comparison; then the branch taken, Linear(4, 4) on 2 rows: 2*4*4 MACs, 2*4 bias adds.
    assert_counts(prof, 2 * 4 * 4, 8 + 1 + 2 * (2 * 4 * 4) + 2 * 4)


class ScatterAdds(nn.Module):
    def forward(self, x, idx, src, where):
        y = x.index_add(0, idx, src)  # 4 rows of 3 added in: 12
        y = y.index_add(0, idx, src, alpha=2.0)  # and scaled first: 24
        return y.scatter_add(1, where, torch.ones(5, 2))  # 5 x 2 indices: 10


def test_scatter_adds_count_one_add_per_element_they_add():
    idx = torch.tensor([0, 2, 2, 4])
    where = torch.zeros(5, 2, dtype=torch.long)
    prof = profile_model(ScatterAdds(), (torch.zeros(5, 3), idx, torch.ones(4, 3), where))
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == 4 * 3 + 2 * 4 * 3 + 5 * 2


# Writes that add when asked to, and copy (0 FLOPs) otherwise. x [5, 3]; idx names 4 rows,
# values [4, 3]; where [5, 2] indexes dim 1, src [5, 2] (or [5, 3], of which scatter reads the
# 5 x 2 that where covers).
WRITES = {
    "index_put": (lambda x, idx, v, where: x.index_put((idx,), v), 0),
    # accumulate: one add per element of the values, 4 x 3 (as index_add's 12 above)
    "index_put-accumulate": (lambda x, idx, v, where: x.index_put((idx,), v, True), 4 * 3),
    "index_put_-accumulate": (
        lambda x, idx, v, where: x.clone().index_put_((idx,), v, accumulate=True),
        4 * 3,
    ),
    "_unsafe_index_put-accumulate": (
        lambda x, idx, v, where: torch.ops.aten._unsafe_index_put(x, [idx], v, True),
        4 * 3,
    ),
    "scatter": (lambda x, idx, v, where: x.scatter(1, where, torch.ones(5, 2)), 0),
    "scatter-value": (lambda x, idx, v, where: x.scatter(1, where, 2.0), 0),
    # scatter.reduce: one add (or multiply) per index, 5 x 2, into the element it lands on
    "scatter-add": (
        lambda x, idx, v, where: x.scatter(1, where, torch.ones(5, 3), reduce="add"),
        5 * 2,
    ),
    "scatter-multiply": (
        lambda x, idx, v, where: x.scatter(1, where, torch.ones(5, 2), reduce="multiply"),
        5 * 2,
    ),
    # scatter.value_reduce: the one value, once per index
    "scatter-value-multiply": (
        lambda x, idx, v, where: x.scatter(1, where, 2.0, reduce="multiply"),
        5 * 2,
    ),
    "scatter_reduce-sum": (
        lambda x, idx, v, where: x.scatter_reduce(1, where, torch.ones(5, 2), "sum"),
        5 * 2,
    ),
    "scatter_reduce-amax": (
        lambda x, idx, v, where: x.scatter_reduce(1, where, torch.ones(5, 2), "amax"),
        5 * 2,
    ),
    # mean: the 10 adds, then a divide per output element, 5 x 3
    "scatter_reduce-mean": (
        lambda x, idx, v, where: x.scatter_reduce(1, where, torch.ones(5, 2), "mean"),
        5 * 2 + 5 * 3,
    ),
}


class Write(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, idx, v, where):
        return self.fn(x, idx, v, where)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("case", sorted(WRITES))
def test_writes_count_the_adds_they_make(case, device):
    fn, flops = WRITES[case]
    inputs = (torch.zeros(5, 3), torch.tensor([0, 2, 2, 4]), torch.ones(4, 3))
    where = torch.tensor([[0, 1], [1, 1], [2, 0], [0, 0], [2, 2]])
    with torch.device(device):  # the scatters' own src tensors too
        prof = profile_model(Write(fn), tuple(t.to(device) for t in (*inputs, where)))
    assert prof.coverage.unsupported_ops == {}
    assert (prof.macs, prof.flops) == (0, flops)


class Rows(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(10, 4))

    def forward(self, idx):
        return self.w[idx]


def test_indexing_backward_adds_each_row_into_the_gradient():
    """A training step of w[idx] with 4 indices into w [10, 4]: the lookup is free, the
    default loss sums the 16 elements looked up (16, 1 per input element); backward, the
    sum's gradient is an expand (free) and index_put with accumulate adds each of the 4 rows
    of 4 into w's gradient (16)."""
    prof = profile_model(Rows(), (torch.tensor([1, 3, 3, 7]),), mode="train")
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == 16 + 16


@pytest.mark.parametrize(
    ("fold", "shape", "adds"),
    [
        # out 6, kernel 3, padding 1, stride 1: 6 blocks a dim; kernel offsets 0, 1, 2 land
        # inside 5, 6 and 5 times (offset 0 of the first block and offset 2 of the last fall
        # in the padding): 16 a dim, 16 * 16 = 256 a channel, 2 channels (18 = 2 * 9)
        (nn.Fold((6, 6), 3, padding=1), (1, 18, 36), 2 * 16 * 16),
        # out 5, kernel 3, padding 1, stride 2: (5 + 2 - 2 - 1) // 2 + 1 = 3 blocks a dim at
        # -1, 1, 3; offset 0 lands at -1, 1, 3 (2 inside), offset 1 at 0, 2, 4 (3), offset 2
        # at 1, 3, 5 (2): 7 a dim, 49 a channel; 2 images of 1 channel
        (nn.Fold((5, 5), 3, padding=1, stride=2), (2, 9, 9), 2 * 7 * 7),
        # out (5, 4), kernel 2, dilation 2, no padding: (5 - 3) + 1 = 3 and (4 - 3) + 1 = 2
        # blocks, every element lands: 2 * 3 and 2 * 2 a dim, 24 a channel, 3 channels
        (nn.Fold((5, 4), 2, dilation=2), (1, 12, 6), 3 * (2 * 3) * (2 * 2)),
    ],
    ids=["padded", "strided", "dilated"],
)
def test_fold_adds_each_column_element_that_lands_in_the_image(fold, shape, adds):
    """nn.Fold (col2im) adds the columns into the image; nn.Unfold (im2col) only copies."""
    prof = profile(fold, torch.randn(shape))
    assert prof.coverage.unsupported_ops == {}
    assert (prof.macs, prof.flops) == (0, adds)
    assert profile(nn.Unfold(3, padding=1), torch.randn(1, 2, 6, 6)).flops == 0


@pytest.mark.parametrize(
    ("fn", "shape", "flops"),
    [
        # max(1, ceil(log2 k)) per input element: k = 1 still compares each element once
        (lambda x: torch.topk(x, 1).values, (4, 6), 4 * 6 * 1),
        (lambda x: torch.topk(x, 5).values, (4, 6), 4 * 6 * 3),  # ceil(log2 5) = 3
        # max(1, ceil(log2 n)) per element, n the sorted length: n = 1 still costs 1
        (lambda x: torch.sort(x, dim=1).values, (4, 1), 4 * 1 * 1),
        (lambda x: torch.sort(x, dim=1).values, (4, 6), 4 * 6 * 3),  # ceil(log2 6) = 3
        # a selection compares each element once, as topk's one pass: were unpriced
        (lambda x: torch.kthvalue(x, 2, dim=1).values, (4, 6), 4 * 6),
        (lambda x: torch.median(x, dim=0).values, (4, 6), 4 * 6),
        (lambda x: x.median(), (4, 6), 4 * 6),
        (lambda x: x.nanmedian(), (4, 6), 4 * 6),
    ],
    ids=["topk-k1", "topk-k5", "sort-n1", "sort-n6", "kthvalue", "median-dim", "median", "nan"],
)
def test_sort_and_topk_count_at_least_one_comparison_an_element(fn, shape, flops):
    class Sorted(nn.Module):
        def forward(self, x):
            return fn(x)

    prof = profile(Sorted(), torch.randn(shape))
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == flops


def test_the_other_sorts_log2_is_at_least_one_too():
    """nms, unique and searchsorted take the same max(1, ceil(log2 n)) as sort."""
    from pytest_graphbudget.costs import Shape, price

    one = Shape((1,))
    # one box: 3 (its area) + 1 * 1 (the sort) + no pair
    assert price("torchvision.nms", (Shape((1, 4)), one, 0.5), {}, one).other == 3 + 1
    # one element: 1 * 1 (the sort) + 1 (the neighbour comparison)
    assert price("_unique2", (one,), {}, (one, one, one)).other == 1 + 1
    # 5 queries into a sorted length of 1: 1 each
    assert price("searchsorted", (one, Shape((5,))), {}, Shape((5,))).other == 5


@pytest.mark.parametrize(
    ("rows", "p", "macs", "flops"),
    [
        # 2 batches of 40 x 30 pairs over 8 features, through _euclidean_dist (over 25 rows):
        # MACs 2*40*30*(8+2) = 24000; besides, the norms 2*8*(40+30) = 1120 and the -2 scale
        # 40*8 = 320 per batch, and a clamp and a root per pair 2*1200 = 2400 per batch
        ((40, 30), 2.0, 24000, 2 * 24000 + 2 * (1120 + 320 + 2400)),
        # 10 x 20 pairs through _cdist_forward (25 rows or fewer on both sides): per batch 200
        # pairs, a difference and a MAC per feature, a root per pair
        ((10, 20), 2.0, 2 * 200 * 8, 2 * 2 * 200 * 8 + 2 * (200 * 8 + 200)),
        # p=1 (always the direct kernel): a difference, an abs and an add per feature, no root
        ((10, 20), 1.0, 0, 2 * 3 * 200 * 8),
    ],
)
def test_cdist_counts_its_pairs(rows, p, macs, flops):
    class Dist(nn.Module):
        def forward(self, a, b):
            return torch.cdist(a, b, p=p)

    prof = profile_model(Dist(), (torch.rand(2, rows[0], 8), torch.rand(2, rows[1], 8)))
    assert prof.coverage.unsupported_ops == {}
    assert (prof.macs, prof.flops) == (macs, flops)


def test_weight_norm_parametrization_is_priced():
    """``parametrizations.weight_norm`` (audio models' convolutions) runs one
    ``_weight_norm_interface`` kernel, which was unsupported. Linear(16, 8) at batch 4: the
    product 4 x 16 x 8 MACs and 4 x 8 bias adds; the weight w = g * v / ||v||: a square and an
    add per element of v (128), a square root and a divide per row norm (8), a multiply per
    element of v."""
    from torch.nn.utils import parametrizations

    prof = profile_model(parametrizations.weight_norm(nn.Linear(16, 8)), (torch.randn(4, 16),))
    assert prof.coverage.unsupported_ops == {}
    assert prof.macs == 4 * 16 * 8
    assert prof.flops == 2 * 4 * 16 * 8 + 4 * 8 + (2 * 128 + 2 * 8 + 128)


def test_weight_norm_backward_is_priced():
    """User trial: a training budget of a model with ``parametrizations.weight_norm`` (vocoders,
    wav2vec2's positional conv) failed: ``_weight_norm_interface_backward`` had no formula and
    may hide a contraction. Linear(16, 8), v 8 x 16, g 8 x 1: per row a = sum(grad_w * v)
    (2 per element of v), grad_g = a / norm, and g / norm, norm^2, a / norm^2 (4 per row),
    grad_v = (g / norm) * (grad_w - v * a / norm^2) (3 per element): 5 * 128 + 4 * 8."""
    from torch.nn.utils import parametrizations

    model = parametrizations.weight_norm(nn.Linear(16, 8))
    plain = nn.Linear(16, 8)
    x = torch.randn(4, 16)
    prof = profile_model(model, (x,), mode="train")
    assert prof.coverage.unsupported_ops == {}
    # the plain Linear's step, the weight's forward kernel, and its backward kernel
    extra = (2 * 128 + 2 * 8 + 128) + (5 * 128 + 4 * 8)
    assert prof.flops == profile_model(plain, (x,), mode="train").flops + extra


class Grouped(nn.Module):
    """``torch._grouped_mm``: rows of x split by ``offs`` among 3 expert matrices."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 16, 8))

    def forward(self, x, offs):
        return torch._grouped_mm(x, self.w, offs=offs)


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="torch without _grouped_mm")
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_grouped_mm_counts_each_row_against_its_expert(device):
    """12 rows of 16 features, each meeting its group's (16, 8): 12 x 16 x 8 MACs. On the
    meta device its kernel refuses float32 (bfloat16 only), which the CPU runs."""
    x, offs = torch.randn(12, 16), torch.tensor([4, 9, 12], dtype=torch.int32)
    model = Grouped().to(device)
    prof = profile_model(model, (x.to(device), offs.to(device)))
    assert prof.coverage.unsupported_ops == {}
    assert prof.macs == 12 * 16 * 8


def tiny_mixtral(transformers):
    """A Mixtral of 2 layers, hidden 64, 4 experts of 128 (top 2), vocabulary 128."""
    config = transformers.MixtralConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        vocab_size=128,
        max_position_embeddings=128,
    )
    return transformers.MixtralForCausalLM(config).eval()


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_mixtral_experts_count_every_routed_token(device):
    """transformers 5 runs a mixture of experts through ``_grouped_mm``, which had no formula:
    a tiny Mixtral counted 30% of its MACs. By hand, 64 tokens, hidden 64, 4 heads of 16, 2
    key-value heads, 4 experts of 128, top 2, vocabulary 128, per layer: q and o 64 x 64 x 64
    each, k and v 64 x 64 x 32 each, scores and values 4 x 64 x 64 x 16 each, the router
    64 x 64 x 4, the experts 64 x 2 x (64 x 256 + 128 x 64); then the head 64 x 64 x 128.
    transformers 4 routes each expert's tokens by value (``torch.where`` of its mask), which a
    model on the meta device cannot: refused, saying so; and it takes the rotary frequencies
    as a matmul, half the head dim by the 64 positions, where 5 broadcasts a product."""
    transformers = pytest.importorskip("transformers")
    older = transformers_major() < 5
    with torch.device(device):
        model = tiny_mixtral(transformers)
    ids = torch.randint(0, 128, (1, 64))
    if older and device == "meta":
        with pytest.raises(ModelRunError, match=r"build it with real weights \(meta=False\)"):
            profile_model(model, (ids,))
        return
    prof = profile_model(model, (ids,))
    assert not prof.coverage.unsupported_contractions
    attention = 2 * 64 * 64 * 64 + 2 * 64 * 64 * 32 + 2 * 4 * 64 * 64 * 16
    layer = attention + 64 * 64 * 4 + 64 * 2 * (64 * 256 + 128 * 64)
    rotary = 8 * 64 if older else 0
    assert prof.macs == 2 * layer + 64 * 64 * 128 + rotary


def test_mixtral_experts_through_transformers_fallback_count_every_routed_token():
    """Under export, float32 experts take transformers' ``grouped_mm_fallback`` (one ``mm``
    per expert in a custom op; so does every forward on a torch before 2.9 on the CPU): it
    had no formula, and the exported Mixtral counted a third of its MACs. The same hand
    count as above."""
    transformers = pytest.importorskip("transformers")
    if transformers_major() < 5:
        pytest.skip("transformers 4 loops its experts in Python: no fallback op")
    ids = torch.randint(0, 128, (1, 64))
    prof = profile_model(tiny_mixtral(transformers), (ids,), tier="dynamo")
    assert prof.coverage.unsupported_ops == {}
    assert any(n.target.startswith("grouped_mm_fallback") for n in prof.node_info)
    attention = 2 * 64 * 64 * 64 + 2 * 64 * 64 * 32 + 2 * 4 * 64 * 64 * 16
    layer = attention + 64 * 64 * 4 + 64 * 2 * (64 * 256 + 128 * 64)
    assert prof.macs == 2 * layer + 64 * 64 * 128


class GroupedFallback(nn.Module):
    """Three experts' (16, 24) products over 10 rows sorted by expert (4, 0 and 6 rows)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 16, 24))
        self.register_buffer("offs", torch.tensor([4, 4, 10]))

    def forward(self, x):
        return torch.ops.transformers.grouped_mm_fallback(x, self.weight, self.offs)


def test_transformers_grouped_mm_fallback_and_its_backward_by_hand():
    """Forward: each of the 10 rows through its expert's 16 x 24, 10 x 16 x 24 MACs. Its
    backward op computes both gradients: the input's 10 x 24 x 16 and the weight's, each
    expert's rows' outer products, 10 x 16 x 24 in all."""
    pytest.importorskip("transformers.integrations.moe", reason="transformers 5's op")
    x = torch.randn(10, 16)
    eval_prof = profile_model(GroupedFallback(), (x,))
    assert eval_prof.macs == 10 * 16 * 24
    assert eval_prof.coverage.unsupported_ops == {}
    train = profile_model(GroupedFallback(), (x,), mode="train", optimizer=None)
    assert train.coverage.unsupported_ops == {}
    assert train.macs == 10 * 16 * 24 + 2 * 10 * 16 * 24


class Annotated(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        with torch.profiler.record_function("block"):
            return self.fc(x)


@pytest.mark.parametrize(
    "model", [Annotated(), nn.DataParallel(nn.Linear(8, 4))], ids=["record_function", "dp"]
)
def test_a_profilers_annotations_are_no_unpriced_ops(model):
    """User trial: ``record_function`` (and ``nn.DataParallel``, which opens one) listed
    ``profiler._record_function_enter_new`` and ``_exit`` as ops without a cost formula: a
    warning, an error under --graph-budget-strict, for calls that compute nothing. The linear:
    2*2*8*4 + 2*4 = 136 FLOPs."""
    prof = profile(model, torch.randn(2, 8))
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == 136


class TwoInputs(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, a, b):
        return self.layer(a, b)


def test_a_bilinear_layer_is_priced_as_aten_runs_it():
    """``nn.Bilinear(5, 6, 3)`` on (4, 5) and (4, 6) was an op without a formula (0 MACs, a
    contraction flagged). ATen's ``_trilinear`` runs it one output feature at a time: x1 @
    W[o] over I (N*I*J MACs), that times x2 summed over J (N*J), added into the output (N):
    MACs 3 * (4*5*6 + 4*6) = 432 = N*O*J*(I+1); FLOPs 2*432 + 12 (adds) + 12 (bias) = 888."""
    prof = profile(TwoInputs(nn.Bilinear(5, 6, 3)), torch.randn(4, 5), torch.randn(4, 6))
    assert prof.coverage.unsupported_ops == {}
    assert (prof.macs, prof.flops, prof.params) == (432, 888, 3 * 5 * 6 + 3)


def test_a_complex_models_conjugates_are_free_and_angle_and_cummax_priced():
    """User trial: ``z.conj()`` (a bit flipped on a view, no kernel) was an unsupported
    contraction, failing every complex model's budget (a training step conjugates too), and
    ``conj_physical``, ``angle`` and ``cummax`` had no formula. By hand, on 4 x 16 complex:
    the product 4 * 16 * 16 = 1,024 complex MACs; ``angle`` one atan2 per element (64),
    ``conj_physical`` one negation each (64), ``cummax`` one compare each (64), two adds (128)."""
    import torch
    from torch import nn

    from pytest_graphbudget import profile_model

    class Product(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(16, 16, dtype=torch.cfloat))

        def forward(self, z):
            return z.conj() @ self.w

    class Pointwise(nn.Module):
        def forward(self, z):
            return torch.angle(z) + z.conj_physical().real + torch.cummax(z.real, 1)[0]

    z = torch.randn(4, 16, dtype=torch.cfloat)
    product = profile_model(Product(), (z,))
    assert product.macs == 4 * 16 * 16 and product.coverage.unsupported_ops == {}
    pointwise = profile_model(Pointwise(), (z,))
    assert pointwise.coverage.unsupported_ops == {}
    assert pointwise.flops == 64 + 64 + 64 + 2 * 64


# --------------------------------------------------------------------------------------------
# Resampling


class Resize(nn.Module):
    def __init__(self, size, mode, antialias):
        super().__init__()
        self.size, self.mode, self.antialias = size, mode, antialias

    def forward(self, x):
        return F.interpolate(x, size=self.size, mode=self.mode, antialias=self.antialias)


@pytest.mark.parametrize(
    ("size", "mode", "flops"),
    [
        # 3 planes of 32 x 32 down to 8 x 8: a factor of 4 widens bilinear's 2 taps to 8; the
        # width pass writes 32 x 8 at 2 FLOPs a tap, the height pass 8 x 8
        ((8, 8), "bilinear", 3 * (2 * 8 * 32 * 8 + 2 * 8 * 8 * 8)),
        # bicubic's 4 taps, 16 at a factor of 4
        ((8, 8), "bicubic", 3 * (2 * 16 * 32 * 8 + 2 * 16 * 8 * 8)),
        # up to 64 x 64: the taps stay 2 (nothing skipped to average)
        ((64, 64), "bilinear", 3 * (2 * 2 * 32 * 64 + 2 * 2 * 64 * 64)),
        # only the width resized, by 2: one pass of 4 taps
        ((32, 16), "bilinear", 3 * 2 * 4 * 32 * 16),
    ],
)
def test_antialiased_interpolate_sums_the_taps_of_each_pass(size, mode, flops):
    """User trial: ``antialias=True`` had been priced as plain interpolation (9 FLOPs an output
    element for bilinear), 9x under at a factor of 4, where the filter averages what it skips.
    Plain bilinear stays 3 lerps of 3 FLOPs an output element."""
    x = torch.randn(1, 3, 32, 32)
    assert_counts(profile(Resize(size, mode, True), x), 0, flops)
    assert_counts(profile(Resize((8, 8), "bilinear", False), x), 0, 3 * 8 * 8 * 9)


# --------------------------------------------------------------------------------------------
# Data movement, a diagonal summed, scans


@pytest.mark.parametrize(
    "fn",
    [
        torch.diag,  # of a 2-D input: diagonal_copy
        torch.diag_embed,
        torch.rot90,  # k=1: a flip and a transpose
        lambda x: torch.rot90(x, 2),
        lambda x: torch.take(x, torch.tensor([0, 3])),
        lambda x: x.narrow_copy(0, 0, 2),
        lambda x: torch.block_diag(x, x),
    ],
    ids=["diag", "diag_embed", "rot90", "rot90-k2", "take", "narrow_copy", "block_diag"],
)
def test_data_movement_costs_zero_and_is_supported(fn):
    """User trial: these copies were unsupported contractions, failing a budget; data movement
    is costed at zero."""
    assert_counts(profile(Unary(fn), torch.randn(4, 8)), 0, 0)


@pytest.mark.parametrize(("shape", "flops"), [((4, 6), 4), ((5, 3), 3)])
def test_trace_sums_the_diagonal(shape, flops):
    """trace: its min(rows, cols) diagonal elements summed, 1 per element as sum."""
    assert_counts(profile(Unary(torch.trace), torch.randn(shape)), 0, flops)


def test_linalg_error_check_is_free():
    """linalg.solve runs _linalg_solve_ex, then _linalg_check_errors on its info: a check,
    free. The solve is the LU of a 4 x 4 matrix, 2 x 64 / 3, and two triangular solves of 2 x 16
    for each of 2 right-hand sides (tests/costs/test_linalg.py)."""
    prof = profile(Fn(torch.linalg.solve), torch.randn(4, 4) + 4 * torch.eye(4), torch.randn(4, 2))
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == round(2 * 64 / 3 + 2 * 16 * 2)


@pytest.mark.parametrize(
    ("fn", "flops"),
    [
        # a multiply per element of the (4, 16) output
        (lambda x: torch.cumprod(x, 1), 1 * 64),
        # max + log1p(exp(min - max)) of the running total and the next element: min, max,
        # subtract, exp, log1p, add, 1 each as the pointwise table prices them
        (lambda x: torch.logcumsumexp(x, 1), 6 * 64),
    ],
    ids=["cumprod", "logcumsumexp"],
)
def test_scans_count_their_per_element_work(fn, flops):
    assert_counts(profile(Unary(fn), torch.randn(4, 16)), 0, flops)
