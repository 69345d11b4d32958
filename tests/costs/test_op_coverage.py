"""Ops real models run that had no formula, each a coverage failure or warning in the gate
(``aten.logit x1 has no cost formula and may hide a contraction``): HF ``generate``'s
``isin`` and ``multinomial``, a router's ``bincount``, SegNet's ``max_unpool2d``, a spatial
transformer's ``affine_grid``, RoPE's ``polar``, ``nn.Embedding(max_norm=...)``'s renorm, and
the special functions of distributions and losses. Every count is derived by hand from the
conventions of docs/metrics.md (a transcendental or special function is 1 per element, a
composite counts the operations of its formula)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402

sp = torch.special
N = 4 * 8  # elements of the (4, 8) input


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def flops(fn, x=None):
    """The FLOPs of ``fn(x)`` in eval, once every op it ran is known to have a formula."""
    torch.manual_seed(0)
    x = torch.rand(4, 8) + 0.5 if x is None else x  # in every function's domain
    prof = profile_model(Fn(fn).eval(), (x,))
    assert prof.coverage.unsupported_ops == {}
    return prof.flops


ONE = {  # 1 per element: a special function is one evaluation, as exp or erf
    "i0": torch.i0,
    "lgamma": torch.lgamma,
    "digamma": torch.digamma,
    "polygamma": lambda t: torch.polygamma(1, t),
    "igamma": lambda t: torch.igamma(t, t),
    "igammac": lambda t: torch.igammac(t, t),
    "erfcx": sp.erfcx,
    "ndtri": lambda t: sp.ndtri(t - 0.5),
    "log_ndtr": sp.log_ndtr,
    "i0e": sp.i0e,
    "i1": sp.i1,
    "i1e": sp.i1e,
    "zeta": lambda t: sp.zeta(t + 1, t),
    "bessel_j0": sp.bessel_j0,
    "modified_bessel_k1": sp.modified_bessel_k1,
    "chebyshev_t": lambda t: sp.chebyshev_polynomial_t(t, 3),
    "copysign": lambda t: torch.copysign(t, -t),
    "nextafter": lambda t: torch.nextafter(t, t),
    "frexp": lambda t: torch.frexp(t).mantissa,
    "deg2rad": torch.deg2rad,
    "rad2deg": torch.rad2deg,
}


@pytest.mark.parametrize("name", ONE)
def test_one_flop_an_element(name):
    extra = N if name in ("copysign", "ndtri", "zeta") else 0  # -t, t - 0.5, t + 1
    assert flops(ONE[name]) == N + extra


@pytest.mark.parametrize(
    ("fn", "per_element"),
    [
        (torch.logit, 3),  # log(x / (1 - x)): subtract, divide, log
        (lambda t: torch.logit(t, eps=1e-6), 4),  # and the clamp to [eps, 1 - eps]
        (lambda t: torch.logaddexp(t, t), 6),  # max, subtract, abs, exp, log1p, add
        (lambda t: torch.logaddexp2(t, t), 7),  # the same with exp2, and a divide by ln 2
        (lambda t: torch.hypot(t, t), 4),  # sqrt(x^2 + y^2)
        (torch.sinc, 3),  # sin(pi x) / (pi x)
        (lambda t: torch.ldexp(t, t), 2),  # x * 2^e
        (lambda t: sp.xlog1py(t, t), 2),  # x * log1p(y)
        (sp.entr, 3),  # -x log x
        (lambda t: torch.mvlgamma(t + 1, 2), 1 + 3 * 2),  # the add, then p = 2 shifted lgammas
        (lambda t: torch.view_as_real(torch.polar(t, t)), 4),  # abs * cos, abs * sin
        (lambda t: torch.view_as_real(torch.complex(t, t)), 0),  # a copy, interleaved
        (lambda t: torch.renorm(t, 2, 0, 1.0), 3),  # square, add into the norm, rescale
        (lambda t: torch.heaviside(t - 1, t), 1 + 1),  # the subtract, a select
        (lambda t: torch.isposinf(t).float(), 1 + 0),  # a compare, then a cast (free)
        (lambda t: torch.signbit(t).float(), 1 + 0),
        (lambda t: torch.empty_like(t).exponential_() * t, 1),  # the draw is free, as uniform
        (lambda t: torch.empty_like(t).random_(0, 5) * t, 1),  # integers drawn: free likewise
        (lambda t: torch.empty_permuted((4, 8), (1, 0)).copy_(t) * t, 1),  # allocated: free
        (lambda t: torch.poisson(t), 0),
        (lambda t: torch.nonzero_static(t > 1, size=10).float(), 1),  # the compare
    ],
    ids=[
        "logit", "logit_eps", "logaddexp", "logaddexp2", "hypot", "sinc", "ldexp", "xlog1py",
        "entr", "mvlgamma", "polar", "complex", "renorm", "heaviside", "isposinf", "signbit",
        "exponential", "random", "empty_permuted", "poisson", "nonzero_static",
    ],
)  # fmt: skip
def test_composites_count_their_formula(fn, per_element):
    assert flops(fn) == per_element * N


def test_integer_ops():
    x = torch.arange(1, 33).reshape(4, 8)
    assert flops(lambda t: torch.gcd(t, t + 1), x) == 2 * N  # the add, then gcd
    assert flops(lambda t: (t << 2) >> 1, x) == 2 * N
    assert flops(lambda t: torch.bitwise_left_shift(t, t), x) == N


def test_linalg_cross():
    # (4, 3) x (4, 3): each of 12 output elements a_j b_k - a_k b_j (3)
    x = torch.rand(4, 6)
    assert flops(lambda t: torch.linalg.cross(t[:, :3], t[:, 3:]), x) == 3 * 12


def test_isin_compares_every_pair_while_the_test_set_is_small():
    x = torch.arange(32).reshape(4, 8)
    # 2 test elements, under 10 * 32^0.145 = 16.5: 32 x 2 comparisons (generate's end tokens)
    assert flops(lambda t: torch.isin(t, torch.tensor([3, 7])).float(), x) == 32 * 2
    # 40 of them: both sorted together, 72 x ceil(log2 72) = 7, and a compare of neighbours
    assert flops(lambda t: torch.isin(t, torch.arange(40)).float(), x) == 72 * (7 + 1)


def test_bincount_and_histograms_put_each_element_in_its_bin():
    x = torch.arange(32) % 5
    assert flops(lambda t: torch.bincount(t).float(), x) == 32
    assert flops(lambda t: torch.histogram(t.float(), 4).hist, x) == 32  # the cast: free


@pytest.mark.parametrize(
    ("samples", "replacement", "expected"),
    [
        (1, False, 32 * (1 + 1)),  # divide by an exponential draw, argmax: a sampled token
        (3, False, 32 * (1 + 2)),  # the divide, topk's heap of 3 (ceil(log2 3) = 2)
        (3, True, 2 * 32 + 4 * 3 * 3),  # sum and normalise, a binary search of 8 per sample
    ],
)
def test_multinomial_samples_as_aten_does(samples, replacement, expected):
    fn = lambda t: torch.multinomial(t, samples, replacement).float()  # noqa: E731
    assert flops(fn) == expected


def test_mode_sorts_each_slice_and_counts_its_runs():
    # 4 slices of 8: 8 x ceil(log2 8) = 3 comparisons each, and one per element for the runs
    assert flops(lambda t: torch.mode(t, -1).values) == N * (3 + 1)


@pytest.mark.parametrize(("reduce", "extra"), [("amax", 0), ("prod", 0), ("mean", N)])
def test_index_reduce(reduce, extra):
    index = torch.tensor([0, 1, 0, 1])
    # each of the 32 source elements into its row; mean then divides the 32 outputs
    assert flops(lambda t: t.index_reduce(0, index, t, reduce), None) == N + extra


def test_segment_reduce():
    data = torch.rand(32)
    fn = lambda t: torch.segment_reduce(t, "sum", lengths=torch.tensor([20, 12]))  # noqa: E731
    assert flops(fn, data) == 32


def test_embedding_max_norm_renorms_the_rows_it_looks_up():
    weight = torch.rand(10, 8)
    fn = lambda w: F.embedding(torch.tensor([1, 2, 5]), w, max_norm=1.0)  # noqa: E731
    assert flops(fn, weight) == 3 * 3 * 8  # 3 rows of 8: square, add, rescale


def test_max_unpool_only_moves():
    x = torch.rand(1, 1, 2, 2)
    indices = torch.tensor([[[[0, 3], [9, 15]]]])
    assert flops(lambda t: F.max_unpool2d(t, indices, 2) + 1, x) == 16  # the add on 4 x 4


def test_tril_indices_are_a_factory():
    # the indices cost nothing; the gathered six elements of the 4 x 4 tensor, +1 each
    assert flops(lambda t: t[tuple(torch.tril_indices(3, 3))] + 1, torch.rand(4, 4)) == 6


def test_pdist_runs_cdists_direct_kernel_over_its_pairs():
    # 5 rows of 3: 10 pairs; per pair and feature a difference and a MAC, a root per pair
    assert flops(F.pdist, torch.rand(5, 3)) == 2 * (10 * 3) + 10 * 3 + 10


def test_affine_grid_is_one_bmm():
    # theta (2, 2, 3) over a (2, 1, 4, 5) grid: 2 x 20 points x 2 coordinates, 3 MACs each
    theta = torch.rand(2, 2, 3)
    fn = lambda t: F.affine_grid(t, [2, 1, 4, 5], align_corners=False)  # noqa: E731
    torch.manual_seed(0)
    prof = profile_model(Fn(fn).eval(), (theta,))
    assert prof.coverage.unsupported_ops == {}
    assert (prof.macs, prof.flops) == (80 * 3, 2 * 80 * 3)


def test_a_check_that_every_element_is_true_reads_each_once():
    # LLaVA checks its image tokens against its features: _is_all_true of a comparison
    assert flops(lambda t: (t > 0)._is_all_true().float()) == N + N
    assert flops(lambda t: (t > 0)._is_any_true().float()) == N + N


def test_moves_factories_and_queries_cost_nothing():
    x = torch.rand(3, 3) + torch.eye(3)
    assert flops(lambda t: torch.detach_copy(t) + 1, x) == 9  # the add
    # lu_unpack: P, L and U copied out of the factorization (linalg_lu_factor_ex priced)
    factored = flops(lambda t: torch.linalg.lu_factor(t)[0], x)
    assert flops(lambda t: torch.lu_unpack(*torch.linalg.lu_factor(t))[1], x) == factored


def test_a_zero_gradient_is_a_factory():
    """sgn's gradient of a real input is zero: autograd makes an _efficientzerotensor."""
    model = nn.Sequential(nn.Linear(8, 8))
    model.append(Fn(torch.sgn))
    prof = profile_model(model, (torch.rand(4, 8),), mode="train")
    assert prof.coverage.unsupported_ops == {}


class SignScaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x)
        return (y * (2 * y).sgn_()).sum()


def test_arithmetic_on_a_zero_gradient_is_priced_as_the_aten_op_of_its_name():
    """The zero gradient of ``sgn_`` reaches the product's backward, whose arithmetic on a
    ZeroTensor runs through ``torch._refs`` under the tracer: ``prims.mul`` and ``prims.add``,
    each over the 4 x 8 gradient, one FLOP an element as ``mul`` and ``add``. They had no
    entry, and the step failed its budget on them as ops that may contract."""
    prof = profile_model(SignScaled(), (torch.rand(4, 8),), mode="train")
    assert prof.coverage.unsupported_ops == {}
    prims = [n for n in prof.node_info if n.target in ("mul.default", "add.default")]
    assert sorted((n.kind, n.flops) for n in prims) == [("add", 32), ("mul", 32)]


def test_dist_and_the_legacy_solves():
    x = torch.rand(4, 4) + 4 * torch.eye(4)
    # dist: a - b, square, sum per element (the 16 of a 4 x 4), and b = t / 2: 16 more
    assert flops(lambda t: torch.dist(t, t / 2), x) == 3 * 16 + 16
    # triangular_solve of 4 right-hand sides by a 4 x 4 factor: n^2 a side (trsm)
    assert flops(lambda t: torch.triangular_solve(t, t).solution, x) == 4**2 * 4
    # cholesky_inverse of a 4 x 4 factor: potri, 2 n^3 / 3 = 42.7, rounded
    assert flops(lambda t: torch.cholesky_inverse(t), x) == round(2 * 4**3 / 3)
