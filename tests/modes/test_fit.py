"""fit.py on polynomials written down by hand: the fit must find them exactly, at the lowest
degree, say when a point verified it, and refuse to call a non-polynomial a polynomial."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.modes.fit import MAX_DEGREE, fit, growth_degree


def one_axis(values, f, axis="seq_len"):
    return fit("macs", [axis], [{axis: v} for v in values], [f(v) for v in values])


def test_quadratic_found_exactly_and_predicts_an_unmeasured_point():
    # Per-layer BERT-base MACs (h = 768, 12 layers): 12*s*h^2 + 2*s^2*h, times 12.
    h, layers = 768, 12
    macs = lambda s: layers * (12 * s * h * h + 2 * s * s * h)  # noqa: E731
    result = one_axis([128, 256, 512], macs)
    assert result.formula() == "macs = 84934656*s + 18432*s^2"
    assert result(seq_len=1024) == macs(1024)
    assert result.degree("seq_len") == 2
    assert result.to_dict()["verified"] is False  # three points, three coefficients


def test_lowest_degree_wins_and_spare_points_verify_it():
    result = one_axis([1, 2, 3, 4, 5], lambda s: 7 * s + 3)
    assert result.formula() == "macs = 3 + 7*s"
    assert result.held_out == 3
    assert result.to_dict()["coefficients"] == {"1": 3, "s": 7}
    assert result.to_dict()["verified"] is True


def test_rational_and_negative_coefficients_are_kept_exact():
    # s*(s-1)/2 - s: half-integers, a negative linear term.
    result = one_axis([1, 2, 3, 4], lambda s: s * (s - 1) // 2 - s)
    assert result.coefficients[(1,)] == Fraction(-3, 2)
    assert result.formula() == "macs = -3/2*s + 1/2*s^2"
    assert result.to_dict()["coefficients"] == {"s": "-3/2", "s^2": "1/2"}


def test_constant_and_cubic():
    assert one_axis([1, 2, 3], lambda s: 42).formula() == "macs = 42"
    cubic = one_axis([1, 2, 3, 4, 5], lambda s: s**3)
    assert cubic.formula() == "macs = s^3"
    assert cubic.degree("seq_len") == 3


def test_grid_in_two_axes():
    # MACs of a BERT-like stack: linear in batch, quadratic in seq_len, with a pooler term.
    points = [{"seq_len": s, "batch": b} for s in (8, 16, 32) for b in (1, 2, 4)]
    values = [b * 4096 + 98304 * s * b + 256 * s * s * b for s in (8, 16, 32) for b in (1, 2, 4)]
    result = fit("macs", ["seq_len", "batch"], points, values)
    assert result.formula() == "macs = 4096*b + 98304*s*b + 256*s^2*b"
    assert result.degree("seq_len") == 2
    assert result.degree("batch") == 1
    assert result(seq_len=64, batch=8) == 8 * (4096 + 98304 * 64 + 256 * 64 * 64)


def test_not_polynomial_is_said_not_invented():
    # A piecewise figure (a peak that switches from one buffer to another), on enough points.
    values = [1, 2, 3, 4, 5, 6]
    result = one_axis(values, lambda s: max(100, s**4))
    assert MAX_DEGREE < len(values) - 1
    assert not result.polynomial
    assert result.to_dict()["polynomial"] is False
    assert "piecewise" in result.to_dict()["reason"]
    with pytest.raises(GraphBudgetError, match="not polynomial"):
        result(seq_len=7)


def test_bad_input_and_growth_words():
    with pytest.raises(GraphBudgetError, match="each point once"):
        fit("flops", ["batch"], [{"batch": 1}, {"batch": 1}], [1, 2])
    assert growth_degree("quadratic", "growth_max") == 2
    with pytest.raises(GraphBudgetError, match="'linear'"):
        growth_degree("exponential", "growth_max")


def tiny_bert_macs(seq_len, batch):
    """A BERT of hidden 32, intermediate 64, 2 layers, per sequence: Q, K, V and output
    projections 4*s*32^2 and the MLP 2*s*32*64 (8192*s a layer), attention 2*s^2*32 (64*s^2
    a layer), the pooler 32^2."""
    return batch * (1024 + 16384 * seq_len + 128 * seq_len**2)


def grid_fit(seq_lens, batches):
    points = [{"seq_len": s, "batch": b} for s in seq_lens for b in batches]
    return fit("macs", ["seq_len", "batch"], points, [tiny_bert_macs(**p) for p in points])


def test_spare_points_along_one_axis_do_not_verify_the_other():
    # seq_len 16 and 32 fix a line in s at every batch: the chord of the quadratic,
    # (656384 - 295936) / 16 = 22528 per token from 295936 at 16. The two spare points of the
    # 2 x 3 grid (6 points, 4 coefficients) only vary the batch.
    result = grid_fit((16, 32), (1, 2, 3))
    assert result.formula() == "macs = -64512*b + 22528*s*b"
    assert result.held_out == 2
    assert result.unverified == ("seq_len",)
    assert result.to_dict()["verified"] is False
    assert result.to_dict()["unverified"] == ["seq_len"]
    assert result.check() == (
        "verified in batch on 2 more points; every seq_len used, add one to verify it"
    )
    # A third seq_len finds the quadratic, yet its three values are all it needs.
    assert grid_fit((16, 32, 64), (1, 2, 3)).unverified == ("seq_len",)
    # A fourth verifies it, and the third batch the linear batch.
    full = grid_fit((16, 32, 64, 128), (1, 2, 3))
    assert full.formula() == "macs = 1024*b + 16384*s*b + 128*s^2*b"
    assert (full.held_out, full.unverified, full.verified) == (6, (), True)
    assert full.check() == "verified on 6 more points"
    assert full.to_dict()["unverified"] == []
    # Two batches: linear in b through both, so the batch axis is the unverified one.
    assert grid_fit((16, 32, 64, 128), (1, 2)).check() == (
        "verified in seq_len on 2 more points; every batch used, add one to verify it"
    )


def test_one_axis_says_when_every_point_was_used():
    exact = one_axis([16, 32, 64], lambda s: tiny_bert_macs(s, 1))
    assert exact.check() == "every point used; add one to verify it"
    assert (exact.unverified, exact.verified) == (("seq_len",), False)
    spare = one_axis([16, 32, 64, 128], lambda s: tiny_bert_macs(s, 1))
    assert (spare.unverified, spare.check()) == ((), "verified on 1 more point")
