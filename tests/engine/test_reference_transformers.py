"""Hugging Face BERT and GPT-2 against closed forms written out here.

Models are built from configurations (``BertModel(BertConfig())``, ``GPT2Model(GPT2Config())``):
random weights, nothing downloaded. Inputs are built from each model's ``forward`` signature.

MACs of one encoder/decoder layer at sequence length s, width h, FFN width 4h:

    Q, K, V, O projections   4 * s * h * h
    FFN (two linears)        2 * s * h * 4h
    attention QK^T           s * s * h        (all heads together: H * s * s * (h/H))
    attention AV             s * s * h

Embeddings are lookups (no MACs). BERT adds its pooler: one linear on the first token, 1 * h * h.
GPT-2's ``Conv1D`` layers are ``addmm`` and count like linears; ``GPT2Model`` has no LM head.

Parameter counts: the published figures for the default configurations, and the same closed form
(checked against them below) for the small configurations.
"""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pytest_graphbudget import profile_model  # noqa: E402

BERT_BASE_PARAMS = 109_482_240  # bert-base-uncased, with pooler
GPT2_PARAMS = 124_439_808  # gpt2 (117M), no LM head


def layer_macs(s: int, h: int, ffn: int) -> int:
    projections = 4 * s * h * h
    mlp = 2 * s * h * ffn
    attention = s * s * h + s * s * h  # QK^T + AV
    return projections + mlp + attention


def attention_macs(s: int, h: int) -> int:
    return 2 * s * s * h


def bert_macs(s: int, h: int, layers: int, ffn: int) -> int:
    pooler = 1 * h * h
    return layers * layer_macs(s, h, ffn) + pooler


def gpt2_macs(s: int, h: int, layers: int, ffn: int) -> int:
    return layers * layer_macs(s, h, ffn)


def bert_params(vocab: int, positions: int, types: int, h: int, layers: int, ffn: int) -> int:
    embeddings = vocab * h + positions * h + types * h + 2 * h  # + LayerNorm
    attention = 4 * (h * h + h) + 2 * h  # q, k, v, o with biases + LayerNorm
    mlp = (h * ffn + ffn) + (ffn * h + h) + 2 * h  # two linears + LayerNorm
    pooler = h * h + h
    return embeddings + layers * (attention + mlp) + pooler


def gpt2_params(vocab: int, positions: int, h: int, layers: int, ffn: int) -> int:
    embeddings = vocab * h + positions * h
    block = (
        2 * h  # ln_1
        + h * 3 * h
        + 3 * h  # c_attn (q, k, v fused)
        + h * h
        + h  # c_proj
        + 2 * h  # ln_2
        + h * ffn
        + ffn  # mlp.c_fc
        + ffn * h
        + h
    )  # mlp.c_proj
    return embeddings + layers * block + 2 * h  # + ln_f


def test_param_closed_forms_match_published_counts():
    """The closed forms used for the small configurations reproduce the published counts."""
    assert bert_params(30522, 512, 2, 768, 12, 3072) == BERT_BASE_PARAMS
    assert gpt2_params(50257, 1024, 768, 12, 3072) == GPT2_PARAMS


def text_inputs(model, batch: int, seq: int):
    """Positional ``input_ids`` plus whichever of attention_mask / token_type_ids ``forward``
    accepts, decided from the signature (not from the model's name)."""
    params = inspect.signature(model.forward).parameters
    assert "input_ids" in params
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=g)
    kwargs = {}
    if "attention_mask" in params:
        kwargs["attention_mask"] = torch.ones(batch, seq, dtype=torch.long)
    if "token_type_ids" in params and getattr(model.config, "type_vocab_size", 0):
        kwargs["token_type_ids"] = torch.zeros(batch, seq, dtype=torch.long)
    return (input_ids,), kwargs


def buffer_bytes(model) -> int:
    """Bytes of the model's buffers (BERT: int64 position_ids and token_type_ids)."""
    return sum(b.numel() * b.element_size() for b in model.buffers())


def small_bert():
    cfg = transformers.BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=64,
        type_vocab_size=2,
    )
    return transformers.BertModel(cfg).eval(), cfg


def small_gpt2():
    cfg = transformers.GPT2Config(
        vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4
    )  # n_inner=None -> 4 * n_embd
    return transformers.GPT2Model(cfg).eval(), cfg


# --------------------------------------------------------------------------------------------
# Small configurations: fast, exact


def test_small_bert_exact():
    torch.manual_seed(0)
    model, cfg = small_bert()
    s, h, L, ffn = 16, 64, 2, 256
    args, kwargs = text_inputs(model, 1, s)
    prof = profile_model(model, args, kwargs)

    assert prof.trace.method == "eager", prof.trace.failures
    assert prof.macs == bert_macs(s, h, L, ffn)  # 2*(4*16*64*64 + 2*16*64*256 + 2*16*16*64) + 64*64
    assert prof.params == bert_params(1000, 64, 2, h, L, ffn)
    assert prof.weights_bytes == 4 * prof.params + buffer_bytes(model)
    assert prof.flops_contraction == 2 * prof.macs
    assert prof.flops > prof.flops_contraction
    assert prof.coverage.unsupported_ops == {}


def test_small_bert_counts_attention_flop_counter_misses(flop_counter):
    """FlopCounterMode prices BERT's linears (addmm) exactly, but has no formula for the CPU SDPA
    kernel. Our count must be its linear count plus the hand-derived attention matmuls."""
    torch.manual_seed(0)
    model, cfg = small_bert()
    s, h, L = 16, 64, 2
    args, kwargs = text_inputs(model, 1, s)
    counts = flop_counter(model, args, kwargs)
    linear_macs = (counts.get("aten.addmm", 0) + counts.get("aten.mm", 0)) // 2
    assert linear_macs > 0

    prof = profile_model(model, args, kwargs)
    assert prof.macs == linear_macs + L * attention_macs(s, h)


def test_small_gpt2_exact():
    torch.manual_seed(0)
    model, cfg = small_gpt2()
    s, h, L, ffn = 16, 64, 2, 256
    args, kwargs = text_inputs(model, 1, s)
    prof = profile_model(model, args, kwargs)

    assert prof.trace.method == "eager", prof.trace.failures
    assert prof.macs == gpt2_macs(s, h, L, ffn)  # 2 * (4*16*64*64 + 2*16*64*256 + 2*16*16*64)
    assert prof.params == gpt2_params(1000, 64, h, L, ffn)
    assert prof.weights_bytes == 4 * prof.params + buffer_bytes(model)
    assert prof.flops_contraction == 2 * prof.macs
    assert prof.flops > prof.flops_contraction
    assert prof.coverage.unsupported_ops == {}


# --------------------------------------------------------------------------------------------
# Default configurations at batch 1, sequence 128 (the cases)


def test_bert_base_seq128(rel_err):
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig()).eval()
    s, h, L, ffn = 128, 768, 12, 3072
    expected = bert_macs(s, h, L, ffn)
    # = 12 * (4*128*768*768 + 2*128*768*3072 + 2*128*128*768) + 768*768 = 11,174,215,680 MACs:
    # 21.74 GFLOPs of linears (the seed documents' figure) + 0.60 GFLOPs of attention matmuls.
    args, kwargs = text_inputs(model, 1, s)
    prof = profile_model(model, args, kwargs)

    assert prof.trace.method == "eager", prof.trace.failures
    assert rel_err(prof.macs, expected) <= 0.005, f"macs {prof.macs:,} expected {expected:,}"
    assert prof.params == BERT_BASE_PARAMS
    assert prof.weights_bytes == 4 * BERT_BASE_PARAMS + buffer_bytes(model)  # fp32
    assert prof.flops_contraction == 2 * prof.macs
    assert prof.flops > prof.flops_contraction
    assert prof.coverage.unsupported_ops == {}


def test_gpt2_seq128(rel_err):
    torch.manual_seed(0)
    model = transformers.GPT2Model(transformers.GPT2Config()).eval()
    s, h, L, ffn = 128, 768, 12, 3072
    expected = gpt2_macs(s, h, L, ffn)
    # = 12 * (4*128*768*768 + 2*128*768*3072 + 2*128*128*768) = 11,173,625,856 MACs
    # (every Conv1D is an addmm; a module-only counter that misses them reports ~0).
    args, kwargs = text_inputs(model, 1, s)
    prof = profile_model(model, args, kwargs)

    assert prof.trace.method == "eager", prof.trace.failures
    assert rel_err(prof.macs, expected) <= 0.005, f"macs {prof.macs:,} expected {expected:,}"
    assert prof.params == GPT2_PARAMS
    assert prof.weights_bytes == 4 * GPT2_PARAMS + buffer_bytes(model)
    assert prof.flops_contraction == 2 * prof.macs
    assert prof.flops > prof.flops_contraction
    assert prof.coverage.unsupported_ops == {}
