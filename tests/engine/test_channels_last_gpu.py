"""A GPU prices an eager convolution on a channels-last input at its family's factor
(``[channels_last]`` in ``hardware_profiles.toml``, fitted by ``benchmarks/gpu_channels_last.py``
to timm's NHWC tables: a channels-last conv net runs in about 0.89 of its NCHW time), and only
there: compiled models, families without an NHWC table and CPUs are priced as before."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_graphbudget import profile_model
from pytest_graphbudget.hardware import get

CONVS = {  # (module, its efficiency kind); after a ReLU, whose output's channels mark groups
    "dense": (lambda: nn.Conv2d(64, 64, 3, padding=1), "conv"),
    "grouped": (lambda: nn.Conv2d(64, 64, 3, padding=1, groups=4), "conv_grouped"),
    "depthwise": (lambda: nn.Conv2d(64, 64, 3, padding=1, groups=64), "depthwise"),
}


def conv_seconds(model: nn.Module, x: torch.Tensor, hardware: str, **options) -> float:
    """The estimated seconds of the model's one convolution, less its launch."""
    prof = profile_model(model, (x,), hardware=hardware, dtype="float16", **options)
    convs = [s for s in prof.to_dict()["subgraphs"] if s["kind"].startswith("conv")]
    assert len(convs) == 1, convs
    return convs[0]["est_latency_s"] - get(hardware).launch_s


def both(name: str) -> tuple[nn.Module, nn.Module]:
    """The convolution as built (NCHW) and converted to channels-last, same weights."""
    torch.manual_seed(0)
    plain = nn.Sequential(nn.ReLU(), CONVS[name][0]()).eval()
    converted = nn.Sequential(nn.ReLU(), CONVS[name][0]()).eval()
    converted.load_state_dict(plain.state_dict())
    return plain, converted.to(memory_format=torch.channels_last)


@pytest.mark.parametrize("name", CONVS)
def test_an_eager_convolution_on_a_channels_last_input_takes_its_kinds_factor(name):
    plain, converted = both(name)
    x = torch.randn(8, 64, 56, 56)
    nchw = conv_seconds(plain, x, "rtx4090")
    nhwc = conv_seconds(converted, x.contiguous(memory_format=torch.channels_last), "rtx4090")
    factor = get("rtx4090").channels_last[CONVS[name][1]]
    assert 0.5 < factor < 1.0 or name == "depthwise"
    assert nhwc == pytest.approx(factor * nchw, rel=1e-9)


def test_a_channels_last_weight_runs_the_convolution_channels_last_as_cudnn_picks():
    # ATen's cudnn_conv_suggest_memory_format: the input's or the weight's strides decide
    plain, converted = both("dense")
    x = torch.randn(8, 64, 56, 56)  # NCHW, into a converted model
    factor = get("a100").channels_last["conv"]
    assert conv_seconds(converted, x, "a100") == pytest.approx(
        factor * conv_seconds(plain, x, "a100"), rel=1e-9
    )


@pytest.mark.parametrize(
    ("hardware", "options"),
    [
        ("rtx4090", {"execution": "compiled"}),  # Inductor picks the layout itself
        ("mi300x", {}),  # cdna3: no NHWC table to fit
        ("generic", {}),  # the plain roofline
    ],
)
def test_compiled_models_other_families_and_plain_rooflines_ignore_the_layout(hardware, options):
    plain, converted = both("dense")
    x = torch.randn(8, 64, 56, 56)
    nhwc = x.contiguous(memory_format=torch.channels_last)
    if options.get("execution") == "compiled":  # a fused group's time, launch and all
        times = [
            profile_model(m, (i,), hardware=hardware, dtype="float16", **options).est_latency_s
            for m, i in ((plain, x), (converted, nhwc))
        ]
        assert times[0] == times[1]
        return
    assert conv_seconds(converted, nhwc, hardware) == conv_seconds(plain, x, hardware)


def test_the_factors_are_listed_with_each_profile_and_a_family_without_them_lists_none():
    from pytest_graphbudget.cli.hardware import hardware_rows

    rows = {r["name"]: r for r in hardware_rows([get("rtx3090"), get("mi300x"), get("generic")])}
    assert set(rows["rtx3090"]["channels_last"]) == {"conv", "conv_grouped", "depthwise"}
    assert rows["mi300x"]["channels_last"] == {} == rows["generic"]["channels_last"]
