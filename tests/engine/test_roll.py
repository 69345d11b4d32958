"""A roll over k dims (Swin's shifted windows roll over height and width): ATen's CPU and
CUDA kernels roll one dim at a time into a new tensor (``roll_common``), so eager runs k
kernels and holds k - 1 copies of the output beside it while the call runs
(``engine.eager_kernels.roll_passes``); a compiler's one kernel indexes it in one pass."""

from __future__ import annotations

import pytest
import torch
from test_peak_measured import estimated_peak, measured_peak
from torch import nn

from pytest_graphbudget.api import profile_model
from pytest_graphbudget.hardware import from_table


class Roll(nn.Module):
    """A projection, then a roll of its output by one along ``dims``."""

    def __init__(self, dims: tuple[int, ...]) -> None:
        super().__init__()
        self.pre, self.dims = nn.Linear(16, 16), dims

    def forward(self, x):
        return self.pre(x).roll((1,) * len(self.dims), self.dims)


@pytest.mark.parametrize("optimizer", ["eval", None])
@pytest.mark.parametrize("dims", [(1,), (1, 2), (0, 1, 2)])
def test_a_roll_holds_a_copy_of_its_output_for_each_dim_but_the_last(dims, optimizer):
    # the output, 4 x 10 x 16 floats, is 2,560 B: the profiler's peak grows by that much for
    # each dim rolled beyond the first (it read 2,560 and 5,120 B under before)
    model, x = Roll(dims), torch.randn(4, 10, 16)
    measured = measured_peak(model, x, optimizer)
    assert estimated_peak(model, x, optimizer) == measured
    if len(dims) > 1:
        torch.manual_seed(1)
        assert measured - measured_peak(Roll((1,)), x, optimizer) == (len(dims) - 1) * 2_560


class JustRoll(nn.Module):
    def __init__(self, dims: tuple[int, ...]) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.roll((1,) * len(self.dims), self.dims)


COPY = {  # a copy at 1 GB/s after a launch of 1 us; nothing else runs
    "peak_tflops": {"float32": 1},
    "bandwidth_gbs": 1,
    "kernels": {"copy": {"flops_per_s": 1e30, "bytes_per_s": 1e9, "overhead_s": 1e-6}},
}


@pytest.mark.parametrize("tier", ["fx", "eager"])
def test_an_eager_roll_runs_a_kernel_for_each_dim_and_a_compiled_one_runs_one(tier):
    # x (1, 8, 8, 4) floats, 1,024 B: each pass reads it and writes its result, 2,048 B,
    # 1 us + 2.048 us; over two dims eager runs two, compiled one
    x, hardware = torch.randn(1, 8, 8, 4), from_table("box", COPY)

    def seconds(dims, execution="eager"):
        prof = profile_model(JustRoll(dims), x, hardware=hardware, tier=tier, execution=execution)
        return prof.est_latency_s

    assert seconds((1,)) == pytest.approx(3.048e-6)
    assert seconds((1, 2)) == pytest.approx(2 * 3.048e-6)
    assert seconds((0, 1, 2)) == pytest.approx(3 * 3.048e-6)
    assert seconds((1, 2), "compiled") == pytest.approx(3.048e-6)
