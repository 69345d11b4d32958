"""The quantized ops' formulas (``costs/quantized.py``), counted by hand.

float8 and int8 operands are read at 1 byte an element, as stored: a ``_scaled_mm`` moves half
the bytes of the same product in bfloat16, with the same multiply-accumulates.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
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
    # read a, b and the two float32 scales; write the bfloat16 output (and on torch 2.4,
    # whose op returns the output's amax beside it, that float32 scalar)
    amax = 4 * (len(torch.ops.aten._scaled_mm.default._schema.returns) - 1)
    assert prof.traffic_bytes == 2_560 + 2 * 4 + 16 * 64 * 2 + amax
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


def _static(net: nn.Module, x: torch.Tensor) -> nn.Module:
    """``torch.ao``'s eager static quantization of ``net`` (fbgemm), calibrated on ``x``."""
    import torch.ao.quantization as tq

    net.eval().qconfig = tq.get_default_qconfig("fbgemm")
    for module in net.modules():  # per-channel weights are refused for transposed convs
        if isinstance(module, (nn.ConvTranspose1d, nn.ConvTranspose2d)):
            module.qconfig = tq.default_qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's eager-mode API warns of its deprecation
        tq.prepare(net, inplace=True)
        net(x)
        tq.convert(net, inplace=True)
    return net


class StaticBlock(nn.Module):
    """A statically quantized block with the ops torchvision's quantizable models (ResNet's
    ``add_relu``, MobileNetV2's ``add``, MobileNetV3's ``hardswish`` and ``mul``, ShuffleNet's
    and GoogLeNet's ``cat``) and a decoder's (``ConvTranspose2d``, ``BatchNorm2d``,
    ``LayerNorm``) run."""

    def __init__(self) -> None:
        import torch.ao.quantization as tq
        from torch.ao.nn.quantized import FloatFunctional

        super().__init__()
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2)
        self.bn, self.act, self.ln = nn.BatchNorm2d(6), nn.Hardswish(), nn.LayerNorm([6, 9, 9])
        self.add, self.add_relu = FloatFunctional(), FloatFunctional()
        self.mul, self.cat = FloatFunctional(), FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.up(self.quant(x)))
        z = self.act(y)
        m = self.mul.mul(self.add_relu.add_relu(self.add.add(y, z), y), z)
        return self.dequant(self.cat.cat([self.ln(m), m], dim=1))


def test_static_quantized_ops_have_their_float_ops_flops():
    """User trial: torchvision's quantizable models left ``quantized::add``, ``add_relu``,
    ``mul``, ``hardswish`` and ``cat`` without a formula, and ``conv_transpose2d``,
    ``batch_norm2d`` and ``layer_norm`` failed as contractions. By hand at 2 x 4 x 4 x 4 in
    (128 elements): the transposed conv's weight is [4, 6/2, 3, 3], each input element
    scattered to 3 x 3 x 3 = 27 outputs: 128 x 27 = 3,456 MACs, into 2 x 6 x 9 x 9 = 972
    outputs, each requantized (2) with its bias added (1). On those 972 elements: the batch
    norm 2 + weight + bias = 4 each, hardswish 4, add 1, add_relu 2, mul 1, the affine
    LayerNorm 5 + 2 = 7; cat moves data. The input quantized and the 2 x 12 x 9 x 9 = 1,944
    output elements dequantized: 2 FLOPs an element each."""
    torch.manual_seed(0)
    x = torch.randn(2, 4, 4, 4)
    prof = profile_model(_static(StaticBlock(), x), (x,))
    assert prof.coverage.unsupported_ops == {} and prof.coverage.unsupported_contractions == {}
    outputs = 2 * 6 * 9 * 9  # 972
    assert prof.macs == 128 * 27
    assert prof.modules["up"].flops == 2 * 128 * 27 + outputs * (2 + 1)
    assert prof.modules["bn"].flops == outputs * 4 and prof.modules["act"].flops == outputs * 4
    assert prof.modules["ln"].flops == outputs * 7
    arithmetic = outputs * (1 + 2 + 1)  # add, add_relu, mul
    quantize = 2 * 128 + 2 * 2 * outputs
    pointwise = outputs * (3 + 4 + 4 + 7)  # the conv's epilogue, bn, hardswish, ln
    assert prof.flops == 2 * 128 * 27 + pointwise + arithmetic + quantize


def test_a_static_conv_transpose1d_has_the_float_macs():
    """``ConvTranspose1d(3, 4, 2)`` at 2 x 3 x 5: weight [3, 4, 2], each of the 30 input
    elements scattered to 4 x 2 = 8 outputs, 240 MACs, into 2 x 4 x 6 = 48 outputs, each
    requantized (2) with its bias added (1)."""

    class Up(nn.Module):
        def __init__(self) -> None:
            import torch.ao.quantization as tq

            super().__init__()
            self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
            self.up = nn.ConvTranspose1d(3, 4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.dequant(self.up(self.quant(x)))

    torch.manual_seed(0)
    x = torch.randn(2, 3, 5)
    prof = profile_model(_static(Up(), x), (x,))
    assert prof.coverage.unsupported_ops == {}
    assert prof.macs == 30 * 8 and prof.modules["up"].flops == 2 * 240 + 48 * 3


class Bag(nn.Module):
    """A quantized ``EmbeddingBag(100, 16)``'s op called with a mode and per-sample weights
    (the module itself always passes mode 0, sum)."""

    def __init__(self, bits: int, mode: int) -> None:
        from torch.ao.quantization import float_qparams_weight_only_qconfig as qconfig8
        from torch.ao.quantization import float_qparams_weight_only_qconfig_4bit as qconfig4
        from torch.ao.quantization import quantize_dynamic

        super().__init__()
        torch.manual_seed(0)
        float_bag = nn.Sequential(nn.EmbeddingBag(100, 16)).eval()
        spec = {nn.EmbeddingBag: qconfig8 if bits == 8 else qconfig4}
        self.bag, self.bits, self.mode = quantize_dynamic(float_bag, spec)[0], bits, mode

    def forward(self, ids, offsets, weights=None):
        ops = torch.ops.quantized
        op = ops.embedding_bag_byte if self.bits == 8 else ops.embedding_bag_4bit
        table = self.bag._packed_params._packed_weight
        return op(table, ids, offsets, False, self.mode, False, weights, None, False)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize(
    ("mode", "per_sample", "expected"),
    [
        (0, False, 30 * 16),  # sum: each looked-up row added into its bag
        (1, False, 30 * 16 + 3 * 16),  # mean: and each bag's element divided by its size
        (0, True, 2 * 30 * 16),  # each row first scaled by its weight
    ],
    ids=["sum", "mean", "per-sample"],
)
def test_a_quantized_embedding_bag_has_the_float_bags_flops(bits, mode, per_sample, expected):
    """30 indices into 3 bags of rows 16 wide, as the float ``EmbeddingBag``'s: 30 x 16 adds
    (or compares), + 30 x 16 with per-sample weights, + 3 x 16 divides for a mean. The op had
    had no formula (0 FLOPs, ``quantized.embedding_bag_byte`` unsupported)."""
    ids, offsets = torch.randint(0, 100, (30,)), torch.tensor([0, 10, 25])
    inputs = (ids, offsets, torch.rand(30)) if per_sample else (ids, offsets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof = profile_model(Bag(bits, mode), inputs)
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == expected


def test_a_quantized_embedding_lookup_is_a_gather_of_no_flops():
    """``quantized::embedding_byte`` looks rows up: no FLOPs, as ``embedding``; it had been an
    op without a formula."""
    from torch.ao.nn.quantized import Embedding

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof = profile_model(Embedding(100, 16), torch.randint(0, 100, (2, 8)))
    assert prof.coverage.unsupported_ops == {} and prof.flops == 0
    assert prof.params == 100 * 16


class Fn(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.fake_quantize_per_tensor_affine(x, 0.1, 0, 0, 255),
        lambda x: torch.fake_quantize_per_channel_affine(
            x, torch.full((8,), 0.1), torch.zeros(8, dtype=torch.int32), 1, 0, 255
        ),
    ],
    ids=["per_tensor", "per_channel"],
)
def test_fake_quantize_is_a_quantize_a_dequantize_and_its_mask(fn):
    # (4, 8): quantize 2 and dequantize 2, the in-range mask 3 (two comparisons, their and)
    prof = profile_model(Fn(fn).eval(), (torch.randn(4, 8),))
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == (2 + 2 + 3) * 32


def qat_linear() -> nn.Module:
    """``Linear(8, 8)`` prepared for QAT with the x86 qconfig (the fused observer and fake
    quantize), after one training forward: its weight's per-channel statistics exist."""
    import torch.ao.quantization as quant

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8))
    model.qconfig = quant.get_default_qat_qconfig("x86")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation of prepare_qat
        model = quant.prepare_qat(model.train())
    model(torch.randn(2, 8))
    return model


def test_a_qat_linear_prices_its_fused_observers():
    # before: aten._fused_moving_avg_obs_fq_helper x2, unsupported, failed as a contraction
    prof = profile_model(qat_linear().eval(), (torch.randn(2, 8),))
    assert prof.coverage.unsupported_ops == {}
    linear = 2 * (2 * 8 * 8) + 2 * 8  # addmm: 2 x 8 outputs of 8 MACs, the bias
    # min and max 2, fake quantize 4, its mask 3 per element; 10 per channel (running min and
    # max moved, scale and zero point): the weight's 64 elements in 8 channels, the output's
    # 16 per tensor
    weight, output = 9 * 64 + 10 * 8, 9 * 16 + 10 * 1
    assert prof.flops == linear + weight + output


def test_a_qat_step_trains_through_the_fake_quantize():
    prof = profile_model(qat_linear(), (torch.randn(2, 8),), mode="train")
    assert prof.coverage.unsupported_ops == {}
    totals = prof.to_dict()["totals"]
    # the backward's products (the input's gradient needs none: x is no parameter): the
    # weight's 8 x 8 from 2 rows; the bias's sum of 16; the masks multiplied into the
    # output's gradient (16) and the weight's (64)
    assert totals["backward_macs"] == 2 * 8 * 8
    assert totals["backward_flops"] == 2 * (2 * 8 * 8) + 16 + 16 + 64


class Learnable(nn.Module):
    """LSQ: a fake quantize whose scale and zero point train."""

    def __init__(self) -> None:
        super().__init__()
        self.scale, self.zero = nn.Parameter(torch.tensor([0.1])), nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch._fake_quantize_learnable_per_tensor_affine(x, self.scale, self.zero, 0, 255)


def test_learnable_fake_quantize_and_its_backward():
    prof = profile_model(Learnable(), (torch.randn(4, 8),), mode="train")
    assert prof.coverage.unsupported_ops == {}
    totals = prof.to_dict()["totals"]
    assert totals["forward_flops"] == 4 * 32 + 32  # the fake quantize, then the loss's sum
    # per element: quantized again 2, range checks 2, the input's gradient 1, the scale's 5
    # and the zero point's 1, both summed 2
    assert totals["backward_flops"] == 13 * 32
