"""Quantized models at the bytes their weights are stored in, counted by hand.

Each model is quantized here the way it is shipped (``torch.ao``'s ``quantize_dynamic``,
torchao's ``quantize_``), and its expected weight bytes are written out from the shapes of the
quantized tensors: int8 data at 1 byte an element, float8 at 1, packed int4 at half a byte,
with the scales, zero points and biases as they are stored. MACs are those of the float model:
``Linear(64, 128) -> ReLU -> Linear(128, 32)`` at ``(4, 64)``: 4*64*128 + 4*128*32 = 49,152.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from pytest_graphbudget import profile_model

MACS = 4 * 64 * 128 + 4 * 128 * 32  # 49,152, the float model's


def mlp(dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32)).to(dtype)


def dynamic(model: nn.Module, qconfig: object = None) -> nn.Module:
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch.ao's deprecation notes
        warnings.simplefilter("ignore")
        spec = {nn.Linear: qconfig} if qconfig is not None else {nn.Linear}
        return quantize_dynamic(model, spec, dtype=torch.qint8)


def test_quantize_dynamic_weights_are_int8_with_a_scale_and_zero_point_per_tensor():
    prof = profile_model(dynamic(mlp()), torch.randn(4, 64))
    # int8 weight 128*64 + scale (float64) 8 + zero point (int64) 8 + float32 bias 128*4
    first = 128 * 64 + 8 + 8 + 128 * 4  # 8,720
    second = 32 * 128 + 8 + 8 + 32 * 4  # 4,240
    assert prof.weights_bytes == first + second
    assert [s.bytes_weights for s in prof.subgraphs] == [first, second]
    assert prof.macs == MACS and prof.coverage.unsupported_ops == {}
    assert prof.params == 128 * 64 + 128 + 32 * 128 + 32  # the packed weights and biases
    assert prof.dtype == "int8"
    # user trial: each layer's row said 0 params (the total counted them), and its weight
    # sat in a row of its own, "0._packed_params", the holder a quantized Linear keeps it in
    rows = {path: (m.params, m.weights_bytes) for path, m in prof.modules.items()}
    assert rows == {"0": (128 * 64 + 128, first), "1": (0, None), "2": (32 * 128 + 32, second)}


def test_quantize_dynamic_per_channel_counts_a_scale_and_zero_point_per_row():
    from torch.ao.quantization import per_channel_dynamic_qconfig

    prof = profile_model(dynamic(mlp(), per_channel_dynamic_qconfig), torch.randn(4, 64))
    # per output row: a float64 scale and an int64 zero point, 16 bytes
    first = 128 * 64 + 128 * 16 + 128 * 4
    second = 32 * 128 + 32 * 16 + 32 * 4
    assert prof.weights_bytes == first + second and prof.macs == MACS


@pytest.mark.parametrize("cell", [False, True], ids=["lstm", "lstm-cell"])
def test_a_dynamic_lstms_packed_cells_are_its_parameters(cell):
    """``quantize_dynamic``'s LSTM keeps its weights in packed cells, not ``_packed_params``:
    they had been left out of ``params`` and ``weights_bytes`` (93% of this model's)."""
    from torch.ao.quantization import quantize_dynamic

    torch.manual_seed(0)
    layer = nn.LSTMCell(4, 6) if cell else nn.LSTM(4, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = quantize_dynamic(nn.Sequential(layer).eval(), {type(layer)}, dtype=torch.qint8)
    x = torch.randn(2, 4) if cell else torch.randn(5, 2, 4)
    prof = profile_model(model, x)
    # weight_ih 24x4 and weight_hh 24x6 (4 gates x 6), each int8 with a scale and a zero
    # point (8 bytes each); bias_ih and bias_hh 24 each, float32
    assert prof.params == 24 * 4 + 24 * 6 + 2 * 24  # 288, as the float LSTM's
    assert prof.weights_bytes == (24 * 4 + 16) + (24 * 6 + 16) + 2 * 24 * 4  # 464


def test_the_float_model_is_priced_at_four_bytes_an_element():
    """The control: the same model before quantization."""
    prof = profile_model(mlp(), torch.randn(4, 64))
    assert prof.weights_bytes == 4 * (128 * 64 + 128 + 32 * 128 + 32)


torchao = pytest.importorskip("torchao", reason="the quant extra (torchao) is not installed")


def _ao(model: nn.Module, config: object) -> nn.Module:
    from torchao.quantization import quantize_

    quantize_(model, config)
    return model


def test_torchao_int8_weight_only_is_int8_data_with_a_scale_and_zero_point_per_row():
    from torchao.quantization import Int8WeightOnlyConfig

    model = _ao(mlp(), Int8WeightOnlyConfig())
    prof = profile_model(model, torch.randn(4, 64))
    # int8 data out*in, a float32 scale and an int8 zero point per row, float32 bias
    first = 128 * 64 + 128 * 4 + 128 * 1 + 128 * 4  # 9,344
    second = 32 * 128 + 32 * 4 + 32 * 1 + 32 * 4  # 4,384
    assert prof.weights_bytes == first + second
    assert [s.bytes_weights for s in prof.subgraphs] == [first, second]
    assert prof.macs == MACS and prof.coverage.unsupported_ops == {}
    assert prof.dtype == "int8"


def test_torchao_float8_weight_only_is_one_byte_an_element():
    from torchao.quantization import Float8WeightOnlyConfig

    model = _ao(mlp(torch.bfloat16), Float8WeightOnlyConfig())
    prof = profile_model(model, torch.randn(4, 64, dtype=torch.bfloat16))
    # float8 data out*in, a float32 scale per row, bfloat16 bias
    first = 128 * 64 + 128 * 4 + 128 * 2  # 8,960
    second = 32 * 128 + 32 * 4 + 32 * 2  # 4,288
    assert prof.weights_bytes == first + second
    assert prof.macs == MACS and prof.coverage.unsupported_ops == {}
    assert prof.dtype == "float8_e4m3fn"


def test_torchao_int4_on_cpu_is_stored_one_value_a_byte():
    """torchao's CPU int4 (``IntxWeightOnlyConfig``) keeps each int4 value in an int8, unpacked:
    1 byte an element, with a float32 scale and an int8 zero point per group of 32."""
    from torchao.quantization import IntxWeightOnlyConfig, PerGroup

    config = IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32))
    prof = profile_model(_ao(mlp(), config), torch.randn(4, 64))
    first = 128 * 64 + (128 * 64 // 32) * (4 + 1) + 128 * 4  # 9,984
    second = 32 * 128 + (32 * 128 // 32) * (4 + 1) + 32 * 4  # 4,864
    assert prof.weights_bytes == first + second
    assert prof.macs == MACS and prof.coverage.unsupported_ops == {}


class Int4Linear(nn.Module):
    """A weight-only int4 linear as gpt-fast ships it: torch's own packing, two values a byte,
    with a bfloat16 scale and zero per group of ``group`` input elements and output row."""

    def __init__(self, k: int, n: int, group: int = 32):
        super().__init__()
        values = torch.randint(0, 16, (n, k), dtype=torch.int32)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(values, 1)
        self.register_buffer("packed", packed)
        self.register_buffer("scales_zeros", torch.rand(k // group, n, 2, dtype=torch.bfloat16))
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(
            x, self.packed, self.group, self.scales_zeros
        )


def test_packed_int4_is_half_a_byte_an_element_plus_scales_and_zeros():
    model = Int4Linear(64, 128)
    prof = profile_model(model, torch.randn(4, 64, dtype=torch.bfloat16))
    # 128*64 values at half a byte, then (64/32 groups) * 128 rows * (scale, zero) * 2 bytes
    assert prof.weights_bytes == 128 * 64 // 2 + (64 // 32) * 128 * 2 * 2  # 4,096 + 1,024
    assert model.packed.numel() * model.packed.element_size() == 128 * 64 // 2
    assert prof.macs == 4 * 64 * 128 and prof.coverage.unsupported_ops == {}


def test_tiny_llama_and_bert_quantized_dynamically_have_packed_weights_and_no_unsupported_op():
    """Shipped-config-style transformers at tiny sizes (no hub): every Linear int8, the
    embeddings and norms float32; the weight bytes are each layer's as stored, by hand."""
    transformers = pytest.importorskip("transformers")

    llama = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, max_position_embeddings=64,
    )  # fmt: skip
    bert = transformers.BertConfig(
        hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        vocab_size=256, max_position_embeddings=64,
    )  # fmt: skip
    for model in (transformers.LlamaForCausalLM(llama), transformers.BertModel(bert)):
        model.eval()
        ids = torch.randint(0, 256, (1, 16))
        floating = profile_model(model, ids)
        quantized = dynamic(model)
        prof = profile_model(quantized, ids)
        expected = sum(p.numel() * 4 for p in quantized.parameters())  # float32 left
        expected += sum(b.numel() * b.element_size() for b in quantized.buffers())
        for module in quantized.modules():
            if type(module).__name__ == "Linear" and hasattr(module, "_packed_params"):
                weight, bias = module._weight_bias()
                out, inp = weight.shape
                expected += out * inp + 8 + 8 + (out * 4 if bias is not None else 0)
        assert prof.weights_bytes == expected
        assert prof.macs == floating.macs and prof.coverage.unsupported_ops == {}


def _embedding_quantized(model: nn.Module, spec: dict) -> nn.Module:
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch.ao's deprecation notes
        warnings.simplefilter("ignore")
        return quantize_dynamic(model.eval(), spec)


class Lookup(nn.Module):
    """``Embedding(100, 16)`` then ``Linear(16, 4)``, the user trial's model made small."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.fc = nn.Embedding(100, 16), nn.Linear(16, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.emb(ids))


def test_a_quantized_embedding_table_is_in_params_and_weights():
    """User trial: ``quantize_dynamic``'s Embedding keeps its table packed in an
    ``EmbeddingPackedParams`` (``_packed_weight``), which had been left out: params counted
    the Linear's alone. By hand: the table 100 x 16 quint8 at 1 byte an element, 1,600, with
    a float32 scale and a float32 zero point per row, 100 x 8 = 800; the Linear's int8 weight
    4 x 16 = 64, its per-tensor scale and zero point 8 + 8, its float32 bias 4 x 4 = 16."""
    from torch.ao.quantization import default_dynamic_qconfig
    from torch.ao.quantization import float_qparams_weight_only_qconfig as table_qconfig

    spec = {nn.Embedding: table_qconfig, nn.Linear: default_dynamic_qconfig}
    prof = profile_model(_embedding_quantized(Lookup(), spec), torch.randint(0, 100, (2, 8)))
    table, fc = 100 * 16 + 100 * (4 + 4), 4 * 16 + 8 + 8 + 4 * 4  # 2,400 and 96
    assert prof.params == 100 * 16 + 4 * 16 + 4  # 1,668
    assert prof.weights_bytes == table + fc
    rows = {path: (m.params, m.weights_bytes) for path, m in prof.modules.items()}
    assert rows["emb"] == (100 * 16, table) and rows["fc"] == (4 * 16 + 4, fc)
    assert prof.coverage.unsupported_ops == {}


@pytest.mark.parametrize("bits", [8, 4])
def test_a_quantized_embedding_bag_alone_counts_its_table(bits):
    """An ``EmbeddingBag`` quantized alone had read params 0 and weights 0 B. By hand, its
    table of 100 x 16: quint8 at 1 byte an element (1,600), or quint4x2 at half a byte (800),
    each row with a float32 scale and a float32 zero point (100 x 8 = 800)."""
    from torch.ao.quantization import float_qparams_weight_only_qconfig as qconfig8
    from torch.ao.quantization import float_qparams_weight_only_qconfig_4bit as qconfig4

    torch.manual_seed(0)
    bag = nn.Sequential(nn.EmbeddingBag(100, 16, mode="sum"))
    model = _embedding_quantized(bag, {nn.EmbeddingBag: qconfig8 if bits == 8 else qconfig4})
    prof = profile_model(model, torch.randint(0, 100, (4, 8)))
    assert prof.params == 100 * 16
    assert prof.weights_bytes == 100 * 16 * bits // 8 + 100 * (4 + 4)  # 2,400 or 1,600
    assert prof.dtype == ("uint8" if bits == 8 else "int4")


@pytest.mark.parametrize(
    ("layer", "bits", "traffic"),
    [
        # 32 rows of 16 at a byte each plus 8 (scale, zero point): 768; the float32 lookups
        # written 32 x 16 x 4 = 2,048; the int64 indices read 32 x 8 = 256
        (nn.Embedding, 8, 768 + 2048 + 256),
        # the same rows read, one per index, into 4 bags written 4 x 16 x 4 = 256
        (nn.EmbeddingBag, 8, 768 + 256 + 256),
        # rows of 16 at half a byte an element: 32 x (8 + 8) = 512
        (nn.EmbeddingBag, 4, 512 + 256 + 256),
    ],
)
def test_a_quantized_lookup_reads_its_rows_as_stored(layer, bits, traffic):
    """User trial: a quantized table's lookup had been charged the float32 rows it returns as
    the rows it read (4x the stored bytes for a plain lookup), and a bag the bags it writes
    (10 bags read as 10 rows, not one per index). A lookup reads one stored row per index."""
    from torch.ao.quantization import float_qparams_weight_only_qconfig as qconfig8
    from torch.ao.quantization import float_qparams_weight_only_qconfig_4bit as qconfig4

    torch.manual_seed(0)
    table = layer(100, 16, mode="sum") if layer is nn.EmbeddingBag else layer(100, 16)
    model = _embedding_quantized(nn.Sequential(table), {layer: qconfig8 if bits == 8 else qconfig4})
    prof = profile_model(model, torch.randint(0, 100, (4, 8)))
    assert prof.traffic_bytes == traffic
    assert prof.weights_bytes == 100 * 16 * bits // 8 + 100 * 8  # the whole table is held


def test_a_float16_dynamic_linear_is_two_bytes_an_element():
    """User trial: ``quantize_dynamic(..., dtype=torch.float16)`` packs each weight in float16
    (FBGEMM's), but it unpacks to float32 and had been counted at 4 bytes an element. By hand:
    float16 weights 128 x 64 and 32 x 128 at 2 bytes, float32 biases 128 and 32 at 4."""
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = quantize_dynamic(mlp(), {nn.Linear}, dtype=torch.float16)
    prof = profile_model(model, torch.randn(4, 64))
    first, second = 128 * 64 * 2 + 128 * 4, 32 * 128 * 2 + 32 * 4  # 16,896 and 8,320
    assert prof.weights_bytes == first + second
    assert prof.params == 128 * 64 + 128 + 32 * 128 + 32  # as the float model's
    assert prof.dtype == "float16"


@pytest.mark.parametrize("cell", [False, True], ids=["lstm", "lstm-cell"])
def test_a_float16_dynamic_lstm_is_two_bytes_a_weight_element(cell):
    """The float16 dynamic LSTM's packed cells, as the Linear's: weight_ih 24x4 and weight_hh
    24x6 at 2 bytes an element, bias_ih and bias_hh 24 each in float32 (4 bytes)."""
    from torch.ao.quantization import quantize_dynamic

    torch.manual_seed(0)
    layer = nn.LSTMCell(4, 6) if cell else nn.LSTM(4, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = quantize_dynamic(nn.Sequential(layer).eval(), {type(layer)}, dtype=torch.float16)
    prof = profile_model(model, torch.randn(2, 4) if cell else torch.randn(5, 2, 4))
    assert prof.params == 24 * 4 + 24 * 6 + 2 * 24  # 288
    assert prof.weights_bytes == (24 * 4 + 24 * 6) * 2 + 2 * 24 * 4  # 672
