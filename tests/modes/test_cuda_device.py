"""``measure`` on a CUDA device (issue 26): these need a GPU and skip without one.

References: the GPU's own event clock (a forward takes some time, the fastest of the runs is
no slower than their median), the caller's module (still on the CPU afterwards), the float32
matrix-product rate every GPU of the last decade exceeds (1 TFLOP/s), and the allocator's
``max_memory_allocated``, against the static estimate of the activations live at the peak.

Why the measured peak should be within +-25% of ``activation_peak_bytes``: the two models are
written so that eager PyTorch frees each intermediate when the graph's liveness says it dies
(single-expression forwards, ``nn.Sequential``), and every tensor is megabytes, so the
allocator's 512-byte rounding is below 0.01%. What the estimate does not model on CUDA is
kernel workspace allocated during the forward: cuBLAS's is allocated in the warm-up (before
the measurement starts), cuDNN's convolution workspace is not; with 64-channel 3x3
convolutions over 128x128 maps (64 MiB activations) it is a small share. 25% is the band a
missed activation (each is 1/2 to 1/3 of the peak here) cannot hide in.
"""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch

from pytest_graphbudget import cli
from pytest_graphbudget.api import profile_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

MIB = 2**20


class Block(torch.nn.Module):
    """One single-head transformer block, each intermediate dying where its graph says."""

    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(width, width) for _ in range(4))
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
        )
        self.scale = width**-0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attn = torch.softmax(self.q(x) @ self.k(x).transpose(-2, -1) * self.scale, dim=-1)
        y = self.norm1(x + self.o(attn @ self.v(x)))
        return self.norm2(y + self.mlp(y))


def conv_net() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1),
        torch.nn.BatchNorm2d(64),
        torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 10),
    )


# (16, 64, 128, 128) float32: 16*64*128*128*4 = 64 MiB per activation;
# (8, 512, 256) float32: 4 MiB per token tensor, the (8, 512, 512) scores 8 MiB.
CASES = {
    "conv": (conv_net, (16, 3, 128, 128)),
    "transformer": (Block, (8, 512, 256)),
}


# Measured on an H100 (torch 2.11+cu130, 2026-11-26): the transformer 44 MiB against 36 (1.22x),
# the conv net 256 MiB against 128 (2.00x): cuDNN's convolutions take workspace (and may keep a
# second copy of a 64 MiB activation) that the static peak does not model yet (issue 26: model
# workspace per op). Strict, so the day the estimate covers it this case says so.
CUDNN_GAP = pytest.mark.xfail(strict=True, reason="cuDNN convolution workspace is not modelled")


@pytest.mark.parametrize("case", [pytest.param("conv", marks=CUDNN_GAP), "transformer"])
def test_measured_on_cuda(case):
    build, shape = CASES[case]
    model, x = build().eval(), torch.randn(*shape)
    prof = profile_model(model, x, measure=10, device="cuda")
    rt = prof.runtime
    assert rt.device == f"cuda:{torch.cuda.current_device()}" and rt.runs == 10
    assert 0 < rt.min_s <= rt.median_s <= rt.max_s and math.isfinite(rt.max_s)
    assert next(model.parameters()).device.type == "cpu" and x.device.type == "cpu"
    ratio = rt.peak_measured_bytes / prof.activation_peak_bytes
    print(
        f"{case}: measured peak {rt.peak_measured_bytes / MIB:.2f} MiB, estimated "
        f"{prof.activation_peak_bytes / MIB:.2f} MiB ({ratio:.3f}x), min {rt.min_s * 1e3:.3f} ms"
    )
    assert 0.75 <= ratio <= 1.25


def test_a_model_already_on_cuda_is_timed_there():
    model = torch.nn.Linear(256, 256).cuda()
    prof = profile_model(model, torch.randn(64, 256, device="cuda"), measure=3)
    assert prof.runtime.device.startswith("cuda:")
    # the output, 64*256*4 = 65536 bytes, is allocated by every timed forward
    assert prof.runtime.peak_measured_bytes >= 64 * 256 * 4


def test_calibrate_on_cuda(tmp_path, capsys):
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    path = tmp_path / "gpu.toml"
    assert cli.main(["hardware", "--calibrate", "--device", "cuda", "-o", str(path)]) == 0
    table = tomllib.loads(path.read_text())["hardware"]["calibrated"]
    print(path.read_text(), capsys.readouterr().err)
    assert table["peak_tflops"]["float32"] > 1  # any GPU of the last decade
    assert table["bandwidth_gbs"] > 100  # any discrete GPU's memory


def test_cli_profile_measure_on_cuda(tmp_path, capsys):
    path = tmp_path / "tiny.pt2"
    linear = torch.nn.Sequential(torch.nn.Linear(8, 4)).eval()
    torch.export.save(torch.export.export(linear, (torch.randn(3, 8),)), path)
    argv = ["profile", str(path), "--measure-runs", "5", "--device", "cuda", "--format", "json"]
    assert cli.main(argv) == 0
    runtime = json.loads(capsys.readouterr().out)["runtime"]
    assert runtime["device"] == "cuda:0" and runtime["runs"] == 5
    assert runtime["min_s"] > 0
    # the output, 3*4*4 = 48 bytes, rounded up to the caching allocator's 512-byte block
    assert runtime["peak_measured_bytes"] >= 512


def test_a_marker_times_on_cuda(pytester):
    pytester.makepyfile(
        """
        import pytest, torch
        from pytest_graphbudget import ModelCase

        @pytest.fixture
        def net():
            return ModelCase(torch.nn.Linear(2, 2), (torch.randn(1, 2),))

        @pytest.mark.latency_measured_max("60s")
        @pytest.mark.graph_budget(measure_device="cuda", measure_runs=2)
        def test_cuda(net): ...
        """
    )
    run = pytester.runpytest("-p", "no:cacheprovider", "--graph-budget")
    run.assert_outcomes(passed=1)
