"""Timing in rounds (``modes.rounds``, issue 36): interleaved rounds, their median and spread,
and the calibration's verdict on a machine too noisy to trust. Nothing here is timed: the
clocks are lists of instants written out, the spreads worked by hand."""

from __future__ import annotations

import pytest

from pytest_graphbudget.modes.calibrate import Calibration
from pytest_graphbudget.modes.rounds import best_of, interleaved, noisiest, rotated, spread


def test_spread_is_half_the_interquartile_range_over_the_median():
    # 1, 2, 3, 4, 5: quartiles (inclusive) 2 and 4, median 3: (4 - 2) / 2 / 3 = 1/3
    assert spread([5.0, 1.0, 4.0, 2.0, 3.0]) == pytest.approx(1 / 3)
    # seven rounds, one wild: 10, 10, 10, 10, 11, 11, 30 -> q1 10, q3 11, median 10: 5%
    assert spread([10, 11, 10, 30, 10, 11, 10]) == pytest.approx(0.05)
    assert spread([7.0]) == 0.0 and spread([]) == 0.0


def test_rounds_visit_every_task_once_each_in_a_rotated_order():
    order: list[str] = []
    tasks = {key: (lambda key=key: order.append(key) or len(order)) for key in "abc"}
    found = interleaved(tasks, 3)
    assert order == list("abcbcacab")
    # each task's results, in its rounds' order: the position it ran at
    assert found == {"a": [1, 6, 8], "b": [2, 4, 9], "c": [3, 5, 7]}
    assert rotated(["a", "b", "c"], 4) == ["b", "c", "a"] and rotated([], 2) == []


def test_best_of_is_the_fastest_sample_on_the_clock_given():
    instants = iter([0.0, 3.0, 10.0, 11.5, 20.0, 22.0])  # samples of 3, 1.5 and 2 seconds
    assert best_of(lambda: None, 3, lambda: next(instants)) == 1.5


def calibration(spreads: dict[str, float]) -> Calibration:
    return Calibration("box", "CPU", 1, 1e11, 2048, 2e10, 2**28, 7, spreads=spreads)


def test_a_calibration_whose_kind_strayed_too_far_says_which_and_how_far():
    quiet = calibration({"peak": 0.004, "bandwidth": 0.01, "conv_dense float32": 0.03})
    assert quiet.too_noisy(0.10) is None
    noisy = calibration(
        {"peak": 0.004, "conv_dense float32": 0.12, "pooling bfloat16": 0.31, "copy": 0.11}
    )
    assert noisiest(noisy.spreads) == ("pooling bfloat16", 0.31)
    assert noisy.too_noisy(0.10) == (
        "the machine was too noisy to trust: pooling bfloat16 varied ±31% between rounds "
        "(and 2 more), over the ±10% allowed; close other programs and run again"
    )
    assert "(and" not in noisy.too_noisy(0.2)


def test_the_spreads_are_written_beside_the_profile():
    text = calibration({"peak float32": 0.004, "bandwidth": 0.012, "matmul bfloat16": 0.05}).toml()
    assert "#   roofline: peak ±0.4%, bandwidth ±1.2%" in text
    assert "#   bfloat16: matmul ±5.0%" in text
    assert "median of 7 rounds (each the best of 2)" in text
