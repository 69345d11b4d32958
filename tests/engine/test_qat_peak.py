"""A network under quantization-aware training held to ``torch.profiler``'s peak: the fake
quantizes' outputs and masks (``costs/quantized.py``'s kernels) live as long as ATen keeps them."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.ao.quantization as quant
from test_peak_measured import estimated_peak, measured_peak
from torch import nn


@pytest.mark.usefixtures("one_thread")  # conftest: measured peaks need one thread
@pytest.mark.parametrize("optimizer", ["eval", None, "adam"])
def test_a_qat_conv_nets_peak_is_the_profilers(optimizer):
    """Conv, BatchNorm, ReLU, conv under QAT: the fake quantizes' outputs and masks held to
    ``torch.profiler``'s peak, in eval and a training step."""

    def build() -> nn.Module:
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3)
        )
        model.qconfig = quant.get_default_qat_qconfig("x86")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = quant.prepare_qat(model.train())
        model(x)
        return model

    x = torch.randn(2, 3, 16, 16)
    assert estimated_peak(build(), x, optimizer) == measured_peak(build(), x, optimizer)
