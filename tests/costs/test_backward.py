"""Backward ops of a training step (``costs/backward.py``), counted by hand from the backward
table of docs/metrics.md; each had no formula, so a training budget failed on it as an
unsupported contraction.

Every step is ``op(x + w)`` with ``w`` a zero weight of the input's shape, and the default
loss, the sum of the output. The forward holds the add, the op and the sum; the backward
holds the op's backward alone (the sum's is an expand and the add's passes the gradient on,
both free), so ``backward_flops`` is the op's backward formula. Shapes are tiny: each step
takes milliseconds.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402

X1D, X2D, X3D = (1, 2, 4), (1, 2, 4, 4), (1, 2, 3, 3, 3)  # 8, 32 and 54 elements


class Shifted(nn.Module):
    """``fn(x + w)``: a weight before the op, so that the step takes the op's backward."""

    def __init__(self, fn, shape):
        super().__init__()
        self.fn = fn
        self.w = nn.Parameter(torch.zeros(shape))

    def forward(self, x):
        return self.fn(x + self.w)


def backward(fn, shape, *, macs=0):
    """The step's backward FLOPs, once its backward MACs and coverage are checked."""
    torch.manual_seed(0)
    prof = profile_model(Shifted(fn, shape), (torch.randn(shape),), mode="train")
    totals = prof.to_dict()["totals"]
    assert prof.coverage.unsupported_ops == {}
    assert totals["backward_macs"] == macs
    return totals["backward_flops"]


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize(
    ("shape", "grad"),
    [
        (X1D, 1 * 2 * 6),  # padded by 1 a side: (1, 2, 6)
        (X2D, 1 * 2 * 6 * 6),
        (X3D, 1 * 2 * 5 * 5 * 5),
    ],
    ids=["1d", "2d", "3d"],
)
def test_pad_backward_adds_each_gradient_into_its_source(mode, shape, grad):
    """reflection_padNd_backward, replication_padNd_backward: 1 per output-gradient element."""
    pad = (1, 1) * (len(shape) - 2)
    assert backward(lambda t: F.pad(t, pad, mode=mode), shape) == grad


@pytest.mark.parametrize(
    ("mode", "shape", "flops"),
    [
        # upsample_linear1d_backward: 2 taps, 2 FLOPs a tap, per element of the (1, 2, 8)
        # gradient
        ("linear", X1D, 2 * 2 * (1 * 2 * 8)),
        # upsample_bilinear2d_backward: 4 taps, (1, 2, 8, 8)
        ("bilinear", X2D, 2 * 4 * (1 * 2 * 8 * 8)),
        # upsample_trilinear3d_backward: 8 taps, (1, 2, 6, 6, 6)
        ("trilinear", X3D, 2 * 8 * (1 * 2 * 6 * 6 * 6)),
        # upsample_bicubic2d_backward: 16 taps (4 x 4), (1, 2, 8, 8)
        ("bicubic", X2D, 2 * 16 * (1 * 2 * 8 * 8)),
        # _upsample_nearest_exactNd_backward: an add per gradient element, as nearest
        ("nearest-exact", X1D, 1 * 2 * 8),
        ("nearest-exact", X2D, 1 * 2 * 8 * 8),
        ("nearest-exact", X3D, 1 * 2 * 6 * 6 * 6),
    ],
    ids=["linear", "bilinear", "trilinear", "bicubic", "exact1d", "exact2d", "exact3d"],
)
def test_upsample_backward_weights_each_gradient_into_its_taps(mode, shape, flops):
    assert backward(lambda t: F.interpolate(t, scale_factor=2, mode=mode), shape) == flops


@pytest.mark.parametrize(
    ("mode", "taps"),
    [
        # 4x4 -> 3x2: taps a side ceil(t * max(in / out, 1)): height ceil(2 * 4/3) = 3 and
        # width ceil(2 * 4/2) = 4 bilinear; ceil(4 * 4/3) = 6 and ceil(4 * 2) = 8 bicubic
        ("bilinear", 3 * 4),
        ("bicubic", 6 * 8),
    ],
)
def test_antialiased_backward_weights_each_gradient_into_its_window(mode, taps):
    """_upsample_bilinear2d_aa_backward, _upsample_bicubic2d_aa_backward: each of the 1 x 2 x
    3 x 2 = 12 output gradients into its whole 2-d window, 2 FLOPs a tap."""
    flops = backward(lambda t: F.interpolate(t, size=(3, 2), mode=mode, antialias=True), X2D)
    assert flops == 2 * taps * 12


@pytest.mark.parametrize(
    ("fn", "shape", "grad"),
    [
        (lambda t: F.adaptive_max_pool1d(t, 2), X1D, 1 * 2 * 2),  # the 2-d kernel's backward
        (lambda t: F.adaptive_max_pool2d(t, 2), X2D, 1 * 2 * 2 * 2),
        (lambda t: F.adaptive_max_pool3d(t, 2), X3D, 1 * 2 * 2 * 2 * 2),
    ],
    ids=["1d", "2d", "3d"],
)
def test_adaptive_max_pool_backward_adds_each_gradient_to_its_winner(fn, shape, grad):
    assert backward(fn, shape) == grad


@pytest.mark.parametrize(
    ("grid", "flops"),
    [
        # grid (1, 3, 3, 2): a (1, 2, 3, 3) output of 18 elements. Per element: the input's
        # gradient 2 x 4 corners = 8, each of the 2 coordinates' 2 differences + 2 weights +
        # 1 sum + * dy + over channels = 7; then the 18 grid elements scaled once
        ((1, 3, 3, 2), (8 + 2 * 7) * 18 + 18),
        # grid (1, 2, 2, 2, 3): a (1, 2, 2, 2, 2) output of 16. The input's gradient 2 x 8
        # corners = 16; each of 3 coordinates: 4 differences + 4 weights + 3 adds + 2 = 13;
        # the 24 grid elements scaled once
        ((1, 2, 2, 2, 3), (16 + 3 * 13) * 16 + 24),
    ],
    ids=["2d", "3d"],
)
def test_grid_sampler_backward_prices_both_gradients(grid, flops):
    shape = X2D if len(grid) == 4 else X3D
    samples = torch.zeros(grid)
    assert backward(lambda t: F.grid_sample(t, samples, align_corners=False), shape) == flops


@pytest.mark.parametrize(
    ("fn", "flops"),
    [
        # glu_backward, per element of the (1, 1, 4, 4) output's gradient: sigmoid 4, its
        # half's gradient 1, the other half's (1 - s) * s * a * dy 4
        (lambda t: F.glu(t, 1), 9 * 16),
        # hardshrink_backward, softshrink_backward: a select per element
        (F.hardshrink, 1 * 32),
        (F.softshrink, 1 * 32),
    ],
    ids=["glu", "hardshrink", "softshrink"],
)
def test_pointwise_backward_ops(fn, flops):
    assert backward(fn, X2D) == flops


@pytest.mark.parametrize(
    ("fn", "flops"),
    [
        # logit_backward: dy / (x (1 - x)), subtract, multiply, divide
        (torch.logit, 3 * 32),
        # with eps, 0 outside [eps, 1 - eps]: two comparisons and a select more
        (lambda t: torch.logit(t, eps=1e-6), 6 * 32),
        # _segment_reduce_backward: each element its segment's gradient
        (lambda t: torch.segment_reduce(t.reshape(-1), "sum", lengths=torch.tensor([9, 23])), 32),
    ],
    ids=["logit", "logit_eps", "segment_reduce"],
)
def test_pointwise_backward_ops_that_had_no_formula(fn, flops):
    assert backward(fn, X2D) == flops


def test_pdist_backward_prices_cdists_kernel_and_the_second_row():
    """_pdist_backward over 5 rows of 3 (10 pairs, 30 pair-features), p=2: a difference, a
    MAC and a divide, and the subtract from the pair's second row."""
    assert backward(F.pdist, (5, 3), macs=30) == 2 * 30 + 3 * 30


def test_affine_grid_backward_is_the_forwards_bmm_transposed():
    """affine_grid_generator_backward decomposes: the base grid made again (linspace of 5 and
    of 4, each scaled by a multiply and a divide: 18), then theta's (2, 2, 3) gradient, a bmm
    from the (2, 4, 5, 2) grid's, 80 coordinates x 3 MACs."""
    fn = lambda t: F.affine_grid(t, [2, 1, 4, 5], align_corners=False)  # noqa: E731
    assert backward(fn, (2, 2, 3), macs=240) == 2 * 240 + 2 * (5 + 4)


def test_prelu_backward():
    """_prelu_kernel_backward: 2 per element (the input's gradient as leaky_relu's, the
    weight's x * dy); then autograd sums the weight's 32 gradients into its one slope (1 per
    input element)."""
    assert backward(nn.PReLU(), X2D) == 2 * 32 + 32


def test_rrelu_in_training_draws_its_slopes_and_is_priced():
    """F.rrelu(training=True) runs rrelu_with_noise in training: forward a comparison and a
    multiply per element (2); its backward rrelu_with_noise_backward, dy * noise (1)."""
    torch.manual_seed(0)
    model = Shifted(lambda t: F.rrelu(t, training=True), X2D)
    prof = profile_model(model, (torch.randn(X2D),), mode="train")
    totals = prof.to_dict()["totals"]
    assert prof.coverage.unsupported_ops == {}
    # the add 32, rrelu_with_noise 2 x 32, the loss's sum 32
    assert totals["forward_flops"] == 32 + 2 * 32 + 32
    assert totals["backward_flops"] == 1 * 32


def test_rrelu_in_eval_is_a_leaky_relu():
    """F.rrelu(training=False) runs rrelu_with_noise too, as leaky_relu with the mean slope: 1
    per element (it was unsupported in eval as well)."""
    prof = profile_model(Shifted(lambda t: F.rrelu(t), X2D).eval(), (torch.randn(X2D),))
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == 32 + 1 * 32  # the add, then rrelu


class Dist(nn.Module):
    """cdist(x1 + w1, x2 + w2): both operands need a gradient, so the step runs
    _cdist_backward twice, once per operand (the second on the transposed gradient)."""

    def __init__(self, p):
        super().__init__()
        self.p = p
        self.w1 = nn.Parameter(torch.zeros(2, 5, 3))
        self.w2 = nn.Parameter(torch.zeros(2, 4, 3))

    def forward(self, x1, x2):
        return torch.cdist(x1 + self.w1, x2 + self.w2, p=self.p)


@pytest.mark.parametrize(
    ("p", "macs", "other"),
    [
        # 2 batches of 5 x 4 pairs over 3 features: 120 pair-features a call, two calls.
        # p=2: a difference, then grad * diff / dist added in: a MAC and a divide
        (2.0, 2 * 120, 2 * 2 * 120),
        # p=1: a difference, grad * sign(diff) (2), the add: 4
        (1.0, 0, 2 * 4 * 120),
        # p=3: a difference, diff * |diff|^(p-2) * grad / dist^(p-1) (6), the add: 8
        (3.0, 0, 2 * 8 * 120),
        # 0 < p < 2: sign(diff) * |diff|^(p-1) * grad / dist^(p-1) (7): 9
        (1.5, 0, 2 * 9 * 120),
        # inf: grad * sign(diff) * (1 - min(1, ceil(|(|diff| - dist)|))) (9): 11
        (float("inf"), 0, 2 * 11 * 120),
        # p=0: the gradient is zero; the kernel only fills it
        (0.0, 0, 0),
    ],
    ids=["p2", "p1", "p3", "p1.5", "inf", "p0"],
)
def test_cdist_backward_prices_the_direct_kernel(p, macs, other):
    """cdist of 5 and 4 rows (25 or fewer: the direct kernel, _cdist_forward)."""
    torch.manual_seed(0)
    prof = profile_model(Dist(p), (torch.randn(2, 5, 3), torch.randn(2, 4, 3)), mode="train")
    totals = prof.to_dict()["totals"]
    assert prof.coverage.unsupported_ops == {}
    assert (totals["backward_macs"], totals["backward_flops"]) == (macs, 2 * macs + other)


def test_take_backward_adds_with_put():
    """torch.take's backward puts the gradient back with accumulate: put, 1 add per element
    taken (3)."""
    index = torch.tensor([0, 3, 5])
    assert backward(lambda t: torch.take(t, index), (3, 4)) == 3


def _differentiable(fn) -> bool:
    """Whether torch's autograd has a derivative for ``fn`` (``narrow_copy``'s came after 2.4)."""
    try:
        fn(torch.ones(3, 4, requires_grad=True)).sum().backward()
    except RuntimeError:
        return False
    return True


def _narrow_copy(t):
    return t.narrow_copy(0, 0, 2)


@pytest.mark.parametrize(
    "fn",
    [
        torch.diag,  # diagonal_copy
        torch.diag_embed,
        torch.rot90,  # rot90, and rot90 the other way for its gradient
        pytest.param(
            _narrow_copy,
            marks=pytest.mark.skipif(
                not _differentiable(_narrow_copy), reason="no derivative for narrow_copy here"
            ),
        ),
        lambda t: torch.block_diag(t, t),
        lambda t: t.masked_scatter(t > 0, t),  # masked_scatter_backward (a VLM's merge)
    ],
    ids=["diag", "diag_embed", "rot90", "narrow_copy", "block_diag", "masked_scatter"],
)
def test_data_movement_trains_without_unsupported_ops(fn):
    torch.manual_seed(0)
    prof = profile_model(Shifted(fn, (3, 4)), (torch.randn(3, 4),), mode="train")
    assert prof.coverage.unsupported_ops == {}


class Pooled(nn.Module):
    """A 1x1 convolution to 8 channels, then RoI Align or RoI Pool of three boxes into 2 x 2
    bins: the box head of an R-CNN, whose step had left ``_roi_align_backward`` unpriced.
    Position-sensitive pooling reads each bin from its own channel of a group of 4."""

    def __init__(self, op: str) -> None:
        super().__init__()
        self.conv, self.op = nn.Conv2d(2, 8, 1, bias=False), op

    def forward(self, x):
        import torchvision.ops

        boxes = torch.tensor([[0, 0.0, 0.0, 4.0, 4.0], [0, 1.0, 1.0, 6.0, 6.0], [0, 2, 2, 7, 7]])
        pool = getattr(torchvision.ops, self.op)
        if "align" in self.op:
            return pool(self.conv(x), boxes, (2, 2), 1.0, sampling_ratio=2)
        return pool(self.conv(x), boxes, (2, 2), 1.0)


ALIGN = 3 * 8 * 2 * 2 * (2 * 2 * (7 + 1) + 1)  # bins x (2 x 2 bilinear reads and adds, 1 divide)
PS_ALIGN = ALIGN // 4  # 2 output channels, a quarter of the bins, each read alike


@pytest.mark.parametrize(
    ("op", "forward", "backward"),
    [
        # 3 boxes x 8 channels x 2 x 2 bins = 96 bins; each averages 2 x 2 samples, a bilinear
        # read (4 multiplies, 3 adds) and an add each, then one divide: 96 x 33 both ways
        ("roi_align", ALIGN, ALIGN),
        # each bin's max over its share of the 8 x 8 x 8 map, 3 x 512 / 4, and one add per bin;
        # backward: one add per bin into the element its max came from
        ("roi_pool", 3 * 512 // 4 + 96, 96),
        # 96 / 4 = 24 bins; 24 x 33 both ways
        ("ps_roi_align", PS_ALIGN, PS_ALIGN),
        # an average: the forward's adds over the bins' share, and one divide per bin; the
        # backward divides once per bin and adds into every element the bin covers
        ("ps_roi_pool", 3 * 512 // 4 + 24, 3 * 512 // 4 + 24),
    ],
)
def test_roi_pooling_backward_is_priced(op, forward, backward):
    pytest.importorskip("torchvision")
    step = profile_model(Pooled(op), torch.randn(1, 2, 8, 8), mode="train")
    assert step.coverage.unsupported_ops == {}
    conv = 8 * 2 * 8 * 8 * 2  # 1,024 MACs: the forward, and the weight's gradient
    bins = 24 if op.startswith("ps_") else 96
    assert step.phases["forward"]["flops"] == conv + forward + bins  # and the loss's sum
    assert step.phases["backward"]["flops"] == backward + conv
