"""``dtype="int8"`` and ``dtype="float8_e4m3fn"``: a quantized copy, the caller's model as it was.

The model is ``Linear(64, 128) -> ReLU -> Linear(128, 32)`` at ``(4, 64)``: 49,152 MACs
(4*64*128 + 4*128*32) in every dtype. Its weights, by hand:

- float32: 4 * (128*64 + 128 + 32*128 + 32) = 49,792 bytes;
- int8 (``quantize_dynamic``: int8 data, a float64 scale and an int64 zero point per tensor,
  float32 bias): (8,192 + 16 + 512) + (4,096 + 16 + 128) = 12,960 bytes;
- float8_e4m3fn (torchao: float8 data, a float32 scale per row, float32 bias):
  (8,192 + 512 + 512) + (4,096 + 128 + 128) = 13,568 bytes.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_graphbudget import profile_model
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.modes.request import Variant, untagged

MACS = 49_152


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))


def test_int8_profiles_a_dynamically_quantized_copy_and_leaves_the_model_alone():
    model = mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prof = profile_model(model, torch.randn(4, 64), dtype="int8", hardware="epyc-9654")
    assert (prof.dtype, prof.weights_bytes, prof.macs) == ("int8", 12_960, MACS)
    assert prof.coverage.unsupported_ops == {}
    assert [type(m) for m in model] == [nn.Linear, nn.ReLU, nn.Linear]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert profile_model(model, torch.randn(4, 64)).weights_bytes == 49_792  # the control


def test_float8_profiles_float8_weights():
    pytest.importorskip("torchao", reason="the quant extra (torchao) is not installed")
    model = mlp()
    prof = profile_model(model, torch.randn(4, 64), dtype="float8_e4m3fn")
    assert (prof.dtype, prof.weights_bytes, prof.macs) == ("float8_e4m3fn", 13_568, MACS)
    assert type(model[0].weight) is nn.Parameter and model[0].weight.dtype == torch.float32


@pytest.mark.parametrize(
    "model, options, message",
    [
        (mlp(), {"mode": "train"}, "dtype='int8' quantizes the model for inference: use it with "
         "mode='eval'"),
        (nn.Conv2d(3, 8, 3), {}, "dtype='int8' quantizes nn.Linear layers and Conv2d has none"),
        # user trial: its forward failed ("expected scalar type Float but found Half"), blamed
        (mlp().half(), {}, "dtype='int8' quantizes float32 Linear layers, and Sequential's "
         "weights are float16: give the model in float32"),
    ],
)  # fmt: skip
def test_what_cannot_be_quantized_is_one_line(model, options, message):
    shape = (1, 3, 8, 8) if isinstance(model, nn.Conv2d) else (4, 64)
    kind = next(model.parameters()).dtype
    with pytest.raises(GraphBudgetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        profile_model(model, torch.randn(shape, dtype=kind), dtype="int8", **options)


@pytest.mark.parametrize("dtype", ["int8", "float8_e4m3fn"])
def test_a_model_neither_recipe_quantizes_is_refused_not_priced_as_float32(dtype):
    """User trial: ``nn.MultiheadAttention`` under int8 or float8 came out float32 to the
    byte, with an ``@int8`` id: both recipes skip its ``out_proj`` (a
    NonDynamicallyQuantizableLinear) and its bare ``in_proj_weight``."""
    if dtype.startswith("float8"):
        pytest.importorskip("torchao", reason="the quant extra (torchao) is not installed")
    attention, x = nn.MultiheadAttention(64, 4, batch_first=True).eval(), torch.randn(2, 10, 64)
    with pytest.raises(GraphBudgetError, match="quantized none of MultiheadAttention's Linear"):
        profile_model(attention, (x, x, x), dtype=dtype)


@pytest.mark.parametrize(
    ("dtype", "message"),
    [
        ("int8", "dtype='int8' quantizes a copy of the model, and Sequential is already quantized"),
        ("bfloat16", "dtype='bfloat16' casts the floating inputs too, and Sequential is already"),
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.ao.quantization's
def test_an_already_quantized_model_is_refused_in_its_words_not_its_forwards(dtype, message):
    """User trial: int8 on a ``quantize_dynamic`` model said "Sequential has none [nn.Linear]"
    (they are quantized Linears now); bfloat16 cast its inputs, not its packed weights, and
    blamed its forward ("expected scalar type Float but found BFloat16")."""
    model = torch.ao.quantization.quantize_dynamic(mlp().eval(), {nn.Linear}, dtype=torch.qint8)
    with pytest.raises(GraphBudgetError, match=message.replace("(", r"\(")) as info:
        profile_model(model, torch.randn(4, 64), dtype=dtype)
    assert str(info.value).endswith("leave dtype unset")
    assert profile_model(model, torch.randn(4, 64), dtype="float32").macs == MACS  # no cast


@pytest.mark.parametrize("dtype", ["int8", "float8_e4m3fn"])
def test_a_model_on_the_meta_device_is_not_quantized_without_a_word(dtype):
    """User trial: int8 on a meta-built BERT ended in torch's traceback ("Tensor.item() cannot
    be called on meta tensors", from the observer); float8 priced the weights at one byte
    and the products without the dequantize, 1.5x fast. Both read the weights' values."""
    with torch.device("meta"):
        model = mlp()
    with pytest.raises(GraphBudgetError, match="Sequential is on the meta device, which has"):
        profile_model(model, torch.empty(4, 64, device="meta"), dtype=dtype)


def test_int8_on_a_gpu_profile_is_refused_its_kernel_runs_on_cpus_only():
    """User trial: int8 (``quantized::linear_dynamic``, FBGEMM or QNNPACK) was priced on t4,
    a100 and h100 at their int8 tensor-core peaks: a kernel no GPU runs, slower than float16
    on every card. A CPU profile prices it."""
    with pytest.raises(GraphBudgetError, match="runs on CPU only: t4 .turing. would price"):
        profile_model(mlp(), torch.randn(4, 64), dtype="int8", hardware="t4")
    assert profile_model(mlp(), torch.randn(4, 64), dtype="int8").macs == MACS  # generic
    # a model quantized by torch.ao already: priced on a100 at its int8 tensor-core peak
    quantized = torch.ao.quantization.quantize_dynamic(mlp().eval(), {nn.Linear})
    with pytest.raises(GraphBudgetError, match="kernels run on CPU only: a100 .ampere."):
        profile_model(quantized, torch.randn(4, 64), hardware="a100")
    assert profile_model(quantized, torch.randn(4, 64), hardware="epyc-9654").macs == MACS


def test_the_baseline_id_of_a_quantized_variant_ends_with_its_dtype():
    assert Variant(dtype="int8").tag("nets.toml::lin") == "nets.toml::lin@int8"
    assert Variant(dtype="float8_e4m3fn").tag("m") == "m@float8_e4m3fn"
    assert untagged("nets.toml::lin@int8") == "nets.toml::lin"
    assert untagged("t.py::test[x]@float8_e4m3fn") == "t.py::test[x]"


def test_a_tied_linear_quantized_is_a_second_copy_and_the_profile_says_so():
    """User trial: int8 on a GPT-2 whose ``lm_head`` shares ``wte``'s weight grew its weights
    (689 kB to 753 kB) without a word: the embedding stays float, so the head's quantized
    weight is a second copy. By hand: the float32 table 16 x 8 x 4 = 512 bytes, the int8 copy
    16 x 8 = 128 bytes and its float64 scale and int64 zero point, 16: 656."""

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(16, 8)
            self.head = nn.Linear(8, 16, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, ids):
            return self.head(self.wte(ids))

    prof = profile_model(Tied().eval(), (torch.randint(0, 16, (1, 4)),), dtype="int8")
    assert prof.weights_bytes == 512 + 128 + 16
    assert prof.notes == [
        "dtype='int8': head's weight is tied to wte.weight, which stays as it is: the "
        "quantized weight is a second copy, counted in the weights"
    ]
