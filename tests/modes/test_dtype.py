"""Issue 12, dtype: ``profile_model(..., dtype=)`` counts weights, activations and traffic in
that dtype's bytes and takes the hardware's peak for it, on a cast copy of the model.

Hand counts. ``nn.Linear(64, 32)`` on an ``(8, 64)`` input: 8*64*32 = 16,384 MACs and
2*16,384 + 8*32 (bias) = 33,024 FLOPs in every dtype. Its 64*32 + 32 = 2,080 weights are
8,320 bytes in float32 and 4,160 in bfloat16; the input's 512 elements 2,048 and 1,024 bytes;
the output's 256 elements 1,024 and 512. It is one fused subgraph reading the input and the
weights and writing the output: 2,048 + 8,320 + 1,024 = 11,392 bytes of traffic in float32,
5,696 in bfloat16. Peaks are NVIDIA's datasheet figures for the A100 SXM4 80GB: 19.5 TFLOP/s
float32, 312 TFLOP/s dense bfloat16 and float16 tensor-core, 2,039 GB/s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from pytest_graphbudget.api import profile_model
from pytest_graphbudget.compat import kernels as releases
from pytest_graphbudget.engine.profile import profile_from_dict
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.hardware import GIGA, TERA, Hardware, get

A100_BANDWIDTH = 2039 * GIGA
A100 = replace(get("a100"), family="", efficiency={}, launch_s=0.0, compute_capability=None)
"""The A100's datasheet roofline alone, without its family's fitted efficiencies, its memory
counted as on the host (the bytes of each dtype's tensors, no allocator blocks)."""


def linear() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Linear(64, 32), torch.randn(8, 64)


@pytest.fixture(scope="module")
def profiles():
    model, x = linear()
    dtypes = (None, "bfloat16", "float16")
    with pytest.MonkeyPatch.context() as patch:  # oneDNN 3.10's products, whichever is here
        patch.setattr(releases, "onednn_brgemm_accumulates", lambda: True)
        return {d: profile_model(model, (x,), hardware=A100, dtype=d) for d in dtypes}


def test_bfloat16_halves_every_byte_and_keeps_every_flop(profiles):
    own, half = profiles[None], profiles["bfloat16"]
    assert (own.flops, own.macs, half.flops, half.macs) == (33_024, 16_384, 33_024, 16_384)
    assert (own.weights_bytes, half.weights_bytes) == (8_320, 4_160)
    assert (own.input_bytes, half.input_bytes) == (2_048, 1_024)
    assert (own.traffic_bytes, half.traffic_bytes) == (11_392, 5_696)
    assert half.params == own.params == 2_080
    # float16's product is ATen's own kernel, which holds nothing more: the output's 512 bytes.
    assert (own.activation_peak_bytes, profiles["float16"].activation_peak_bytes) == (1_024, 512)
    # bfloat16's is oneDNN's brgemm, which holds the result's 8 x 32 block in float32 (1,024),
    # the weight packed (64 inner values x 64 columns x 2 bytes, 8,192) and 1,024 more beside
    # the output: 10,752 (costs/brgemm.py; the profiler measures 15,936 in all on the CPU).
    assert half.activation_peak_bytes == 512 + 1_024 + 8_192 + 1_024
    assert half.peak_memory_bytes == 4_160 + 1_024 + 10_752


def test_the_json_says_the_dtype_and_the_bfloat16_ridge_point(profiles):
    own, half = profiles[None].to_dict(), profiles["bfloat16"].to_dict()
    assert (own["dtype"], half["dtype"]) == ("float32", "bfloat16")
    assert half["inputs"] == [{"name": "input", "shape": [8, 64], "dtype": "bfloat16"}]
    assert own["hardware"]["ridge_point"] == pytest.approx(19.5 * TERA / A100_BANDWIDTH)
    assert half["hardware"]["ridge_point"] == pytest.approx(312 * TERA / A100_BANDWIDTH)
    # memory-bound either way: eager, each op's traffic over the bandwidth (the linear reads
    # the input, 1,024 B, and weights, 4,160 B, and writes 512 B: one op, one kernel)
    assert half["totals"]["est_latency_s"] == pytest.approx(5_696 / A100_BANDWIDTH)


def test_a_saved_bfloat16_profile_reads_back_as_bfloat16_not_float16(profiles):
    """float16 and bfloat16 have the same ridge point on an A100: only the JSON's dtype can
    tell them apart (before it had one, the ridge point picked float16 first)."""
    again = profile_from_dict(profiles["bfloat16"].to_dict())
    assert again.dtype == "bfloat16"


def test_the_estimate_divides_by_the_peak_of_the_dtype():
    """On hardware with a near-infinite bandwidth every subgraph is compute-bound, so the
    estimate is FLOPs over the dtype's peak: 33,024 / 1e12 in float32, / 8e12 in float16."""
    fast = Hardware("fast", "test", {"float32": 1 * TERA, "float16": 8 * TERA}, bandwidth=1e18)
    model, x = linear()
    own = profile_model(model, (x,), hardware=fast)
    half = profile_model(model, (x,), hardware=fast, dtype="float16")
    assert own.est_latency_s == pytest.approx(33_024 / 1e12)
    assert half.est_latency_s == pytest.approx(33_024 / 8e12)
    assert half.dtype == "float16" and half.weights_bytes == 4_160


def test_the_roofline_moves_a_square_matmul_from_compute_to_memory_bound():
    """``nn.Linear(256, 256)`` on ``(256, 256)``: 2*256**3 + 256**2 = 33,619,968 FLOPs over
    (65,536 + 65,792 + 65,536) elements moved, 787,456 bytes in float32: intensity 42.7, above
    the A100's float32 ridge point (9.6), so compute-bound, taking FLOPs / 19.5 TFLOP/s. In
    bfloat16 the bytes halve (intensity 85.4) but the ridge point rises to 153: memory-bound,
    taking 393,728 bytes / 2,039 GB/s."""
    torch.manual_seed(0)
    model, x = nn.Linear(256, 256), torch.randn(256, 256)
    own = profile_model(model, (x,), hardware=A100, execution="compiled")
    half = profile_model(model, (x,), hardware=A100, dtype="bfloat16", execution="compiled")
    assert own.flops == half.flops == 33_619_968
    assert (own.traffic_bytes, half.traffic_bytes) == (787_456, 393_728)
    assert [s.bottleneck for s in own.subgraphs] == ["compute_bound"]
    assert [s.bottleneck for s in half.subgraphs] == ["memory_bound"]
    assert own.est_latency_s == pytest.approx(33_619_968 / (19.5 * TERA))
    assert half.est_latency_s == pytest.approx(393_728 / A100_BANDWIDTH)


class Tied(nn.Module):
    """An embedding whose weight the output layer shares: 10*8 = 80 parameters, once."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.out = nn.Linear(8, 10, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids):
        return self.out(self.embed(ids))


def test_the_users_model_is_untouched_tied_weights_stay_tied_and_token_ids_stay_integers():
    model, ids = Tied(), torch.tensor([[1, 2, 3]])
    before = model.embed.weight.detach().clone()
    half = profile_model(model, (ids,), dtype="bfloat16")
    assert (half.params, half.weights_bytes) == (80, 160)  # 80 weights of 2 bytes, counted once
    assert half.inputs[0].dtype == "int64" and half.dtype == "bfloat16"
    assert model.embed.weight.dtype == torch.float32 and model.out.weight is model.embed.weight
    assert torch.equal(model.embed.weight, before) and model.training


class Gram(nn.Module):
    def forward(self, x):
        return x @ x.transpose(0, 1)


def test_a_model_without_weights_takes_the_dtype_of_its_inputs():
    """No parameter says the dtype: the cast inputs do, and so the peak is bfloat16's."""
    half = profile_model(Gram(), (torch.randn(4, 16),), hardware="a100", dtype="bfloat16")
    assert half.dtype == "bfloat16" and half.input_bytes == 4 * 16 * 2
    assert half.ridge_point == pytest.approx(312 * TERA / A100_BANDWIDTH)


@pytest.mark.parametrize(
    "dtype, hint",
    [("bf16", "did you mean 'bfloat16'?"), ("float64", "'float32', 'bfloat16', 'float16'")],
)
def test_an_unknown_dtype_is_one_line_that_names_the_valid_ones(dtype, hint):
    model, x = linear()
    with pytest.raises(GraphBudgetError) as info:
        profile_model(model, (x,), dtype=dtype)
    assert hint in str(info.value) and "\n" not in str(info.value)


def test_a_bfloat16_training_step_keeps_adams_state_in_the_parameters_dtype(monkeypatch):
    """One Adam step of the Linear: the same FLOPs in both dtypes, every byte halved; the
    optimizer's state is what torch.optim.Adam itself allocates for the bfloat16 copy
    (two moments per parameter, ``zeros_like`` the parameter: 2 * 2,080 * 2 bytes)."""
    monkeypatch.setattr(releases, "onednn_brgemm_accumulates", lambda: True)  # as in 3.10 on
    model, x = linear()
    own = profile_model(model, (x,), mode="train", optimizer="adam")
    half = profile_model(model, (x,), mode="train", optimizer="adam", dtype="bfloat16")
    reference = model.to(torch.bfloat16)  # the test's own copy of the model is spent here
    adam = torch.optim.Adam(reference.parameters())
    reference(x.to(torch.bfloat16)).sum().backward()
    adam.step()
    state = [t for s in adam.state.values() for k, t in s.items() if k != "step"]
    assert half.optimizer_state_bytes == sum(t.numel() * t.element_size() for t in state) == 8_320
    assert (half.mode, half.dtype, half.flops) == ("train", "bfloat16", own.flops)
    assert half.traffic_bytes * 2 == own.traffic_bytes
    # every byte halved but oneDNN's bfloat16 buffers (tests/engine/test_peak_half.py holds the
    # step to the profiler); float16's products hold none
    float16 = profile_model(model.float(), (x,), mode="train", optimizer="adam", dtype="float16")
    assert float16.peak_memory_bytes * 2 == own.peak_memory_bytes
    assert half.peak_memory_bytes > own.peak_memory_bytes // 2
