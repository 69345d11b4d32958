"""The quantized ops' formulas (``costs/quantized.py``), counted by hand.

float8 and int8 operands are read at 1 byte an element, as stored: a ``_scaled_mm`` moves half
the bytes of the same product in bfloat16, with the same multiply-accumulates.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import torch
from torch import nn

from pytest_graphbudget import profile_model
from pytest_graphbudget.hardware import get


class ScaledMM(nn.Module):
    """``torch._scaled_mm`` of two float8 operands with per-tensor float32 scales."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale_a", torch.tensor(1.0))
        self.register_buffer("scale_b", torch.tensor(1.0))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch._scaled_mm(
            a, b.t(), scale_a=self.scale_a, scale_b=self.scale_b, out_dtype=torch.bfloat16
        )


class MM(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b.t()


def test_scaled_mm_reads_float8_at_one_byte_an_element():
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(64, 32).to(torch.float8_e4m3fn)
    prof = profile_model(ScaledMM(), (a, b), hardware="h100")
    assert prof.coverage.unsupported_ops == {}
    # (16, 32) @ (32, 64): 16*32*64 = 32,768 MACs; each of the 16*64 outputs scaled twice
    assert prof.macs == 32_768 and prof.flops == 2 * 32_768 + 2 * 16 * 64
    assert prof.input_bytes == 16 * 32 * 1 + 64 * 32 * 1  # 2,560: float8 is 1 byte
    # read a, b and the two float32 scales; write the bfloat16 output
    assert prof.traffic_bytes == 2_560 + 2 * 4 + 16 * 64 * 2
    assert prof.dtype == "float8_e4m3fn"
    # the control: the same product in bfloat16 reads twice the bytes of its operands
    half = profile_model(MM(), (a.to(torch.bfloat16), b.to(torch.bfloat16)), hardware="h100")
    assert half.macs == prof.macs and half.input_bytes == 2 * prof.input_bytes


def test_a_large_float8_product_is_timed_at_the_float8_peak():
    """(2048, 2048) @ (2048, 2048) in float8 on an H100: 2*2048^3 = 17.2 GFLOPs over about
    4.2 + 4.2 MB read and 8.4 MB written, ~1,000 FLOPs a byte, above the float8 ridge point
    (1,978.9 TFLOP/s / 3.35 TB/s = 591): compute-bound, timed at 1,978.9 TFLOP/s, not at
    bfloat16's 989.4."""
    n = 2048
    a = torch.empty(n, n, dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty(n, n, dtype=torch.float8_e4m3fn, device="meta")
    datasheet = replace(get("h100"), family="", efficiency={}, launch_s=0.0)
    prof = profile_model(ScaledMM().to("meta"), (a, b), hardware=datasheet)
    [matmul] = [s for s in prof.subgraphs if s.macs]
    assert matmul.bottleneck == "compute_bound"
    assert abs(matmul.est_latency_s - matmul.flops / 1978.9e12) < 1e-12


class RoundTrip(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)
        return q.dequantize()


def test_quantize_and_dequantize_are_two_flops_an_element():
    with warnings.catch_warnings():  # torch's note on quantized tensors' deprecation
        warnings.simplefilter("ignore")
        prof = profile_model(RoundTrip(), torch.randn(4, 64))
    assert prof.coverage.unsupported_ops == {}
    # quantize: x / scale + zero point, 2 * 256; dequantize: (q - zero point) * scale, 2 * 256
    assert prof.flops == 2 * 256 + 2 * 256


def test_dynamic_int8_linear_flops_around_its_macs():
    from torch.ao.quantization import quantize_dynamic

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    prof = profile_model(model, torch.randn(4, 64))
    macs = 4 * 64 * 128 + 4 * 128 * 32  # 49,152
    # per layer: its input quantized dynamically (4 FLOPs an element), each output rescaled
    # and its bias added (2); the ReLU between them 1 per element
    first = 4 * (4 * 64) + 2 * (4 * 128)  # 2,048
    relu = 4 * 128
    second = 4 * (4 * 128) + 2 * (4 * 32)  # 2,304
    assert prof.macs == macs and prof.flops == 2 * macs + first + relu + second


def test_static_int8_conv_and_linear_have_their_float_macs():
    """``torch.ao``'s eager static quantization (fused conv + ReLU, then a linear) priced
    MACs 0 and both ops unsupported. By hand at batch 2, 3x8x8 in: the conv's 2 x 8 x 6 x 6
    outputs take 3 x 3 x 3 MACs each = 15,552; the linear's 2 x 10 outputs 288 each = 5,760.
    Around them, per output element: requantized (2), the bias added (1), the ReLU (1)."""
    import torch.ao.quantization as tq

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
            self.conv, self.relu = nn.Conv2d(3, 8, 3), nn.ReLU()
            self.fc = nn.Linear(8 * 6 * 6, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.relu(self.conv(self.quant(x)))
            return self.dequant(self.fc(x.flatten(1)))

    torch.manual_seed(0)
    net = Net().eval()
    net.qconfig = tq.get_default_qconfig("fbgemm")
    tq.fuse_modules(net, [["conv", "relu"]], inplace=True)
    x = torch.randn(2, 3, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's eager-mode API warns of its deprecation
        tq.prepare(net, inplace=True)
        net(x)
        tq.convert(net, inplace=True)
    prof = profile_model(net, (x,))
    assert prof.coverage.unsupported_ops == {}
    conv, fc = 2 * 8 * 6 * 6, 2 * 10  # output elements
    assert prof.modules["conv"].macs == conv * 27 and prof.modules["fc"].macs == fc * 288
    assert prof.modules["conv"].flops == 2 * conv * 27 + conv * (2 + 1 + 1)
    assert prof.modules["fc"].flops == 2 * fc * 288 + fc * (2 + 1)
