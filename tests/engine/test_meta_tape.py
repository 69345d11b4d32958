"""Models on the meta device take the taped forward, on fake tensors (issue 25).

A model built on the meta device has no data to run, so it used to be warmed up on fake
tensors and exported (``torch.export``) whenever FX failed. Now its forward is taped on fake
twins of its weights and inputs, never materialised; export runs only when asked for
(``tier="dynamo"``). The references are closed-form transformer counts written out below.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers")


def _on_meta(build):
    with torch.device("meta"):
        model = build().eval()
    assert all(t.is_meta for t in [*model.parameters(), *model.buffers()])
    return model


# A Llama with grouped-query attention, LLaMA-2-70B's shape scaled down: hidden h, MLP width f,
# H query heads of d = h/H, G key/value heads (kv = G*d), L layers, vocabulary V, s tokens.
S, H_DIM, F, HEADS, KV_HEADS, LAYERS, VOCAB = 16, 64, 176, 4, 2, 2, 100
D = H_DIM // HEADS  # 16
KV = KV_HEADS * D  # 32


def llama_macs(s, h, f, heads, kv, layers, vocab):
    """Per layer: q and o projections 2*s*h*h, k and v 2*s*h*kv (grouped-query attention),
    MLP gate, up and down 3*s*h*f, attention scores (QK^T) and values (AV) s*s*h each (every
    query head over every key: SDPA's causal mask is counted dense); then the LM head s*h*V."""
    del heads
    per_layer = 2 * s * h * h + 2 * s * h * kv + 3 * s * h * f + 2 * s * s * h
    return layers * per_layer + s * h * vocab


def llama_flops(s, h, f, heads, kv, layers, vocab):
    """2 FLOPs per MAC, plus what runs around the products (docs/metrics.md's formulas):

    - per layer: two RMSNorms, each pow, mean, mul, weight mul 4*s*h + eps add and rsqrt 2*s;
      rotary on q and k: 2 muls, an add and a neg of half, 3.5 per element of q (s*h) and k
      (s*kv); SDPA per score (heads*s*s): 1 scale + 5 softmax + 1 causal mask; two residual
      adds 2*s*h; SiLU (5) and the up-projection mul (1) per MLP element, 6*s*f;
    - once: the final RMSNorm 4*s*h + 2*s; the rotary table, inv_freq times positions s*d/2,
      cos and sin s*d each, each scaled s*d; the cache positions (arange + offset) s."""
    d = h // heads
    norm = 4 * s * h + 2 * s
    rotary = 3 * s * h + s * h // 2 + 3 * s * kv + s * kv // 2
    per_layer = 2 * norm + rotary + 7 * heads * s * s + 2 * s * h + 6 * s * f
    table = s * d // 2 + 2 * s * d + 2 * s * d
    products = 2 * llama_macs(s, h, f, heads, kv, layers, vocab)
    return products + layers * per_layer + norm + table + s


def llama_params(h, f, kv, layers, vocab):
    """Embedding and the untied LM head V*h each; per layer q, o h*h, k, v h*kv, MLP 3*h*f and
    two RMSNorm weights; the final norm h. No biases."""
    return 2 * vocab * h + layers * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h) + h


def test_closed_forms_give_llama_2_70b_published_size():
    # The closed forms above at LLaMA-2-70B's configuration (h 8192, f 28672, 64 heads, 8 KV
    # heads, 80 layers, V 32000): 68,976,648,192 parameters, the "70B" Meta publishes.
    assert llama_params(8192, 28672, 8 * 128, 80, 32000) == 68_976_648_192


@pytest.fixture(scope="module")
def llama(transformers):
    config = transformers.LlamaConfig(
        hidden_size=H_DIM, intermediate_size=F, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
        max_position_embeddings=64,
    )  # fmt: skip
    model = _on_meta(lambda: transformers.LlamaForCausalLM(config))
    prof = profile_model(model, (torch.zeros(1, S, dtype=torch.long),))
    return model, prof


def test_meta_llama_is_taped_not_exported(llama):
    model, prof = llama
    assert prof.trace.method == "eager"
    assert set(prof.trace.failures) == {"fx"}  # export was never tried
    assert all(p.is_meta for p in model.parameters())  # nothing materialised


def _cpu_ops(transformers, config) -> set[str]:
    """The ATen ops the Llama runs on CPU, built there and run: whether its attention is SDPA's
    math decomposition, not the CPU's flash kernel (transformers passes ``enable_gqa`` where
    there is no mask, and torch 2.5 and 2.6's flash kernel takes no grouped heads), and how
    that decomposition turns the causal mask into a bias. Asked of torch, not the profiler."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad(), Log():
        model(torch.zeros(1, S, dtype=torch.long))
    return seen


def test_meta_llama_counts_are_the_closed_form(llama, transformers):
    model, prof = llama
    shape = (S, H_DIM, F, HEADS, KV, LAYERS, VOCAB)
    # transformers 4 (what torch 2.4 and 2.5 run) makes the rotary table's angles as a product,
    # inv_freq (d/2, 1) @ positions (1, s), a bmm of s*d/2 MACs (2 FLOPs each) where 5
    # multiplies (1 FLOP each), and its positions with an arange from the offset, not an
    # arange plus the offset (s adds)
    older = int(transformers.__version__.split(".")[0]) < 5
    table = S * (H_DIM // HEADS) // 2 if older else 0
    # 2 * (2*16*64*64 + 2*16*64*32 + 3*16*64*176 + 2*16*16*64) + 16*64*100 = 1,642,496
    assert llama_macs(*shape) == 1_642_496
    assert prof.macs == llama_macs(*shape) + table
    # SDPA's math decomposition, per layer: q and the repeated k each scaled by sqrt(scale)
    # (heads*s*d each) where the kernel scales each score once (heads*s*s), the causal mask
    # turned into a bias (a where, s*s; torch 2.5 a logical_not and a masked_fill, 2*s*s) and
    # added (heads*s*s, as the kernel's), a safe softmax (5 per score, as the kernel's)
    ran = _cpu_ops(transformers, model.config)
    bias = 2 * S * S if "logical_not" in ran else S * S
    math = 2 * HEADS * S * D + bias - HEADS * S * S
    math *= LAYERS if "_scaled_dot_product_flash_attention_for_cpu" not in ran else 0
    assert prof.flops == llama_flops(*shape) + table - (S if older else 0) + math
    assert prof.params == llama_params(H_DIM, F, KV, LAYERS, VOCAB) == 105_280
    # float32, counted though never allocated: the weights, and the rotary buffers inv_freq and
    # original_inv_freq, d/2 = 8 floats each (in transformers 4 the second is the first tensor)
    assert prof.weights_bytes == 4 * (105_280 + (1 if older else 2) * D // 2)


def test_meta_gpt2_with_tied_head_is_taped_with_the_closed_form(transformers):
    s, h, layers, vocab, positions = 8, 32, 2, 50, 16
    config = transformers.GPT2Config(
        vocab_size=vocab, n_embd=h, n_layer=layers, n_head=2, n_positions=positions
    )
    model = _on_meta(lambda: transformers.GPT2LMHeadModel(config))
    prof = profile_model(model, (torch.zeros(1, s, dtype=torch.long),))
    assert prof.trace.method == "eager"
    # Per layer: c_attn s*h*3h, c_proj s*h*h, MLP 2*s*h*4h, QK^T and AV 2*s*s*h; LM head s*h*V.
    macs = layers * (3 * s * h * h + s * h * h + 8 * s * h * h + 2 * s * s * h) + s * h * vocab
    assert prof.macs == macs == 2 * (24_576 + 8_192 + 65_536 + 4_096) + 12_800
    # Token and position tables; per layer two LayerNorms (2h each), c_attn h*3h + 3h, c_proj
    # h*h + h, MLP h*4h + 4h and 4h*h + h; the final LayerNorm 2h. The head is tied to wte.
    per_layer = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (8 * h * h + 5 * h)
    assert prof.params == vocab * h + positions * h + layers * per_layer + 2 * h


class Anchored(nn.Module):
    """YOLO's pattern on the meta device: anchors built by the first forward (lazy state) and
    a shape compare FX cannot trace."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.shape = None
        self.anchors = torch.empty(0)

    def forward(self, x):
        if self.shape != x.shape:
            self.anchors = torch.arange(x.shape[-1] * x.shape[-2], dtype=x.dtype)
            self.shape = x.shape
        return self.conv(x).flatten(2) + self.anchors


def test_meta_model_with_lazy_state_is_taped_on_the_forward_after_the_first():
    model = _on_meta(Anchored)
    prof = profile_model(model, (torch.zeros(1, 3, 8, 8),))
    assert prof.trace.method == "eager"
    # conv: 8 out channels x 64 pixels x 27 = 13,824 MACs; the add 8*64. The anchors' arange
    # belongs to the first forward only, as a forward after it runs (and the other tiers price).
    assert prof.macs == 8 * 64 * 27
    assert prof.flops == 2 * 8 * 64 * 27 + 8 * 64
    assert "aten.arange" not in {n.target for n in prof.node_info}
    assert model.shape is None and model.anchors.is_meta  # what the forwards assigned is undone


class ReadsItsIndex(nn.Module):
    """A Qwen-VL vision tower's pattern: how many patches to take, and where, read from an
    integer input (its image grid) into Python and into ``nonzero``."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 16)

    def forward(self, x, grid):
        take = int((grid[:, 0] * grid[:, 1]).sum())  # .item() of the grid
        rows = (grid[:, 1] > 2).nonzero().squeeze(-1)  # a result sized by the grid's values
        return self.proj(x[:take]), rows


def test_a_meta_model_reading_its_integer_input_is_profiled_with_those_values():
    """Such a forward raised on the meta device ("depends on tensor values ... build it with
    real weights"): its inputs' fakes had no values. An integer input now keeps them. By hand:
    2 x 3 + 1 x 4 = 10 of the 12 rows through the 8 -> 16 projection."""
    x, grid = torch.zeros(12, 8), torch.tensor([[2, 3], [1, 4]])
    meta = profile_model(_on_meta(ReadsItsIndex), (x, grid))
    assert meta.macs == 10 * 8 * 16
    assert meta.macs == profile_model(ReadsItsIndex().eval(), (x, grid)).macs


class WindowsOfItsIndex(nn.Module):
    """Qwen2.5-VL's pattern: indices built with ``arange`` from its input's values (its
    attention windows), then read (``nonzero``)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 16)

    def forward(self, x, grid):
        order = torch.arange(int(grid.prod())).reshape(-1, 2).flip(-1).flatten()
        return self.proj(x[(order % 3 != 0).nonzero().squeeze(-1)])


def test_indices_a_meta_model_builds_from_its_input_keep_their_values():
    """By hand: a 2 x 3 grid orders its 6 rows 1, 0, 3, 2, 5, 4, and keeps those not a
    multiple of 3: 1, 2, 5, 4, four rows through the 8 -> 16 projection."""
    x, grid = torch.zeros(6, 8), torch.tensor([[2, 3]])
    meta = profile_model(_on_meta(WindowsOfItsIndex), (x, grid))
    assert meta.macs == 4 * 8 * 16
    assert meta.macs == profile_model(WindowsOfItsIndex().eval(), (x, grid)).macs


class SamplesItsValidPatches(nn.Module):
    """ViLT's pattern: the patches its mask keeps (``nonzero``, values known), a random order
    of them (``multinomial``, values unknown on fakes), then those rows."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 16)

    def forward(self, x, mask):
        kept = mask.nonzero()
        order = torch.multinomial(torch.ones(kept.size(0)), kept.size(0))
        chosen = kept[order]
        return self.proj(x[chosen[:, 0]] * mask[chosen[:, 0], chosen[:, 1]][:, None])


def test_rows_picked_by_random_indices_of_known_rows_are_not_taken_for_known():
    """The index of known rows by unknown ones was made a constant holding whatever its empty
    memory held (``new_empty`` of a constant, inside the fake index), and the next index by
    it raised "index 140217088418048 is out of bounds". By hand: the mask keeps 5 of the 6
    rows, each through the 8 -> 16 projection."""
    x, mask = torch.zeros(6, 8), torch.tensor([[1], [1], [0], [1], [1], [1]])
    meta = profile_model(_on_meta(SamplesItsValidPatches), (x, mask))
    assert meta.macs == 5 * 8 * 16
    assert meta.macs == profile_model(SamplesItsValidPatches().eval(), (x, mask)).macs
