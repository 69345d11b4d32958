"""Quantized resnet50, BERT-base and a small Llama: weight bytes by hand, layer by layer.

Each model is quantized the way ``dtype="int8"`` does it (``quantize_dynamic`` of its
``nn.Linear`` layers) and profiled; every quantized layer's weight bytes in the profile (the
kernel it anchors) must equal its packed size computed here from the quantized tensors (int8
data at 1 byte an element, 16 bytes of per-tensor scale and zero point, the float32 bias), the
total must equal those plus the float parameters left, the MACs must equal the float model's,
and no op may be unsupported. ``dtype="int8"`` and ``dtype="float8_e4m3fn"`` on the float model
must give the same totals as the hand count. Too slow for ``make test`` (a real forward of
each, float and quantized): the tests do the same on tiny models.

    python benchmarks/quantized.py          # writes benchmarks/QUANTIZED_RESULTS.md
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def models() -> dict:
    import torch
    import torchvision
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    llama = LlamaConfig(  # TinyLlama-style shapes, 4 layers: grouped-query attention, SwiGLU
        hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
    )  # fmt: skip
    ids = torch.randint(0, 30000, (1, 128))
    return {
        "resnet50": (torchvision.models.resnet50(), torch.randn(1, 3, 224, 224)),
        "bert-base": (BertModel(BertConfig()).eval(), ids),
        "llama (4 layers, h=512)": (LlamaForCausalLM(llama).eval(), ids),
    }


def packed_bytes(weight, bias) -> int:
    """int8 data, a float64 scale and an int64 zero point, the float32 bias."""
    out, inp = weight.shape
    return out * inp * 1 + 8 + 8 + (bias.numel() * 4 if bias is not None else 0)


def check(name: str, model, inputs) -> str:
    import torch
    from torch.ao.quantization import quantize_dynamic

    from pytest_graphbudget import profile_model

    start = time.perf_counter()
    floating = profile_model(model, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    prof = profile_model(quantized, inputs)
    layers = {}
    for path, module in quantized.named_modules():
        if isinstance(getattr(module, "_packed_params", None), torch.nn.Module):  # the Linear
            layers[path] = packed_bytes(*module._weight_bias())
    charged: dict[str, int] = {}
    for sub in prof.subgraphs:
        charged[sub.module] = charged.get(sub.module, 0) + sub.bytes_weights
    wrong = [p for p, size in layers.items() if charged.get(p) != size]
    left = sum(p.numel() * p.element_size() for p in quantized.parameters())
    left += sum(b.numel() * b.element_size() for b in quantized.buffers())
    total = left + sum(layers.values())
    as_dtype = profile_model(model, inputs, dtype="int8")
    ok = (
        not wrong
        and prof.weights_bytes == total == as_dtype.weights_bytes
        and prof.macs == floating.macs
        and not prof.coverage.unsupported_ops
    )
    fp8 = profile_model(model, inputs, dtype="float8_e4m3fn")
    seconds = time.perf_counter() - start
    return (
        f"| {name} | {len(layers)} | {floating.weights_bytes:,} | {prof.weights_bytes:,} "
        f"| {total:,} | {fp8.weights_bytes:,} | {prof.macs == floating.macs} "
        f"| {len(prof.coverage.unsupported_ops) + len(fp8.coverage.unsupported_ops)} "
        f"| {'yes' if ok else 'NO: ' + ', '.join(wrong[:3])} | {seconds:.0f} |"
    )


def main() -> None:
    import torch

    rows = [check(name, *case) for name, case in models().items()]
    lines = [
        "# Quantized models: weight bytes by hand",
        "",
        f"`python benchmarks/quantized.py`, torch {torch.__version__}. int8: `quantize_dynamic` of "
        "every `nn.Linear`; each layer's bytes in the profile against its packed size by hand.",
        "",
        "| model | int8 layers | float32 weights | int8 weights (profile) | int8 by hand "
        "| float8_e4m3fn weights | MACs equal | unsupported ops | every layer exact | s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]
    (HERE / "QUANTIZED_RESULTS.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
