"""Peak memory of tiny transformers architectures, on fakes and in a training step, measured.

transformers 5 decides several things from the values of a model's inputs (whether attention
needs an explicit mask, whether position ids are packed sequences, whether a recurrent layer
multiplies a padding mask in), and its models keep state on their modules (a recurrent layer's
last state). On fakes (a model built on the meta device, every training step) those values
cannot be read: ``engine/hf_masks.py`` answers them from the real inputs and from the ops that
made the forward's own tensors. This sweep holds every such path to eager torch, one
architecture at a time, each built tiny from its configuration (2 layers, hidden 64; no
weights are downloaded):

- ``eval meta``: the forward profiled on a model built on the meta device, against the same
  model built with weights (both ours: the real one is exact against the profiler on the tape);
- ``train``: one training step (the sum of the outputs as the loss, ``backward()``), against
  ``torch.profiler(profile_memory=True)``'s running peak plus what the step holds before it
  (``tests/engine/test_train_peak_gaps.measured``), one intra-op thread.

Each architecture is called as training loops call it: with an unpadded ``attention_mask``, and
for causal LMs also without one and with ``use_cache=False`` (as under gradient
checkpointing), where the forward makes its own position ids.

    python benchmarks/hf_peak.py                     # every architecture, writes HF_PEAK_RESULTS.md
    python benchmarks/hf_peak.py --models llama,bart --no-write
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import warnings
from pathlib import Path

from notes import cpu_kernels, ratio, save_results  # benchmarks/notes.py

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent / "tests" / "engine")]

TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
VISION = {**TEXT, "image_size": 32, "patch_size": 8}
SEQ2SEQ = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "vocab_size": 128,
    "max_position_embeddings": 128,
    "pad_token_id": 0,
}
DEEPSEEK = {
    **TEXT,
    "num_key_value_heads": 4,
    "moe_intermediate_size": 32,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
}
CAUSAL = (
    "llama mistral qwen2 qwen3 gemma gemma2 gemma3_text phi3 gpt_neox opt bloom falcon gpt2 "
    "olmo2 starcoder2 cohere stablelm granite smollm3 mixtral qwen2_moe phimoe jamba mamba "
    "falcon_h1 recurrent_gemma llama4_text gpt_oss qwen3_next lfm2 bamba"
).split()
ENCODERS = "bert roberta distilbert modernbert electra xlm-roberta mpnet deberta-v2".split()
IMAGES = "vit clip_vision_model dinov2 siglip_vision_model".split()
VLMS = {"llava": ("clip_vision_model", "llama"), "paligemma": ("siglip_vision_model", "gemma")}
"""Vision-language models: a vision tower and a decoder, the image's features merged into the
text's embeddings where its tokens are (``masked_scatter``)."""
IMAGE_TOKEN = 127
MODELS = (*CAUSAL, "deepseek_v3", *ENCODERS, *IMAGES, *VLMS, "bart", "mbart", "t5")


def config(name: str):
    import transformers

    if name in ("bart", "mbart"):
        return transformers.AutoConfig.for_model(name, **SEQ2SEQ)
    if name == "t5":
        sizes = {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 4, "d_kv": 16}
        return transformers.AutoConfig.for_model(
            name, **sizes, vocab_size=128, decoder_start_token_id=0, pad_token_id=0
        )
    if name in VLMS:
        vision, text = VLMS[name]
        tower = {**VISION, "hidden_size": 32, "intermediate_size": 64}
        return transformers.AutoConfig.for_model(
            name,
            vision_config={"model_type": vision, **tower},
            text_config={"model_type": text, **TEXT, "head_dim": 16},
            image_token_index=IMAGE_TOKEN,
            **({"vision_feature_layer": -1} if name == "llava" else {"projection_dim": 64}),
        )
    sizes = DEEPSEEK if name == "deepseek_v3" else VISION if name in IMAGES else TEXT
    sizes = {**sizes, "embedding_size": 64} if name in ("electra", "albert") else sizes
    made = transformers.AutoConfig.for_model(name, **sizes)
    if name not in IMAGES and name != "deepseek_v3":
        try:
            made.head_dim = 16
        except AttributeError:  # a property of the configuration (Falcon)
            pass
    return made


def build(name: str, cfg):
    import transformers

    if name == "t5":
        return transformers.AutoModelForSeq2SeqLM.from_config(cfg)
    if name in CAUSAL or name == "deepseek_v3":
        return transformers.AutoModelForCausalLM.from_config(cfg)
    if name in VLMS:
        return transformers.AutoModelForImageTextToText.from_config(cfg)
    return transformers.AutoModel.from_config(cfg)


def calls(name: str) -> list[tuple[str, tuple, dict, dict]]:
    """(label, args, tensor keywords, other keywords) of each call tried."""
    import torch

    torch.manual_seed(1)
    if name in IMAGES:
        return [("pixels", (torch.randn(2, 3, 32, 32),), {}, {})]
    if name in VLMS:  # one 32-pixel image (16 patches of 8), its tokens first, then 12 words
        ids = torch.cat([torch.full((1, 16), IMAGE_TOKEN), torch.randint(3, 120, (1, 12))], 1)
        image = {"pixel_values": torch.randn(1, 3, 32, 32), "attention_mask": torch.ones_like(ids)}
        return [("image", (ids,), image, {})]
    ids = torch.randint(3, 128, (2, 16))
    mask = {"attention_mask": torch.ones_like(ids)}
    if name == "t5":
        return [("mask", (ids,), {**mask, "decoder_input_ids": ids}, {})]
    if name in CAUSAL or name == "deepseek_v3":
        off = {"use_cache": False}
        return [("mask", (ids,), mask, off), ("no mask", (ids,), {}, off)]
    return [("mask", (ids,), mask, {}), ("no mask", (ids,), {}, {})]


def measure(name: str) -> list[dict]:
    import torch
    from test_train_peak_gaps import measured  # tests/engine: the profiler's step peak
    from torch import nn

    from pytest_graphbudget import profile_model
    from pytest_graphbudget.errors import ModelRunError

    class Called(nn.Module):
        def __init__(self, model, options):
            super().__init__()
            self.model, self.options = model, options

        def forward(self, *args, **kwargs):
            out = self.model(*args, **kwargs, **self.options)
            for field in ("logits", "last_hidden_state"):
                if getattr(out, field, None) is not None:
                    return getattr(out, field)
            return out[0]

    cfg = config(name)
    torch.manual_seed(0)
    real = build(name, cfg)
    with torch.device("meta"):
        on_meta = build(name, cfg)
    rows = []
    for label, args, tensors, options in calls(name):
        model, twin = Called(real, options), Called(on_meta, options)
        eager = profile_model(model, args, tensors).peak_memory_bytes
        try:
            fakes = profile_model(twin, args, tensors).peak_memory_bytes
        except ModelRunError as error:  # a forward that reads values: no fakes can run it
            fakes = None if "depends on tensor values" in str(error) else _raise(error)
        step = profile_model(model, args, tensors, mode="train")
        truth = measured(model, args, kwargs=tensors)
        row = {"model": name, "call": label, "eval": eager, "eval_meta": fakes}
        rows.append(row | {"train": step.peak_memory_bytes, "measured": truth})
        rows[-1]["method"] = step.trace.method
    return rows


def _raise(error: Exception):
    raise error


def _meta(row: dict) -> str:
    if row["eval_meta"] is None:
        return "n/a: its forward reads values (the image tokens counted)"
    return ratio(row["eval_meta"], row["eval"])


def render(rows: list[dict], failed: dict[str, str], seconds: float) -> str:
    import torch
    import transformers

    lines = [
        "# Tiny transformers architectures: peaks on fakes and in a step, measured",
        "",
        "Written by `python benchmarks/hf_peak.py` (its docstring says what is measured): "
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"Python {platform.python_version()}, one intra-op thread, {cpu_kernels()}, "
        f"{seconds:.0f} s.",
        "",
        "| model | call | eval on meta vs with weights | train step (ours) | measured | train |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['call']} | {_meta(r)} | "
            f"{r['train']:,} ({r['method']}) | {r['measured']:,} | "
            f"{ratio(r['train'], r['measured'])} |"
        )
    worst = max(rows, key=lambda r: abs(r["train"] / r["measured"] - 1), default=None)
    within = sum(abs(r["train"] - r["measured"]) <= 0.0005 * r["measured"] for r in rows)
    meta = sum(r["eval_meta"] == r["eval"] for r in rows)
    ran = sum(r["eval_meta"] is not None for r in rows)
    lines += [
        "",
        f"{len(rows)} calls of {len({r['model'] for r in rows})} architectures: the step within "
        f"±0.05% of measured in {within}, the forward on meta equal to the one with weights "
        f"in {meta} of the {ran} that run on meta."
        + (f" Worst step: {worst['model']} ({worst['call']}), " if worst else "")
        + (f"{ratio(worst['train'], worst['measured'])}." if worst else ""),
    ]
    for name, why in failed.items():
        lines.append(f"- {name} failed: {why}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated model types (default: all)")
    parser.add_argument("--no-write", action="store_true", help="print, do not write the file")
    options = parser.parse_args()
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)  # oneDNN's scratch is per thread
    names = options.models.split(",") if options.models else list(MODELS)
    rows, failed, start = [], {}, time.perf_counter()
    for name in names:
        try:
            found = measure(name)
        except Exception as error:  # a row that says why, not a stopped sweep
            failed[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            print(name, "failed:", failed[name], flush=True)
            continue
        rows += found
        for r in found:
            train = ratio(r["train"], r["measured"])
            print(name, r["call"], _meta(r), train, flush=True)
    text = render(rows, failed, time.perf_counter() - start)
    if options.no_write:
        print(text)
    else:
        save_results(HERE / "HF_PEAK_RESULTS.md", text, partial=bool(options.models))


if __name__ == "__main__":
    main()
