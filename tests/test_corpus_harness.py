"""The corpus benchmark's harness (``benchmarks/corpus.py``, ``make corpus``, issue 35): one row
measured in this process, its figures checked against references nobody here wrote
(torchvision's published ResNet-18, closed-form ViT counts, FlopCounterMode run here), and a
small results file rendered to the summary counted by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_measure  # noqa: E402  (benchmarks/corpus_measure.py)
import corpus_models  # noqa: E402
import corpus_render  # noqa: E402

timm = pytest.importorskip("timm")


def flop_counter_macs(model: torch.nn.Module, image: torch.Tensor) -> int:
    # SDPA on the math backend: FlopCounterMode counts CPU flash attention as 0 before torch 2.15
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(image)
    return counter.get_total_flops() // 2


def test_resnet18_row_has_torchvisions_published_params_and_macs():
    weights = pytest.importorskip("torchvision.models").ResNet18_Weights.IMAGENET1K_V1
    row = corpus_measure.measure("timm", "resnet18", repeats=1)
    assert row["status"] == "ok", row
    assert row["params"] == row["params_ref"] == weights.meta["num_params"] == 11_689_512
    assert round(row["macs"] / 1e9, 3) == weights.meta["_ops"]  # torchvision's GMACs: 1.814
    model = timm.create_model("resnet18", pretrained=False).eval()
    assert row["macs"] == row["macs_ref"] == flop_counter_macs(model, torch.rand(1, 3, 224, 224))
    assert row["agreement"] == "equal" and not row["meta"]
    assert row["input"] == "1x3x224x224"
    assert row["repeats"] == 1 and row["ratio"] == pytest.approx(
        row["ours_s"] / row["theirs_s"], rel=1e-2
    )


# timm's test_vit: patch 16, width 64, depth 6, MLP 3x, at its 160 x 160: 100 patches + the class
# token. Parameters and multiply-adds written out from the architecture.
D, DEPTH, HIDDEN, TOKENS, PATCHES, CLASSES = 64, 6, 192, 101, 100, 1000
BLOCK_PARAMS = 2 * 2 * D + (D * 3 * D + 3 * D) + (D * D + D) + (D * HIDDEN + HIDDEN)
BLOCK_PARAMS += HIDDEN * D + D
VIT_PARAMS = (3 * 16 * 16 * D + D) + D + TOKENS * D + DEPTH * BLOCK_PARAMS + 2 * D
VIT_PARAMS += D * CLASSES + CLASSES
BLOCK_MACS = TOKENS * (D * 3 * D + D * D + D * HIDDEN + HIDDEN * D) + 2 * TOKENS * TOKENS * D
VIT_MACS = PATCHES * (3 * 16 * 16) * D + DEPTH * BLOCK_MACS + D * CLASSES


def test_vit_row_on_the_meta_device():
    """Threshold 0: built on the meta device, where the reference runs on fake twins of the
    weights; ``repeats=0``: the figures only."""
    row = corpus_measure.measure("timm", "test_vit", repeats=0, threshold=0)
    assert row["status"] == "ok", row
    assert row["meta"] is True and row["input"] == "1x3x160x160"
    assert "ratio" not in row
    model = timm.create_model("test_vit", pretrained=False).eval()
    assert row["params"] == row["params_ref"] == VIT_PARAMS == 371_240
    assert row["macs"] == row["macs_ref"] == VIT_MACS
    assert VIT_MACS == flop_counter_macs(model, torch.rand(1, 3, 160, 160))


def test_bert_row_from_transformers_defaults_has_the_closed_form():
    """The transformers family through the harness as ``make corpus`` runs it: BERT-base from
    its default configuration, on the meta device, at the zoo's 128 tokens. By hand, per layer:
    q, k, v and o 128 x 768 x 768 each, the FFN 2 x 128 x 768 x 3072, scores and values
    2 x 128 x 128 x 768; then the pooler, one token 768 x 768."""
    pytest.importorskip("transformers")
    row = corpus_measure.measure("hf", "bert", repeats=0)
    assert row["status"] == "ok", row
    assert row["meta"] is True and row["input"] == "input_ids=1x128 attention_mask=1x128 " + (
        "token_type_ids=1x128"
    )
    tokens, width = 128, 768
    layer = 4 * tokens * width * width + 2 * tokens * width * 4 * width
    layer += 2 * tokens * tokens * width
    assert row["macs"] == row["macs_ref"] == 12 * layer + width * width == 11_174_215_680
    assert row["agreement"] == "equal"


def test_a_float32_mixture_of_experts_on_meta_has_its_reference():
    """A float32 Mixtral on the meta device: ``_grouped_mm``'s CPU kernel takes bfloat16
    alone, so FlopCounterMode's forward raised and the corpus listed every mixture of experts
    as skipped. Its reference runs the experts as ``batched_mm``; by hand (2 layers, hidden 64,
    4 heads, 2 key-value heads, 4 experts of 128, top 2, 64 tokens), per layer: q and o
    64 x 64 x 64, k and v 64 x 64 x 32, scores and values 4 x 64 x 64 x 16 each, the router
    64 x 64 x 4, the experts 64 x 2 x (64 x 256 + 128 x 64); then the head 64 x 64 x 128."""
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4 routes experts by value, which the meta device cannot")
    config = transformers.MixtralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, vocab_size=128,
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(config).eval()
    assert model.config._experts_implementation == "grouped_mm"
    built = corpus_models.Built(model, (torch.randint(0, 128, (1, 64)),), meta=True)
    row = corpus_measure.measure_built(built, repeats=0)
    attention = 2 * 64 * 64 * 64 + 2 * 64 * 64 * 32 + 2 * 4 * 64 * 64 * 16
    layer = attention + 64 * 64 * 4 + 64 * 2 * (64 * 256 + 128 * 64)
    assert row["macs"] == row["macs_ref"] == 2 * layer + 64 * 64 * 128
    assert row["agreement"] == "equal"
    assert model.config._experts_implementation == "grouped_mm"  # put back


def test_a_fast_path_flop_counter_leaves_at_zero_is_a_known_gap():
    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]

    built = corpus_models.Built(Attention().eval(), (torch.rand(1, 5, 16),))
    row = corpus_measure.measure_built(built, repeats=1)
    # in_proj 5*16*48, Q.K and A.V 2 heads of 5*5*8 each, out_proj 5*16*16
    assert row["macs"] == 5 * 16 * 48 + 2 * (2 * 5 * 5 * 8) + 5 * 16 * 16 == 5920
    assert row["macs_ref"] == 0
    assert row["agreement"] == "known gap"
    assert row["gap_ops"] == ["_native_multi_head_attention"]


def test_a_model_whose_shapes_are_drawn_at_random_is_priced_on_the_same_draw():
    """transformers' VITS draws its spectrogram's length (a stochastic duration predictor): two
    unseeded forwards had priced two lengths, and the corpus listed it as differing by 3.7%."""

    class Drawn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(16, 8)

        def forward(self, x):
            frames = int(torch.randint(1, 1000, ()).item())
            return self.proj(x.expand(frames, 16))

    built = corpus_models.Built(Drawn().eval(), (torch.rand(1, 16),))
    row = corpus_measure.measure_built(built, repeats=1)
    torch.manual_seed(corpus_measure.SEED)
    frames = int(torch.randint(1, 1000, ()).item())
    assert row["macs"] == row["macs_ref"] == frames * 16 * 8
    assert row["agreement"] == "equal"


def test_a_model_that_reads_a_value_on_the_meta_device_is_measured_with_weights(monkeypatch):
    """Longformer, LED and XLM read values of their own tensors (``.item()``), which the meta
    device has none of: the corpus listed them as skipped. Built again with real weights, as a
    user profiles them, they are measured, and the row says why."""

    class Kept(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(16, 8)
            self.register_buffer("keep", torch.tensor([1.0, 1.0, 1.0, 0.0]))

        def forward(self, x):
            return self.proj(x[: int(self.keep.sum().item())])

    def kept(name: str, threshold: int) -> corpus_models.Built:
        model = Kept().eval()
        meta = corpus_models.count_params(model) > threshold
        args = (torch.rand(4, 16),)
        return corpus_models.Built(model.to("meta") if meta else model, args, meta=meta)

    monkeypatch.setitem(corpus_models.BUILDERS, "test", kept)
    row = corpus_measure.measure("test", "kept", repeats=0, threshold=0)
    assert row["status"] == "ok" and row["meta"] is False, row
    assert "DataDependentOutputException" in row["real_after"]
    assert row["macs"] == row["macs_ref"] == 3 * 16 * 8


def test_a_model_that_cannot_be_rebuilt_with_weights_keeps_its_row(monkeypatch):
    """The second build, with weights, can fail (memory, a library): the meta row stands, and
    says why, rather than the worker dying on it."""

    class Reads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("n", torch.tensor(2.0))

        def forward(self, x):
            return x[: int(self.n.item())]

    def reads(name: str, threshold: int) -> corpus_models.Built:
        if threshold > 0:
            raise corpus_models.Skip("build: MemoryError")
        return corpus_models.Built(Reads().to("meta"), (torch.rand(4, 2),), meta=True)

    monkeypatch.setitem(corpus_models.BUILDERS, "test", reads)
    row = corpus_measure.measure("test", "reads", repeats=0, threshold=0)
    assert row["status"] == "skipped" and row["meta"] is True
    assert row["reason"].endswith("; with weights, build: MemoryError")
    assert "DataDependentOutputException" in row["reason"]


def test_a_model_that_does_not_build_is_skipped_with_its_reason():
    row = corpus_measure.measure("timm", "no_such_model")
    assert row["status"] == "skipped"
    assert row["reason"].startswith("build: RuntimeError: Unknown model")


def _row(name: str, status: str = "ok", **figures) -> dict:
    row = {"kind": "model", "family": "timm", "name": name, "status": status, "seconds": 2.0}
    if status == "ok":
        row.update(tier="fx", params=10, params_ref=10, macs=100, macs_ref=100)
        row.update(agreement="equal", ours_s=0.1, theirs_s=0.1, ratio=1.0)
    return {**row, **figures}


def test_rendering_gives_the_family_summary_counted_by_hand(tmp_path):
    rows = [
        {"kind": "run", "started": "2026-01-01 00:00 UTC", "load": 1.0, "listed": {"timm": 50}},
        _row("a", ratio=0.5),
        _row("b", ratio=2.0, meta=True),
        _row("c", params=11, macs=150, agreement="differs"),
        _row("d", agreement="known gap", macs=120, gap_ops=["mkldnn_rnn_layer"], ratio=0.8),
        _row("e", "skipped", reason="build: TypeError: no"),
        _row("f", "timeout", reason="timed out after 600 s"),
        _row("a", ratio=0.6),  # measured again: the last line counts
        _row("g", ratio=1.0, real_after="reference: DataDependentOutputException: x"),
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"kind": "mod')  # cut short
    text = corpus_render.render(path)
    # tried 7 (a..g); profiled a-d and g: 5 of 7 = 71%; params exact 4 of 5 = 80%; MACs of the
    # 5 with a reference: equal 3 (60%), known gap 1 (20%), differ 1 (20%); ratios 0.6, 0.8,
    # 1.0, 1.0, 2.0: median 1.0, p90 the 5th of 5 (nearest rank), worst b.
    assert (
        "| timm | 7 | 1 | 5 (71%) | 1 | 80% | 60% | 20% | 20% | 1.00x | 2.00x | 2.00x `b` |"
    ) in text
    assert "Tried: timm 7 of 50 listed." in text
    assert "- params exact: 4 of 5 (80%);" in text
    assert "| `g` | fx, weights | 10 | 100 | 100 | = | 0.100 | 0.100 | 1.00x |" in text
    assert "| `b` | fx, meta | 10 | 100 | 100 | = | 0.100 | 0.100 | 2.00x |" in text
    assert "| `a` | fx | 10 | 100 | 100 | = | 0.100 | 0.100 | 0.60x |" in text
    assert "- `c`: ours 150 MACs, FlopCounterMode 100 (+50.00%); to investigate" in text
    known = "known gap (mkldnn_rnn_layer: fused RNN)"
    assert f"- `d`: ours 120 MACs, FlopCounterMode 100 (+20.00%); {known}" in text
    assert "- `e` (skipped): build: TypeError: no" in text
    assert "- `f` (timeout): timed out after 600 s" in text


def _run(started: str, listed: dict) -> dict:
    return {"kind": "run", "started": started, "load": 0.5, "listed": listed,
            "machine": "x86_64", "processor": started[:10]}  # fmt: skip


def test_a_run_of_one_family_keeps_the_others_on_the_page(tmp_path):
    """``make corpus --family hf`` wrote a file of transformers' rows alone, and its page lost
    timm's section, summary row and runs: they were put back by hand each time. Now a family
    the file has no row of keeps what the page it replaces says of it."""
    first = tmp_path / "first.jsonl"
    rows = [_run("2026-01-01 00:00 UTC", {"timm": 5, "hf": 9}), _row("a"), _row("b", ratio=2.0)]
    rows += [{**_row("bert"), "family": "hf"}]
    first.write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = corpus_render.render(first)
    second = tmp_path / "second.jsonl"
    rows = [_run("2026-02-02 00:00 UTC", {"hf": 9}), {**_row("gpt2", ratio=3.0), "family": "hf"}]
    second.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = corpus_render.render(second, page)

    timm = page[page.index("## timm") : page.index("## transformers")]
    assert timm in text  # its section, word for word
    assert "| timm | 2 | 0 | 2 (100%) | 0 |" in text
    assert "| transformers | 1 | 0 | 1 (100%) |" in text and "3.00x `gpt2`" in text
    assert "`bert`" not in text  # transformers' rows are the new file's
    assert "Tried: timm 2 of 5 listed; transformers 1 of 9 listed." in text
    assert "transformers' rows: run with " in text and "started 2026-02-02 00:00 UTC" in text
    kept = text[text.index("timm's rows: run with ") :].split("\n\n")[0]
    assert "(2026-01-01)" in kept and "started 2026-01-01 00:00 UTC" in kept
    assert text.index("timm's rows") > text.index("transformers' rows")
    assert text.index("## timm") < text.index("## transformers")
    # and again: the kept family's runs stay its own
    assert "timm's rows: run with " in corpus_render.render(second, text)
