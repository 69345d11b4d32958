"""The per-kind micro-benchmarks (``modes.kernels``, issue 26): the kinds that read weights
are timed cold, over copies that together outgrow a server's last-level cache, as a layer of a
forward reads its weights once, evicted by the layers since."""

from __future__ import annotations

import pytest
import torch

from pytest_graphbudget.modes.kernel_shapes import benches, pool
from pytest_graphbudget.modes.kernels import WINDOW_POOLS, cold, window_rate
from pytest_graphbudget.rates import KERNEL_KINDS


def test_a_cold_benchmark_rotates_copies_that_together_hold_the_limit():
    made = []

    def make():
        layer = torch.nn.Linear(16, 16)  # one copy: its own weights and input
        x = torch.randn(4, 16)
        made.append(layer)
        # moved: 4 x 16 in + 16 x 16 weight + 16 bias + 4 x 16 out = 416 elements = 1,664 B
        return (lambda: layer(x)), 2 * 4 * 16 * 16, 1_664

    call, flops, moved = cold(make, limit=16_640)  # 10 x 1,664 B: 10 copies besides the first
    assert (flops, moved) == (2_048, 1_664)
    assert len(made) == 11
    seen = set()
    for layer in made:  # each call runs the next copy, in turn
        layer.register_forward_hook(lambda module, *_: seen.add(id(module)))
    for _ in range(11):
        call()
    assert seen == {id(layer) for layer in made}


def test_a_benchmark_that_moves_nothing_keeps_one_copy():
    made = []

    def make():
        made.append(1)
        return (lambda: None), 0, 0

    cold(make, limit=2**26)
    assert made == [1]


def test_pooling_s_comparison_rate_is_the_median_of_the_stride_1_window_pools():
    # 3x3 over 192 x 28 x 28 at stride 1 (same size out): 9 x 192 x 784 = 1,354,752
    # 3x3 over 480 x 14 x 14: 9 x 480 x 196 = 846,720
    # 5x5 over 128 x 20 x 20 (YOLO's SPPF): 25 x 128 x 400 = 1,280,000 -> the median
    with torch.device("meta"):
        flops = [pool(*shape[:2], torch.float32, *shape[2:])[1] for shape in WINDOW_POOLS]
    assert flops == [1_354_752, 846_720, 1_280_000]
    # each pool timed at 1 ms past no overhead: comparisons / 1e-3 s
    assert window_rate([(f, 1e-3) for f in flops], 0.0) == pytest.approx(1.28e9)
    # past an overhead of 0.5 ms, the same pools in 0.5 ms: twice the rate
    assert window_rate([(f, 1e-3) for f in flops], 5e-4) == pytest.approx(2.56e9)


def test_the_same_shapes_drive_every_device_at_any_batch():
    """A GPU's calibration times the CPU's table at batch 1 and at a larger batch: the same
    kinds, the same shapes, FLOPs and activation bytes scaled by the batch, weights not."""
    with torch.device("meta"):  # shapes only: nothing allocated, nothing run
        one = {k: [make() for make in found] for k, found in benches(torch.float32, True).items()}
        many = {
            k: [make() for make in found] for k, found in benches(torch.float32, True, 32).items()
        }
    assert sorted(one) == sorted(many) == sorted(KERNEL_KINDS)
    # conv_dense's first shape: 16 -> 16 channels, 3x3, 28x28, stride 1, padding 1
    # MACs 16 x 28 x 28 x 16 x 9 = 1,806,336; bytes 4 x (16 x 784 in + 16 x 784 out + 2,304
    # weights + 16 bias) = 4 x 27,408 = 109,632
    _, flops, moved = one["conv_dense"][0]
    assert (flops, moved) == (2 * 1_806_336, 109_632)
    _, flops, moved = many["conv_dense"][0]
    assert (flops, moved) == (32 * 2 * 1_806_336, 4 * (32 * 2 * 16 * 784 + 2_304 + 16))
    # matmul's first: (16 x 64) @ (64 x 64): at batch 32, 512 rows
    assert many["matmul"][0][1] == 2 * 512 * 64 * 64
